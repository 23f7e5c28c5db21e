"""``flwr run .`` on the simulation runtime equals the in-process engine.

Both protocols: the default (every client releases once, the moment classifier) and the
reference MRMA.
"""

from __future__ import annotations

import subprocess
import time

import numpy as np
import pytest

from ldpfda.config import Settings
from ldpfda.engine import run_repeat

from .support import REFERENCE, ROOT

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "protocol", [{}, REFERENCE], ids=["default-moment", "reference-mrma"]
)
def test_flwr_run_simulation_equals_the_engine(tmp_path, protocol):
    from local_superlink import find_local_superlinks, stop_pid
    from loopback import (
        _executable,
        flower_env,
        free_port,
        run_config_arg,
        wait_for_report,
    )

    http_port = free_port()
    env = flower_env(tmp_path / "flwr-home") | {
        # Own ports, so the test never talks to (or stops) anybody else's SuperLink.
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(http_port),
        "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()),
    }
    config = {
        "data.dataset": "functional",
        "data.n-train": 12,
        "data.n-eval": 8,
        "mrma.num-weak-models": 4,
        "mrma.subsample-size": 6,
        "data.n-test": 2000,
        "flower.repeat": 2,
        "flower.report-dir": str(tmp_path / "reports"),
        "flower.reply-timeout": 120.0,
        **protocol,
    }
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [
                _executable("flwr"),
                "run",
                str(ROOT),
                "--federation-config",
                "num-supernodes=20",
                "--run-config",
                run_config_arg(config),
            ],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        report = wait_for_report(tmp_path / "reports", timeout=240)
    finally:
        pids = find_local_superlinks(http_port)
        for pid in pids:
            stop_pid(pid)
    assert len(pids) == 1, "flwr run should have started exactly one local SuperLink"
    assert find_local_superlinks(http_port) == []
    assert time.perf_counter() - started < 300

    settings = Settings.from_mapping(report["settings"])
    assert settings.mechanism == ("reference" if protocol else "joint-hybrid")
    reference = run_repeat(settings, 2)
    assert report["method"] == reference.method
    run_dir = next((tmp_path / "reports").glob("run-*"))
    payload = np.load(run_dir / "payload.npz")
    if settings.protocol == "moment":
        # Every client released, training and evaluation alike.
        np.testing.assert_array_equal(payload["client_ids"], np.arange(20))
        np.testing.assert_allclose(
            payload["releases"], reference.payload.releases, rtol=0, atol=1e-12
        )
        assert "evaluate" not in report["participation"]
    else:
        np.testing.assert_array_equal(payload["client_ids"], np.arange(12))
        np.testing.assert_allclose(
            payload["features"], reference.payload.features, rtol=0, atol=1e-12
        )
        np.testing.assert_array_equal(payload["labels"], reference.payload.labels)
    model = np.load(run_dir / "model.npz")
    np.testing.assert_allclose(model["coef"], reference.final.coef[0], atol=1e-10)
    np.testing.assert_allclose(
        model["intercept"], reference.final.intercept, atol=1e-10
    )
    for method, error in report["test_errors"].items():
        assert error == pytest.approx(reference.test_errors[method])
    assert report["participation"]["connected_nodes"] == 20
    spent = {c["reported_spent"] for c in report["privacy"]["clients"].values()}
    assert spent == {5.0}
