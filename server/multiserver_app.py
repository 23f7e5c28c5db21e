"""The phases of a multi-server session on Flower, one Flower run each: ``train`` fits
and exports M weak models, ``evaluate`` has every evaluation client answer for one
model of all servers and exports the error estimates (so each client releases once in
the session). Models and estimates move as artifacts in ``flower.artifact-dir``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flwr.serverapp import Grid

from ldpfda import __version__
from ldpfda.config import Settings
from ldpfda.datasets.population import public_featurizer
from ldpfda.schema import catalog
from ldpfda.server.artifacts import (
    ModelEstimates,
    estimates_path,
    load_directory,
    models_path,
    session_fingerprint,
    write_estimates,
    write_models,
)
from ldpfda.server.grid import GridClients
from ldpfda.server.multiserver import (
    check_reference,
    evaluate_phase,
    model_slices,
    train_phase,
)
from ldpfda.server.options import FlowerOptions
from ldpfda.server.plans import planned_ids
from ldpfda.server.report import Status, privacy_section, write_report
from ldpfda.server.server_app import connect
from ldpfda.server.session import Session, logger

__all__ = ["run_phase"]


def _start(
    grid: Grid, settings: Settings, options: FlowerOptions, status: Status
) -> tuple[GridClients, Session]:
    """Check the settings, wait for the nodes and ask each who it is."""
    check_reference(settings)
    if options.spec or options.public_data:
        raise ValueError(
            "the multi-server phases run on the embedded designs; flower.spec and "
            "flower.public-data are for a single-server run (flower.phase = "
            '"single")'
        )
    if settings.server_id < 0:
        raise ValueError(
            f"phase {options.phase!r} needs data.server-id >= 0 (this server's id in "
            "the session)"
        )
    return connect(grid, settings, options, status, "identify_s")


def _train(
    grid: Grid, settings: Settings, options: FlowerOptions, status: Status
) -> tuple[GridClients, Session, dict[str, Any]]:
    """Collect the training releases, fit and export M weak models."""
    n_features = public_featurizer(settings, options.repeat)[0].n_features_out
    clients, session = _start(grid, settings, options, status)
    # The release query is alike for every node, so it goes to all of them and they
    # say who they are with their reply (an evaluation client's node answers only
    # that): no identify round first.
    train_ids, _ = planned_ids(settings)
    payload, weak = train_phase(
        session, settings, train_ids, n_features, options.repeat, settings.n_classes
    )
    with session.timed("server_train_s"):
        artifact = write_models(
            models_path(options.artifact_dir, settings.server_id),
            weak,
            server=settings.server_id,
            session=options.session,
            fingerprint=session_fingerprint(settings, options.repeat),
        )
    extra = {
        "artifact": str(artifact.resolve()),
        "train_clients": [int(c) for c in payload.client_ids],
    }
    return clients, session, extra


def _evaluate(
    grid: Grid, settings: Settings, options: FlowerOptions, status: Status
) -> tuple[GridClients, Session, dict[str, Any]]:
    """Every evaluation client answers for one model of the session's valid models
    artifacts (by server id); export the estimates."""
    n_features = public_featurizer(settings, options.repeat)[0].n_features_out
    fingerprint = session_fingerprint(settings, options.repeat)
    found = load_directory(
        options.artifact_dir,
        dimension=n_features,
        fingerprint=fingerprint,
        session=options.session,
        estimates=False,
    )
    for rejected, reason in found.rejected.items():
        logger.warning("ldpfda: artifact %s rejected: %s", rejected, reason)
    rows, weak = found.stacked()
    models = model_slices(rows, settings.n_classes)
    clients, session = _start(grid, settings, options, status)
    ids = clients.ids()
    eval_ids = ids[ids >= settings.n_train]
    with session.timed("clients_evaluate_s"):
        answered, estimates = evaluate_phase(
            session,
            settings,
            eval_ids,
            weak,
            n_features,
            options.repeat,
            settings.n_classes,
        )
    by_server = {
        r: ModelEstimates(
            found.models[r].digest,
            estimates.raw[i],
            estimates.counts[i],
            settings.epsilon,
        )
        for r, i in models.items()
    }
    artifact = write_estimates(
        estimates_path(options.artifact_dir, settings.server_id),
        by_server,
        server=settings.server_id,
        session=options.session,
        dimension=n_features,
        fingerprint=fingerprint,
    )
    extra = {
        "artifact": str(artifact.resolve()),
        "models_evaluated": {
            str(r): {
                "path": str(found.models[r].path),
                "digest": found.models[r].digest,
                "estimated_errors": e.errors.tolist(),
                "counts": e.counts.tolist(),
            }
            for r, e in by_server.items()
        },
        "rejected_artifacts": found.rejected,
        "eval_clients": answered.tolist(),
    }
    return clients, session, extra


def run_phase(
    grid: Grid, settings: Settings, options: FlowerOptions, *, run_id: int = 0
) -> dict[str, Any]:
    """Run the phase ``options.phase`` names (``"train"`` or ``"evaluate"``) and
    write its ``report.json``.

    Returns the report. Raises ``RuntimeError`` when no models artifact is usable
    (``evaluate``), or too few nodes connect or give a valid reply.
    """
    phases = {"train": _train, "evaluate": _evaluate}
    if options.phase not in phases:
        raise ValueError(
            f"run_phase runs the phases {sorted(phases)}, got {options.phase!r}"
        )
    status = Status(Path(options.report_dir) / f"run-{run_id}")
    try:
        clients, session, extra = phases[options.phase](grid, settings, options, status)
        rounds = {catalog.IDENTIFY: clients.identify, **session.rounds}
        report = {
            "ldpfda_version": __version__,
            "phase": options.phase,
            "session": options.session,
            "server": settings.server_id,
            "run_id": int(run_id),
            **extra,
            "settings": settings.to_mapping(),
            "flower": options.to_mapping(),
            "participation": {
                "expected_clients": settings.n_train + settings.n_eval,
                "connected_nodes": len(clients.nodes),
                **{name: r.summary() for name, r in rounds.items()},
            },
            "privacy": privacy_section(session, sorted(clients.node_of), budgets=False),
            "timings": session.timings,
        }
        write_report(report, status)
        return report
    except Exception as exc:
        status.failed(exc)
        raise
