"""A multi-server session on Flower's simulation runtime, driven from a checkout.

:func:`run_simulation` runs the session of :mod:`ldpfda.engine.multiserver` as one
Flower run per server and phase, each server its own local SuperLink (its own
``FLWR_HOME`` and ports; started by :func:`local_superlink.start_local_superlink`,
which waits for it longer than ``flwr run`` would) with its own virtual SuperNodes,
by ``flwr run <checkout> --federation-config "num-supernodes=N"``; every SuperLink is
stopped by PID at the end, then the combine step writes the session's report.
``ldpfda multiserver --flower`` calls it; ``multiserver_loopback.py`` runs the same
session with real processes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ldpfda.config import Settings
from ldpfda.deploy import local_superlink, loopback
from ldpfda.server.multiserver import ServerSpec
from ldpfda.server.multiserver_flower import (
    PHASES,
    phase_run_config,
    server_settings,
    write_session_report,
)

__all__ = ["run_simulation"]


def run_simulation(
    specs: Sequence[ServerSpec],
    base: Settings,
    workdir: str | Path,
    *,
    session: str | None = None,
    heterogeneity: float = 0.05,
    timeout: float = 900.0,
) -> dict[str, Any]:
    """Run a whole session (repeat 0) on Flower's simulation runtime; its report.

    The report (:func:`combine_session`, plus every phase report's path and the wall
    time) is also written to ``<workdir>/report.json``.
    """
    configs = server_settings(specs, base)
    workdir = Path(workdir).resolve()
    session = session or f"session-{int(time.time())}"
    artifacts = workdir / "artifacts"
    ports = [
        (loopback.free_port(), loopback.free_port()) for _ in configs
    ]  # (SuperLink HTTP API, Control API) of each server's local SuperLink
    phase_reports: dict[str, dict[str, str]] = {}
    started = time.perf_counter()
    try:
        for phase in PHASES:
            for cfg, (http, control) in zip(configs, ports, strict=True):
                name = f"server{cfg.server_id}"
                home = workdir / name / "flwr-home"
                report_dir = workdir / name / phase
                env = loopback.flower_env(home) | {
                    "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(http),
                    "FLWR_LOCAL_CONTROL_API_PORT": str(control),
                }
                config = phase_run_config(
                    cfg,
                    phase=phase,
                    session=session,
                    artifact_dir=artifacts,
                    report_dir=report_dir,
                )
                report_dir.mkdir(parents=True, exist_ok=True)
                local_superlink.start_local_superlink(env, cwd=workdir)
                nodes = f"num-supernodes={cfg.n_train + cfg.n_eval}"
                loopback.flwr_run(
                    loopback.CHECKOUT_APP,
                    ["--federation-config", nodes],
                    config,
                    env,
                    workdir,
                    timeout,
                    what=f"flwr run ({name}, {phase})",
                )
                loopback.wait_for_report(report_dir, timeout)
                phase_reports.setdefault(name, {})[phase] = str(
                    next(report_dir.glob("run-*/report.json"))
                )
    finally:
        for http, _ in ports:
            for pid in local_superlink.find_local_superlinks(http):
                local_superlink.stop_pid(pid)
    return write_session_report(
        workdir,
        artifacts,
        configs,
        session=session,
        repeat=0,
        heterogeneity=heterogeneity,
        started=started,
        phase_reports=phase_reports,
    )
