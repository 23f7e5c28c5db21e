"""Flower timing hook for ``ldpfda benchmark --flower``: a real ``flwr run .``.

``simulate(n_clients, settings)`` runs ``flwr run . --federation-config
"num-supernodes=N"`` from the source checkout with a fresh ``FLWR_HOME`` (offline, no
telemetry, no run-time installation), half of the clients training and half evaluating
under the reference MRMA protocol, waits for the report, stops the SuperLink that
``flwr run`` leaves behind by PID, and returns the wall time and the peak of the summed
resident memory of every Flower and Ray process (sampled every 0.2 s).

Needs a source checkout (the app directory is the repository root).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ldpfda.config import Settings

__all__ = ["simulate"]

ROOT = Path(__file__).resolve().parents[1]
_MARKERS = ("flwr", "flower", "ray", "raylet", "gcs_server")


def _flower_rss_mb() -> float:
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if not any(m in cmd for m in _MARKERS):
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return total / 1024.0


def simulate(n_clients: int, settings: Settings) -> dict[str, Any]:
    """Time one ``flwr run .`` simulation of ``n_clients`` virtual clients."""
    if not (ROOT / "pyproject.toml").exists():
        raise RuntimeError("the Flower benchmark needs a source checkout")
    n_train = n_clients // 2
    run_config = (
        f'privacy.mechanism="reference" data.dataset="{settings.dataset}" '
        f"privacy.epsilon={settings.epsilon} data.n-train={n_train} "
        f"data.n-eval={n_clients - n_train} mrma.num-weak-models=10 "
        f"mrma.subsample-size={min(25, n_train)} seed={settings.seed}"
    )
    with tempfile.TemporaryDirectory() as home:
        env = dict(
            os.environ,
            FLWR_HOME=home,
            FLWR_TELEMETRY_ENABLED="0",
            FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
        )
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        peak = [0.0]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], _flower_rss_mb())
                time.sleep(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.perf_counter()
        proc = subprocess.run(
            [
                "flwr",
                "run",
                ".",
                "--federation-config",
                f"num-supernodes={n_clients}",
                "--run-config",
                run_config,
                "--stream",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        wall = time.perf_counter() - t0
        done.set()
        sampler.join()
        from ldpfda.deploy.local_superlink import find_local_superlinks, stop_pid

        for pid in find_local_superlinks():
            stop_pid(pid)
    if proc.returncode != 0 or "report written" not in proc.stdout + proc.stderr:
        raise RuntimeError(f"flwr run failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return {"wall_s": wall, "flower_peak_rss_mb": peak[0]}
