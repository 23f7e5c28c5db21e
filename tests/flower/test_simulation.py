"""``flwr run .`` on the simulation runtime equals the in-process engine.

Both protocols: the default (every client releases once, the moment classifier) and the
reference MRMA. The module fixture submits one run of each to the same local SuperLink
(the first ``flwr run`` starts it, the second finds it running) and waits for both; the
two runs go on side by side.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpfda.config import Settings
from ldpfda.engine import run_repeat

from .support import REFERENCE, ROOT

pytestmark = pytest.mark.slow

PROTOCOLS: dict[str, dict[str, Any]] = {
    "default-moment": {},
    "reference-mrma": REFERENCE,
}


@dataclass
class Simulations:
    """Both runs: reports and run directories by protocol, and the SuperLinks."""

    reports: dict[str, dict[str, Any]]
    run_dirs: dict[str, Path]
    superlinks: list[int]
    superlinks_left: list[int]
    wall_time_s: float


@pytest.fixture(scope="module")
def simulations(tmp_path_factory: pytest.TempPathFactory) -> Simulations:
    from local_superlink import find_local_superlinks, stop_pid
    from loopback import (
        _executable,
        flower_env,
        free_port,
        run_config_arg,
        wait_for_report,
    )

    workdir = tmp_path_factory.mktemp("simulation")
    http_port = free_port()
    env = flower_env(workdir / "flwr-home") | {
        # Own ports, so the test never talks to (or stops) anybody else's SuperLink.
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(http_port),
        "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()),
    }
    started = time.perf_counter()
    reports, run_dirs = {}, {}
    try:
        # `flwr run` returns once the run is submitted, so the SuperLink the first
        # one starts is up when the second one looks for it.
        for name, protocol in PROTOCOLS.items():
            config = {
                "data.dataset": "functional",
                "data.n-train": 12,
                "data.n-eval": 8,
                "mrma.num-weak-models": 4,
                "mrma.subsample-size": 6,
                "data.n-test": 2000,
                "flower.repeat": 2,
                "flower.report-dir": str(workdir / name),
                "flower.reply-timeout": 120.0,
                **protocol,
            }
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
                cwd=workdir,
                capture_output=True,
                text=True,
                timeout=180,
            )
            if done.returncode != 0:
                raise RuntimeError(
                    f"flwr run ({name}) failed:\n{done.stdout}{done.stderr}"
                )
        for name in PROTOCOLS:
            reports[name] = wait_for_report(workdir / name, timeout=240)
            run_dirs[name] = next((workdir / name).glob("run-*"))
    finally:
        pids = find_local_superlinks(http_port)
        for pid in pids:
            stop_pid(pid)
    return Simulations(
        reports=reports,
        run_dirs=run_dirs,
        superlinks=pids,
        superlinks_left=find_local_superlinks(http_port),
        wall_time_s=time.perf_counter() - started,
    )


def test_flwr_run_starts_one_local_superlink_which_is_stopped(simulations):
    assert len(simulations.superlinks) == 1, (
        "flwr run should have started exactly one local SuperLink"
    )
    assert simulations.superlinks_left == []
    assert simulations.wall_time_s < 300


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_flwr_run_simulation_equals_the_engine(simulations, protocol):
    report = simulations.reports[protocol]
    run_dir = simulations.run_dirs[protocol]
    settings = Settings.from_mapping(report["settings"])
    assert settings.mechanism == (
        "reference" if PROTOCOLS[protocol] else "joint-hybrid"
    )
    reference = run_repeat(settings, 2)
    assert report["method"] == reference.method
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
