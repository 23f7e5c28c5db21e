"""Helpers of the Flower tests: the project's run config and an in-memory Grid.

:class:`FakeGrid` hands each message straight to the ClientApp.

It lets the ServerApp logic run against real ClientApp handlers, with one persistent
``Context`` per node, in milliseconds and without Ray or network processes. Nodes can be
made silent (their replies are dropped, as for a node that died) to test fault handling.
"""

from __future__ import annotations

import os
import time
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.config import flatten_dict
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

from ldpfda.deploy.loopback import descendants as process_tree

ROOT = Path(__file__).resolve().parents[2]

#: Small settings of a quick in-memory run (kebab-case run-config keys), on the vector
#: design (the app's default dataset is the wearable one).
SMALL: dict[str, Any] = {
    "data.dataset": "vector",
    "data.n-train": 30,
    "data.n-eval": 20,
    "mrma.num-weak-models": 5,
    "mrma.subsample-size": 10,
    "data.n-test": 2000,
}

#: The reference MRMA protocol, one key away from the default joint release.
REFERENCE: dict[str, Any] = {"privacy.mechanism": "reference"}


def app_config() -> dict[str, Any]:
    """The flattened ``[tool.flwr.app.config]`` of the project, as Flower reads it."""
    with (ROOT / "pyproject.toml").open("rb") as handle:
        config = tomllib.load(handle)
    return dict(flatten_dict(config["tool"]["flwr"]["app"]["config"]))


def partitions(n: int, **extra: Any) -> list[dict[str, Any]]:
    """Node configs of ``n`` simulated nodes (partition ids 0 .. n-1)."""
    return [{"partition-id": i, "num-partitions": n, **extra} for i in range(n)]


class FakeGrid(Grid):
    """``n`` nodes with ids ``1000 + i``; node ``i`` gets ``node_configs[i]``.

    Parameters
    ----------
    client_app : ClientApp
    run_config : mapping
        The flattened run config every node sees.
    node_configs : list of mapping
        One node config per node.
    silent : set of int, optional
        Indices of nodes that die after joining: their replies to ``silent_on``
        queries never arrive (the ClientApp still runs, as a node may crash after
        releasing).
    silent_on : set of str
        Message types the silent nodes do not answer.
    """

    def __init__(
        self,
        client_app: ClientApp,
        run_config: Mapping[str, Any],
        node_configs: list[dict[str, Any]],
        *,
        run_id: int = 7,
        silent: Iterable[int] = (),
        silent_on: Iterable[str] = ("query.privatize", "query.evaluate"),
    ) -> None:
        self.client_app = client_app
        # Messages take their run and source ids from the running task's identity, which
        # Flower sets in a ServerApp process; here the test process plays that role.
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = run_id, 1, 1
        self.node_ids = [1000 + i for i in range(len(node_configs))]
        self.contexts = {
            node: Context(
                run_id=run_id,
                node_id=node,
                node_config=dict(cfg),
                state=RecordDict(),
                run_config=dict(run_config),
            )
            for node, cfg in zip(self.node_ids, node_configs, strict=True)
        }
        self.silent = {self.node_ids[i] for i in silent}
        self.silent_on = set(silent_on)
        self.sent: list[Message] = []

    def set_run(self, run: Any) -> None:  # pragma: no cover - not used
        self._run = run

    @property
    def run(self) -> Any:  # pragma: no cover - not used
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content, dst_node_id, message_type, group_id=group_id, ttl=ttl)

    def get_node_ids(self) -> list[int]:
        return list(self.node_ids)

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        raise NotImplementedError

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        raise NotImplementedError

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        replies = []
        for message in messages:
            self.sent.append(message)
            node = message.metadata.dst_node_id
            reply = self.client_app(message, self.contexts[node])
            if node not in self.silent or message.metadata.message_type not in (
                self.silent_on
            ):
                reply.metadata.__dict__["_src_node_id"] = node
                replies.append(reply)
        return replies


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, reaped or not, has stopped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            # The command name (field 2) may hold spaces; the state follows its ")".
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        # Gone between the two checks: the open fails, or the read of a process that
        # exited after the open (ESRCH).
        return False


# -- one node's reply, checked as the ServerApp checks it ------------------------------


def _bounded(query, key, bounds):
    """``query`` with the bounds of reply array ``key`` set to ``bounds``."""
    import dataclasses

    low, high = bounds
    reply = tuple(
        dataclasses.replace(s, low=low, high=high) if s.key == key else s
        for s in query.reply
    )
    return dataclasses.replace(query, reply=reply)


def parse_payload(message, *, client_id, n_features, feature_range):
    """Features, label and ledger figures of a reference privatize reply."""
    from ldpfda.config import Settings
    from ldpfda.schema import catalog
    from ldpfda.server.grid import parse_checked

    query = catalog.privatize_query(Settings.reference(epsilon=5.0), n_features)
    rows, figures = parse_checked(
        _bounded(query, "features", feature_range), message, client_id
    )
    return rows["features"], int(rows["labels"]), figures


def parse_joint_payload(message, *, client_id, n_features, output_range):
    """The release and ledger figures of a joint privatize reply."""
    from ldpfda.config import Settings
    from ldpfda.schema import catalog
    from ldpfda.server.grid import parse_checked

    query = catalog.privatize_query(Settings(epsilon=5.0), n_features)
    rows, figures = parse_checked(
        _bounded(query, "releases", output_range), message, client_id
    )
    return rows["releases"], figures


def parse_feedback(message, *, client_id):
    """The feedback bit and ledger figures of an evaluate reply."""
    from ldpfda.config import Settings
    from ldpfda.schema import catalog
    from ldpfda.server.grid import parse_checked

    query = catalog.evaluate_query(Settings.reference(epsilon=5.0), 1)
    rows, figures = parse_checked(query, message, client_id)
    return int(rows["bit"]), figures


def parse_features(message, *, client_id, n_features):
    """The public features and ledger figures of a features reply."""
    from ldpfda.schema import catalog
    from ldpfda.server.grid import parse_checked

    query = catalog.features_query(n_features)
    rows, figures = parse_checked(query, message, client_id)
    return rows["x"], figures


def parse_label(message, *, client_id, n_classes=2):
    """The released label and ledger figures of any label reply."""
    from ldpfda.config import Settings
    from ldpfda.schema import catalog
    from ldpfda.server.grid import parse_checked

    query = catalog.label_query(Settings(mechanism="label-uniform"), n_classes)
    rows, figures = parse_checked(query, message, client_id)
    return int(rows["label"]), figures


def descendants(pids: Iterable[int]) -> set[int]:
    """Every live process below ``pids`` (SuperExec, ClientApp, ServerApp, ...)."""
    return set(process_tree(pids))


def still_running(pids: Iterable[int], timeout: float = 60.0) -> set[int]:
    """The processes of ``pids`` that are alive after waiting up to ``timeout`` s for
    all of them to end (it returns as soon as they have: the loopback deployments
    run side by side on 2 cores, and a Flower process under load may take 20 s and
    more to shut down)."""
    deadline = time.monotonic() + timeout
    while (running := {p for p in pids if alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.2)
    return running


def fault_app(directory: Path) -> Path:
    """A Flower app folder that runs the test app with fault injection.

    The host's app (``flower-app/``, the project's components) has no fault hook; a
    deployment whose nodes misbehave on purpose runs ``ldpfda.client.faults:app``
    instead, with the very same run config.
    """
    text = (ROOT / "flower-app" / "pyproject.toml").read_text(encoding="utf-8")
    host = 'clientapp = "ldpfda.client.client_app:app"'
    assert host in text, "flower-app/pyproject.toml names another ClientApp"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "pyproject.toml").write_text(
        text.replace(host, 'clientapp = "ldpfda.client.faults:app"'), encoding="utf-8"
    )
    return directory
