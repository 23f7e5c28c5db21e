"""``flwr run flower-app`` runs the installed package, not a bundle of the checkout."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import sysconfig
import time
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from flwr.cli.build import build_fab_from_disk
from flwr.cli.config_utils import load_and_validate

import ldpfda

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


@pytest.mark.slow
def test_wheel_install_runs_flower_app_in_simulation(tmp_path):
    """Wheel, not editable, in a fresh venv: ``flwr run flower-app`` with 4 nodes.

    The fresh venv takes the third-party packages from this environment through one
    ``.pth`` line naming its site-packages: a path line adds the folder to sys.path
    but runs none of the ``.pth`` files in it, so the editable install's finder of
    this environment stays inactive and ``import ldpfda`` can only find the wheel.
    """
    from ldpfda.deploy.local_superlink import (
        _processes,
        find_local_superlinks,
        stop_pid,
    )
    from ldpfda.deploy.loopback import free_port, run_config_arg, wait_for_report

    from ..test_packaging import build_wheel

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
        "data.n-train": 2,
        "data.n-eval": 2,
        "data.n-test": 100,
        "mrma.num-weak-models": 2,
        "mrma.subsample-size": 2,
        "flower.report-dir": str(tmp_path / "reports"),
        "flower.reply-timeout": 120.0,
    }
    try:
        done = subprocess.run(
            [
                venv / "bin" / "flwr",
                "run",
                str(FLOWER_APP),
                "--federation-config",
                "num-supernodes=4",
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
    assert len(pids) == 1, "flwr run should have started exactly one local SuperLink"
    assert find_local_superlinks(http_port) == []
    # The SuperLink, hence the simulation it starts, ran the fresh venv's interpreter.
    assert [words[0] for words in commands.values()] == [str(python)]

    assert report["settings"]["data.n-train"] == 2
    assert report["participation"]["connected_nodes"] == 4
    spent = {c["reported_spent"] for c in report["privacy"]["clients"].values()}
    assert spent == {report["settings"]["privacy.epsilon"]}
    assert set(report["test_errors"])
    # Nothing of the run outlives it.
    deadline = time.monotonic() + 30
    while (left := [p for p, w in _processes() if any(str(venv) in x for x in w)]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.5)
    for pid in left:
        stop_pid(pid)
    assert left == [], "processes of the fresh venv outlived the run"
    print(f"wheel build, fresh venv and flwr run: {elapsed:.1f} s")
