"""The phases of a multi-server session on Flower: ``train`` and ``evaluate``.

Every server of a session is its own SuperLink with its own SuperNodes, and runs one
Flower run per phase (``flower.phase``; the ServerApp's ``main`` dispatches here). All
runs of a session share ``flower.session`` (nodes keep their ledger per session) and
``flower.artifact-dir``, through which models and estimates move between servers as
validated artifacts (:mod:`ldpfda.server.artifacts`). Server ``s`` is
``data.server-id = s``; its clients ``0 .. n_train-1`` train and the next ``n_eval``
evaluate, as in a single-server run.

``train``
    Ask the training clients for their reference release (``query.privatize``), fit M
    weak models (:func:`~ldpfda.server.engine.train_weak` with
    :func:`~ldpfda.server.multiserver.training_rng`) and export them as
    ``models-server<s>.json``.
``evaluate``
    Load every server's models artifact (a bad one is left out and reported), split the
    evaluation clients over all K models
    (:func:`~ldpfda.server.multiserver.evaluation_groups`), send each client its one
    model (``query.evaluate``), estimate every model's error
    (:func:`~ldpfda.server.mrma.estimate_errors`) and export the estimates as
    ``estimates-server<s>.json``.

The combine step needs no clients
(:func:`ldpfda.server.multiserver_flower.combine_session`).
Training clients are never asked in ``evaluate`` nor evaluation clients in ``train``,
so each client releases once in the session. Each phase writes
``<report-dir>/run-<run id>/report.json`` and ``status.json`` like a single-server run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message, RecordDict
from flwr.serverapp import Grid

from ldpfda import __version__
from ldpfda.client.client_app import EVALUATE, IDENTIFY, PRIVATIZE
from ldpfda.client.data import public_featurizer
from ldpfda.config import Settings
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.server.artifacts import (
    ModelEstimates,
    estimates_path,
    load_directory,
    models_path,
    session_fingerprint,
    write_estimates,
    write_models,
)
from ldpfda.server.engine import train_weak
from ldpfda.server.mrma import LinearModels, estimate_errors
from ldpfda.server.multiserver import check_reference, evaluation_groups, training_rng
from ldpfda.server.server_app import (
    FlowerOptions,
    Round,
    _ask,
    _charge,
    _collect,
    _jsonable,
    _payload,
    _release_events,
    _release_parser,
    _require,
    _Status,
    identify_clients,
    logger,
    parse_feedback,
    wait_for_nodes,
)

__all__ = ["run_evaluate", "run_phase", "run_train"]


@dataclass
class _Session:
    """What both phases share: settings, output, the server's ledger, who is who."""

    settings: Settings
    options: FlowerOptions
    run_id: int
    status: _Status
    n_features: int
    ledger: PrivacyLedger = field(init=False)
    node_of: dict[int, int] = field(default_factory=dict)
    reported: dict[int, dict[str, float]] = field(default_factory=dict)
    rounds: dict[str, Round] = field(default_factory=dict)
    connected: int = 0
    timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        total = self.settings.n_train + self.settings.n_eval
        self.ledger = PrivacyLedger(
            budget=self.settings.epsilon, client_ids=np.arange(total)
        )


def _start(grid: Grid, session: _Session) -> None:
    """Check the settings, wait for the nodes and ask each who it is."""
    settings, options = session.settings, session.options
    check_reference(settings)
    if settings.server_id < 0:
        raise ValueError(
            f"phase {options.phase!r} needs data.server-id >= 0 (this server's id in "
            "the session)"
        )
    total = settings.n_train + settings.n_eval
    session.status("waiting-for-nodes", expected=total)
    t0 = time.perf_counter()
    nodes = wait_for_nodes(
        grid, total, options.min_nodes or total, options.wait_timeout
    )
    session.connected = len(nodes)
    session.status("identify", nodes=len(nodes))
    identify, node_of, _, reported = identify_clients(
        grid, nodes, total, options.reply_timeout
    )
    session.node_of.update(node_of)
    session.reported.update(reported)
    session.rounds[IDENTIFY] = identify
    session.timings["identify_s"] = time.perf_counter() - t0


def _query(
    grid: Grid,
    session: _Session,
    kind: str,
    requests: Mapping[int, RecordDict],
    parse: Callable[[Message, int], tuple[Any, ...]],
) -> tuple[Round, dict[int, tuple[Any, ...]]]:
    """Charge, send and validate one ``query.<kind>`` round to the clients of
    ``requests`` (by client id); the valid replies' values by client."""
    events = _release_events(session.settings, session.n_features)[kind]
    round_ = Round(kind)
    asked = {}
    for c, content in requests.items():
        if _charge(session.ledger, events, c):
            asked[session.node_of[c]] = content
            round_.asked.append(c)
        else:
            round_.refused_by_server.append(c)
    replies = _ask(grid, asked, kind, session.options.reply_timeout)
    valid = _collect(
        round_,
        replies,
        session.node_of,
        session.reported,
        parse,
        timeout=session.options.reply_timeout,
    )
    session.rounds[kind] = round_
    return round_, valid


def _finish(session: _Session, extra: dict[str, Any]) -> dict[str, Any]:
    """Write the phase's ``report.json`` and mark it done."""
    settings, charged = session.settings, session.ledger.spent_all()
    report = {
        "ldpfda_version": __version__,
        "phase": session.options.phase,
        "session": session.options.session,
        "server": settings.server_id,
        "run_id": int(session.run_id),
        **extra,
        "settings": settings.to_mapping(),
        "flower": session.options.to_mapping(),
        "participation": {
            "expected_clients": settings.n_train + settings.n_eval,
            "connected_nodes": session.connected,
            **{name: r.summary() for name, r in session.rounds.items()},
        },
        "privacy": {
            "budget_per_client": settings.epsilon,
            "server_accounting": session.ledger.summary(),
            "clients": {
                str(c): {
                    "charged_by_server": float(charged[c]),
                    "reported_spent": session.reported.get(c, {}).get("spent"),
                }
                for c in sorted(session.node_of)
            },
        },
        "timings": session.timings,
    }
    session.status.directory.mkdir(parents=True, exist_ok=True)
    path = session.status.directory / "report.json"
    path.write_text(
        json.dumps(_jsonable(report), indent=2, allow_nan=False), encoding="utf-8"
    )
    session.status("done", report=str(path.resolve()))
    logger.info("ldpfda: report written to %s", path.resolve())
    return report


def run_train(
    grid: Grid, settings: Settings, options: FlowerOptions, *, run_id: int = 0
) -> dict[str, Any]:
    """Phase ``train``: collect the training releases, fit and export M weak models.

    Returns the report. Raises ``RuntimeError`` when too few nodes connect or too few
    training clients give a valid release.
    """
    status = _Status(Path(options.report_dir) / f"run-{run_id}")
    try:
        featurizer, _ = public_featurizer(settings, options.repeat)
        n_features = featurizer.n_features_out
        session = _Session(settings, options, run_id, status, n_features)
        _start(grid, session)
        train_ids = [c for c in sorted(session.node_of) if c < settings.n_train]
        session.status("privatize", releasing_clients=len(train_ids))
        t0 = time.perf_counter()
        round_, rows = _query(
            grid,
            session,
            PRIVATIZE,
            {c: RecordDict() for c in train_ids},
            _release_parser(settings, n_features),
        )
        _require(
            round_, settings.subsample_size, options.min_reply_fraction, "training"
        )
        payload = _payload(settings, n_features, rows)
        session.timings["clients_privatize_s"] = time.perf_counter() - t0

        session.status("train", payloads=len(payload))
        t0 = time.perf_counter()
        weak = train_weak(payload, settings, training_rng(settings, options.repeat))
        artifact = write_models(
            models_path(options.artifact_dir, settings.server_id),
            weak,
            server=settings.server_id,
            session=options.session,
            fingerprint=session_fingerprint(settings, options.repeat),
        )
        session.timings["server_train_s"] = time.perf_counter() - t0
        return _finish(
            session,
            {
                "artifact": str(artifact.resolve()),
                "train_clients": [int(c) for c in payload.client_ids],
            },
        )
    except Exception as exc:
        status("failed", error=f"{type(exc).__name__}: {exc}")
        raise


def _model_request(coef: np.ndarray, intercept: float) -> RecordDict:
    return RecordDict(
        {
            "model": ArrayRecord(
                {
                    "coef": Array(np.ascontiguousarray(coef, dtype=np.float64)),
                    "intercept": Array(np.array([intercept], dtype=np.float64)),
                }
            )
        }
    )


def run_evaluate(
    grid: Grid, settings: Settings, options: FlowerOptions, *, run_id: int = 0
) -> dict[str, Any]:
    """Phase ``evaluate``: every evaluation client answers for one model of one server.

    The models are those of the valid ``models-*.json`` artifacts of
    ``flower.artifact-dir``, ordered by server id; rejected files are listed in the
    report with the reason. Returns the report. Raises ``RuntimeError`` when no models
    artifact is usable, or too few nodes or valid replies.
    """
    status = _Status(Path(options.report_dir) / f"run-{run_id}")
    try:
        featurizer, _ = public_featurizer(settings, options.repeat)
        found = load_directory(
            options.artifact_dir,
            dimension=featurizer.n_features_out,
            fingerprint=session_fingerprint(settings, options.repeat),
            session=options.session,
            estimates=False,
        )
        for path, reason in found.rejected.items():
            logger.warning("ldpfda: artifact %s rejected: %s", path, reason)
        if not found.models:
            raise RuntimeError(
                f"no usable models artifact in {options.artifact_dir} for session "
                f"{options.session!r}; rejected: {found.rejected}"
            )
        owners = sorted(found.models)
        weak = LinearModels(
            np.vstack([found.models[r].models.coef for r in owners]),
            np.concatenate([found.models[r].models.intercept for r in owners]),
        )
        session = _Session(settings, options, run_id, status, featurizer.n_features_out)
        _start(grid, session)
        eval_ids = [c for c in sorted(session.node_of) if c >= settings.n_train]
        session.status("evaluate", eval_clients=len(eval_ids), models=len(weak))
        t0 = time.perf_counter()
        groups = evaluation_groups(len(eval_ids), len(weak), settings, options.repeat)
        group_of = dict(zip(eval_ids, groups.tolist(), strict=True))
        round_, feedback = _query(
            grid,
            session,
            EVALUATE,
            {
                c: _model_request(weak.coef[g], weak.intercept[g])
                for c, g in group_of.items()
            },
            lambda reply, c: parse_feedback(reply, client_id=c),
        )
        _require(round_, 1, options.min_reply_fraction, "evaluation")
        answered = sorted(feedback)
        estimates = estimate_errors(
            np.array([feedback[c][0] for c in answered], dtype=np.int8),
            np.array([group_of[c] for c in answered], dtype=np.int64),
            n_models=len(weak),
            epsilon=settings.epsilon,
        )
        session.timings["clients_evaluate_s"] = time.perf_counter() - t0
        bounds = np.cumsum([0] + [len(found.models[r].models) for r in owners])
        by_server = {
            r: ModelEstimates(
                found.models[r].digest,
                estimates.raw[lo:hi],
                estimates.counts[lo:hi],
                settings.epsilon,
            )
            for r, lo, hi in zip(owners, bounds[:-1], bounds[1:], strict=True)
        }
        artifact = write_estimates(
            estimates_path(options.artifact_dir, settings.server_id),
            by_server,
            server=settings.server_id,
            session=options.session,
            dimension=featurizer.n_features_out,
            fingerprint=session_fingerprint(settings, options.repeat),
        )
        return _finish(
            session,
            {
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
                "eval_clients": answered,
            },
        )
    except Exception as exc:
        status("failed", error=f"{type(exc).__name__}: {exc}")
        raise


def run_phase(
    grid: Grid, settings: Settings, options: FlowerOptions, *, run_id: int = 0
) -> dict[str, Any]:
    """Run the phase ``options.phase`` names (``"train"`` or ``"evaluate"``)."""
    phases = {"train": run_train, "evaluate": run_evaluate}
    if options.phase not in phases:
        raise ValueError(
            f"run_phase runs the phases {sorted(phases)}, got {options.phase!r}"
        )
    return phases[options.phase](grid, settings, options, run_id=run_id)
