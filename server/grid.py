"""The Flower transport: queries as messages to SuperNodes over a ``Grid``; every
reply is checked with the very value checks of the in-process transport, and a reply
that fails is rejected with the reason."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid
from numpy.typing import NDArray

from ldpfda.schema import catalog
from ldpfda.schema.blocks import (
    BLOCK_LAYOUT,
    FIRST_RECORD,
    id_runs,
    pack_request,
    stacked,
)
from ldpfda.schema.queries import (
    ERROR_BUDGET,
    ERROR_DATA,
    ERROR_LEDGER,
    ERROR_POLICY,
    ERROR_REQUEST,
    ERROR_SPEC,
    SPEC_RECORD,
    ArraySpec,
    Query,
    ReplyError,
    Request,
)
from ldpfda.server.session import Replies, Round, check_replies, logger, wire_rows

__all__ = [
    "GridClients",
    "ReplyError",
    "parse_checked",
    "parse_identity",
    "wait_for_nodes",
]

#: Error codes with which Flower reports that a node never answered (it went offline,
#: its ClientApp crashed, or the reply was lost): the client is missing, not wrong.
_UNAVAILABLE = frozenset(
    {
        ErrorCode.MESSAGE_UNAVAILABLE,
        ErrorCode.REPLY_MESSAGE_UNAVAILABLE,
        ErrorCode.NODE_UNAVAILABLE,
        ErrorCode.CLIENT_APP_CRASHED,
    }
)


#: The kind a node's refusal is reported as, by its error code.
REFUSALS = {
    ERROR_REQUEST: "request",
    ERROR_BUDGET: "budget",
    ERROR_POLICY: "policy",
    ERROR_LEDGER: "ledger",
    ERROR_DATA: "data",
    ERROR_SPEC: "spec",
}


def _content(message: Message) -> RecordDict:
    if message.has_error():
        error = message.error
        kind = REFUSALS.get(int(error.code), "error")
        raise ReplyError(kind, f"error reply (code {error.code}): {error.reason}")
    if not message.has_content():
        raise ReplyError("content", "reply has no content")
    return message.content


def _ledger_info(content: RecordDict, key: str, client_id: int) -> dict[str, float]:
    try:
        record = content.config_records[key]
        reported = record["client-id"]
        spent = float(record["spent"])  # type: ignore[arg-type]
        budget = float(record["budget"])  # type: ignore[arg-type]
    except (KeyError, TypeError, ValueError) as exc:
        raise ReplyError(
            "ledger", f"reply lacks a valid '{key}' record: {exc!r}"
        ) from exc
    if isinstance(reported, bool) or not isinstance(reported, int):
        raise ReplyError("ledger", f"client-id must be an int, got {reported!r}")
    if reported != client_id:
        raise ReplyError(
            "ledger", f"reply is signed by client {reported}, expected {client_id}"
        )
    # Both may be inf (a non-private run), never NaN or negative.
    if not spent >= 0 or not budget > 0:
        raise ReplyError(
            "ledger", f"invalid ledger figures spent={spent!r}, budget={budget!r}"
        )
    return {"spent": spent, "budget": budget}


def _array(content: RecordDict, spec: ArraySpec) -> NDArray:
    try:
        return content.array_records[spec.record][spec.key].numpy()
    except Exception as exc:  # a corrupt Array may fail in many ways inside numpy
        raise ReplyError(
            "content",
            f"reply lacks a readable '{spec.record}.{spec.key}' array: {exc!r}",
        ) from exc


def parse_identity(message: Message) -> tuple[int, dict[str, float]]:
    """The client id and ledger figures of a ``query.identify`` reply (or
    :class:`ReplyError`)."""
    return _identity(_content(message))


def _identity(content: RecordDict) -> tuple[int, dict[str, float]]:
    try:
        client_id = content.config_records["identity"]["client-id"]
    except KeyError as exc:
        raise ReplyError(
            "identity", "reply lacks an 'identity' record with a client-id"
        ) from exc
    if isinstance(client_id, bool) or not isinstance(client_id, int) or client_id < 0:
        raise ReplyError(
            "identity", f"client-id must be an int >= 0, got {client_id!r}"
        )
    return client_id, _ledger_info(content, "identity", client_id)


def parse_checked(
    query: Query, message: Message, client_id: int
) -> tuple[dict[str, NDArray], dict[str, float]]:
    """One node's reply rows (per-client shape) and ledger figures, checked whole:
    content, shapes and ledger record, then the values as in process (else
    :class:`ReplyError` with the first reason)."""
    content = _content(message)
    rows = wire_rows(query, {spec.key: _array(content, spec) for spec in query.reply})
    figures = _ledger_info(content, query.ledger_record, client_id)
    values = {key: np.asarray(row)[None, ...] for key, row in rows.items()}
    checked = check_replies(query, np.array([client_id], dtype=np.int64), values)
    if checked.rejected:
        kind, detail = checked.rejected[client_id].split(": ", 1)
        raise ReplyError(kind, detail)
    return rows, figures


def _block_ledger(content: RecordDict, key: str) -> tuple[list[int], list[dict]]:
    """The client ids and ledger figures of a block's reply record ``key``."""
    try:
        record = content.config_records[key]
        reported = [int(c) for c in record["client-ids"]]  # type: ignore[union-attr]
        spent = [float(v) for v in record["spent"]]  # type: ignore[union-attr]
        budget = float(record["budget"])  # type: ignore[arg-type]
    except (KeyError, TypeError, ValueError) as exc:
        raise ReplyError(
            "ledger", f"reply lacks a valid '{key}' record: {exc!r}"
        ) from exc
    if len(spent) != len(reported) or not all(v >= 0 for v in spent) or not budget > 0:
        raise ReplyError("ledger", f"invalid ledger figures in '{key}'")
    return reported, [{"spent": v, "budget": budget} for v in spent]


def parse_block(
    query: Query, content: RecordDict, ids: NDArray[np.int64]
) -> tuple[dict[str, NDArray], list[dict[str, float]]]:
    """A block node's reply arrays, stacked over clients ``ids``, and each client's
    ledger figures (shapes and signatures checked; the values are checked by the
    caller, as in process), else :class:`ReplyError`."""
    values = {}
    for spec in query.reply:
        value = _array(content, spec)
        if value.dtype.kind not in "biuf":
            raise ReplyError("content", f"'{spec.record}.{spec.key}' is not numeric")
        values[spec.key] = stacked(spec, value, ids.size)
    reported, figures = _block_ledger(content, query.ledger_record)
    if reported != ids.tolist():
        raise ReplyError("ledger", "the reply is signed by other clients than asked")
    return values, figures


def _block_content(query: Query, request: Request, ids: NDArray) -> RecordDict:
    records, shared = pack_request(query.request, request, ids)
    content = RecordDict(
        {
            k: ArrayRecord({key: Array(a) for key, a in v.items()})
            for k, v in records.items()
        }
    )
    content[BLOCK_LAYOUT] = ConfigRecord({"shared": ",".join(shared)})
    return content


def _request_content(query: Query, arrays: Mapping[str, NDArray]) -> RecordDict:
    records: dict[str, dict[str, Array]] = {}
    for spec in query.request:
        value = np.asarray(arrays[spec.key]).astype(spec.dtype)
        if -1 not in spec.shape:
            value = value.reshape(spec.wire_shape())
        records.setdefault(spec.record, {})[spec.key] = Array(
            np.ascontiguousarray(value)
        )
    return RecordDict({k: ArrayRecord(v) for k, v in records.items()})


def wait_for_nodes(
    grid: Grid, expected: int, minimum: int, timeout: float
) -> list[int]:
    """Node ids once ``expected`` nodes are connected, or ``minimum`` at the timeout
    (else ``RuntimeError``)."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = sorted(int(n) for n in grid.get_node_ids())
        if len(nodes) >= expected:
            return nodes
        if time.monotonic() >= deadline:
            if len(nodes) >= minimum:
                logger.warning(
                    "ldpfda: starting with %d of %d expected nodes",
                    len(nodes),
                    expected,
                )
                return nodes
            raise RuntimeError(
                f"only {len(nodes)} node(s) connected after {timeout:g} s, but the run "
                f"needs {minimum} (flower.min-nodes; the settings need {expected}: "
                f"data.n-train + data.n-eval clients, flower.clients-per-node of "
                f"them a node). Start more SuperNodes, set "
                f'--federation-config "num-supernodes={expected}" in simulation, or '
                f"lower data.n-train / data.n-eval."
            )
        time.sleep(min(1.0, max(deadline - time.monotonic(), 0.01)))


class _Absent(Exception):
    """No reply to use; the message says why (``timeout`` or ``unavailable``)."""


def _present(reply: Message | None, timeout: float) -> Message:
    if reply is None:
        raise _Absent(f"timeout: no reply within flower.reply-timeout = {timeout:g} s")
    if reply.has_error() and reply.error.code in _UNAVAILABLE:
        raise _Absent(f"unavailable: {reply.error.reason} (code {reply.error.code})")
    return reply


@dataclass
class GridClients:
    """SuperNodes of a Flower ``grid`` as a transport. :meth:`connect` fills ``nodes``
    (connected when the run started); the first query (or an identify round) fills
    ``node_of`` (each identified client's node; in block mode every client of a
    node's block), ``claimed`` (each answering node's first client id) and the
    ``identify`` round, keyed by node id."""

    grid: Grid
    reply_timeout: float
    node_of: dict[int, int] = field(default_factory=dict)
    claimed: dict[int, int] = field(default_factory=dict)
    identify: Round = field(default_factory=lambda: Round(catalog.IDENTIFY, who="node"))
    nodes: list[int] = field(default_factory=list)
    reported: dict[int, dict[str, float]] = field(default_factory=dict)
    #: The run's federation spec hash, sent with every request (None: the run has none).
    spec_hash: str | None = None
    #: Simulated clients each node serves (block mode: > 1, simulation only).
    clients_per_node: int = 1
    #: The run's clients (ids ``0 .. total-1``); whether the nodes said who they are.
    total: int = 0
    identified: bool = False
    #: Called once the nodes are identified (the session's quorum on them).
    on_identified: Callable[[], None] | None = None
    #: Seconds :meth:`rejoin` waits for a node (negative: ``reply_timeout``).
    rejoin_timeout: float = -1.0

    def connect(self, total: int, minimum: int, wait_timeout: float) -> None:
        """Wait for the nodes of the run's ``total`` clients. They say who they are
        in their reply to the first query (:meth:`ask`), or in an identify round when
        the ids are needed first (:meth:`ids`) or the first query's request differs
        between clients.

        Of two nodes claiming one client id the lower node id stands and the other is
        rejected as a duplicate; an id outside ``0 .. total-1`` is rejected as unknown.
        """
        self.total = total
        expected = -(-total // self.clients_per_node)
        self.nodes = wait_for_nodes(
            self.grid, expected, min(minimum, expected), wait_timeout
        )

    def _identities(self, replies: Mapping[int, Message]) -> dict[int, RecordDict]:
        """Identify every node by its reply (the identify round, in node ids); the
        content of each identified node's reply."""
        self.identify.ask(np.array(self.nodes, dtype=object))
        got, identified = Replies(_NONE, {}), {}
        for node in sorted(self.nodes):
            try:
                content = _content(_present(replies.get(node), self.reply_timeout))
                if self.clients_per_node > 1:
                    block, figures = _block_ledger(content, "identity")
                else:
                    client_id, one = _identity(content)
                    block, figures = [client_id], [one]
            except _Absent as exc:
                got.missing[node] = str(exc)
                continue
            except ReplyError as exc:
                got.rejected[node] = str(exc)
                continue
            if reason := self._claim(node, block, figures, self.total):
                got.rejected[node] = reason
            else:
                identified[node] = content
        self.identify.record(got)
        self.identify.answer(np.array(sorted(identified), dtype=object))
        self.identified = True
        if self.on_identified is not None:
            self.on_identified()
        return identified

    def _identify_round(self) -> None:
        query = catalog.identify_query()
        self._identities(self._send(query, {n: RecordDict() for n in self.nodes}))

    def _claim(
        self, node: int, block: list[int], figures: list[dict], total: int
    ) -> str:
        """Record ``node`` as the node of clients ``block``; the reason it is
        rejected instead (an id outside the run, or one another node has)."""
        self.claimed[node] = block[0] if block else -1
        for client_id in block:
            if not 0 <= client_id < total:
                return f"unknown: client {client_id} is not in this run"
            if client_id in self.node_of:
                other = self.node_of[client_id]
                return f"duplicate: client {client_id} is already node {other}"
        self.node_of.update(dict.fromkeys(block, node))
        self.reported.update(zip(block, figures, strict=True))
        return ""

    def describe(self) -> str:
        """Who is connected and identified, and who gave no identity reply."""
        missing = sorted(self.identify.missing.items())
        rejected = sorted(self.identify.rejected.items())
        return (
            f"connected nodes: {len(self.nodes)}, identified clients: "
            f"{len(self.node_of)}, nodes without an identity reply: {missing[:5]}, "
            f"rejected identities: {rejected[:5]}"
        )

    def ids(self) -> NDArray[np.int64]:
        """The identified clients, by id (after an identify round if need be)."""
        if not self.identified:
            self._identify_round()
        return np.array(sorted(self.node_of), dtype=np.int64)

    def absent(self, ids: NDArray[np.int64]) -> NDArray[np.bool_]:
        """Which of ``ids`` are known to have no node (none before identification)."""
        if not self.identified:
            return np.zeros(len(ids), dtype=bool)
        known = np.fromiter(self.node_of, dtype=np.int64, count=len(self.node_of))
        return ~np.isin(ids, known)

    def _send(
        self, query: Query, contents: Mapping[int, RecordDict]
    ) -> dict[int, Message]:
        """Send ``query`` to each node of ``contents``; replies by node id (a stray
        reply is logged and dropped, a node-unavailable error kept under its node)."""
        kind = query.message_type
        if self.spec_hash is not None:
            for content in contents.values():
                content[SPEC_RECORD] = ConfigRecord({"hash": self.spec_hash})
        messages = [
            Message(content, node, kind, group_id=query.name)
            for node, content in contents.items()
        ]
        if not messages:
            return {}
        received = self.grid.send_and_receive(messages, timeout=self.reply_timeout)
        node_by_id = {
            m.metadata.message_id: m.metadata.dst_node_id
            for m in messages
            if m.metadata.message_id
        }
        replies: dict[int, Message] = {}
        for reply in received:
            unavailable = reply.has_error() and reply.error.code in _UNAVAILABLE
            if unavailable:
                node = node_by_id.get(reply.metadata.reply_to_message_id)
            else:
                node = int(reply.metadata.src_node_id)
            answers = unavailable or reply.metadata.message_type == kind
            if node is None or node not in contents or node in replies or not answers:
                logger.warning(
                    "ldpfda: ignored a stray reply (%s from node %s) to the %s round",
                    reply.metadata.message_type,
                    reply.metadata.src_node_id,
                    query.name,
                )
                continue
            replies[node] = reply
        return replies

    def rejoin(self, ids: NDArray[np.int64]) -> None:
        """Wait until the nodes of clients ``ids`` are online again, for at most
        ``rejoin_timeout`` (a restarted SuperNode keeps its node id under SuperNode
        authentication)."""
        self._wait_for({self.node_of[int(c)] for c in ids})

    def _wait_for(self, nodes: set[int]) -> None:
        wait = self.reply_timeout if self.rejoin_timeout < 0 else self.rejoin_timeout
        deadline = time.monotonic() + wait
        while not nodes <= {int(n) for n in self.grid.get_node_ids()}:
            if time.monotonic() >= deadline:
                return
            time.sleep(1.0)

    def _rows(
        self, query: Query, content: RecordDict, asked: NDArray[np.int64]
    ) -> tuple[dict[str, NDArray], list[dict[str, float]]]:
        """One node's reply arrays stacked over its ``asked`` clients, and their
        ledger figures (:class:`ReplyError` for a refusal or a malformed reply)."""
        configs = content.config_records  # a new mapping at every access
        if "refusal" in configs:
            refusal = configs["refusal"]
            code, reason = int(str(refusal["code"])), str(refusal["reason"])
            kind = REFUSALS.get(code, "error")
            raise ReplyError(kind, f"error reply (code {code}): {reason}")
        if self.clients_per_node > 1:
            return parse_block(query, content, asked)
        arrays = {spec.key: _array(content, spec) for spec in query.reply}
        rows = wire_rows(query, arrays)
        figures = _ledger_info(content, query.ledger_record, int(asked[0]))
        return {k: np.asarray(v)[None, ...] for k, v in rows.items()}, [figures]

    def _contents(
        self,
        query: Query,
        request: Request,
        ids: NDArray[np.int64],
        groups: Mapping[int, NDArray[np.int64]],
    ) -> dict[int, RecordDict]:
        """The request of each node for its clients ``ids[groups[node]]``."""
        if self.clients_per_node > 1:
            return {
                node: _block_content(query, request.take(rows), ids[rows])
                for node, rows in groups.items()
            }
        return {
            node: _request_content(
                query, request.client(int(rows[0]) if rows.size else 0)
            )
            for node, rows in groups.items()
        }

    def _first(
        self, query: Query, ids: NDArray[np.int64], request: Request
    ) -> dict[int, RecordDict]:
        """Send the run's first query, alike for every client, to every node with
        the ids it is for (:data:`FIRST_RECORD`), a node that was unavailable once
        more when it is back; identify the nodes by their replies."""
        empty = np.zeros(0, dtype=np.int64)
        contents = self._contents(query, request, ids, dict.fromkeys(self.nodes, empty))
        runs = Array(id_runs(ids))
        for content in contents.values():
            content[FIRST_RECORD] = ArrayRecord({"asked": runs})
        replies = self._send(query, contents)
        lost = {
            node
            for node, reply in replies.items()
            if reply.has_error() and reply.error.code in _UNAVAILABLE
        }
        if lost:
            self._wait_for(lost)
            replies.update(self._send(query, {n: contents[n] for n in lost}))
        return self._identities(replies)

    def ask(self, query: Query, ids: NDArray[np.int64], request: Request) -> Replies:
        if not self.identified and (request.rows or request.ragged):
            self._identify_round()
        first = None if self.identified else self._first(query, ids, request)
        out = Replies(_NONE, {})
        groups: dict[int, list[int]] = {}
        for i, c in enumerate(ids.tolist()):
            # A client no node said it is: absent, like those the session no longer
            # asks (a first query is sent before the server knows who is there).
            if (node := self.node_of.get(c)) is not None:
                groups.setdefault(node, []).append(i)
        index = {node: np.array(rows, dtype=np.int64) for node, rows in groups.items()}
        if first is None:
            replies = self._send(query, self._contents(query, request, ids, index))
        parts: list[tuple[NDArray[np.int64], dict[str, NDArray]]] = []
        for node, rows in index.items():
            asked = ids[rows]
            try:
                if first is not None:
                    content = first[node]
                else:
                    content = _content(_present(replies.get(node), self.reply_timeout))
                values, figures = self._rows(query, content, asked)
            except (_Absent, ReplyError) as exc:
                lost = out.missing if isinstance(exc, _Absent) else out.rejected
                lost.update(dict.fromkeys(asked.tolist(), str(exc)))
                continue
            out.reported.update(zip(asked.tolist(), figures, strict=True))
            parts.append((rows, values))
        return _checked(query, ids, parts, out)


def _checked(
    query: Query,
    ids: NDArray[np.int64],
    parts: list[tuple[NDArray[np.int64], dict[str, NDArray]]],
    out: Replies,
) -> Replies:
    """``out`` with the replies of ``parts`` (rows of ``ids`` and their arrays) in the
    order asked, every value checked as in process (a rejected client's figures
    dropped)."""
    rows = np.concatenate([_NONE, *(r for r, _ in parts)])
    order = np.argsort(rows, kind="stable")
    values = {
        spec.key: _stack([v[spec.key] for _, v in parts], spec)[order]
        for spec in query.reply
    }
    checked = check_replies(query, ids[rows[order]], values, out.rejected)
    for c in checked.rejected:
        out.reported.pop(c, None)
    out.ids, out.values, out.rejected = checked.ids, checked.values, checked.rejected
    return out


_NONE = np.zeros(0, dtype=np.int64)


def _stack(parts: list[NDArray], spec: ArraySpec) -> NDArray:
    if parts:
        return np.concatenate([np.asarray(p) for p in parts])
    shape = tuple(max(d, 0) for d in spec.shape)
    return np.zeros((0, *shape), dtype=spec.dtype)
