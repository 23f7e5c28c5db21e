"""A SuperNode's own state: who it is, its data, its ledger across queries.

Everything the generic query handler of :mod:`ldpfda.client.client_app` derives from
a Flower ``Context`` before it answers: the node's identity and noise seed
(:func:`client_setup`), its client's scaled features and label (:func:`client_data`),
and its privacy ledger, rebuilt for every query from what it released before
(:func:`node_ledger`).
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
from flwr.app import ConfigRecord, Context
from numpy.typing import NDArray

from ldpfda.client.answers import Refusal
from ldpfda.config import Settings, run_settings
from ldpfda.datasets.files import load_node_data
from ldpfda.datasets.population import (
    public_featurizer,
    simulated_noise_seed,
    simulated_partition,
)
from ldpfda.privacy.base import ReleaseEvent
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.random import derive_seed
from ldpfda.schema.queries import ERROR_REQUEST

__all__ = [
    "ClientSetup",
    "client_data",
    "client_setup",
    "ledger_record",
    "load_ledger",
    "node_ledger",
    "save_ledger",
]

_STATE_PREFIX = "ldpfda-ledger-"
#: Allowed ``flower.session`` names (the session names a ledger directory).
_SESSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class ClientSetup:
    """Everything a node derives from its context before answering.

    Attributes
    ----------
    client_id : int
    settings : Settings
        The run's settings, parsed like the in-process CLI's.
    repeat : int
        The repeat whose derived seeds the run uses (``flower.repeat``).
    budget : float
        The node's epsilon cap for the run.
    noise_seed : int
        Seed that, with the client id, keys the node's noise.
    """

    client_id: int
    settings: Settings
    repeat: int
    budget: float
    noise_seed: int


def _node_int(node_config: dict[str, Any], key: str) -> int | None:
    value = node_config.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"node config {key} must be an integer, got {value!r}")
    return int(value)


def client_setup(context: Context) -> ClientSetup:
    """Identity, settings, budget and noise seed of the node running ``context``."""
    node = dict(context.node_config)
    settings, flower = run_settings(context.run_config)
    repeat = int(flower.get("repeat", 0))
    client_id = _node_int(node, "client-id")
    if client_id is None:
        client_id = _node_int(node, "partition-id")
    if client_id is None or client_id < 0:
        raise Refusal(ERROR_REQUEST, "the node has no client-id (nor partition-id)")
    budget = node.get("privacy-budget", settings.epsilon)
    if isinstance(budget, str):
        budget = float(budget)
    secret = _node_int(node, "noise-seed")
    if secret is not None:
        noise_seed = derive_seed(secret, "noise", settings.seed, repeat)
    elif node.get("data-path"):
        noise_seed = secrets.randbits(62)
    else:
        # Simulated partition: the engine's client seed, so both runs release the same.
        noise_seed = simulated_noise_seed(settings, repeat)
    return ClientSetup(client_id, settings, repeat, float(budget), noise_seed)


def client_data(
    context: Context, setup: ClientSetup
) -> tuple[NDArray[np.float64], NDArray[np.int8]]:
    """The node's scaled features ``(1, p)`` and true label ``(1,)``."""
    path = context.node_config.get("data-path")
    if not path:
        return simulated_partition(setup.settings, setup.repeat, setup.client_id)
    data = load_node_data(str(path))
    if len(data) != 1:
        raise ValueError(f"a node holds one client's data; {path} has {len(data)} rows")
    featurizer, grid = public_featurizer(setup.settings, setup.repeat)
    return data.features(featurizer, grid), data.labels


# -- the ledger, kept across the queries of one run ------------------------------------


def _ledger_scope(context: Context) -> str:
    """What the ledger is kept for: the run config's ``flower.session``, else the run.

    A multi-server session spans several runs, and a client must not be asked again in
    a later run of it. Flower gives every run a fresh ``Context.state`` (it is carried
    over only within a run series), so a ledger that outlives a run needs
    ``ledger-dir``.
    """
    session = str(context.run_config.get("flower.session", "") or "")
    if not session:
        return f"run-{context.run_id}"
    if not _SESSION_NAME.fullmatch(session):
        raise ValueError(
            f"flower.session must match {_SESSION_NAME.pattern}, got {session!r}"
        )
    return f"session-{session}"


def _ledger_file(context: Context, client_id: int) -> Path | None:
    directory = context.node_config.get("ledger-dir")
    if not directory:
        return None
    return Path(str(directory)) / _ledger_scope(context) / f"client-{client_id}.json"


def _state_key(context: Context) -> str:
    return f"{_STATE_PREFIX}{_ledger_scope(context)}"


def load_ledger(context: Context, client_id: int, budget: float) -> PrivacyLedger:
    """The node's ledger for this run, rebuilt from what it released so far.

    Releases are replayed into a fresh :class:`PrivacyLedger`; a node that already
    spent more than ``budget`` (e.g. restarted with a smaller one) refuses everything.
    """
    file = _ledger_file(context, client_id)
    key = _state_key(context)
    if file is not None:
        stored = file.read_text(encoding="utf-8") if file.exists() else "[]"
    elif key in context.state:
        record = context.state.config_records[key]
        # save_ledger stored the id as an int
        if cast(int, record["client-id"]) != client_id:
            raise Refusal(ERROR_REQUEST, "the node's identity changed during the run")
        stored = str(record["events"])
    else:
        stored = "[]"
    ledger = PrivacyLedger(budget=budget, client_ids=[client_id])
    for item in json.loads(stored):
        event = ReleaseEvent.of(
            item["mechanism"], item["epsilon"], **item["parameters"]
        )
        ledger.charge(event, [client_id])
    return ledger


@contextmanager
def node_ledger(context: Context, setup: ClientSetup) -> Iterator[PrivacyLedger]:
    """The node's ledger for one release, saved afterwards even if the release fails.

    A refused release charges nothing, and a charged one is on disk (or in the run
    state) before the reply leaves.
    """
    ledger = load_ledger(context, setup.client_id, setup.budget)
    try:
        yield ledger
    finally:
        save_ledger(context, ledger)


def save_ledger(context: Context, ledger: PrivacyLedger) -> None:
    """Store every release of ``ledger`` (in ``Context.state`` or ``ledger-dir``)."""
    client_id = int(ledger.client_ids[0])
    events = json.dumps(
        [
            {
                "mechanism": e.event.mechanism,
                "epsilon": e.event.epsilon,
                "parameters": dict(e.event.parameters),
            }
            for e in ledger.entries
        ]
    )
    file = _ledger_file(context, client_id)
    if file is None:
        context.state[_state_key(context)] = ConfigRecord(
            {"client-id": client_id, "events": events}
        )
        return
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(".tmp")
    tmp.write_text(events, encoding="utf-8")
    os.replace(tmp, file)


def ledger_record(ledger: PrivacyLedger) -> ConfigRecord:
    client_id = int(ledger.client_ids[0])
    return ConfigRecord(
        {
            "client-id": client_id,
            "budget": float(ledger.budget),
            "spent": ledger.spent(client_id),
        }
    )
