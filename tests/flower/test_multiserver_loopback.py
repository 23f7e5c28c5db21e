"""A multi-server session over loopback: 2 SuperLinks, 4 SuperNodes each, real
processes; models and estimates move between the servers as artifacts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ldpfda.config import Settings
from ldpfda.server.multiserver import ServerSpec

from .support import alive

pytestmark = pytest.mark.slow


def test_two_server_session_over_loopback(tmp_path):
    from multiserver_loopback import run_loopback_session

    specs = (ServerSpec(2, 2, 5.0), ServerSpec(2, 2, 2.0, 0.2, 0.5))
    base = Settings.reference(
        dataset="functional", num_weak_models=1, subsample_size=2, n_test=2000
    )
    report = run_loopback_session(specs, base, tmp_path, session="lb1", timeout=240)

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
        # evaluation clients in the train phase; each node's ledger, kept per session
        # over both runs, holds its one release at its whole budget.
        assert train["train_clients"] == [0, 1]
        assert evaluate["eval_clients"] == [2, 3]
        budget = train["privacy"]["budget_per_client"]
        ledgers = sorted((tmp_path / name / "ledgers" / "session-lb1").glob("*.json"))
        assert [p.name for p in ledgers] == [f"client-{i}.json" for i in range(4)]
        for path in ledgers:
            events = json.loads(path.read_text(encoding="utf-8"))
            assert sum(e["epsilon"] for e in events) == pytest.approx(budget)
