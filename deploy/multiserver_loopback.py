"""A multi-server session as a real deployment on one machine, over loopback.

Every server is its own ``flower-superlink`` with its own ``flower-supernode``
processes (:class:`loopback.LoopbackFederation`), each node with the data file of the
row :func:`ldpfda.engine.multiserver.run_multiserver_repeat` gives its client and a
ledger directory that outlives the session's runs. Once every SuperNode is ready, the
script submits the ``train`` run to every server, waits for all, then the ``evaluate``
run (models and estimates move through one artifact directory), runs the combine step
(:func:`ldpfda.server.multiserver_flower.combine_session`), writes
``WORKDIR/report.json`` and stops every process it started, by PID.

Usage::

    python -m ldpfda.deploy.multiserver_loopback WORKDIR
        [--server 3,2,5,0,0 --server 3,2,2,0.2,0.5] [--num-weak-models 1]

Each ``--server`` is ``n_train,n_eval,epsilon,feature_shift,label_shift``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from ldpfda.deploy.loopback import (
    CHECKOUT_APP,
    LoopbackFederation,
    make_node_files,
    wait_for_report,
)

__all__ = ["run_loopback_session"]

#: Timeouts that suit a loopback run (each query starts an app process per node, and
#: on a busy machine that takes long). A session's nodes are all honest: a reply
#: timeout is only a bound on a round, never waited for in full.
LOOPBACK_RUN_CONFIG: dict[str, Any] = {
    "flower.reply-timeout": 120.0,
    "flower.wait-timeout": 120.0,
    "flower.min-reply-fraction": 0.5,
}


def run_loopback_session(
    specs: Sequence[Any],
    base: Any,
    workdir: Path,
    *,
    session: str = "loopback",
    timeout: float = 300.0,
    before_runs: Callable[[], object] | None = None,
) -> dict[str, Any]:
    """Run a whole session with one loopback federation per server; the report.

    ``specs`` are :class:`~ldpfda.server.multiserver.ServerSpec`, ``base`` the shared
    reference settings. The report is :func:`combine_session`'s, plus the phase
    reports' paths, the processes' PIDs and the wall time; it is also written to
    ``<workdir>/report.json``. ``before_runs`` is called once every SuperNode is
    ready, before the first run is submitted (to time the session against other work
    on the machine); if it raises, the session stops there.
    """
    from ldpfda.server.multiserver_flower import (
        PHASES,
        phase_run_config,
        server_settings,
        write_session_report,
    )

    configs = server_settings(specs, base)
    workdir = Path(workdir).resolve()
    artifacts = workdir / "artifacts"
    started = time.perf_counter()
    phase_reports: dict[str, dict[str, str]] = {}
    with ExitStack() as stack:
        federations = []
        for cfg in configs:
            name = f"server{cfg.server_id}"
            files = make_node_files(cfg, workdir / name / "data")
            # Each node keeps its lifetime ledger in <workdir>/<server>/state-<i>,
            # whatever the session's runs.
            federations.append(
                stack.enter_context(LoopbackFederation(workdir / name, files))
            )
        pids = {
            f"server{cfg.server_id}": [p.pid for p in [f.superlink, *f.supernodes] if p]
            for cfg, f in zip(configs, federations, strict=True)
        }
        # A server lists a node as soon as it connects, before the node can run its
        # ClientApp; a run submitted earlier spends its reply timeout on node start-up
        # and may find no client. Wait for every node of every server first.
        for federation in federations:
            federation.node_ids(timeout=timeout)
        if before_runs is not None:
            before_runs()
        for phase in PHASES:
            # The servers are independent: submit every run, then wait for them all.
            runs = [
                (
                    federation,
                    phase_run_config(
                        cfg,
                        phase=phase,
                        session=session,
                        artifact_dir=artifacts,
                        report_dir=workdir / f"server{cfg.server_id}" / phase,
                        extra=LOOPBACK_RUN_CONFIG,
                    ),
                )
                for cfg, federation in zip(configs, federations, strict=True)
            ]
            with ThreadPoolExecutor(max_workers=len(runs)) as pool:
                for submitted in [
                    pool.submit(f.submit, CHECKOUT_APP, c) for f, c in runs
                ]:
                    submitted.result()
            for cfg in configs:
                name = f"server{cfg.server_id}"
                report_dir = workdir / name / phase
                wait_for_report(report_dir, timeout)
                phase_reports.setdefault(name, {})[phase] = str(
                    next(report_dir.glob("run-*/report.json"))
                )
        # Signal every process at once; leaving the stack then waits for each by PID.
        for federation in federations:
            for process in federation.processes():
                process.terminate()
    return write_session_report(
        workdir,
        artifacts,
        configs,
        session=session,
        repeat=0,
        heterogeneity=0.05,
        started=started,
        phase_reports=phase_reports,
        pids=pids,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument(
        "--server",
        action="append",
        default=None,
        help="n_train,n_eval,epsilon,feature_shift,label_shift (one per server)",
    )
    parser.add_argument("--dataset", default="functional")
    parser.add_argument("--num-weak-models", type=int, default=1)
    parser.add_argument("--subsample-size", type=int, default=2)
    parser.add_argument("--session", default="loopback")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)

    from ldpfda.config import Settings
    from ldpfda.server.multiserver import ServerSpec

    specs = []
    for text in args.server or ["3,2,5,0,0", "3,2,2,0.2,0.5"]:
        n_train, n_eval, epsilon, feature_shift, label_shift = text.split(",")
        sizes, reals = (n_train, n_eval), (epsilon, feature_shift, label_shift)
        specs.append(ServerSpec(*map(int, sizes), *map(float, reals)))
    base = Settings.reference(
        dataset=args.dataset,
        num_weak_models=args.num_weak_models,
        subsample_size=args.subsample_size,
        n_test=2000,
    )
    report = run_loopback_session(
        specs, base, args.workdir, session=args.session, timeout=args.timeout
    )
    json.dump(
        {k: report[k] for k in ("test_errors", "rejected_artifacts", "wall_time_s")},
        sys.stdout,
        indent=2,
    )
    print()


if __name__ == "__main__":
    main()
