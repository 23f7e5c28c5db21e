"""Multi-server sessions in process: both phases, every server's clients here.

:func:`run_multiserver_repeat` runs the phase plans of :mod:`ldpfda.server.multiserver`
with every server's clients in this process, then the combine step. The same session
on Flower's simulation runtime is ``deploy/simulation.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda._validation import check_real
from ldpfda.config import Settings
from ldpfda.datasets.population import population_data, simulated_noise_seed
from ldpfda.engine.inprocess import InProcessClients, split_clients
from ldpfda.engine.runner import run_protocol
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.random import derive_seed
from ldpfda.schema.payloads import LinearModels
from ldpfda.server.fitting import model_error
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
from ldpfda.server.session import Session

__all__ = [
    "MultiServerResult",
    "run_multiserver_repeat",
    "summarize",
]


@dataclass
class MultiServerResult:
    """Per-server and global test errors of one repeat, with the estimates used."""

    test_errors: dict[str, dict[str, float]]
    estimates: NDArray[np.float64]  # (S, S*M): server r's estimate of model j
    privacy: dict[str, Any]
    models: dict[str, LinearModels]


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
    (:func:`~ldpfda.datasets.population.simulated_noise_seed`). The single-server
    baseline of server s is the MRMA run it would do alone on the same clients (a
    counterfactual: in either world each client releases once). With
    ``settings.n_classes`` K > 2 (the ``wearable`` dataset, every server its own
    subjects) every model has K rows and errors are those of the argmax.
    """
    check_reference(settings)
    s_count = len(servers)
    if s_count < 1:
        raise ValueError("servers must name at least one server")
    heterogeneity = check_real(heterogeneity, "heterogeneity", low=0.0)
    m, k = settings.num_weak_models, settings.n_classes
    configs = [spec.settings(settings, s) for s, spec in enumerate(servers)]
    populations, tests, sessions, ledgers = [], [], [], []
    for s, cfg in enumerate(configs):
        if cfg.n_eval < s_count * m:
            raise ValueError(
                f"server {s} has n_eval={cfg.n_eval}: at least one evaluation client "
                f"per model of every server ({s_count * m}) is needed"
            )
        train, evaluation, test = split_clients(cfg, population_data(cfg, repeat))
        populations.append((train, evaluation))
        tests.append(test)
        every = np.arange(cfg.n_train + cfg.n_eval)
        ledgers.append(PrivacyLedger(budget=cfg.epsilon, client_ids=every))
        clients = InProcessClients(
            [train, evaluation],
            cfg,
            seed=simulated_noise_seed(cfg, repeat),
            ledger=PrivacyLedger(budget=cfg.epsilon, client_ids=every),
        )
        sessions.append(Session(clients, ledgers[-1]))
    n_features = populations[0][0].featurizer.n_features_out

    # 1. Every server asks its training clients and trains M weak models.
    weak_parts = [
        train_phase(session, cfg, train.client_ids, n_features, repeat, k)[1]
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
            session, cfg, evaluation.client_ids, weak, n_features, repeat, k
        )
        estimates[r] = est.raw
        variances[r] = worst_case_variance(est.counts, cfg.epsilon)

    models = final_models(
        weak,
        estimates,
        variances,
        settings=settings,
        heterogeneity=heterogeneity,
        n_classes=k,
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
            n_classes=k,
        )
        test_errors[f"server{s}"] = {
            "multi_server": model_error(models[f"server{s}"], x_test, y_test),
            "global": model_error(models["global"], x_test, y_test),
            "single_server": model_error(alone.final, x_test, y_test),
            "voting_all": float((majority_vote(weak, x_test, k) != y_test).mean()),
        }
    spent = np.concatenate([ledger.spent_all() for ledger in ledgers])
    budgets = np.concatenate(
        [np.full(cfg.n_train + cfg.n_eval, cfg.epsilon) for cfg in configs]
    )
    privacy = {
        "max_spent_over_budget": float(np.max(spent / budgets)),
        "budgets": [cfg.epsilon for cfg in configs],
    }
    return MultiServerResult(test_errors, estimates, privacy, models)


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
