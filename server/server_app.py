"""The Flower ServerApp: one repeat of the protocol (or one phase of a multi-server
session) over the grid, running the very plan the in-process engine runs: clients
``0 .. n_train-1`` train and the next ``n_eval`` evaluate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from ldpfda import __version__
from ldpfda.config import Settings
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.random import derive_seed
from ldpfda.schema import catalog
from ldpfda.server.fitting import (
    ProtocolResult,
    assess_signal,
    no_signal_warning,
    score,
)
from ldpfda.server.grid import GridClients
from ldpfda.server.options import FlowerOptions, parse_run_config
from ldpfda.server.own_data import run_data
from ldpfda.server.plans import Plan, planned_ids, run_plan
from ldpfda.server.report import (
    Status,
    privacy_section,
    rejections,
    write_run,
)
from ldpfda.server.session import Session, logger, reason_kind

__all__ = ["app", "connect", "participation", "run_server"]


def connect(
    grid: Grid,
    settings: Settings,
    options: FlowerOptions,
    status: Status,
    timing: str = "wait_for_nodes_s",
    spec_hash: str | None = None,
) -> tuple[GridClients, Session]:
    """Wait for the run's nodes (timed as ``timing``); the transport and a session
    over it, with the server's ledger. Once the nodes are identified (by their first
    reply) the quorum holds against every client the run asked for."""
    total = settings.n_train + settings.n_eval
    clients = GridClients(
        grid,
        options.reply_timeout,
        rejoin_timeout=options.rejoin_timeout,
        spec_hash=spec_hash,
        clients_per_node=options.clients_per_node,
    )
    ledger = PrivacyLedger(budget=settings.epsilon, client_ids=np.arange(total))
    session = Session(clients, ledger, options.min_reply_fraction, status)
    status("waiting-for-nodes", expected=total)
    with session.timed(timing):
        clients.connect(total, options.min_nodes or total, options.wait_timeout)

    def identified() -> None:
        status("identify", nodes=len(clients.nodes))
        absent = sorted(set(range(total)) - set(clients.node_of))
        if absent:
            logger.warning(
                "ldpfda: %d configured client(s) absent: %s", len(absent), absent[:20]
            )
        session.reported.update(clients.reported)
        session.lose({c: "absent: no node identified as this client" for c in absent})
        session.require(clients.identify, 1, "planned", np.arange(total))

    clients.on_identified = identified
    return clients, session


def participation(
    clients: GridClients, session: Session, total: int, **extra: Any
) -> dict[str, Any]:
    """The report's ``participation`` block: who took part, per round, and why not."""
    rounds = {catalog.IDENTIFY: clients.identify, **session.rounds}
    return {
        "expected_clients": total,
        "connected_nodes": len(clients.nodes),
        "absent_clients": sorted(set(range(total)) - set(clients.node_of)),
        "ignored_nodes": {
            str(node): reason
            for node, reason in clients.identify.rejected.items()
            if reason_kind(reason) in ("duplicate", "unknown")
        },
        **extra,
        "rejections": rejections(rounds, clients.node_of, clients.claimed),
        **{name: r.summary() for name, r in rounds.items()},
    }


def run_server(
    grid: Grid, settings: Settings, options: FlowerOptions, *, run_id: int = 0
) -> tuple[ProtocolResult, dict[str, Any]]:
    """Run one repeat of the protocol over ``grid``; its result and the report written
    to ``<report_dir>/run-<run_id>/report.json``.

    Raises ``RuntimeError`` when too few nodes connect or too few valid replies arrive.
    """
    status = Status(Path(options.report_dir) / f"run-{run_id}")
    total = settings.n_train + settings.n_eval
    try:
        data = run_data(settings, options)
        settings.check_n_classes(data.n_classes)  # before any node
        featurizer, public = data.featurizer, data.public
        clients, session = connect(
            grid, settings, options, status, spec_hash=data.spec_hash
        )
        # The planned clients: the nodes say who they are with their first reply.
        train_ids, eval_ids = planned_ids(settings)
        server_rng = np.random.default_rng(
            derive_seed(settings.seed, "server", options.repeat)
        )
        plan = Plan(
            settings,
            train_ids,
            eval_ids,
            featurizer.n_features_out,
            server_rng,
            public,
            planned=(train_ids, eval_ids),
            n_classes=data.n_classes,
        )
        result = run_plan(session, plan)
        with session.timed("server_score_s"):
            if data.test is not None:
                score(result, *data.test)
            assess_signal(result, public, data.test)
        result.timings = dict(session.timings)
        present = clients.absent(np.arange(total)) == 0
        extra: dict[str, Any] = {
            "train_clients": train_ids[present[train_ids]].tolist(),
            "eval_clients": eval_ids[present[eval_ids]].tolist(),
        }
        if not settings.label_release:
            extra["output_range"] = list(
                catalog.release_range(settings, featurizer.n_features_out)
            )
        report = result.report()
        report["signal"]["warning"] = warning = no_signal_warning(
            result.signal,
            n_clients=len(result.payload),
            epsilon=settings.epsilon,
            n_features=featurizer.n_features_out,
        )
        if warning:
            logger.warning("ldpfda: %s", warning)
        report.update(
            ldpfda_version=__version__,
            run_id=int(run_id),
            n_classes=int(data.n_classes),
            settings=settings.to_mapping(),
            flower=options.to_mapping(),
            participation=participation(clients, session, total, **extra),
            second_moment=data.second_moment(),
        )
        # The identified clients, and those charged whose node never said who it is.
        charged = np.flatnonzero(session.ledger.spent_all() > 0).tolist()
        listed = sorted({*clients.node_of, *charged})
        report["privacy"] = privacy_section(session, listed)
        if settings.label_release:
            report["privacy"]["labeldp"] = result.privacy["labeldp"]
        write_run(report, result.final, result.payload.arrays(), status)
        return result, report
    except Exception as exc:
        status.failed(exc)
        raise


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point of ``flwr run``: parse the run config, run one repeat or phase.

    The ServerApp's own numpy work (test sets, fits) runs on one BLAS thread. In
    Flower's simulation it is a thread of the process that starts Ray, and a fork
    there stops OpenBLAS's thread pool: a product that OpenBLAS had handed to the pool
    (drawing the test set of a 10^5-client run) then waited forever, the simulation
    at full CPU in ``exec_blas_async_wait`` with no pool thread left, and no report.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        _main(grid, context)


def _main(grid: Grid, context: Context) -> None:
    settings, options = parse_run_config(context.run_config)
    if options.phase != "single":
        from ldpfda.server.multiserver_app import run_phase

        run_phase(grid, settings, options, run_id=context.run_id)
        return
    run_server(grid, settings, options, run_id=context.run_id)
