"""Block mode of the simulation: one virtual SuperNode serves many simulated clients.

With ``flower.clients-per-node`` = B > 1, simulated partition ``p`` serves clients
``p*B .. p*B + B - 1`` (of the run's ``data.n-train + data.n-eval``) and answers a
query for any of them with the very vectorised client function the in-process
transport calls (:func:`ldpfda.client.answers.answer`), on the run's client noise seed
and the per-client keyed streams: a block's releases equal the in-process ones, bit
for bit. The wire layout is :mod:`ldpfda.schema.blocks`. The block's ledger, one row
per client, is kept in the node's run state.

Simulation only: Flower's simulation rescans its message store per virtual node, so
10^4 one-client nodes cost minutes per round. A deployed node holds one client's data
and refuses block mode (``ERROR_POLICY``), as does a simulated node that reads its
own file (``flower.node-data``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from numpy.typing import NDArray

from ldpfda.client.answers import ClientBatch, Refusal, answer
from ldpfda.client.node import ClientSetup, DataError, check_classes, run_settings
from ldpfda.client.release import noise_seed
from ldpfda.datasets.population import simulated_partition
from ldpfda.privacy.base import ReleaseEvent
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.schema import catalog
from ldpfda.schema.blocks import BLOCK_LAYOUT, BLOCK_RECORD, in_runs, unpack_request
from ldpfda.schema.queries import ERROR_POLICY, ERROR_REQUEST, Query

__all__ = ["answer_block", "clients_per_node"]

#: Node config keys of a node that is not a plain simulated partition.
_OWN_NODE = ("client-id", "data-path", "spec-path", "noise-seed", "ledger-dir")


def clients_per_node(context: Context) -> int:
    """The run's ``flower.clients-per-node`` (1: one client per node)."""
    value = context.run_config.get("flower.clients-per-node", 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Refusal(
            ERROR_REQUEST, f"flower.clients-per-node must be an int >= 1, got {value!r}"
        )
    return value


def _block(context: Context, setup: ClientSetup, size: int) -> NDArray[np.int64]:
    node = dict(context.node_config)
    own = [key for key in _OWN_NODE if node.get(key) not in (None, "")]
    flower = run_settings(context.run_config)[1]
    if (
        own
        or setup.policy.deployed
        or flower.get("node-data")
        or "partition-id" not in node
    ):
        raise Refusal(
            ERROR_POLICY,
            "block mode (flower.clients-per-node > 1) is for simulated partitions "
            f"only; this node holds its own client's data (node config {own})",
        )
    total = setup.settings.n_train + setup.settings.n_eval
    first = setup.client_id * size
    if first >= total:
        raise DataError(f"partition {setup.client_id} has no clients of {total}")
    return np.arange(first, min(first + size, total), dtype=np.int64)


def _ledger_key(context: Context) -> str:
    return f"ldpfda-block-ledger-run-{context.run_id}"


def _load(context: Context, block: NDArray[np.int64], budget: float) -> PrivacyLedger:
    ledger = PrivacyLedger(budget=budget, client_ids=block)
    key = _ledger_key(context)
    if key in context.state:
        for item in json.loads(str(context.state.config_records[key]["events"])):
            event = ReleaseEvent.of(
                item["mechanism"], item["epsilon"], **item["parameters"]
            )
            ledger.restore([event], item["clients"])
    return ledger


def _save(context: Context, ledger: PrivacyLedger) -> None:
    events = [
        {
            "mechanism": e.event.mechanism,
            "epsilon": e.event.epsilon,
            "parameters": dict(e.event.parameters),
            "clients": e.client_ids.tolist(),
        }
        for e in ledger.entries
    ]
    context.state[_ledger_key(context)] = ConfigRecord({"events": json.dumps(events)})


def _figures(ledger: PrivacyLedger, ids: NDArray[np.int64]) -> ConfigRecord:
    spent = ledger.spent_all()[np.searchsorted(ledger.client_ids, ids)]
    return ConfigRecord(
        {
            "client-ids": ids.tolist(),
            "budget": float(ledger.budget),
            "spent": spent.astype(float).tolist(),
        }
    )


def answer_block(
    name: str,
    message: Message,
    context: Context,
    setup: ClientSetup,
    n_classes: int,
    query_of: Callable[[int], Query],
    runs: NDArray[np.int64] | None = None,
) -> RecordDict:
    """The reply content of query ``name`` for the asked clients of the node's block
    (``identify``: the whole block, with each client's ledger figures; in the run's
    first round, the clients of the block in ``runs``)."""
    block = _block(context, setup, clients_per_node(context))
    ledger = _load(context, block, setup.budget)
    if name == catalog.IDENTIFY:
        return RecordDict({"identity": _figures(ledger, block)})
    setup.policy.check_run(setup.settings)
    content = message.content
    records: dict[str, Any] = {
        k: {key: a.numpy() for key, a in r.items()}
        for k, r in content.array_records.items()
    }
    layout = content.config_records.get(BLOCK_LAYOUT, ConfigRecord())
    shared = [k for k in str(layout.get("shared", "")).split(",") if k]
    features, labels = simulated_partition(
        setup.settings, setup.repeat, int(block[0]), block.size
    )
    check_classes(setup, n_classes, labels)
    query = query_of(features.shape[1])
    try:
        arrays = {s.key: records[s.record][s.key] for s in query.request}
        ids, request = unpack_request(
            query.request, arrays, records[BLOCK_RECORD], shared
        )
    except KeyError as exc:
        raise ValueError(f"the request lacks {exc}") from exc
    if runs is not None:
        ids = block[in_runs(block, runs)]
    rows = ids - block[0]
    if ids.size == 0 or np.any((rows < 0) | (rows >= block.size)):
        raise ValueError("the request asks for clients outside the node's block")
    batch = ClientBatch(ids, features[rows], labels[rows], noise_seed(setup, 0), ledger)
    try:
        reply = answer(name, batch, request, setup.settings)
    finally:
        _save(context, ledger)
    out: dict[str, Any] = {}
    for spec in query.reply:
        value = np.ascontiguousarray(np.asarray(reply[spec.key]).astype(spec.dtype))
        out.setdefault(spec.record, ArrayRecord({}))[spec.key] = Array(value)
    out[query.ledger_record] = _figures(ledger, ids)
    return RecordDict(out)
