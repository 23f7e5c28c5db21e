"""The server's side of a run over any transport: ask, account, check, record."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.schema.queries import Query, ReplyError, Request, check_rows

__all__ = [
    "Clients",
    "QuorumError",
    "Replies",
    "Round",
    "Session",
    "check_replies",
    "locate",
    "reason_kind",
    "wire_rows",
]

# A child of Flower's logger, so these lines reach `flwr run --stream` and `flwr log`.
logger = logging.getLogger("flwr.ldpfda")
_NO_KEYS = np.zeros(0, dtype=np.int64)
#: Clients charged at a time (:meth:`Session._charge`).
_SPAN = 1 << 20


def reason_kind(reason: str) -> str:
    """The kind of a rejection reason ``"<kind>: <detail>"`` (e.g. ``"range"``)."""
    return reason.split(":", 1)[0]


@dataclass
class Replies:
    """What one ask brought back: each reply array stacked over ``ids`` (the clients
    with a valid reply, in the order asked), who was ``missing`` (``timeout: ...`` or
    ``unavailable: ...``) or ``rejected`` and why, and the ledger figures each valid
    reply ``reported`` (where the transport has them)."""

    ids: NDArray[np.int64]
    values: dict[str, NDArray]
    missing: dict[int, str] = field(default_factory=dict)
    rejected: dict[int, str] = field(default_factory=dict)
    reported: dict[int, dict[str, float]] = field(default_factory=dict)

    def get(self, key: str, ids: NDArray[np.int64], fill: Any) -> NDArray:
        """Array ``key`` for clients ``ids``, ``fill`` where a client gave none."""
        values = self.values[key]
        out = np.full((ids.size, *values.shape[1:]), fill, dtype=values.dtype)
        found, where = locate(self.ids, ids)
        out[found] = values[where[found]]
        return out


def locate(
    haystack: NDArray[np.int64], needles: NDArray[np.int64]
) -> tuple[NDArray[np.bool_], NDArray[np.int64]]:
    """For each needle: whether it is in ``haystack`` (unique ids), and where."""
    if haystack.size == 0:
        nowhere = np.zeros(needles.size, dtype=np.int64)
        return nowhere.astype(bool), nowhere
    order = np.argsort(haystack, kind="stable")
    pos = np.minimum(np.searchsorted(haystack[order], needles), haystack.size - 1)
    where = order[pos]
    return haystack[where] == needles, where


class Clients(Protocol):
    """A transport: asks clients queries and returns their checked replies."""

    def ask(self, query: Query, ids: NDArray[np.int64], request: Request) -> Replies:
        """Ask clients ``ids`` (request row ``i`` to ``ids[i]``); checked replies."""
        ...

    def rejoin(self, ids: NDArray[np.int64]) -> None:
        """Wait, for a bounded time, until clients ``ids`` are reachable again."""
        ...


def wire_rows(query: Query, arrays: dict[str, NDArray]) -> dict[str, NDArray]:
    """One client's reply arrays as rows of per-client shape (:class:`ReplyError`
    ``content`` for a missing or non-numeric array, ``shape`` for a wrong shape)."""
    rows = {}
    for spec in query.reply:
        value = arrays.get(spec.key)
        if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
            raise ReplyError(
                "content", f"'{spec.record}.{spec.key}' must be a numeric array"
            )
        rows[spec.key] = spec.row(value)
    return rows


def check_replies(
    query: Query,
    ids: NDArray[np.int64],
    values: dict[str, NDArray],
    rejected: dict[int, str] | None = None,
) -> Replies:
    """Replies of ``ids`` (arrays stacked in that order) checked against ``query``; a
    client with any array outside its spec is rejected with the first reason."""
    rejected = dict(rejected or {})
    ok = np.ones(ids.size, dtype=bool)
    for spec in query.reply:
        good, reasons = check_rows(spec, values[spec.key])
        for i, reason in zip(np.flatnonzero(~good), reasons, strict=True):
            if ok[i]:
                rejected[int(ids[i])] = reason
        ok &= good
    if ok.all():
        return Replies(ids, dict(values), {}, rejected)
    return Replies(ids[ok], {k: v[ok] for k, v in values.items()}, {}, rejected)


def _joined(parts: list[NDArray[Any]]) -> NDArray[Any]:
    """The parts end to end (the one part itself, not a copy)."""
    return parts[0] if len(parts) == 1 else np.concatenate([_NO_KEYS, *parts])


@dataclass
class Round:
    """Who was asked one query, who answered, who did not, and what was rejected.

    Keys are client ids (node ids in the identify round); ``missing`` and ``rejected``
    give each its reason, ``"<kind>: <detail>"``. Who was asked and who answered are
    kept as arrays, since a round in process may hold millions of clients.
    """

    name: str
    missing: dict[int, str] = field(default_factory=dict)
    rejected: dict[int, str] = field(default_factory=dict)
    refused_by_server: list[int] = field(default_factory=list)
    who: str = "client"
    _asked: list[NDArray[Any]] = field(default_factory=list, repr=False)
    _answered: list[NDArray[Any]] = field(default_factory=list, repr=False)

    @property
    def asked(self) -> NDArray[Any]:
        return _joined(self._asked)

    @property
    def answered(self) -> NDArray[Any]:
        return _joined(self._answered)

    def ask(self, keys: NDArray[Any]) -> None:
        """Record that ``keys`` were asked (node ids, which may not fit in int64, as
        an object array)."""
        self._asked.append(keys)

    def answer(self, keys: NDArray[Any]) -> None:
        self._answered.append(keys)

    def record(self, replies: Replies) -> None:
        """Add what one ask brought back, logging every missing and rejected reply."""
        self.missing.update(replies.missing)
        self.rejected.update(replies.rejected)
        for reasons, line in (
            (replies.missing, "ldpfda: %s: no reply from %s %d (%s)"),
            (replies.rejected, "ldpfda: %s reply of %s %d rejected: %s"),
        ):
            for key, reason in reasons.items():
                logger.warning(line, self.name, self.who, key, reason)
        self.answer(replies.ids)

    def summary(self) -> dict[str, Any]:
        return {
            "asked": int(self.asked.size),
            "answered": int(self.answered.size),
            "missing": sorted(self.missing),
            "rejected": {str(k): v for k, v in sorted(self.rejected.items())},
            "not_asked_budget": sorted(self.refused_by_server),
        }


def _merged(first: Replies, retry: Replies) -> Replies:
    """``first`` with the replies of the clients asked again in ``retry``."""
    missing = {c: r for c, r in first.missing.items() if c not in retry.ids}
    missing.update(retry.missing)
    values = {
        k: np.concatenate([v, retry.values[k]]) if k in retry.values else v
        for k, v in first.values.items()
    }
    return Replies(
        np.concatenate([first.ids, retry.ids]),
        values,
        missing,
        {**first.rejected, **retry.rejected},
        {**first.reported, **retry.reported},
    )


class QuorumError(RuntimeError):
    """Too few clients of a round gave a valid reply for the run to go on: ``round``
    names it, ``missing`` lists the clients the run asked for and lost by then."""

    def __init__(self, message: str, round: str = "", missing: list[int] | None = None):
        super().__init__(message)
        self.round = round
        self.missing = list(missing or [])


def _head(items: list[Any], n: int = 5) -> str:
    return str(items[:n])[:-1] + (
        f", ... {len(items) - n} more]" if len(items) > n else "]"
    )


class Session:
    """One run's asks through ``clients``, charged first to the server's ``ledger``;
    ``status(stage, **extra)`` is told each stage as it starts, and ``timings`` holds
    the wall time of every :meth:`timed` step."""

    def __init__(
        self,
        clients: Clients,
        ledger: PrivacyLedger,
        min_reply_fraction: float = 0.0,
        status: Callable[..., None] | None = None,
    ) -> None:
        self.clients = clients
        self.ledger = ledger
        self.min_reply_fraction = min_reply_fraction
        self.status = status or (lambda stage, **extra: None)
        self.rounds: dict[str, Round] = {}
        self.reported: dict[int, dict[str, float]] = {}
        self.timings: dict[str, float] = {}
        #: Every client the run lost (absent, missing, rejected, not affordable), with
        #: the first reason: each round's quorum counts them against its population.
        self.lost: dict[int, str] = {}

    def lose(self, reasons: dict[int, str]) -> None:
        """Record clients the run lost (a client keeps its first reason)."""
        for client, reason in reasons.items():
            self.lost.setdefault(int(client), reason)

    @contextmanager
    def timed(self, key: str) -> Iterator[None]:
        """Add the wall time of the block to ``timings[key]``."""
        t0 = time.perf_counter()
        yield
        self.timings[key] = self.timings.get(key, 0.0) + time.perf_counter() - t0

    def ask(
        self,
        stage: str,
        query: Query,
        ids: NDArray[np.int64],
        request: Request | None = None,
        *,
        minimum: int = 1,
        what: str = "",
        planned: NDArray[np.int64] | None = None,
        reduce: Callable[[Replies], None] | None = None,
    ) -> Replies:
        """Ask clients ``ids`` ``query`` as round ``stage``; the valid replies.

        A client that cannot afford the query is not asked (``not_asked_budget``), one
        that was unavailable is asked once more once it is back (a restarted node
        answers from its own ledger, with the very release it made if it made one);
        :class:`QuorumError` when fewer than ``minimum`` valid replies come back, or
        when the run has lost more of ``planned`` (the clients the run asked for in
        this round, whether present or not; default ``ids``) than the reply fraction
        allows (:meth:`require`). With ``reduce``, every checked chunk of valid
        replies is handed to it (the transport's chunks, or all replies as one), and
        the replies returned keep no values.
        """
        request = request or Request()
        ids = np.asarray(ids, dtype=np.int64)
        planned = ids if planned is None else planned
        round_ = self.rounds.setdefault(stage, Round(stage))
        # A client the transport knows has no node is neither asked nor charged.
        absent = getattr(self.clients, "absent", lambda ids: np.zeros(ids.size, bool))
        gone = absent(ids)
        if gone.any():
            self.lose(
                {int(c): "absent: no node identified as this client" for c in ids[gone]}
            )
            request, ids = request.take(np.flatnonzero(~gone)), ids[~gone]
        affordable = self._charge(query, request, ids)
        asked = ids if affordable.all() else ids[affordable]
        round_.refused_by_server.extend(int(c) for c in ids[~affordable])
        self.lose({int(c): "budget: not affordable" for c in ids[~affordable]})
        round_.ask(asked)
        if not affordable.all():
            request = request.take(np.flatnonzero(affordable))
        replies = self._replies(query, asked, request, reduce)
        away = [c for c, r in replies.missing.items() if r.startswith("unavailable")]
        index = np.flatnonzero(np.isin(asked, away)) if away else _NO_KEYS
        if index.size:
            self.status(f"{stage} rejoin", clients=asked[index].tolist())
            self.clients.rejoin(asked[index])
            retry = self._replies(query, asked[index], request.take(index), reduce)
            replies = _merged(replies, retry)
        for c in replies.missing.keys() | replies.rejected.keys():
            self.reported.pop(c, None)
        self.reported.update(replies.reported)
        round_.record(replies)
        self.lose({**replies.missing, **replies.rejected})
        self.require(round_, minimum, what or stage, planned)
        return replies

    def _replies(
        self,
        query: Query,
        ids: NDArray[np.int64],
        request: Request,
        reduce: Callable[[Replies], None] | None,
    ) -> Replies:
        """The transport's replies of ``ids``; with ``reduce`` (see :meth:`ask`)."""
        if reduce is None:
            return self.clients.ask(query, ids, request)
        chunks = getattr(self.clients, "ask_chunks", None)
        parts = (
            chunks(query, ids, request)
            if chunks
            else [self.clients.ask(query, ids, request)]
        )
        out, answered = Replies(_NO_KEYS, {}), np.zeros(ids.size, dtype=bool)
        ascending = bool(np.all(ids[1:] > ids[:-1]))
        for part in parts:
            if part.ids.size:
                reduce(part)
                at = np.searchsorted(ids, part.ids) if ascending else None
                answered[locate(ids, part.ids)[1] if at is None else at] = True
            out.missing.update(part.missing)
            out.rejected.update(part.rejected)
            out.reported.update(part.reported)
        # Everyone answered (the usual ask): the asked ids themselves, not a copy.
        out.ids = ids if answered.all() else ids[answered]
        return out

    def _charge(
        self, query: Query, request: Request, ids: NDArray[np.int64]
    ) -> NDArray[np.bool_]:
        """Charge every client of ``ids`` that can afford its cost, :data:`_SPAN`
        clients at a time (no temporaries the size of the population); who was
        charged."""
        ok = np.ones(ids.size, dtype=bool)
        if query.cost is None or ids.size == 0:
            return ok
        for start in range(0, ids.size, _SPAN):
            index = np.arange(start, min(start + _SPAN, ids.size))
            groups, group = query.costs(request, index)
            for g, events in enumerate(groups):
                rows = index if len(groups) == 1 else index[group == g]
                total = float(sum(e.epsilon for e in events))
                can = self.ledger.can_spend(total, ids[rows])
                if np.any(can):
                    self.ledger.charge_all(list(events), ids[rows[can]])
                ok[rows[~can]] = False
        return ok

    def require(
        self,
        round_: Round,
        minimum: int,
        what: str,
        planned: NDArray[np.int64] | None = None,
    ) -> None:
        """Stop the run with :class:`QuorumError` if fewer than ``minimum`` clients of
        ``round_`` replied validly, or if fewer than ``min_reply_fraction`` of
        ``planned`` (default: the clients asked) are still in the run, every client
        lost in this or an earlier round counted out; the message names the counts and
        who is missing (with what the transport knows of connected nodes)."""
        fraction = self.min_reply_fraction
        answered = int(round_.answered.size)
        population = round_.asked if planned is None else np.asarray(planned)
        lost_ids = np.fromiter(self.lost, dtype=np.int64, count=len(self.lost))
        inside = np.isin(lost_ids, population) if lost_ids.size else lost_ids > 0
        gone = sorted(int(c) for c in lost_ids[inside])
        in_run = population.size - len(gone)
        needed = max(minimum, math.ceil(fraction * population.size))
        if answered >= minimum and in_run >= needed:
            return
        kept = in_run if in_run < needed else answered
        # What the transport knows of who took part (connected, identified nodes).
        describe = getattr(self.clients, "describe", None)
        who = f"; {describe()}" if describe is not None else ""
        raise QuorumError(
            f"only {kept} of {population.size} {what} clients "
            f"gave a valid reply in round {round_.name!r}; the run needs {needed} "
            f"(flower.min-reply-fraction = {fraction:g} of the clients it asked for, "
            f"and at least {minimum}). Missing ({len(gone)}): {_head(gone)}; "
            f"rejected in this round ({len(round_.rejected)}): "
            f"{_head(sorted(round_.rejected.items()))}; not asked for lack of "
            f"budget: {len(round_.refused_by_server)}{who} (the log has "
            "every reason)",
            round_.name,
            gone,
        )
