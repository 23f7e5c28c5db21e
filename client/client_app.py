r"""The Flower ClientApp: one SuperNode is one client of the protocol.

One generic handler serves every query of :mod:`ldpfda.schema.catalog` (its table
gives each query's request and reply): it reads the node's setup, data and ledger
(:mod:`ldpfda.client.node`), checks the request against the query's schema, answers
with the same vectorised function the in-process transport calls
(:func:`ldpfda.client.answers.answer`) on a batch of one client, and sends the reply
arrays with ``ConfigRecord "ledger"`` (``client-id``, ``budget``, ``spent``; the
identify query replies ``"identity"``). A charged release is on disk (or in the run
state) before the reply leaves.

A query the node cannot or will not answer gets an error reply with a code of
:mod:`ldpfda.schema.queries` (``ERROR_BUDGET``, ``ERROR_POLICY``, ``ERROR_LEDGER``,
``ERROR_DATA``, ``ERROR_REQUEST``) and a generic reason; the node's log says why.

Node config (``flower-supernode --node-config``)
------------------------------------------------
``client-id`` (int)
    The node's identity in the protocol (deployment). In simulation the
    ``partition-id`` is the identity.
``data-path`` (str)
    The node's data file (see :mod:`ldpfda.datasets.files`). Without it the node
    serves simulated partition ``partition-id`` of the embedded design.
``noise-seed`` (int)
    Optional secret of the node's noise, combined with its record's persistent release
    counter (:func:`ldpfda.client.release.noise_seed`); without it a deployed node
    draws fresh OS entropy for every release.
The node's privacy (``privacy-budget``, ``max-release-epsilon``, ``features-public``,
``p2p``, ``state-dir``) is its policy: :mod:`ldpfda.client.policy`.

The test-only fault injection (``test-misbehave``) is a mod of the separate test app
:data:`ldpfda.client.faults.app`; this app, the one a host runs, has none.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    RecordDict,
)
from flwr.clientapp import ClientApp

from ldpfda.client.answers import Refusal
from ldpfda.client.blocks import answer_block, clients_per_node
from ldpfda.client.ledger import LedgerError
from ldpfda.client.node import (
    DataError,
    SpecRefusal,
    check_classes,
    check_spec,
    client_data,
    client_setup,
    ledger_record,
    node_state,
)
from ldpfda.client.policy import PolicyRefusal
from ldpfda.client.release import RELEASES, release
from ldpfda.exceptions import BudgetExceededError
from ldpfda.schema import catalog
from ldpfda.schema.blocks import FIRST_RECORD, in_runs
from ldpfda.schema.queries import (
    ERROR_BUDGET,
    ERROR_REQUEST,
    SPEC_RECORD,
    ArraySpec,
    Query,
    ReplyError,
    Request,
)

__all__ = ["ERROR_BUDGET", "ERROR_REQUEST", "QUERIES", "app", "handle", "register"]

logger = logging.getLogger("flwr.ldpfda.node")

#: Every query a node answers.
QUERIES = (
    catalog.IDENTIFY,
    catalog.PRIVATIZE,
    catalog.EVALUATE,
    catalog.FEATURES,
    catalog.LABEL,
    catalog.P2P_RANDOMIZE,
    catalog.P2P_FORWARD,
)


@lru_cache(maxsize=64)
def node_query(name: str, settings: Any, n_features: int, n_classes: int = 2) -> Query:
    """The schema of query ``name`` for the node's run (what it reads and sends):
    a pure function of its arguments (a frozen :class:`~ldpfda.schema.queries.Query`
    of hashable settings), built once per process."""
    builders = {
        catalog.IDENTIFY: lambda: catalog.identify_query(),
        catalog.PRIVATIZE: lambda: catalog.privatize_query(
            settings, n_features, n_classes
        ),
        catalog.EVALUATE: lambda: catalog.evaluate_query(
            settings, n_features, n_classes
        ),
        catalog.FEATURES: lambda: catalog.features_query(n_features, n_classes),
        catalog.LABEL: lambda: catalog.label_query(settings, n_classes),
        catalog.P2P_RANDOMIZE: lambda: catalog.p2p_randomize_query(n_classes),
        catalog.P2P_FORWARD: lambda: catalog.p2p_forward_query(n_classes),
    }
    return builders[name]()


def _request_arrays(message: Message, specs: tuple[ArraySpec, ...]) -> dict[str, Any]:
    out = {}
    for spec in specs:
        try:
            out[spec.key] = message.content.array_records[spec.record][spec.key].numpy()
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"the request carries no usable '{spec.record}.{spec.key}'"
            ) from exc
    return out


def _reply_content(
    query: Query, arrays: dict[str, np.ndarray], ledger: Any
) -> RecordDict:
    records: dict[str, dict[str, Array]] = {}
    for spec in query.reply:
        value = np.asarray(arrays[spec.key]).astype(spec.dtype)
        records.setdefault(spec.record, {})[spec.key] = Array(
            np.ascontiguousarray(value.reshape(spec.wire_shape()))
        )
    content: dict[str, Any] = {k: ArrayRecord(v) for k, v in records.items()}
    content[query.ledger_record] = ledger_record(ledger)
    return RecordDict(content)


def query_classes(name: str, message: Message) -> int:
    """K of a query: its request's ``n-classes`` (every query of a K-class run but
    ``identify`` carries it), else 2."""
    spec = catalog.CLASSES_SPEC
    record = message.content.array_records.get(spec.record)
    if name == catalog.IDENTIFY or record is None or spec.key not in record:
        return 2
    arrays = _request_arrays(message, (spec,))
    try:
        return catalog.request_classes(Request.of_client(arrays, (spec,)))
    except ReplyError as exc:
        raise ValueError(f"malformed request: {exc}") from exc


def _spec_hash(message: Message) -> str | None:
    """The federation spec a request is made under (None if it names none)."""
    record = message.content.config_records.get(SPEC_RECORD)
    return None if record is None else str(record.get("hash"))


def handle(
    name: str, message: Message, context: Context, runs: Any = None
) -> RecordDict:
    """Answer query ``name`` for the node of ``context`` (the content of the reply);
    a block node in the first round for its clients in ``runs``.

    The node's policy is checked first; a deployed node answers a query identical to
    an earlier one with the stored release, at no cost.
    """
    setup = client_setup(context)
    check_spec(setup, _spec_hash(message))
    if clients_per_node(context) > 1:
        n_classes = query_classes(name, message)
        return answer_block(
            name,
            message,
            context,
            setup,
            n_classes,
            lambda p: node_query(name, setup.settings, p, n_classes),
            runs,
        )
    with node_state(context, setup) as state:
        return _answer(name, message, context, setup, state)


def _answer(
    name: str, message: Message, context: Context, setup: Any, state: Any
) -> RecordDict:
    """The reply content of a one-client node to query ``name``, its ledger open as
    ``state``."""
    n_classes = query_classes(name, message)
    if name != catalog.IDENTIFY:
        setup.policy.check_run(setup.settings)
        features, labels = client_data(context, setup)
        check_classes(setup, n_classes, labels)
    else:
        features = np.zeros((1, 0))
        labels = np.zeros(1, dtype=np.int8)
    query = node_query(name, setup.settings, features.shape[1], n_classes)
    try:
        request = Request.of_client(
            _request_arrays(message, query.request), query.request
        )
    except ReplyError as exc:
        raise ValueError(f"malformed request: {exc}") from exc
    memoize = setup.record is not None and name in RELEASES
    arrays = release(name, setup, state, features, labels, request, memoize=memoize)
    return _reply_content(query, arrays, state.ledger)


def _error(name: str, exc: Exception) -> Error:
    """The error reply of a refusal or a bad request: a refusal for the node's policy,
    ledger or data carries only its code and a generic reason (the node's log says
    why)."""
    if isinstance(exc, BudgetExceededError):
        logger.warning("ldpfda node: %s refused: %s", name, exc)
        return Error(ERROR_BUDGET, f"refused: {exc}")
    if isinstance(exc, (PolicyRefusal, LedgerError, DataError, SpecRefusal)):
        logger.warning("ldpfda node: %s refused: %s", name, exc.reason)
        return Error(exc.code, str(exc))
    if isinstance(exc, Refusal):
        return Error(exc.code, str(exc))
    return Error(ERROR_REQUEST, f"{type(exc).__name__}: {exc}")


_REFUSED = (
    BudgetExceededError,
    PolicyRefusal,
    LedgerError,
    DataError,
    SpecRefusal,
    Refusal,
    ValueError,
    TypeError,
    KeyError,
    OSError,
)


def first_reply(name: str, message: Message, context: Context) -> RecordDict:
    """The reply to the run's first query (:data:`~ldpfda.schema.blocks.
    FIRST_RECORD`): the node's identity, and for those of its clients the query asks
    the answer, or the refusal as a ``refusal`` record (a refusal before the node can
    say who it is stays an error reply).

    A one-client node reads its setup and opens its ledger once for both: the
    identity is what the ledger held before the release.
    """
    runs = message.content.array_records[FIRST_RECORD]["asked"].numpy()
    if clients_per_node(context) > 1:
        identity = handle(catalog.IDENTIFY, message, context)
        record = identity.config_records["identity"]
        mine = record.get("client-ids", [record.get("client-id")])
        if not in_runs(np.asarray(mine, dtype=np.int64), runs).any():
            return identity
        return _with_identity(
            name, record, lambda: handle(name, message, context, runs)
        )
    setup = client_setup(context)
    check_spec(setup, _spec_hash(message))
    with node_state(context, setup) as state:
        record = ledger_record(state.ledger)
        if not in_runs(np.array([setup.client_id]), runs).any():
            return RecordDict({"identity": record})
        return _with_identity(
            name, record, lambda: _answer(name, message, context, setup, state)
        )


def _with_identity(name: str, record: ConfigRecord, answer: Any) -> RecordDict:
    """``answer()``'s content, or its refusal as a ``refusal`` record, with the
    node's ``identity`` record."""
    try:
        content = answer()
    except _REFUSED as exc:
        error = _error(name, exc)
        refusal = {"code": int(error.code), "reason": str(error.reason)}
        content = RecordDict({"refusal": ConfigRecord(refusal)})  # type: ignore[arg-type]
    content["identity"] = record
    return content


def respond(name: str, message: Message, context: Context) -> Message:
    """:func:`handle` (:func:`first_reply` for the run's first query), with a refusal
    or a bad request as an error reply (:func:`_error`)."""
    try:
        if FIRST_RECORD in message.content.array_records:
            return Message(first_reply(name, message, context), reply_to=message)
        return Message(handle(name, message, context), reply_to=message)
    except _REFUSED as exc:
        return Message(_error(name, exc), reply_to=message)


def register(client_app: ClientApp) -> ClientApp:
    """Register the handler of every query of :data:`QUERIES` on ``client_app``."""
    for name in QUERIES:

        def query(message: Message, context: Context, name: str = name) -> Message:
            return respond(name, message, context)

        client_app.query(name)(query)
    return client_app


#: The app a host runs.
app = register(ClientApp())
