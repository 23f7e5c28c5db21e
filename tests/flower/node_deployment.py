"""The node's own privacy in a real deployment: one label-only run over loopback.

1 SuperLink with TLS and SuperNode authentication, and 5 SuperNodes, each its own
process with its own data file and state directory (its lifetime ledger). One
``label-uniform`` run at epsilon 1, a mode that sends the features in the clear:

======  ================================================================================
client  node
======  ================================================================================
0, 1    ``features-public = true``: answer
2       the default policy (features private): refuses the run, code 4002
3       ``features-public = true`` and a lifetime budget of 0.5: refuses the label
        release, which would overspend it, code 4001
4       ``features-public = true``; makes its label release (charged, on its ledger),
        then crashes before the reply leaves (SIGKILL). Once the server has seen it
        go offline, it is started again with the same key and state directory; the
        server asks it once more and it answers with the very release it made,
        without a second charge
======  ================================================================================

The loopback tests (:mod:`tests.flower.test_loopback`) run it in a thread beside
their other deployments: most of its time is spent waiting for Flower's heartbeats.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ldpfda.server.server_app import parse_run_config

from .support import app_config, descendants, fault_app, still_running

#: Seconds the server waits for a round; a crashed node is offline after at most two
#: of Flower's 30 s heartbeats, and the server waits as long again for it to rejoin.
REPLY_TIMEOUT = 90.0
EPSILON = 1.0

RUN_CONFIG: dict[str, Any] = {
    "data.dataset": "functional",
    "data.n-train": 4,
    "data.n-eval": 1,
    # (MRMA's and the clusters' settings, unused here, are still checked.)
    "mrma.num-weak-models": 1,
    "mrma.subsample-size": 2,
    "labeldp.n-clusters": 2,
    "labeldp.min-cluster-size": 2,
    "data.n-test": 500,
    "privacy.mechanism": "label-uniform",
    "privacy.epsilon": EPSILON,
    "flower.reply-timeout": REPLY_TIMEOUT,
    "flower.min-reply-fraction": 0.2,
    "flower.wait-timeout": 120.0,
}

PUBLIC = {"features-public": True}
NODES: list[dict[str, Any]] = [
    PUBLIC,
    PUBLIC,
    {},
    {**PUBLIC, "privacy-budget": 0.5},
    {**PUBLIC, "test-misbehave": "hang", "test-hang-seconds": 3 * REPLY_TIMEOUT},
]
PRIVATE, POOR, RESTARTED = 2, 3, 4


@dataclass
class NodeRun:
    """What the deployment saw."""

    report: dict[str, Any]
    final_stage: str | None
    payload: dict[str, np.ndarray]
    node_ids: list[int]
    node_ids_after: list[int]
    ledger_at_crash: dict[str, Any]
    ledger_after: dict[str, Any]
    stages: list[str]
    logs: list[str]
    left_running: set[int]


def _ledger(state_dir: Path) -> dict[str, Any] | None:
    for path in state_dir.glob("client-*.json"):
        try:
            return dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return None
    return None


def _wait(what: str, condition: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} not within {timeout:g} s")
        time.sleep(0.2)
    return value


def run_node_deployment(workdir: Path) -> NodeRun:
    """Start the federation, run it as the module docstring says, stop it."""
    from ldpfda.deploy.loopback import (
        LoopbackFederation,
        make_node_files,
        run_stage,
        wait_for_report,
    )

    reports = workdir / "reports"
    config = {**RUN_CONFIG, "flower.report-dir": str(reports)}
    settings, _ = parse_run_config(app_config() | config)
    files = make_node_files(settings, workdir / "data")
    federation = LoopbackFederation(workdir / "fed", files, node_config=NODES, tls=True)
    state = workdir / "fed" / f"state-{RESTARTED}"
    with federation:
        assert federation.superlink is not None
        pids = [federation.superlink.pid] + [p.pid for p in federation.supernodes]
        node_ids = federation.node_ids()
        federation.submit(fault_app(workdir / "fault-app"), config)
        # The release is on the node's ledger; the reply has not left.
        ledger_at_crash = _wait(
            "the charge on client 4's ledger",
            lambda: (ledger := _ledger(state)) and ledger["events"] and ledger,
            timeout=240,
        )
        children = descendants(pids)
        # A crashed host loses the SuperNode and every process below it.
        crashed = federation.supernodes[RESTARTED]
        below = descendants([crashed.pid])
        crashed.kill()
        for pid in below:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        # The server finds the node offline and waits for it to come back.
        stage = _wait(
            "the server waiting for client 4 to rejoin",
            lambda: (s := run_stage(reports)) and s.endswith("rejoin") and s,
            timeout=2 * REPLY_TIMEOUT,
        )
        federation.restart(RESTARTED, node_config={"test-misbehave": ""})
        node_ids_after = federation.node_ids()
        report = wait_for_report(reports, timeout=300)
        final_stage = run_stage(reports)
        pids.append(federation.supernodes[RESTARTED].pid)
        children |= descendants(pids)
        logs = [p.log.read_text(errors="replace") for p in federation.supernodes]
    left_running = still_running(set(pids) | children)
    ledger_after = _ledger(state)
    assert ledger_after is not None
    with np.load(next(reports.glob("run-*")) / "payload.npz") as npz:
        payload = {key: npz[key] for key in npz.files}
    return NodeRun(
        report,
        final_stage,
        payload,
        node_ids,
        node_ids_after,
        ledger_at_crash,
        ledger_after,
        [stage],
        logs,
        left_running,
    )


class NodeDeployment(threading.Thread):
    """:func:`run_node_deployment` in the background; :meth:`result` waits for it."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(name="node-deployment", daemon=True)
        self.workdir = workdir
        self.outcome: NodeRun | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.outcome = run_node_deployment(self.workdir)
        except BaseException as exc:  # raised again by result()
            self.error = exc

    def result(self) -> NodeRun:
        self.join(timeout=900)
        if self.is_alive():
            raise TimeoutError("the node deployment did not end within 900 s")
        if self.error is not None:
            raise RuntimeError(f"the node deployment failed: {self.error!r}")
        assert self.outcome is not None
        return self.outcome
