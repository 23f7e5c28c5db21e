"""Faulty and malicious nodes in a loopback deployment: real SuperLink, real SuperNodes.

One federation run of the reference MRMA protocol (4 training and 2 evaluation clients,
7 SuperNodes, each its own process with its own data file):

======  ==========  ===================================================================
client  role        node
======  ==========  ===================================================================
0       training    honest
1       training    ``range``: a value outside the mechanism's declared output range
2       training    ``extreme``: every value at the edge of the range (valid)
3       training    ``hang``: answers only after the reply timeout
4       evaluation  honest
5       evaluation  ``bit``: feedback 3
0       (again)     a seventh SuperNode that also says it is client 0, with its data
======  ==========  ===================================================================

The run must complete with the honest and the valid replies, the report must name every
reply it did not use with the client and the reason, and every process must be stopped.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from ldpfda.server.server_app import parse_run_config

from .support import ROOT, alive, app_config

pytestmark = pytest.mark.slow

#: Seconds the server waits for each round; the hanging node answers after it.
REPLY_TIMEOUT = 60.0


def _descendants(pids: list[int]) -> set[int]:
    """Every live process below ``pids`` (SuperExec, ClientApp, ServerApp, ...)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text(encoding="utf-8")
            except OSError:
                continue
            parent[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = set(pids)
    while frontier:
        frontier = {child for child, ppid in parent.items() if ppid in frontier}
        found |= frontier
    return found


def _gone(pids: set[int], timeout: float = 20.0) -> set[int]:
    """The processes of ``pids`` still alive after up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while (running := {p for p in pids if alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.2)
    return running


def test_loopback_run_completes_with_faulty_and_malicious_nodes(tmp_path):
    from loopback import LoopbackFederation, make_node_files, wait_for_report

    config = {
        "data.dataset": "functional",
        "data.n-train": 4,
        "data.n-eval": 2,
        "data.n-test": 2000,
        "mrma.num-weak-models": 1,
        "mrma.subsample-size": 2,
        "privacy.mechanism": "reference",
        "flower.report-dir": str(tmp_path / "reports"),
        "flower.reply-timeout": REPLY_TIMEOUT,
        "flower.min-reply-fraction": 0.5,
        "flower.wait-timeout": 120.0,
    }
    settings, _ = parse_run_config(app_config() | config)
    files = make_node_files(settings, tmp_path / "data")
    node_config = [
        {},
        {"test-misbehave": "range"},
        {"test-misbehave": "extreme"},
        # Answers after the timeout: its late reply comes while the run goes on.
        {"test-misbehave": "hang", "test-hang-seconds": REPLY_TIMEOUT},
        {},
        {"test-misbehave": "bit"},
        {"client-id": 0},
    ]
    federation = LoopbackFederation(
        tmp_path / "fed", [*files, files[0]], node_config=node_config
    )
    with federation:
        node_ids = federation.node_ids()  # every node takes part in the run
        federation.submit(ROOT, config)
        report = wait_for_report(tmp_path / "reports", timeout=300)
        pids = [federation.superlink.pid] + [p.pid for p in federation.supernodes]
        children = _descendants(pids)
        assert children, "the SuperNodes run their ClientApps in child processes"
    # Including the ClientApp of the hanging node, which may still be asleep.
    assert not _gone(set(pids) | children), "every process is stopped"

    part = report["participation"]
    assert part["connected_nodes"] == 7
    assert part["train_clients"] == [0, 1, 2, 3] and part["eval_clients"] == [4, 5]
    # Every reply not used, with the client and the reason; nothing else.
    rejections = {(r["stage"], r["client_id"]): r for r in part["rejections"]}
    assert set(rejections) == {
        ("identify", 0),
        ("privatize", 1),
        ("privatize", 3),
        ("evaluate", 5),
    }
    assert {key: r["kind"] for key, r in rejections.items()} == {
        ("identify", 0): "duplicate",
        ("privatize", 1): "range",
        ("privatize", 3): "timeout",
        ("evaluate", 5): "bit",
    }
    # Of the two nodes that say they are client 0, the one with the lower id stands.
    duplicate = rejections["identify", 0]
    first, second = sorted([node_ids[0], node_ids[6]])
    assert duplicate["node_id"] == second
    assert duplicate["reason"] == f"duplicate: client 0 is already node {first}"
    assert part["ignored_nodes"] == {str(second): duplicate["reason"]}
    assert "outside the mechanism's range" in rejections["privatize", 1]["reason"]
    assert rejections["privatize", 1]["node_id"] == node_ids[1]
    assert rejections["privatize", 3]["reason"] == (
        f"timeout: no reply within flower.reply-timeout = {REPLY_TIMEOUT:g} s"
    )
    assert rejections["privatize", 3]["node_id"] == node_ids[3]
    assert "must be a bit" in rejections["evaluate", 5]["reason"]
    assert part["privatize"]["missing"] == [3]
    assert part["evaluate"]["missing"] == []

    # The server waited for the hanging node no longer than its timeout.
    privatize_s = report["timings"]["clients_privatize_s"]
    assert REPLY_TIMEOUT <= privatize_s < REPLY_TIMEOUT + 15

    # Everything valid was used: the honest training client and the extreme one ...
    assert part["identify"]["answered"] == 6
    assert part["privatize"]["answered"] == 2 and part["evaluate"]["answered"] == 1
    run_dir = next((tmp_path / "reports").glob("run-*"))
    payload = np.load(run_dir / "payload.npz")
    np.testing.assert_array_equal(payload["client_ids"], [0, 2])
    # ... the extreme one at the edge of the declared range, never beyond it.
    low, high = part["output_range"]
    assert set(payload["features"][1]) <= {low, high}
    assert np.all((low <= payload["features"]) & (payload["features"] <= high))
    assert np.all(np.isin(payload["labels"], [0, 1]))
    # ... and the honest evaluator's bit: one weak model, fitted and weighted.
    assert len(report["models"]) == 1 and np.all(
        np.isfinite(report["final_model"]["coef"])
    )
    assert {"mrma", "weak", "naive"} <= set(report["test_errors"])
    # Each client that was asked is charged; only valid replies vouch for a spend.
    clients = report["privacy"]["clients"]
    assert {c: v["reported_spent"] for c, v in clients.items()} == {
        "0": 5.0,
        "1": None,
        "2": 5.0,
        "3": None,
        "4": 5.0,
        "5": None,
    }
    assert all(v["charged_by_server"] == pytest.approx(5.0) for v in clients.values())
