"""Real deployments over loopback: SuperLinks and SuperNodes as separate processes.

The module fixture runs two deployments side by side on 127.0.0.1, once, and every
test asserts on what it recorded (reports, logs, processes):

* **one federation with TLS and SuperNode authentication**: 1 SuperLink and 10
  SuperNodes, each its own process with its own data file, registered by key. One run
  of the reference MRMA protocol (6 training and 3 evaluation clients):

  ======  ==========  ==============================================================
  client  role        node
  ======  ==========  ==============================================================
  0       training    honest
  1       training    ``range``: a value outside the mechanism's declared output range
  2       training    ``extreme``: every value at the edge of the range (valid)
  3       training    ``hang``: answers only after the reply timeout
  4       training    ``nan``: a NaN feature
  5       training    ``shape``: features of the wrong shape
  6       evaluation  honest, its data in a CSV file
  7       evaluation  ``bit``: feedback 3
  8       evaluation  killed (SIGKILL) once the training round has begun
  0       (again)     a tenth SuperNode that also says it is client 0, with its data
  ======  ==========  ==============================================================

  The run must complete with the honest and the valid replies, the report must name
  every reply it did not use with the client and the reason, and every process must
  be stopped.

* **a two-server session without TLS**, on vector data: 2 SuperLinks with 4
  SuperNodes each (a server needs a population of its own, so it cannot share the
  federation above: a SuperLink offers every connected node to every run); models and
  estimates move between the servers as artifacts. Its runs are submitted once the
  federation's non-hanging training nodes have replied, so that they use the time its
  server waits for the hanging node.

* **the node's own privacy** (:mod:`tests.flower.node_deployment`): a label-only run
  on 5 SuperNodes, in which one node's policy refuses the run, one refuses a release
  beyond its lifetime budget, and one crashes with a release on its ledger, is
  restarted, and answers the server's second ask with that very release.

* **the walkthrough** (``docs/walkthrough.md``, run by
  :mod:`tests.flower.walkthrough_deployment`): its shell blocks as written: a
  wearable file set (wide CSV, long CSV, NPZ, each on its own irregular timestamps),
  a spec from public calibration curves, keys, a SuperLink with TLS and SuperNode
  authentication, 4 SuperNodes started with ``ldpfda deploy``, one run on the hosts'
  own files and one on the same SuperLink that names two clients without a host,
  which must end ``failed``.
"""

from __future__ import annotations

import io
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, redirect_stderr
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpfda.config import Settings
from ldpfda.server.multiserver import ServerSpec
from ldpfda.server.server_app import parse_run_config

from .node_deployment import EPSILON, POOR, PRIVATE, RESTARTED, NodeDeployment
from .support import alive, app_config, descendants, fault_app, still_running
from .walkthrough_deployment import Walkthrough

pytestmark = pytest.mark.slow

#: Seconds the server waits for each round; the hanging node answers after it.
REPLY_TIMEOUT = 60.0
#: Seconds the hanging node sleeps on the request before it answers. A round that waited
#: for it would last at least this long; one that did not lasts the timeout and
#: Flower's own pushes, pulls and 3 s polls, which took up to 15.5 s on the loaded
#: 2-core machine: twice the timeout tells the two apart with room for both.
HANG_SECONDS = 2 * REPLY_TIMEOUT
#: Seconds the server waits for an unavailable node to come back online.
REJOIN_TIMEOUT = 5.0

#: The federation's run (its report directory is added by the fixture).
RUN_CONFIG: dict[str, Any] = {
    "data.dataset": "functional",
    "data.n-train": 6,
    "data.n-eval": 3,
    "data.n-test": 2000,
    "mrma.num-weak-models": 2,
    "mrma.subsample-size": 2,
    # MRMA: the killed node is an evaluation client, asked after the training round.
    "privacy.mechanism": "reference",
    "flower.reply-timeout": REPLY_TIMEOUT,
    # The killed node never comes back: the evaluate round gives up on it after this.
    "flower.rejoin-timeout": REJOIN_TIMEOUT,
    # 2 of the 6 training replies are valid, and 1 of the 3 evaluation replies.
    "flower.min-reply-fraction": 0.25,
    "flower.wait-timeout": 120.0,
}

#: Node config of each SuperNode, by index (the client id unless it says otherwise).
NODES: list[dict[str, Any]] = [
    {},
    {"test-misbehave": "range"},
    {"test-misbehave": "extreme"},
    # Answers long after the timeout (its ClientApp is stopped with its node).
    {"test-misbehave": "hang", "test-hang-seconds": HANG_SECONDS},
    {"test-misbehave": "nan"},
    {"test-misbehave": "shape"},
    {},
    {"test-misbehave": "bit"},
    {},
    {"client-id": 0},
]
CSV_CLIENT, VICTIM, DUPLICATE = 6, 8, 9
#: The training nodes, other than client 0's, that answer the privatize query in time.
PROMPT_TRAINING = [1, 2, 4, 5]

#: The two-server session: (n_train, n_eval, epsilon[, feature and label shift]).
SESSION_SPECS = (ServerSpec(2, 2, 5.0), ServerSpec(2, 2, 2.0, 0.2, 0.5))
SESSION = "lb1"


class _Session(threading.Thread):
    """The two-server session, run in the background. It sets ``ready`` once its nodes
    are, and submits its first run only once ``gate`` is set (it gives up if
    ``cancelled`` is set with it)."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(name="two-server-session", daemon=True)
        self.workdir = workdir
        self.ready = threading.Event()
        self.gate = threading.Event()
        self.cancelled = threading.Event()
        self.report: dict[str, Any] | None = None
        self.error: BaseException | None = None

    def _wait_for_gate(self) -> None:
        self.ready.set()
        if not self.gate.wait(timeout=600) or self.cancelled.is_set():
            raise RuntimeError("the session was called off before its first run")

    def run(self) -> None:
        from ldpfda.deploy.multiserver_loopback import run_loopback_session

        # Vector data: the federation above serves curves, so both kinds of data
        # files reach real SuperNodes.
        base = Settings.reference(
            dataset="vector", num_weak_models=1, subsample_size=2, n_test=2000
        )
        try:
            self.report = run_loopback_session(
                SESSION_SPECS,
                base,
                self.workdir,
                session=SESSION,
                timeout=240,
                before_runs=self._wait_for_gate,
            )
        except BaseException as exc:  # raised again by result()
            self.error = exc

    def wait_until_ready(self, timeout: float) -> None:
        """Until every node of the session is ready (or the session failed)."""
        deadline = time.monotonic() + timeout
        while not self.ready.wait(timeout=0.5):
            if not self.is_alive():
                raise RuntimeError(f"the two-server session failed: {self.error!r}")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the session's nodes not ready after {timeout:g} s")

    def result(self) -> dict[str, Any]:
        self.join(timeout=600)
        if self.is_alive():
            raise TimeoutError("the two-server session did not end within 600 s")
        if self.error is not None:
            raise RuntimeError(f"the two-server session failed: {self.error!r}")
        assert self.report is not None
        return self.report


@dataclass
class Deployment:
    """What the fixture saw of both deployments."""

    settings: Settings
    connection: str
    tls_stderr: str
    insecure_stderr: str
    node_ids: list[int]
    pids: list[int]
    alive_at_start: bool
    victim_alive_after_kill: bool
    children: set[int]
    left_running: set[int]
    report: dict[str, Any]
    payload: dict[str, np.ndarray]
    session: _Session
    node: NodeDeployment
    walkthrough: Walkthrough


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    from ldpfda.deploy.loopback import (
        LoopbackFederation,
        make_node_files,
        wait_for_report,
        wait_for_stage,
    )

    workdir = tmp_path_factory.mktemp("loopback")
    reports = workdir / "reports"
    config = {**RUN_CONFIG, "flower.report-dir": str(reports)}
    settings, _ = parse_run_config(app_config() | config)
    files = make_node_files(settings, workdir / "data")
    files[CSV_CLIENT] = make_node_files(settings, workdir / "csv", suffix=".csv")[
        CSV_CLIENT
    ]
    federation = LoopbackFederation(
        workdir / "fed", [*files, files[0]], node_config=NODES, tls=True
    )
    session = _Session(workdir / "session")
    node = NodeDeployment(workdir / "node")
    walkthrough = Walkthrough(workdir / "walkthrough")
    tls_stderr, insecure_stderr = io.StringIO(), io.StringIO()
    try:
        with ExitStack() as stack:
            with redirect_stderr(tls_stderr):
                stack.enter_context(federation)
            assert federation.superlink is not None
            connection = (federation.home / "config.toml").read_text(encoding="utf-8")
            pids = [federation.superlink.pid] + [p.pid for p in federation.supernodes]
            alive_at_start = all(alive(pid) for pid in pids)
            # The session's federations (no TLS: they warn) start while these do.
            stack.enter_context(redirect_stderr(insecure_stderr))
            session.start()
            node.start()
            node_ids = federation.node_ids()  # every node takes part in the run
            # No round starts its reply timeout while the other deployment's
            # processes are still starting.
            session.wait_until_ready(timeout=300)
            federation.submit(fault_app(workdir / "fault-app"), config)
            wait_for_stage(reports, ("privatize",), timeout=240)
            children = descendants(pids)
            # Client 0 is whichever of its two nodes has the lower id. The victim is
            # killed once its first reply (which says who it is) has left.
            standing = min([0, DUPLICATE], key=lambda i: node_ids[i])
            federation.wait_for_replies(
                [standing, *PROMPT_TRAINING, VICTIM],
                "query.privatize",
                timeout=REPLY_TIMEOUT + 60,
            )
            victim = federation.supernodes[VICTIM]
            victim.kill()
            victim_alive_after_kill = alive(victim.pid)
            session.gate.set()
            # Once this run only waits for its hanging node: started with the other
            # deployments, its processes' start-up slowed this run's replies past the
            # reply timeout on the 2-core machine.
            walkthrough.start()
            report = wait_for_report(reports, timeout=300)
            # Including the ClientApp of the hanging node, which may still be asleep.
            children |= descendants(pids)
    except BaseException:
        # Call the session off (or let it end) and wait for it to stop its processes.
        if not session.gate.is_set():
            session.cancelled.set()
            session.gate.set()
            # Once this run only waits for its hanging node: started with the other
            # deployments, its processes' start-up slowed this run's replies past the
            # reply timeout on the 2-core machine.
            walkthrough.start()
        if session.ident is not None:
            session.join(timeout=600)
        for thread in (node, walkthrough):
            if thread.ident is not None:
                thread.join(timeout=900)
        raise
    # The federation stops what it started when it ends, the ClientApp that outlived
    # its SuperNode included (the hanging node's, asleep for HANG_SECONDS): nothing is
    # left to end by itself, so a few seconds cover what the stop has just killed.
    left_running = still_running(set(pids) | children, timeout=5.0)
    run_dir = next(reports.glob("run-*"))
    with np.load(run_dir / "payload.npz") as npz:
        payload = {key: npz[key] for key in npz.files}
    yield Deployment(
        settings=settings,
        connection=connection,
        tls_stderr=tls_stderr.getvalue(),
        insecure_stderr=insecure_stderr.getvalue(),
        node_ids=node_ids,
        pids=pids,
        alive_at_start=alive_at_start,
        victim_alive_after_kill=victim_alive_after_kill,
        children=children,
        left_running=left_running,
        report=report,
        payload=payload,
        session=session,
        node=node,
        walkthrough=walkthrough,
    )
    # The session may still run while the tests above assert; never leave its
    # processes behind, whether or not its test ran.
    session.join(timeout=600)
    node.join(timeout=900)
    walkthrough.join(timeout=900)


# -- the federation with TLS, SuperNode authentication and bad nodes -------------------


def test_every_process_starts_and_every_one_is_stopped(deployment):
    assert deployment.alive_at_start, "1 SuperLink + 10 SuperNodes, each a process"
    assert len(deployment.pids) == 1 + len(NODES)
    assert deployment.children, "the SuperNodes run their ClientApps in child processes"
    assert not deployment.victim_alive_after_kill
    assert not deployment.left_running, "every process is stopped by PID"


def test_tls_with_authenticated_supernodes_and_no_insecure_warning(deployment):
    from ldpfda.deploy.loopback import INSECURE_WARNING

    assert "root-certificates" in deployment.connection
    assert "insecure" not in deployment.connection
    assert INSECURE_WARNING not in deployment.tls_stderr
    # Every registered node joined over TLS and answered who it is (with its first
    # reply), but the duplicate and the node that hangs on its first release.
    part = deployment.report["participation"]
    assert part["connected_nodes"] == len(NODES)
    assert part["identify"]["answered"] == len(NODES) - 2


def test_an_insecure_federation_warns(deployment):
    from ldpfda.deploy.loopback import INSECURE_WARNING

    assert INSECURE_WARNING in deployment.insecure_stderr, "insecure mode must warn"


def test_every_unused_reply_is_named_with_the_client_and_the_reason(deployment):
    part = deployment.report["participation"]
    node_ids = deployment.node_ids
    assert part["train_clients"] == [0, 1, 2, 4, 5]  # 3 never said who it is
    assert part["eval_clients"] == [6, 7, 8]
    # Every reply not used, and every one that never came; nothing else.
    rejections = {(r["stage"], r["client_id"]): r for r in part["rejections"]}
    assert {key: r["kind"] for key, r in rejections.items()} == {
        ("identify", 0): "duplicate",
        ("identify", None): "timeout",  # client 3's node, hanging on its release
        ("privatize", 1): "range",
        ("privatize", 4): "nan",
        ("privatize", 5): "shape",
        ("evaluate", 7): "bit",
        ("evaluate", 8): "unavailable",
    }
    for (stage, client), rejection in rejections.items():
        if stage != "identify":
            assert rejection["node_id"] == node_ids[client]
    assert "outside the mechanism's range" in rejections["privatize", 1]["reason"]
    assert "NaN" in rejections["privatize", 4]["reason"]
    assert "shape" in rejections["privatize", 5]["reason"]
    assert "must be a bit" in rejections["evaluate", 7]["reason"]
    assert sorted(part["privatize"]["rejected"]) == ["1", "4", "5"]
    assert "NaN" in part["privatize"]["rejected"]["4"]
    assert "shape" in part["privatize"]["rejected"]["5"]
    assert list(part["evaluate"]["rejected"]) == ["7"]


def test_of_two_nodes_claiming_one_client_the_lower_node_id_stands(deployment):
    part = deployment.report["participation"]
    duplicate = next(r for r in part["rejections"] if r["kind"] == "duplicate")
    first, second = sorted([deployment.node_ids[0], deployment.node_ids[DUPLICATE]])
    assert duplicate["client_id"] == 0
    assert duplicate["node_id"] == second
    assert duplicate["reason"] == f"duplicate: client 0 is already node {first}"
    assert part["ignored_nodes"] == {str(second): duplicate["reason"]}


def test_a_hanging_node_is_waited_for_no_longer_than_the_timeout(deployment):
    part = deployment.report["participation"]
    # It hangs on its first reply, so it never says who it is: client 3 is absent.
    (rejection,) = [r for r in part["rejections"] if r["kind"] == "timeout"]
    assert (rejection["stage"], rejection["node_id"]) == (
        "identify",
        deployment.node_ids[3],
    )
    assert rejection["reason"] == (
        f"timeout: no reply within flower.reply-timeout = {REPLY_TIMEOUT:g} s"
    )
    assert part["absent_clients"] == [3]
    # The node received the request after the round began and slept HANG_SECONDS on
    # it: a round that had waited for its reply would have lasted longer than that.
    privatize_s = deployment.report["timings"]["clients_privatize_s"]
    assert REPLY_TIMEOUT <= privatize_s < HANG_SECONDS


def test_a_node_killed_during_the_run_is_missing_and_the_run_goes_on(deployment):
    part = deployment.report["participation"]
    assert part["evaluate"]["missing"] == [VICTIM]
    assert part["evaluate"]["answered"] == 1  # the CSV node; the bit node is rejected
    # It is reported unavailable within two of Flower's 30 s heartbeats of the kill,
    # and waited for only flower.rejoin-timeout after that, not a reply timeout.
    assert deployment.report["timings"]["clients_evaluate_s"] < REPLY_TIMEOUT + 15


def test_every_valid_reply_is_used_and_nothing_else(deployment):
    report, payload = deployment.report, deployment.payload
    part = report["participation"]
    # The honest training client and the extreme one ...
    assert part["privatize"]["answered"] == 2
    np.testing.assert_array_equal(payload["client_ids"], [0, 2])
    # ... the extreme one at the edge of the declared range, never beyond it.
    low, high = part["output_range"]
    assert set(payload["features"][1]) <= {low, high}
    assert np.all((low <= payload["features"]) & (payload["features"] <= high))
    assert np.all(np.isfinite(payload["features"]))
    assert np.all(np.isin(payload["labels"], [0, 1]))
    # ... and the honest evaluator's bit: the weak models, fitted and weighted.
    assert len(report["models"]) == deployment.settings.num_weak_models == 2
    assert np.all(np.isfinite(report["final_model"]["coef"]))
    assert {"mrma", "weak", "naive"} <= set(report["test_errors"])


def test_each_client_asked_is_charged_and_only_valid_replies_vouch(deployment):
    clients = deployment.report["privacy"]["clients"]
    epsilon = deployment.settings.epsilon
    assert {c: v["reported_spent"] for c, v in clients.items()} == {
        "0": epsilon,
        "1": None,
        "2": epsilon,
        "3": None,
        "4": None,
        "5": None,
        "6": epsilon,
        "7": None,
        "8": None,
    }
    assert epsilon == 5.0
    assert all(v["charged_by_server"] == pytest.approx(5.0) for v in clients.values())


# -- the two-server session ------------------------------------------------------------


def test_two_server_session_over_loopback(deployment):
    report = deployment.session.result()
    pids = [pid for server in report["pids"].values() for pid in server]
    assert len(pids) == 2 * (1 + 4), "2 SuperLinks with 4 SuperNodes each"
    assert not any(alive(pid) for pid in pids), "every process is stopped by PID"

    # Per-server and global models, each server scored on its own population.
    assert set(report["models"]) == {"global", "server0", "server1"}
    assert set(report["test_errors"]) == {"server0", "server1"}
    for errors in report["test_errors"].values():
        assert set(errors) == {"multi_server", "global", "voting_all"}
        assert all(0.0 <= v <= 1.0 for v in errors.values())
    # Both servers' models, evaluated by both servers' clients.
    assert report["rejected_artifacts"] == {}
    assert report["model_servers"] == [0, 1]
    assert report["estimates_used"] == {
        "server0": ["server0", "server1"],
        "server1": ["server0", "server1"],
    }
    assert all(v is not None for row in report["estimates"] for v in row)

    for name, phases in report["phase_reports"].items():
        train = json.loads(Path(phases["train"]).read_text(encoding="utf-8"))
        evaluate = json.loads(Path(phases["evaluate"]).read_text(encoding="utf-8"))
        assert train["participation"]["privatize"]["answered"] == 2
        assert evaluate["participation"]["evaluate"]["answered"] == 2
        # The training clients were not asked in the evaluate phase, nor the
        # evaluation clients in the train phase; each node's lifetime ledger (one
        # record: its client id and data file) holds its one release at the run's
        # epsilon, across both runs of the session.
        assert train["train_clients"] == [0, 1]
        assert evaluate["eval_clients"] == [2, 3]
        epsilon = train["privacy"]["budget_per_client"]
        for i in range(4):
            (path,) = (deployment.session.workdir / name / f"state-{i}").glob(
                f"client-{i}-*.json"
            )
            ledger = json.loads(path.read_text(encoding="utf-8"))
            assert ledger["counter"] == 1
            assert sum(e["epsilon"] for e in ledger["events"]) == pytest.approx(epsilon)


# -- the node's own privacy ------------------------------------------------------------


def test_a_label_only_run_completes_with_the_nodes_that_answer(deployment):
    run = deployment.node.result()
    assert run.final_stage == "done"
    np.testing.assert_array_equal(run.payload["client_ids"], [0, 1, RESTARTED])


def test_every_node_refusal_is_reported_by_its_reason_code(deployment):
    part = deployment.node.result().report["participation"]
    rejections = {(r["stage"], r["client_id"]): r for r in part["rejections"]}
    assert {key: r["kind"] for key, r in rejections.items()} == {
        ("features", PRIVATE): "policy",
        ("label", POOR): "budget",
    }
    assert "(code 4002)" in rejections["features", PRIVATE]["reason"]
    assert "(code 4001)" in rejections["label", POOR]["reason"]


def test_a_refusing_node_says_why_in_its_own_log(deployment):
    logs = deployment.node.result().logs
    assert "features-public is not set" in logs[PRIVATE]
    assert "budget" in logs[POOR]


def test_a_restarted_node_keeps_its_node_id_and_its_ledger(deployment):
    run = deployment.node.result()
    assert run.stages == ["label rejoin"]
    assert run.node_ids_after == run.node_ids
    # One release, charged once: the second ask was answered from the ledger ...
    assert [e["epsilon"] for e in run.ledger_after["events"]] == [EPSILON]
    assert run.ledger_after["counter"] == run.ledger_at_crash["counter"] == 1
    assert run.ledger_after["memo"] == run.ledger_at_crash["memo"]
    # ... with the very release the node made before it crashed.
    (stored,) = run.ledger_after["memo"].values()
    row = int(np.flatnonzero(run.payload["client_ids"] == RESTARTED)[0])
    assert stored["arrays"]["label"] == [int(run.payload["labels"][row])]
    reported = run.report["privacy"]["clients"][str(RESTARTED)]
    assert reported["reported_spent"] == pytest.approx(EPSILON)


def test_every_process_of_the_node_deployment_is_stopped(deployment):
    assert not deployment.node.result().left_running


# -- the walkthrough -------------------------------------------------------------------


def _block_output(run, needle: str) -> str:
    """The output of the walkthrough's block whose text holds ``needle``."""
    from .walkthrough_deployment import walkthrough_blocks

    (index,) = [i for i, b in enumerate(walkthrough_blocks()) if needle in b]
    return run.outputs[index]


def test_the_walkthrough_runs_as_written_with_tls_and_authentication(deployment):
    from .walkthrough_deployment import walkthrough_blocks

    run = deployment.walkthrough.result()
    out = (run.workdir / "walkthrough.out").read_text()
    assert run.returncode == 0, out[-4000:]
    assert len(run.outputs) == len(walkthrough_blocks())
    connection = (run.workdir / "flwr-home" / "config.toml").read_text()
    assert "root-certificates" in connection and "insecure" not in connection
    # Every key registered, one at a time; every node joined with its key.
    assert _block_output(run, "deploy register").count(": registered\n") == 4
    assert "4 SuperNodes ready" in _block_output(run, "deploy nodes")
    assert len(run.pids) == 1 + 4
    assert not run.left_running, "the walkthrough stops every process by PID"
    print(f"walkthrough: {run.wall_time_s:.0f} s, every block")


def test_walkthrough_nodes_release_their_own_files_on_their_own_timestamps(
    deployment,
):
    from ldpfda.schema.spec import FederationSpec

    run = deployment.walkthrough.result()
    spec = FederationSpec.load(run.workdir / "federation.toml")
    files = sorted((run.workdir / "data" / "nodes").iterdir())
    heads = {f.read_text().partition("\n")[0] for f in files if f.suffix == ".csv"}
    assert {f.suffix for f in files} == {".csv", ".npz"}
    # Wide CSVs (a column per timestamp) and a long one (a row per observation).
    assert "subject,curve,time,label,heart_rate" in heads
    assert any(h.startswith("subject,curve,channel,label,") for h in heads)
    curves = {f: spec.featurize_file(f) for f in files}
    stamps = {tuple(np.unique(c.times).tolist()) for c, _ in curves.values()}
    assert len(stamps) == len(files) == 4
    (run_dir,) = (run.workdir / "reports").glob("run-*")
    report = json.loads((run_dir / "report.json").read_text())
    assert report["flower"]["flower.spec"] == str(run.workdir / "federation.toml")
    with np.load(run_dir / "payload.npz") as payload:
        np.testing.assert_array_equal(payload["client_ids"], [0, 1, 2, 3])
        low, high = report["participation"]["output_range"]
        assert np.all((low <= payload["releases"]) & (payload["releases"] <= high))
    # Each node featurized its own file: its log names it and the points observed.
    for i, f in enumerate(files):
        log = (run.workdir / "logs" / f"supernode-{i}.log").read_text()
        observed = int(curves[f][1].n_points[0, 0])
        assert f"{f}: observed points per channel {{'heart_rate': {observed}}}" in log
    assert set(report["test_errors"]) == {"moment"}


def test_a_run_below_the_quorum_fails_and_the_command_names_the_missing(deployment):
    # Needs the server's quorum over the clients the run asks for, in every round:
    # clients 4 and 5 have no host and never answer.
    run = deployment.walkthrough.result()
    out = _block_output(run, "reports-quorum")
    (status_file,) = (run.workdir / "reports-quorum").glob("run-*/status.json")
    status = json.loads(status_file.read_text())
    assert status["stage"] == "failed", out
    assert "exited with status 1" in out
    assert status["error"] in out
    assert re.search(r"[Mm]issing[^\n]*\b4\b[^\n]*\b5\b", status["error"]), status
