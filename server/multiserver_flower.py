"""A multi-server session on Flower: its run configs and the combine step, which
needs no clients."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ldpfda.config import Settings
from ldpfda.datasets.population import design_test_set, public_featurizer
from ldpfda.server.artifacts import load_directory, session_fingerprint
from ldpfda.server.fitting import model_error, model_report
from ldpfda.server.mrma import LinearModels, majority_vote
from ldpfda.server.multiserver import (
    ServerSpec,
    check_reference,
    final_models,
    model_slices,
    worst_case_variance,
)

__all__ = [
    "PHASES",
    "combine_session",
    "phase_run_config",
    "server_settings",
    "write_session_report",
]

#: The Flower runs of a session, in order; the combine step follows.
PHASES = ("train", "evaluate")

#: The run-config keys that describe a server's population in a report.
_POPULATION_KEYS = (
    "data.server-id",
    "data.n-train",
    "data.n-eval",
    "privacy.epsilon",
    "data.feature-shift",
    "data.label-shift",
)


def server_settings(specs: Sequence[ServerSpec], base: Settings) -> list[Settings]:
    """The settings of each server of a session (server ids ``0 .. S-1``).

    Refuses settings other than the reference MRMA, and a server with fewer evaluation
    clients than the session has models.
    """
    check_reference(base)
    if not specs:
        raise ValueError("a session needs at least one server")
    configs = [spec.settings(base, s) for s, spec in enumerate(specs)]
    n_models = len(specs) * base.num_weak_models
    for cfg in configs:
        if cfg.n_eval < n_models:
            raise ValueError(
                f"server {cfg.server_id} has n_eval={cfg.n_eval}: at least one "
                f"evaluation client per model of every server ({n_models}) is needed"
            )
    return configs


def phase_run_config(
    settings: Settings,
    *,
    phase: str,
    session: str,
    artifact_dir: str | Path,
    report_dir: str | Path,
    repeat: int = 0,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``--run-config`` of one server's run of ``phase`` (kebab-case keys)."""
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
    return {
        **settings.to_mapping(),
        "flower.phase": phase,
        "flower.session": session,
        "flower.artifact-dir": str(Path(artifact_dir).resolve()),
        "flower.report-dir": str(Path(report_dir).resolve()),
        "flower.repeat": int(repeat),
        **(extra or {}),
    }


def _estimate_matrix(
    found: Any,
    configs: Sequence[Settings],
    columns: Mapping[int, slice],
    rejected: dict[str, str],
) -> tuple[np.ndarray, np.ndarray, dict[str, list[str]]]:
    """Row r: server r's estimates of every model (NaN, variance inf, where none),
    their variances, and per evaluating server the servers whose models it
    estimated."""
    n_models = max(c.stop for c in columns.values())
    estimates = np.full((len(configs), n_models), np.nan)
    variances = np.full_like(estimates, np.inf)
    used: dict[str, list[str]] = {}
    for row, cfg in enumerate(configs):
        name = f"server{cfg.server_id}"
        used[name] = []
        artifact = found.estimates.get(cfg.server_id)
        if artifact is None:
            continue
        for owner, entry in sorted(artifact.estimates.items()):
            where = f"{artifact.path}#server{owner}"
            mine = found.models.get(owner)
            if mine is None:
                rejected[where] = (
                    f"{artifact.path}: estimates of server {owner}, which has no "
                    "usable models artifact"
                )
            elif entry.models != mine.digest:
                rejected[where] = (
                    f"{artifact.path}: estimates of server {owner} are of models "
                    f"{entry.models}, but {mine.path} is {mine.digest}"
                )
            elif entry.errors.size != columns[owner].stop - columns[owner].start:
                rejected[where] = (
                    f"{artifact.path}: {entry.errors.size} estimates of server "
                    f"{owner}'s {columns[owner].stop - columns[owner].start} models"
                )
            else:
                cols = columns[owner]
                estimates[row, cols] = entry.errors
                variances[row, cols] = worst_case_variance(entry.counts, entry.epsilon)
                used[name].append(f"server{owner}")
    return estimates, variances, used


def _test_errors(
    configs: Sequence[Settings],
    names: Sequence[str],
    models: Mapping[str, LinearModels],
    weak: LinearModels,
    repeat: int,
) -> dict[str, dict[str, float]]:
    """Every server's models scored on its own population's test set (K > 2
    classes: the argmax)."""
    out = {}
    for cfg, name in zip(configs, names, strict=True):
        x_test, y_test = design_test_set(cfg, repeat)
        k = cfg.n_classes
        out[name] = {
            "multi_server": model_error(models[name], x_test, y_test),
            "global": model_error(models["global"], x_test, y_test),
            "voting_all": float((majority_vote(weak, x_test, k) != y_test).mean()),
        }
    return out


def combine_session(
    artifact_dir: str | Path,
    configs: Sequence[Settings],
    *,
    session: str,
    repeat: int = 0,
    heterogeneity: float = 0.05,
) -> dict[str, Any]:
    """The combine step: final models of every server and the global model.

    Row r of the estimate matrix is server r's estimates (``configs[r]``), column j the
    j-th model in server-id order; an estimate is used only if it is of the very models
    artifact read here (same digest and size), otherwise it is rejected with the
    reason, and a model nobody estimated gets the error 1/2. Every server's models are
    scored on its own population's test set. Returns the session report (its fields
    are in ``docs/flower.md``).
    """
    if not configs:
        raise ValueError("combine_session needs the settings of at least one server")
    base = configs[0]
    featurizer, _ = public_featurizer(base, repeat)
    found = load_directory(
        artifact_dir,
        dimension=featurizer.n_features_out,
        fingerprint=session_fingerprint(base, repeat),
        session=session,
    )
    rows, weak = found.stacked()
    columns = model_slices(rows, base.n_classes)
    rejected = dict(found.rejected)
    estimates, variances, used = _estimate_matrix(found, configs, columns, rejected)
    names = [f"server{cfg.server_id}" for cfg in configs]
    models = final_models(
        weak,
        np.where(np.isfinite(variances), estimates, 0.5),
        variances,
        settings=base,
        heterogeneity=heterogeneity,
        names=names,
        n_classes=base.n_classes,
    )
    return {
        "session": session,
        "repeat": int(repeat),
        "heterogeneity": float(heterogeneity),
        "servers": {
            name: {k: cfg.to_mapping()[k] for k in _POPULATION_KEYS}
            for cfg, name in zip(configs, names, strict=True)
        },
        "model_servers": list(columns),
        "models": {name: model_report(m) for name, m in models.items()},
        "test_errors": _test_errors(configs, names, models, weak, repeat),
        "estimates": [
            [None if np.isnan(v) else float(v) for v in row] for row in estimates
        ],
        "estimates_used": used,
        "rejected_artifacts": rejected,
    }


def write_session_report(
    workdir: Path,
    artifacts: Path,
    configs: Sequence[Settings],
    *,
    session: str,
    repeat: int,
    heterogeneity: float,
    started: float,
    **extra: Any,
) -> dict[str, Any]:
    """:func:`combine_session`, ``extra`` and the wall time since ``started`` (a
    :func:`time.perf_counter` value), written to ``<workdir>/report.json``."""
    report = combine_session(
        artifacts, configs, session=session, repeat=repeat, heterogeneity=heterogeneity
    )
    report.update(extra)
    report["wall_time_s"] = time.perf_counter() - started
    (workdir / "report.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    return report
