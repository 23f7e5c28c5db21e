"""Loopback deployment: a real SuperLink and real SuperNodes, as separate processes."""

from __future__ import annotations

import time

import numpy as np
import pytest

from ldpfda.server.server_app import parse_run_config

from .support import ROOT, alive, app_config

pytestmark = pytest.mark.slow


def _config(tmp_path, n_train, n_eval, n_models, **extra):
    return {
        "data.dataset": "functional",
        "data.n-train": n_train,
        "data.n-eval": n_eval,
        "mrma.num-weak-models": n_models,
        "mrma.subsample-size": 2,
        "data.n-test": 2000,
        "flower.report-dir": str(tmp_path / "reports"),
        "flower.reply-timeout": 60.0,
        "flower.min-reply-fraction": 0.5,
        "flower.wait-timeout": 120.0,
        # MRMA: the killed node is an evaluation client, asked after the training round.
        "privacy.mechanism": "reference",
        **extra,
    }


def test_loopback_deployment_survives_a_bad_node_and_a_killed_node(tmp_path, capfd):
    """1 SuperLink + 5 SuperNodes, each its own process with its own data file.

    Client 1 (training) sends NaN features, client 4 (evaluation) is killed (SIGKILL)
    while the training round runs. The run completes without them and says so.
    """
    from loopback import (
        INSECURE_WARNING,
        LoopbackFederation,
        make_node_files,
        run_stage,
        wait_for_report,
    )

    config = _config(tmp_path, n_train=3, n_eval=2, n_models=2)
    settings, _ = parse_run_config(app_config() | config)
    files = make_node_files(settings, tmp_path / "data")
    files[3] = make_node_files(settings, tmp_path / "csv", suffix=".csv")[3]
    federation = LoopbackFederation(
        tmp_path / "fed", files, node_config=[{}, {"test-misbehave": "nan"}]
    )
    with federation:
        pids = [federation.superlink.pid] + [p.pid for p in federation.supernodes]
        assert all(alive(pid) for pid in pids)
        federation.submit(ROOT, config)
        deadline = time.monotonic() + 240
        while run_stage(tmp_path / "reports") not in ("privatize", "train", "evaluate"):
            assert time.monotonic() < deadline, (
                "the run never reached the privatize round"
            )
            time.sleep(0.2)
        victim = federation.supernodes[
            4
        ]  # client 4 evaluates, after the training round
        victim.kill()
        assert not alive(victim.pid)
        report = wait_for_report(tmp_path / "reports", timeout=300)
    assert not any(alive(pid) for pid in pids), "every process is stopped by PID"
    assert INSECURE_WARNING in capfd.readouterr().err, "insecure mode must warn"

    part = report["participation"]
    assert part["connected_nodes"] == 5 and part["identify"]["answered"] == 5
    assert part["train_clients"] == [0, 1, 2] and part["eval_clients"] == [3, 4]
    assert list(part["privatize"]["rejected"]) == ["1"]
    assert "NaN" in part["privatize"]["rejected"]["1"]
    assert part["privatize"]["answered"] == 2
    assert part["evaluate"]["missing"] == [4]
    assert part["evaluate"]["answered"] == 1
    run_dir = next((tmp_path / "reports").glob("run-*"))
    payload = np.load(run_dir / "payload.npz")
    np.testing.assert_array_equal(payload["client_ids"], [0, 2])
    assert np.all(np.isfinite(report["final_model"]["coef"]))
    assert len(report["models"]) == 2
    assert {"mrma", "weak", "naive"} <= set(report["test_errors"])
    clients = report["privacy"]["clients"]
    assert {c: v["reported_spent"] for c, v in clients.items()} == {
        "0": 5.0,
        "1": None,
        "2": 5.0,
        "3": 5.0,
        "4": None,
    }
    assert all(v["charged_by_server"] == pytest.approx(5.0) for v in clients.values())
