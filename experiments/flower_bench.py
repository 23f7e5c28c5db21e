"""Flower timing: real ``flwr run`` simulations of ldpfda and of a minimal app.

``simulate(n_clients, settings)`` (the hook of ``ldpfda benchmark --flower``) runs
``flwr run flower-app --federation-config "num-supernodes=N"`` (the thin app that
loads the installed package; from a checkout's editable install, the checkout's code)
with a fresh ``FLWR_HOME`` and its own SuperLink ports (offline, no telemetry, no
run-time installation), half of the clients training and half evaluating under the
reference MRMA protocol (``--mechanism joint-hybrid``: the default protocol, one
round), waits for the end of the run, stops the SuperLink that ``flwr run`` leaves
behind by PID, and returns the wall time and the peak of the summed resident memory
of every Flower and Ray process (sampled every 0.2 s). ``clients_per_node`` > 1 runs
the simulation's block mode (``flower.clients-per-node``).

``minimal(n_clients)`` times the same on a minimal one-round app (written to a
temporary folder): the server sends every node one empty message and waits for the
replies. ``python -m ldpfda.experiments.flower_bench --clients 1000 --repeats 3``
prints both, interleaved, each pair's ratio and the median; ``--clients-per-node``
times block mode.

Needs a source checkout (for the ``flower-app`` folder). The bundle ``flwr run .``
makes of the whole checkout (about 160 files, 1.4 MB) takes some 3 s longer to build
and to unpack than that of ``flower-app``, which holds only its ``pyproject.toml``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ldpfda.config import Settings

__all__ = ["minimal", "simulate"]

_MARKERS = ("flwr", "flower", "ray", "raylet", "gcs_server")

_MINIMAL_APP = """
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
import time

server = ServerApp()
client = ClientApp()


@server.main()
def main(grid: Grid, context: Context) -> None:
    n = int(context.run_config["nodes"])
    while len(nodes := list(grid.get_node_ids())) < n:
        time.sleep(0.1)
    content = lambda: RecordDict({"x": ConfigRecord({"round": 1})})
    out = [Message(content(), node, "query") for node in nodes]
    replies = list(grid.send_and_receive(out, timeout=600))
    print(f"minimal done: {len(replies)} replies", flush=True)


@client.query()
def answer(message: Message, context: Context) -> Message:
    return Message(RecordDict({"y": ConfigRecord({"ok": 1})}), reply_to=message)
"""

_MINIMAL_TOML = """
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "minimal"
version = "0.1.0"
dependencies = []

[tool.flwr.app]
publisher = "bench"

[tool.flwr.app.components]
serverapp = "minimal_app:server"
clientapp = "minimal_app:client"

[tool.flwr.app.config]
nodes = 1
"""


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


def _timed_run(
    app: Path, n_nodes: int, run_config: dict[str, Any], done: str
) -> dict[str, Any]:
    """``flwr run app --stream`` on ``n_nodes`` virtual SuperNodes; wall time and
    peak RSS (``RuntimeError`` unless its output contains ``done``)."""
    from ldpfda.deploy.local_superlink import find_local_superlinks, stop_pid
    from ldpfda.deploy.loopback import (
        _executable,
        flower_env,
        free_port,
        run_config_arg,
    )

    with tempfile.TemporaryDirectory() as home:
        http = free_port()
        env = flower_env(Path(home)) | {
            "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(http),
            "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()),
        }
        peak, finished = [0.0], threading.Event()

        def sample() -> None:
            while not finished.is_set():
                peak[0] = max(peak[0], _flower_rss_mb())
                time.sleep(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                [_executable("flwr"), "run", str(app), "--stream"]
                + ["--federation-config", f"num-supernodes={n_nodes}"]
                + ["--run-config", run_config_arg(run_config)],
                cwd=app,
                env=env,
                capture_output=True,
                text=True,
                timeout=1800,
            )
            wall = time.perf_counter() - t0
        finally:
            finished.set()
            sampler.join()
            for pid in find_local_superlinks(http):
                stop_pid(pid)
    if proc.returncode != 0 or done not in proc.stdout + proc.stderr:
        raise RuntimeError(f"flwr run failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return {"wall_s": wall, "flower_peak_rss_mb": peak[0], "nodes": n_nodes}


def simulate(
    n_clients: int,
    settings: Settings,
    clients_per_node: int = 1,
    mechanism: str = "reference",
) -> dict[str, Any]:
    """Time one ``flwr run flower-app`` simulation of ``n_clients`` clients
    (``mechanism``: reference MRMA, or e.g. ``"joint-hybrid"`` for the default
    protocol), ``clients_per_node`` of them on each virtual SuperNode."""
    from ldpfda.deploy.loopback import CHECKOUT_APP

    if not (CHECKOUT_APP / "pyproject.toml").exists():
        raise RuntimeError("the Flower benchmark needs a source checkout")
    n_train = n_clients // 2
    config: dict[str, Any] = {
        "privacy.mechanism": mechanism,
        "data.dataset": settings.dataset,
        "privacy.epsilon": settings.epsilon,
        "data.n-train": n_train,
        "data.n-eval": n_clients - n_train,
        "data.n-test": 2000,
        "mrma.num-weak-models": 10,
        "mrma.subsample-size": min(25, n_train),
        "seed": settings.seed,
    }
    if clients_per_node > 1:
        config["flower.clients-per-node"] = clients_per_node
    with tempfile.TemporaryDirectory() as reports:
        config["flower.report-dir"] = reports
        nodes = -(-n_clients // clients_per_node)
        return _timed_run(CHECKOUT_APP, nodes, config, "report written")


def minimal(n_clients: int) -> dict[str, Any]:
    """Time one ``flwr run`` of the minimal one-round app on ``n_clients`` nodes."""
    with tempfile.TemporaryDirectory() as folder:
        app = Path(folder)
        (app / "pyproject.toml").write_text(_MINIMAL_TOML, encoding="utf-8")
        (app / "minimal_app.py").write_text(_MINIMAL_APP, encoding="utf-8")
        return _timed_run(app, n_clients, {"nodes": n_clients}, "minimal done")


def main(argv: list[str] | None = None) -> None:
    """Print ldpfda's runs, the minimal app's (unless ``--no-minimal``), interleaved
    ``--repeats`` times, each pair's ratio and their median."""
    from ldpfda.experiments.common import reference_settings

    parser = argparse.ArgumentParser(prog="flower_bench", description=__doc__)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--clients-per-node", type=int, default=1)
    parser.add_argument("--no-minimal", action="store_true")
    parser.add_argument("--mechanism", default="reference")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    settings = reference_settings(dataset="functional", epsilon=5.0, n_basis=10)
    runs: list[dict[str, Any]] = []
    for _ in range(args.repeats):
        run: dict[str, Any] = {
            "ldpfda": simulate(
                args.clients, settings, args.clients_per_node, args.mechanism
            )
        }
        if not args.no_minimal:
            run["minimal"] = minimal(args.clients)
            run["ratio"] = run["ldpfda"]["wall_s"] / run["minimal"]["wall_s"]
        runs.append(run)
    out: dict[str, Any] = {
        "clients": args.clients,
        "mechanism": args.mechanism,
        "runs": runs,
    }
    if not args.no_minimal:
        out["median_ratio"] = statistics.median(run["ratio"] for run in runs)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
