"""``flwr run flower-app`` runs the installed package, not a bundle of the checkout.

The module fixture builds the wheel, installs it into a fresh venv and runs the thin app
folder from there in simulation block mode (4 virtual nodes serving 250 clients each):
the installed package's run equals ``run_repeat`` bit for bit.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import sysconfig
import time
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.cli.build import build_fab_from_disk
from flwr.cli.config_utils import load_and_validate

import ldpfda
from ldpfda.config import Settings
from ldpfda.engine import run_repeat

from .support import ROOT

FLOWER_APP = ROOT / "flower-app"


# flwr 1.42 builds its path patterns with a pathspec style that pathspec 1.x deprecates.
@pytest.mark.filterwarnings("ignore:GitWildMatchPattern:DeprecationWarning")
def test_flower_app_bundle_holds_no_code():
    config, warnings = load_and_validate(FLOWER_APP / "pyproject.toml")
    assert warnings == []
    assert config["tool"]["flwr"]["app"]["components"]["clientapp"] == (
        "ldpfda.client.client_app:app"
    )
    names = zipfile.ZipFile(io.BytesIO(build_fab_from_disk(FLOWER_APP))).namelist()
    # Nothing to put ahead of the installed ldpfda on the app processes' sys.path.
    assert sorted(names) == [".info/CONTENT", "pyproject.toml"]


def _flwr_scripts(python: Path) -> None:
    """Flower's console scripts in ``python``'s bin folder, run by ``python``.

    Flower starts its helpers (flower-superlink, flower-superexec, flwr-simulation, ...)
    by name from PATH, so they must run the fresh environment's interpreter.
    """
    for entry in metadata.distribution("flwr").entry_points:
        if entry.group != "console_scripts":
            continue
        module, _, attr = entry.value.partition(":")
        script = python.parent / entry.name
        script.write_text(
            f"#!{python}\nimport sys\nfrom {module} import {attr.split('.')[0]}\n"
            f"sys.exit({attr}())\n",
            encoding="utf-8",
        )
        script.chmod(0o755)


def _fresh_env(venv: Path, home: Path) -> dict[str, str]:
    """Environment of the fresh venv: its bin first, nothing of this environment."""
    ours = str(Path(sys.executable).parent)
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != ours]
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}
    }
    env.update(
        {
            "PATH": os.pathsep.join([str(venv / "bin"), *path]),
            "VIRTUAL_ENV": str(venv),
            "FLWR_HOME": str(home),
            "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        }
    )
    return env


#: The run: block mode, 4 virtual nodes serving 250 clients each (reference MRMA).
BLOCK_RUN, BLOCK_NODES = "blocks", 4
BLOCK_CONFIG: dict[str, Any] = {
    "privacy.mechanism": "reference",
    "data.dataset": "functional",
    "data.n-train": 500,
    "data.n-eval": 500,
    "data.n-test": 2000,
    "flower.clients-per-node": 250,
    "flower.repeat": 2,
}


@dataclass
class WheelRun:
    """What the fixture saw of the run from the wheel's fresh venv."""

    python: Path
    pids: list[int]
    left: list[int]
    commands: dict[int, list[str]]
    report: dict[str, Any]
    run_dir: Path
    outlived: list[int]
    elapsed: float


@pytest.fixture(scope="module")
def wheel_run(tmp_path_factory: pytest.TempPathFactory) -> WheelRun:
    """Wheel, not editable, in a fresh venv: ``flwr run flower-app`` in block mode.

    The fresh venv takes the third-party packages from this environment through one
    ``.pth`` line naming its site-packages: a path line adds the folder to sys.path
    but runs none of the ``.pth`` files in it, so the editable install's finder of
    this environment stays inactive and ``import ldpfda`` can only find the wheel.
    """
    from ldpfda.deploy.local_superlink import (
        _processes,
        find_local_superlinks,
        start_local_superlink,
        stop_pid,
    )
    from ldpfda.deploy.loopback import free_port, run_config_arg, wait_for_report

    from ..test_packaging import build_wheel

    tmp_path = tmp_path_factory.mktemp("wheel")
    started = time.perf_counter()
    wheel = build_wheel(tmp_path / "dist")
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True
    )
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = {sysconfig.get_path(kind) for kind in ("purelib", "platlib")}
    (Path(site) / "deps-of-the-test-env.pth").write_text(
        "".join(f"{folder}\n" for folder in sorted(ours)), encoding="utf-8"
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            str(wheel),
        ],
        check=True,
    )
    _flwr_scripts(python)

    http_port = free_port()
    env = _fresh_env(venv, tmp_path / "flwr-home") | {
        # Own ports: never talk to (or stop) anybody else's local SuperLink.
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(http_port),
        "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()),
    }
    probe = subprocess.run(
        [
            python,
            "-c",
            "import sys, ldpfda, ldpfda.client.client_app, ldpfda.server.server_app; "
            "from importlib.metadata import distribution; "
            "print(ldpfda.__file__); "
            "print(distribution('ldpfda').locate_file('ldpfda/__init__.py')); "
            "print([m for m in sys.modules if 'editable' in m])",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert Path(probe[0]).is_relative_to(venv), probe
    assert Path(probe[1]).is_relative_to(venv), probe
    assert probe[2] == "[]", "the editable finder of the test env is active"
    version = subprocess.run(
        [venv / "bin" / "ldpfda", "--version"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert version.stdout.strip() == f"ldpfda {ldpfda.__version__}"

    config = {
        **BLOCK_CONFIG,
        "flower.report-dir": str(tmp_path / "reports"),
        "flower.reply-timeout": 120.0,
    }
    try:
        # The fresh venv's flower-superlink, started as flwr run would but waited for
        # until it answers (flwr run's own start gives up after 15 s).
        start_local_superlink(env, cwd=tmp_path)
        done = subprocess.run(
            [
                venv / "bin" / "flwr",
                "run",
                str(FLOWER_APP),
                "--federation-config",
                f"num-supernodes={BLOCK_NODES}",
                "--run-config",
                run_config_arg(config),
            ],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        report = wait_for_report(tmp_path / "reports", timeout=180)
        superlinks = find_local_superlinks(http_port)
        commands = {pid: words for pid, words in _processes() if pid in superlinks}
    finally:
        pids = find_local_superlinks(http_port)
        for pid in pids:
            stop_pid(pid)
    elapsed = time.perf_counter() - started
    left = find_local_superlinks(http_port)
    # Nothing of the run outlives it.
    deadline = time.monotonic() + 30
    while (
        outlived := [p for p, w in _processes() if any(str(venv) in x for x in w)]
    ) and (time.monotonic() < deadline):
        time.sleep(0.5)
    for pid in outlived:
        stop_pid(pid)
    return WheelRun(
        python=python,
        pids=pids,
        left=left,
        commands=commands,
        report=report,
        run_dir=next((tmp_path / "reports").glob("run-*")),
        outlived=outlived,
        elapsed=elapsed,
    )


@pytest.mark.slow
def test_wheel_install_runs_flower_app_in_simulation(wheel_run):
    assert len(wheel_run.pids) == 1, (
        "flwr run should have used the one local SuperLink, not started another"
    )
    assert wheel_run.left == []
    # The SuperLink, hence the simulation it starts, ran the fresh venv's interpreter.
    assert [words[0] for words in wheel_run.commands.values()] == [
        str(wheel_run.python)
    ]

    report = wheel_run.report
    assert report["settings"]["data.n-train"] == 500
    assert report["participation"]["connected_nodes"] == BLOCK_NODES
    spent = {c["reported_spent"] for c in report["privacy"]["clients"].values()}
    assert spent == {report["settings"]["privacy.epsilon"]}
    assert set(report["test_errors"])
    assert wheel_run.outlived == [], "processes of the fresh venv outlived the run"
    print(f"wheel build, fresh venv and flwr run: {wheel_run.elapsed:.1f} s")


@pytest.mark.slow
def test_block_mode_simulation_equals_the_engine_bit_for_bit(wheel_run):
    report = wheel_run.report
    run_dir = wheel_run.run_dir
    settings = Settings.from_mapping(report["settings"])
    reference = run_repeat(settings, 2)
    assert report["method"] == reference.method == "mrma"
    payload = np.load(run_dir / "payload.npz")
    np.testing.assert_array_equal(payload["client_ids"], np.arange(500))
    for key, array in reference.payload.arrays().items():
        np.testing.assert_array_equal(payload[key], array, err_msg=key)
    model = np.load(run_dir / "model.npz")
    np.testing.assert_array_equal(model["coef"], reference.final.coef[0])
    np.testing.assert_array_equal(model["intercept"], reference.final.intercept)
    for method, error in report["test_errors"].items():
        assert error == reference.test_errors[method]
    part = report["participation"]
    assert part["connected_nodes"] == BLOCK_NODES and part["rejections"] == []
    assert part["evaluate"]["answered"] == 500
    spent = {c["reported_spent"] for c in report["privacy"]["clients"].values()}
    assert spent == {5.0}
