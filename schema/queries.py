r"""Typed queries: what the server may ask a client, and what a valid answer looks like.

A :class:`Query` names its request and reply arrays (:class:`ArraySpec`: dtype,
per-client shape, allowed values) and the privacy cost of answering it. Both transports
check every reply against the same specs (:func:`check_rows`), so a reply rejected in
one is rejected in the other. On the wire a query is the message type
``query.<name>``; each array lives at ``<record>.<key>`` of the ``RecordDict``, a
client's row of per-client shape ``s`` sent as ``(1, *s)`` when ``lead`` (a scalar as
``(1,)``) and as ``s`` otherwise; every reply also carries the ``ConfigRecord
"ledger"`` (``client-id``, ``budget``, ``spent``; ``"identity"`` for identify).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np
from numpy.typing import NDArray

from ldpfda.privacy.base import ReleaseEvent

__all__ = [
    "ERROR_BUDGET",
    "ERROR_DATA",
    "ERROR_LEDGER",
    "ERROR_POLICY",
    "ERROR_REQUEST",
    "ERROR_SPEC",
    "SPEC_RECORD",
    "ArraySpec",
    "Query",
    "ReplyError",
    "Request",
    "check_rows",
    "message_type",
]

#: Error code of a refused release (the node's budget would be overspent).
ERROR_BUDGET = 4001
#: Error code of a malformed request.
ERROR_REQUEST = 4000
#: Error code of a query the node's own privacy policy refuses (kind, epsilon).
ERROR_POLICY = 4002
#: Error code of a node whose ledger is missing or corrupted: it answers nothing until
#: its operator acts.
ERROR_LEDGER = 4003
#: Error code of a node whose data cannot be used (the node's log says why).
ERROR_DATA = 4004
#: Error code of a query made under another federation spec than the node's own.
ERROR_SPEC = 4005
#: The record of every request that names the run's federation spec: ``{"hash": ...}``.
SPEC_RECORD = "spec"

#: ``cost(request, index)``: what answering costs the clients at positions ``index`` of
#: a request, as distinct event lists and each client's position in them.
Cost = Callable[
    ["Request", NDArray[np.int64]],
    tuple[list[tuple[ReleaseEvent, ...]], NDArray[np.int64]],
]


class ReplyError(ValueError):
    """A reply that cannot be used: an error reply, or content that fails its check.

    The message is ``"<kind>: <detail>"``; ``kind`` is one of ``request``,
    ``budget``, ``policy``, ``ledger`` or ``data`` (the node refused, with that error
    code), ``error`` (another error reply), ``content`` (a record or array is
    missing or unreadable), ``identity``, ``shape``, ``nan``, ``range``, ``label`` or
    ``bit``.
    """

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


@dataclass(frozen=True)
class ArraySpec:
    """One array of a request or reply: ``ArrayRecord`` ``record``, entry ``key``.

    ``shape`` is each client's row shape (``-1``: a length the check does not fix).
    A real-valued array is checked finite and within ``low``/``high`` (rejection kind
    ``kind``); a categorical one takes the values ``0 .. values - 1`` (``describe``
    says so in the rejection). ``what`` names the array in messages; ``lead``: a
    client's row is sent with a leading axis of length 1; ``ragged``: clients receive
    blocks of different lengths (:class:`Request`).
    """

    record: str
    key: str
    dtype: str
    shape: tuple[int, ...] = ()
    low: float | None = None
    high: float | None = None
    values: int | None = None
    kind: str = "range"
    what: str = ""
    describe: str = ""
    lead: bool = True
    ragged: bool = False

    @property
    def name(self) -> str:
        return self.what or self.key

    def wire_shape(self) -> tuple[int, ...]:
        """The shape of one client's array on the wire."""
        if not self.shape:
            return (1,)
        return (1, *self.shape) if self.lead else self.shape

    def row(self, array: NDArray) -> NDArray:
        """One client's wire array as a row of per-client shape; ``ReplyError``
        (``shape``) when it does not have :meth:`wire_shape`."""
        expected = self.wire_shape()
        if array.ndim != len(expected) or any(
            e not in (-1, s) for e, s in zip(expected, array.shape, strict=True)
        ):
            shown = str(expected).replace("-1", "n")
            raise ReplyError(
                "shape", f"{self.name} must have shape {shown}, got {array.shape}"
            )
        if not self.shape:
            return array.reshape(())
        return array[0] if self.lead else array


@dataclass(frozen=True)
class Request:
    """What the server sends with a query to clients ``0 .. n-1`` of an ask.

    ``rows``: one row per asked client (row ``i`` to client ``i``); ``shared``: arrays
    every client receives alike; ``ragged``: (values, offsets, counts), client ``i``
    receives ``values[offsets[i] : offsets[i] + counts[i]]``.
    """

    rows: Mapping[str, NDArray] = field(default_factory=dict)
    shared: Mapping[str, NDArray] = field(default_factory=dict)
    ragged: Mapping[str, tuple[NDArray, NDArray, NDArray]] = field(default_factory=dict)

    def take(self, index: NDArray[np.int64] | slice) -> Request:
        """The request of the clients at positions ``index``, in that order."""
        ragged = {
            k: (values, offsets[index], counts[index])
            for k, (values, offsets, counts) in self.ragged.items()
        }
        return Request({k: v[index] for k, v in self.rows.items()}, self.shared, ragged)

    def client(self, i: int) -> dict[str, NDArray]:
        """The arrays client ``i`` receives (rows without the client axis)."""
        out = {k: v[i] for k, v in self.rows.items()}
        out.update(self.shared)
        for k, (values, offsets, counts) in self.ragged.items():
            out[k] = values[offsets[i] : offsets[i] + counts[i]]
        return out

    def per_client(self, key: str, n: int) -> NDArray:
        """Array ``key`` with one row per client (a shared array broadcast to ``n``)."""
        if key in self.rows:
            return self.rows[key]
        value = np.asarray(self.shared[key])
        return np.broadcast_to(value, (n, *value.shape))

    def common(self, key: str) -> NDArray:
        """Array ``key``, which every client must have received alike (else
        ``ValueError``)."""
        if key in self.shared:
            return np.asarray(self.shared[key])
        if key in self.ragged:
            values, offsets, counts = self.ragged[key]
            if counts.size != 1:
                raise ValueError(f"{key} must be shared, not one block per client")
            return values[int(offsets[0]) : int(offsets[0] + counts[0])]
        rows = self.rows[key]
        if rows.shape[0] and not np.all(rows == rows[:1]):
            raise ValueError(f"{key} must be the same for every client of a request")
        return rows[0]

    def blocks(self, key: str) -> tuple[NDArray, NDArray, NDArray]:
        """The ragged array ``key``: (values, offsets, counts)."""
        return self.ragged[key]

    @classmethod
    def of_client(
        cls, arrays: Mapping[str, NDArray], specs: Sequence[ArraySpec]
    ) -> Request:
        """The request of one client from the arrays it received on the wire, each
        checked by :meth:`ArraySpec.row` (an array of free length a ragged block)."""
        rows, ragged = {}, {}
        for spec in specs:
            row = spec.row(np.asarray(arrays[spec.key]))
            if spec.ragged:
                ragged[spec.key] = (
                    row,
                    np.zeros(1, dtype=np.int64),
                    np.array([row.shape[0]], dtype=np.int64),
                )
            else:
                rows[spec.key] = row[None, ...]
        return cls(rows, {}, ragged)


@dataclass(frozen=True)
class Query:
    """A question the server asks clients (message type ``query.<name>``).

    ``request`` and ``reply`` are the arrays sent with it and those a valid reply
    holds; ``cost(request, index)`` the release events each asked client spends
    (:data:`Cost`; None: releases nothing private); ``ledger_record`` the reply's
    ``ConfigRecord`` with the client's ledger figures.
    """

    name: str
    request: tuple[ArraySpec, ...] = ()
    reply: tuple[ArraySpec, ...] = ()
    cost: Cost | None = None
    ledger_record: str = "ledger"

    @property
    def message_type(self) -> str:
        return message_type(self.name)

    def costs(
        self, request: Request, index: NDArray[np.int64]
    ) -> tuple[list[tuple[ReleaseEvent, ...]], NDArray[np.int64]]:
        """What answering costs the clients at positions ``index`` of ``request``:
        distinct event lists, and for each client the position of its list."""
        if self.cost is None:
            return [()], np.zeros(index.size, dtype=np.int64)
        return self.cost(request, index)


def message_type(name: str) -> str:
    """The Flower message type of query ``name``."""
    return f"query.{name}"


def check_rows(spec: ArraySpec, values: NDArray) -> tuple[NDArray[np.bool_], list[str]]:
    """The mask of the rows of ``values`` (one per client) with valid values, and the
    reason ``"<kind>: <detail>"`` of each invalid row in order: ``spec.kind`` for a
    categorical value outside its categories (NaN included) or a real value out of
    bounds, ``nan`` for a non-finite real value."""
    n = values.shape[0]
    # Not reshape(n, -1): a round in which nobody answered has n = 0 rows.
    flat = values.reshape(n, math.prod(values.shape[1:])).astype(np.float64)
    # Reduced along the second axis of a 2-D array, so a 1-D mask (never a scalar).
    finite = cast(NDArray[np.bool_], np.isfinite(flat).all(axis=1))
    if spec.values is not None:
        # A categorical value that is not finite is simply not one of the categories.
        allowed = cast(
            NDArray[np.bool_],
            ((flat >= 0) & (flat <= spec.values - 1) & (np.floor(flat) == flat)).all(
                axis=1
            ),
        )
        describe = (
            spec.describe or f"{spec.name} must be in {{0, ..., {spec.values - 1}}}"
        )
        return allowed, [
            f"{spec.kind}: {describe}, got {values[i]!r}"
            for i in np.flatnonzero(~allowed)
        ]
    ok = finite.copy()
    reasons = {
        int(i): f"nan: {spec.name} contain NaN or infinite values"
        for i in np.flatnonzero(~finite)
    }
    if spec.low is not None or spec.high is not None:
        low = -np.inf if spec.low is None else spec.low
        high = np.inf if spec.high is None else spec.high
        inside = ((flat >= low) & (flat <= high)).all(axis=1) & finite
        for i in np.flatnonzero(finite & ~inside):
            reasons[int(i)] = (
                f"{spec.kind}: {spec.name} outside the mechanism's range "
                f"[{low:.6g}, {high:.6g}]: got [{flat[i].min():.6g}, "
                f"{flat[i].max():.6g}]"
            )
        ok &= inside
    return ok, [reasons[i] for i in sorted(reasons)]
