"""A SuperNode's own state: who it is, its policy, its data, its ledger.

Everything the generic query handler of :mod:`ldpfda.client.client_app` derives from
a Flower ``Context`` before it answers: the node's identity and privacy policy
(:func:`client_setup`, :mod:`ldpfda.client.policy`), its client's scaled features and
label (:func:`client_data`), and its ledger (:func:`node_state`). A deployed node (one
with a data file) keeps a lifetime ledger per record with its memoized releases, its
budget counting every record of its client id (:mod:`ldpfda.client.ledger`); a
simulated partition keeps a ledger for the run.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import numpy as np
from flwr.app import ConfigRecord, Context
from numpy.typing import NDArray

from ldpfda.client.answers import Refusal
from ldpfda.client.ledger import RecordState, open_record, record_key
from ldpfda.client.policy import NodePolicy
from ldpfda.client.release import ClientSetup
from ldpfda.config import Settings
from ldpfda.config import run_settings as parse_run_settings
from ldpfda.datasets.files import load_node_data
from ldpfda.datasets.population import (
    public_featurizer,
    simulated_partition,
)
from ldpfda.privacy.base import ReleaseEvent
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.schema.queries import ERROR_DATA, ERROR_REQUEST, ERROR_SPEC

__all__ = [
    "ClientSetup",
    "DataError",
    "SpecRefusal",
    "check_classes",
    "check_spec",
    "client_data",
    "client_setup",
    "ledger_record",
    "load_ledger",
    "node_state",
    "partition_file",
    "run_settings",
    "save_ledger",
]

logger = logging.getLogger("flwr.ldpfda.node")

_STATE_PREFIX = "ldpfda-ledger-"
#: Allowed ``flower.session`` names (the session names a ledger directory).
_SESSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class DataError(Exception):
    """The node's data cannot be used; ``reason`` is for the node's log only."""

    code = ERROR_DATA

    def __init__(self, reason: str) -> None:
        super().__init__("the node's data cannot be used (see the node's log)")
        self.reason = reason


class SpecRefusal(Exception):
    """A query under another federation spec than the node's (or a spec the node
    cannot read). The reply names the two specs' hashes, which are public."""

    code = ERROR_SPEC

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


#: Extensions of a simulated partition's file in ``flower.node-data``.
_PARTITION_SUFFIXES = (".csv", ".npz")


def partition_file(folder: str, client_id: int) -> Path:
    """The file of simulated client ``client_id`` in ``flower.node-data``:
    ``<folder>/client-<id>.csv`` or ``.npz`` (exactly one of them)."""
    found = [
        path
        for suffix in _PARTITION_SUFFIXES
        if (path := Path(folder) / f"client-{client_id}{suffix}").is_file()
    ]
    if len(found) != 1:
        raise DataError(
            f"flower.node-data {folder}: client {client_id} needs exactly one of "
            f"client-{client_id}.csv and client-{client_id}.npz, found {len(found)}"
        )
    return found[0]


def _simulated_files(node: dict[str, Any], flower: dict[str, Any]) -> bool:
    """Whether the node is a simulated partition that reads its own file from the
    run's ``flower.node-data`` folder, under the run's ``flower.spec``."""
    return not node.get("data-path") and bool(flower.get("node-data"))


def _node_spec(node: dict[str, Any]) -> Any:
    path = node.get("spec-path")
    if not path:
        return None
    from ldpfda.schema.spec import FederationSpec

    try:
        return FederationSpec.load(str(path))
    except (OSError, ValueError, TypeError) as exc:
        raise SpecRefusal("the node cannot read its federation spec", str(exc)) from exc


def check_spec(setup: ClientSetup, spec_hash: str | None) -> None:
    """Refuse a query whose federation spec (``spec_hash``, None if it names none)
    is not the node's own."""
    own = None if setup.spec is None else setup.spec.hash
    if own != spec_hash:
        theirs, ours = ("none" if h is None else h[:16] for h in (spec_hash, own))
        raise SpecRefusal(
            f"the query is made under federation spec {theirs}, this node holds "
            f"spec {ours}"
        )


def check_classes(setup: ClientSetup, n_classes: int, labels: NDArray) -> None:
    """Refuse a query for K classes when the node's spec declares another number of
    labels (``ERROR_SPEC``), or when the node's label is not one of ``0 .. K - 1``
    (``ERROR_DATA``; the label stays in the node's log)."""
    if setup.spec is not None and len(setup.spec.labels) != n_classes:
        raise SpecRefusal(
            f"the query is for {n_classes} classes, this node's federation spec "
            f"declares {len(setup.spec.labels)} labels"
        )
    if np.any((labels < 0) | (labels >= n_classes)):
        raise DataError(
            f"the node's label {labels.tolist()} is not one of the query's "
            f"{n_classes} classes"
        )


@functools.lru_cache(maxsize=8)
def _parsed(items: tuple[tuple[str, Any], ...]) -> tuple[Settings, dict[str, Any]]:
    return parse_run_settings(dict(items))


def run_settings(run_config: Any) -> tuple[Settings, dict[str, Any]]:
    """:func:`ldpfda.config.run_settings` of a node's run config, parsed once per run
    config (a node answers many queries of one run); the Flower keys a copy."""
    try:
        settings, flower = _parsed(tuple(sorted(dict(run_config).items())))
    except TypeError:  # a value that cannot be hashed: parse it as it is
        return parse_run_settings(run_config)
    return settings, dict(flower)


def _node_int(node_config: dict[str, Any], key: str) -> int | None:
    value = node_config.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"node config {key} must be an integer, got {value!r}")
    return int(value)


def client_setup(context: Context) -> ClientSetup:
    """Identity, settings and privacy policy of the node running ``context``."""
    node = dict(context.node_config)
    settings, flower = run_settings(context.run_config)
    repeat = int(flower.get("repeat", 0))
    client_id = _node_int(node, "client-id")
    if client_id is None:
        client_id = _node_int(node, "partition-id")
    if client_id is None or client_id < 0:
        raise Refusal(ERROR_REQUEST, "the node has no client-id (nor partition-id)")
    policy = NodePolicy.from_node_config(node, settings)
    if _simulated_files(node, flower):
        # A simulated partition is the simulation host's: its file and its spec are
        # the run's (Flower gives simulated nodes no node config of their own).
        node["spec-path"] = flower.get("spec", "")
    record = None
    if policy.deployed:
        path = Path(str(node["data-path"]))
        try:
            record = record_key(client_id, path.read_bytes())
        except OSError as exc:
            raise DataError(f"cannot read the data file {path}: {exc}") from exc
    return ClientSetup(
        client_id,
        settings,
        repeat,
        policy,
        record,
        _node_int(node, "noise-seed"),
        _node_spec(node),
    )


def client_data(
    context: Context, setup: ClientSetup
) -> tuple[NDArray[np.float64], NDArray[np.int8]]:
    """The node's scaled features ``(1, p)`` and true label ``(1,)``.

    Raises
    ------
    DataError
        For a data file the node cannot use; what is wrong goes to the node's log
        only, never into a reply (it may describe the data).
    """
    path = context.node_config.get("data-path")
    flower = run_settings(context.run_config)[1]
    if _simulated_files(dict(context.node_config), flower):
        path = str(partition_file(str(flower["node-data"]), setup.client_id))
    try:
        if not path:
            return simulated_partition(setup.settings, setup.repeat, setup.client_id)
        if setup.spec is not None:
            return _spec_data(str(path), setup.spec)
        data = load_node_data(str(path))
        if len(data) != 1:
            raise ValueError(
                f"a node holds one client's data; {path} has {len(data)} rows"
            )
        featurizer, grid = public_featurizer(setup.settings, setup.repeat)
        features = data.features(featurizer, grid)
        if np.any(np.abs(features) > 1.0 + 1e-12):
            raise ValueError(
                f"{path}: its scaled features leave [-1, 1] (max |x| = "
                f"{np.abs(features).max():.6g}): the data is not on the run's scale"
            )
        return features, data.labels
    except (OSError, ValueError) as exc:
        raise DataError(f"{type(exc).__name__}: {exc}") from exc


def _spec_data(path: str, spec: Any) -> tuple[NDArray[np.float64], NDArray[np.int8]]:
    """Features and label of the node's own file, featurized by its spec. What the
    node observed, how many values lie outside the spec's value range and how much
    clipped go to its log, with a warning when they do not fit."""
    curves, got = spec.featurize_file(path)
    if curves.n_subjects != 1:
        raise ValueError(
            f"a node holds one client's data; {path} has {curves.n_subjects} subjects"
        )
    from ldpfda.schema.spec import CLIP_WARNING

    outside = spec.outside_range(curves)
    clipped = float(got.clipped[0])
    misfit = clipped > CLIP_WARNING or any(v > CLIP_WARNING for v in outside.values())
    (logger.warning if misfit else logger.info)(
        "ldpfda node: %s: observed points per channel %s, %d curve(s) dropped; share "
        "of values outside the spec's value range %s; %.0f%% of the %d coordinates "
        "clipped to the spec's bounds%s",
        path,
        dict(zip(spec.channel_names, got.n_points[0].tolist(), strict=True)),
        int(got.n_dropped[0].sum()),
        {name: round(v, 3) for name, v in outside.items()},
        100 * clipped,
        got.features.shape[1],
        " (check the data's unit against the spec's)" if misfit else "",
    )
    return got.features, got.labels.astype(np.int8)


# -- a simulated node's ledger, kept across the queries of one run --------------------


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
    """A simulated node's ledger for this run, rebuilt from what it released so far.

    A node that already spent more than ``budget`` refuses every further release.
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
    ledger.restore(
        [
            ReleaseEvent.of(item["mechanism"], item["epsilon"], **item["parameters"])
            for item in json.loads(stored)
        ],
        [client_id],
    )
    return ledger


@contextmanager
def node_state(context: Context, setup: ClientSetup) -> Iterator[RecordState]:
    """The node's ledger (and memoized releases) for one query, saved afterwards.

    A deployed node: its record's lifetime ledger (:func:`~ldpfda.client.ledger.
    open_record`), locked while the query is answered. A simulated partition: its
    ledger for the run, without memoized releases. A refused release charges nothing,
    and a charged one is stored before the reply leaves.
    """
    if setup.record is not None:
        with open_record(
            setup.policy.state_dir, setup.record, setup.client_id, setup.budget
        ) as state:
            yield state
        return
    ledger = load_ledger(context, setup.client_id, setup.budget)
    try:
        yield RecordState(ledger, memo={}, counter=len(ledger.entries))
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
