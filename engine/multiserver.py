"""Multi-server sessions run from this machine: in process, or on Flower's simulation.

:func:`run_multiserver_repeat` runs both phases of :mod:`ldpfda.server.multiserver`
with every server's clients in this process, then the combine step;
:func:`run_simulation` runs the same session as one Flower run per server and phase,
each server its own local SuperLink (its own ``FLWR_HOME`` and ports) with its own
virtual SuperNodes, started by ``flwr run <checkout> --federation-config
"num-supernodes=N"``; every SuperLink is stopped by PID at the end. It needs a source
checkout (the app directory is the repository root) and the helpers of ``deploy/``.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda._validation import check_real
from ldpfda.config import Settings
from ldpfda.datasets.population import population_data, simulated_noise_seed
from ldpfda.engine.inprocess import ArrayClients, InProcessClients
from ldpfda.engine.runner import run_protocol
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.random import derive_seed
from ldpfda.schema.payloads import LinearModels
from ldpfda.server.mrma import majority_vote
from ldpfda.server.multiserver import (
    ServerSpec,
    check_reference,
    evaluate_phase,
    final_models,
    train_phase,
    training_rng,
    worst_case_variance,
)
from ldpfda.server.multiserver_flower import (
    PHASES,
    phase_run_config,
    server_settings,
    write_session_report,
)
from ldpfda.server.session import Session

__all__ = [
    "MultiServerResult",
    "run_multiserver_repeat",
    "run_simulation",
    "summarize",
]

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class MultiServerResult:
    """Per-server and global test errors of one repeat, with the estimates used."""

    test_errors: dict[str, dict[str, float]]
    estimates: NDArray[np.float64]  # (S, S*M): server r's estimate of model j
    privacy: dict[str, Any]
    models: dict[str, LinearModels] = field(default_factory=dict)
    weak: LinearModels | None = None


def run_multiserver_repeat(
    servers: tuple[ServerSpec, ...],
    settings: Settings,
    repeat: int = 0,
    *,
    heterogeneity: float = 0.05,
) -> MultiServerResult:
    """One repeat of the multi-server protocol, with single-server MRMA for comparison.

    ``settings`` gives the shared protocol settings (dataset, M, subsample size, cutoff,
    test size, seed) and must be the reference MRMA
    (:meth:`~ldpfda.config.Settings.reference`); each :class:`ServerSpec` its
    population (:meth:`ServerSpec.settings`, server ids ``0 .. S-1``). Client ids are
    per server, training clients first, as in a Flower run of each server; the noise of
    a server's clients is keyed by its own seed
    (:func:`~ldpfda.datasets.population.simulated_noise_seed`). The single-server baseline of
    server s is the MRMA run it would do alone on the same clients (a counterfactual:
    in either world each client releases once).
    """
    check_reference(settings)
    s_count = len(servers)
    if s_count < 1:
        raise ValueError("servers must name at least one server")
    heterogeneity = check_real(heterogeneity, "heterogeneity", low=0.0)
    m = settings.num_weak_models
    configs = [spec.settings(settings, s) for s, spec in enumerate(servers)]
    populations, tests = [], []
    for s, cfg in enumerate(configs):
        if cfg.n_eval < s_count * m:
            raise ValueError(
                f"server {s} has n_eval={cfg.n_eval}: at least one evaluation client "
                f"per model of every server ({s_count * m}) is needed"
            )
        data = population_data(cfg, repeat)
        (xtr, ytr), (xev, yev) = data.train, data.evaluation
        train = ArrayClients(np.arange(cfg.n_train), xtr, ytr, data.featurizer)
        evaluation = ArrayClients(
            cfg.n_train + np.arange(cfg.n_eval), xev, yev, data.featurizer
        )
        assert data.test is not None
        tests.append((data.featurizer.transform(data.test[0]), data.test[1]))
        populations.append((train, evaluation))
    ledgers = [
        PrivacyLedger(
            budget=cfg.epsilon, client_ids=np.arange(cfg.n_train + cfg.n_eval)
        )
        for cfg in configs
    ]
    sessions = [
        Session(
            InProcessClients(
                pops,
                cfg,
                seed=simulated_noise_seed(cfg, repeat),
                ledger=PrivacyLedger(
                    budget=cfg.epsilon, client_ids=np.arange(cfg.n_train + cfg.n_eval)
                ),
            ),
            ledger,
        )
        for cfg, pops, ledger in zip(configs, populations, ledgers, strict=True)
    ]
    n_features = populations[0][0].featurizer.n_features_out

    # 1. Every server asks its training clients and trains M weak models.
    weak_parts = [
        train_phase(session, cfg, train.client_ids, n_features, repeat)[1]
        for session, cfg, (train, _) in zip(sessions, configs, populations, strict=True)
    ]
    weak = LinearModels(
        np.concatenate([w.coef for w in weak_parts]),
        np.concatenate([w.intercept for w in weak_parts]),
    )

    # 2. Every server's evaluation clients evaluate all S*M models, one query each.
    estimates = np.empty((s_count, s_count * m))
    variances = np.empty_like(estimates)
    for r, (session, cfg, (_, evaluation)) in enumerate(
        zip(sessions, configs, populations, strict=True)
    ):
        _, est = evaluate_phase(
            session, cfg, evaluation.client_ids, weak, n_features, repeat
        )
        estimates[r] = est.raw
        variances[r] = worst_case_variance(est.counts, cfg.epsilon)

    models = final_models(
        weak, estimates, variances, settings=settings, heterogeneity=heterogeneity
    )

    # 3. Test errors on each server's own population, and the single-server baseline.
    test_errors: dict[str, dict[str, float]] = {}
    for s, (cfg, (train, evaluation)) in enumerate(
        zip(configs, populations, strict=True)
    ):
        x_test, y_test = tests[s]
        alone = run_protocol(
            train,
            evaluation,
            cfg,
            seed=derive_seed(settings.seed, "clients-alone", repeat, s),
            server_rng=training_rng(cfg, repeat),
            keep_payload=False,
        )
        test_errors[f"server{s}"] = {
            "multi_server": float(models[f"server{s}"].errors(x_test, y_test)[0]),
            "global": float(models["global"].errors(x_test, y_test)[0]),
            "single_server": float(alone.final.errors(x_test, y_test)[0]),
            "voting_all": float((majority_vote(weak, x_test) != y_test).mean()),
        }
    spent = np.concatenate([ledger.spent_all() for ledger in ledgers])
    budgets = np.concatenate(
        [np.full(cfg.n_train + cfg.n_eval, cfg.epsilon) for cfg in configs]
    )
    privacy = {
        "max_spent_over_budget": float(np.max(spent / budgets)),
        "budgets": [cfg.epsilon for cfg in configs],
    }
    return MultiServerResult(test_errors, estimates, privacy, models, weak)


def summarize(
    results: list[MultiServerResult],
) -> dict[str, dict[str, dict[str, float]]]:
    """Mean and standard error over repeats, per server and method."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for server in results[0].test_errors:
        out[server] = {}
        for method in results[0].test_errors[server]:
            values = np.array([r.test_errors[server][method] for r in results])
            se = values.std(ddof=1) / math.sqrt(values.size) if values.size > 1 else 0.0
            out[server][method] = {"mean": float(values.mean()), "se": float(se)}
    return out


def _deploy_helpers() -> tuple[Any, Any]:
    """The ``loopback`` and ``local_superlink`` modules of the checkout's deploy/."""
    if not (ROOT / "pyproject.toml").exists():
        raise RuntimeError("a Flower session needs a source checkout of ldpfda")
    deploy = str(ROOT / "deploy")
    if deploy not in sys.path:
        sys.path.insert(0, deploy)
    import local_superlink
    import loopback

    return loopback, local_superlink


def run_simulation(
    specs: Sequence[ServerSpec],
    base: Settings,
    workdir: str | Path,
    *,
    session: str | None = None,
    repeat: int = 0,
    heterogeneity: float = 0.05,
    timeout: float = 900.0,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run a whole session on Flower's simulation runtime and write its report.

    Server s runs ``flwr run`` against its own local SuperLink with
    ``n_train + n_eval`` virtual SuperNodes, once per phase; then the combine step.
    The report (:func:`combine_session`, plus every phase report's path and the wall
    time) is written to ``<workdir>/report.json`` and returned. ``extra`` adds
    run-config keys to every run (e.g. ``flower.reply-timeout``).
    """
    loopback, local_superlink = _deploy_helpers()
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
                    repeat=repeat,
                    extra=extra,
                )
                report_dir.mkdir(parents=True, exist_ok=True)
                done = subprocess.run(
                    [
                        loopback._executable("flwr"),
                        "run",
                        str(ROOT),
                        "--federation-config",
                        f"num-supernodes={cfg.n_train + cfg.n_eval}",
                        "--run-config",
                        loopback.run_config_arg(config),
                    ],
                    env=env,
                    cwd=workdir,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                )
                if done.returncode != 0:
                    raise RuntimeError(
                        f"flwr run ({name}, {phase}) failed:\n{done.stdout}\n"
                        f"{done.stderr}"
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
        repeat=repeat,
        heterogeneity=heterogeneity,
        started=started,
        phase_reports=phase_reports,
    )
