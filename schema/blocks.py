"""The wire layout of a block: one simulated node answering for many clients at once.

In the simulation's block mode (``flower.clients-per-node`` > 1) a virtual SuperNode
serves a block of clients, and a query to it carries the ids it is asked for
(``ArrayRecord "block"``, ``ids``) with their request: every per-client array stacked
over those ids at its ``<record>.<key>`` (shape ``(m, *shape)``), an array every client
receives alike sent once (its key listed in ``ConfigRecord "block-layout"``,
``shared``), a
ragged array as its clients' blocks concatenated, with their lengths at
``block.<key>-counts``. A reply stacks every reply array over the asked ids in their
order, and its ledger record lists ``client-ids`` and each one's ``spent``. No Flower
import: the server's grid and the node both build on it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

from ldpfda.schema.queries import ArraySpec, ReplyError, Request

__all__ = [
    "BLOCK_LAYOUT",
    "BLOCK_RECORD",
    "FIRST_RECORD",
    "id_runs",
    "in_runs",
    "pack_request",
    "stacked",
    "unpack_request",
]

BLOCK_RECORD = "block"
BLOCK_LAYOUT = "block-layout"
#: The record of the first query of a run, sent to every connected node before the
#: server knows who they are: ``asked``, the ids the query is for as ``(start, stop)``
#: runs. A node answers for those of its clients it names, and always adds its
#: ``identity`` record (and a refusal as a ``refusal`` record, with its identity).
FIRST_RECORD = "first"


def id_runs(ids: NDArray[np.int64]) -> NDArray[np.int64]:
    """Client ids as sorted ``(start, stop)`` runs of consecutive ids, shape (r, 2)."""
    ids = np.unique(np.asarray(ids, dtype=np.int64))
    if ids.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    starts = ids[np.concatenate([[0], breaks])]
    stops = ids[np.concatenate([breaks - 1, [ids.size - 1]])] + 1
    return np.stack([starts, stops], axis=1)


def in_runs(ids: NDArray[np.int64], runs: NDArray[np.int64]) -> NDArray[np.bool_]:
    """Which of ``ids`` lie in the ``(start, stop)`` runs of :func:`id_runs`."""
    runs = np.asarray(runs, dtype=np.int64).reshape(-1, 2)
    ids = np.asarray(ids, dtype=np.int64)
    at = np.searchsorted(runs[:, 0], ids, side="right") - 1
    inside = at >= 0
    inside[inside] = ids[inside] < runs[at[inside], 1]
    return inside


def pack_request(
    specs: tuple[ArraySpec, ...], request: Request, ids: NDArray[np.int64]
) -> tuple[dict[str, dict[str, NDArray]], list[str]]:
    """The arrays of the request of clients ``ids`` (request rows ``0 .. m-1``) by
    record and key, and the keys sent once for all."""
    records: dict[str, dict[str, NDArray]] = {
        BLOCK_RECORD: {"ids": np.asarray(ids, dtype=np.int64)}
    }
    shared = []
    for spec in specs:
        if spec.key in request.shared:
            value = np.asarray(request.shared[spec.key])
            shared.append(spec.key)
        elif spec.key in request.ragged:
            values, offsets, counts = request.blocks(spec.key)
            value = np.concatenate(
                [values[o : o + c] for o, c in zip(offsets, counts, strict=True)]
                or [values[:0]]
            )
            records[BLOCK_RECORD][f"{spec.key}-counts"] = counts.astype(np.int64)
        else:
            value = np.asarray(request.rows[spec.key])
        records.setdefault(spec.record, {})[spec.key] = np.ascontiguousarray(
            value.astype(spec.dtype)
        )
    return records, shared


def stacked(spec: ArraySpec, value: NDArray, n: int) -> NDArray:
    """``value`` as ``n`` rows of per-client shape (``ReplyError`` ``shape`` when it
    does not have ``(n, *spec.shape)``, a free length ``-1`` taking any)."""
    expected = (n, *spec.shape)
    if value.ndim != len(expected) or any(
        e not in (-1, s) for e, s in zip(expected, value.shape, strict=True)
    ):
        shown = str(expected).replace("-1", "k")
        raise ReplyError(
            "shape", f"{spec.name} must have shape {shown}, got {value.shape}"
        )
    return value


def unpack_request(
    specs: tuple[ArraySpec, ...],
    arrays: Mapping[str, NDArray],
    block: Mapping[str, NDArray],
    shared: list[str],
) -> tuple[NDArray[np.int64], Request]:
    """The asked ids and their :class:`Request` from a block's arrays (by key), its
    ``block`` record and its shared keys (``ValueError`` for an inconsistent one)."""
    ids = np.asarray(block["ids"]).astype(np.int64).reshape(-1)
    rows, common, ragged = {}, {}, {}
    for spec in specs:
        value = np.asarray(arrays[spec.key])
        counts = block.get(f"{spec.key}-counts")
        if spec.key in shared:
            common[spec.key] = value
        elif counts is not None:
            counts = np.asarray(counts).astype(np.int64).reshape(-1)
            if counts.size != ids.size or int(counts.sum()) != value.shape[0]:
                raise ValueError(f"{spec.key}-counts do not match {spec.key}")
            offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
            ragged[spec.key] = (value, offsets, counts)
        else:
            try:
                rows[spec.key] = stacked(spec, value, ids.size)
            except ReplyError as exc:
                raise ValueError(str(exc)) from exc
    return ids, Request(rows, common, ragged)
