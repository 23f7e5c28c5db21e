"""Multi-server MRMA: servers with different populations evaluate each other's models.

Each server s has its own training and evaluation clients, drawn from its own
(possibly shifted) distribution, with its own size and epsilon. Every server trains M
weak models; the S*M models are then evaluated by subgroups of *every* server's
evaluation clients, each evaluation client still answering exactly one query. Server
r's bits give an unbiased estimate of every model's error on population r.

Server s combines the estimates towards its own population: its own estimate has weight
:math:`1/v_{s}` and another server's :math:`1/(v_{r} + \\tau^2)`, where :math:`v` is the
worst-case (error 1/2) variance of the debiased estimate from that subgroup and
:math:`\\tau` the assumed spread of a model's error across populations. The global model
pools all estimates with weights :math:`1/v_r` (the error on the pooled population).
Reversal, selection and averaging then run over all S*M models, per server and globally.

Cross-evaluation of weak models is an MRMA concept, so this module runs the reference
MRMA protocol only: its settings must be :meth:`ldpfda.config.Settings.reference` (the
reference release, ``server.method`` ``"mrma"`` or ``"auto"``), not the default joint
release with the moment classifier, which has no weak models to evaluate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda._validation import check_epsilon, check_int, check_real
from ldpfda.client.data import population_data, simulated_noise_seed
from ldpfda.client.protocol import TrainingPayload, answer_evaluation, privatize
from ldpfda.config import Settings
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.random import derive_seed
from ldpfda.privacy.randomized_response import rr_keep_probability
from ldpfda.server.engine import ArrayClients, run_protocol, train_weak
from ldpfda.server.mrma import (
    LinearModels,
    assign_groups,
    average_models,
    estimate_errors,
    majority_vote,
    mrma_weights,
    reverse_models,
)

__all__ = [
    "MultiServerResult",
    "ServerSpec",
    "check_reference",
    "combine_estimates",
    "evaluation_groups",
    "final_models",
    "run_multiserver_repeat",
    "training_rng",
    "worst_case_variance",
]


@dataclass(frozen=True)
class ServerSpec:
    """One server's population: sizes, budget and distribution shift."""

    n_train: int = 500
    n_eval: int = 2500
    epsilon: float = 5.0
    feature_shift: float = 0.0
    label_shift: float = 0.0

    def __post_init__(self) -> None:
        check_int(self.n_train, "n_train", minimum=2)
        check_int(self.n_eval, "n_eval", minimum=1)
        check_epsilon(self.epsilon)
        check_real(self.feature_shift, "feature_shift")
        check_real(self.label_shift, "label_shift")

    def settings(self, base: Settings, server_id: int) -> Settings:
        """The settings of server ``server_id``: ``base`` with this population."""
        return base.replace(
            n_train=self.n_train,
            n_eval=self.n_eval,
            epsilon=self.epsilon,
            feature_shift=self.feature_shift,
            label_shift=self.label_shift,
            server_id=server_id,
        )


def check_reference(settings: Settings) -> None:
    """Refuse settings other than the reference MRMA protocol (see the module doc)."""
    if settings.mechanism != "reference" or settings.protocol != "mrma":
        raise ValueError(
            "multi-server cross-evaluation is part of MRMA and runs the reference "
            "protocol: pass Settings.reference(...) (privacy.mechanism = "
            f'"reference"), got mechanism={settings.mechanism!r}, '
            f"method={settings.method!r}"
        )


def training_rng(settings: Settings, repeat: int) -> np.random.Generator:
    """Server ``settings.server_id``'s randomness for its weak models' subsamples."""
    return np.random.default_rng(
        derive_seed(settings.seed, "server", repeat, settings.server_id)
    )


def evaluation_groups(
    n_evaluators: int, n_models: int, settings: Settings, repeat: int
) -> NDArray[np.int64]:
    """Which of the ``n_models`` models each evaluator of server
    ``settings.server_id`` evaluates (by position among its evaluators, ordered by
    client id): :func:`~ldpfda.server.mrma.assign_groups` on the server's own stream.
    """
    rng = np.random.default_rng(
        derive_seed(settings.seed, "groups", repeat, settings.server_id)
    )
    return assign_groups(n_evaluators, n_models, rng)


def worst_case_variance(
    counts: NDArray[np.int64], epsilon: float
) -> NDArray[np.float64]:
    """Variance of the debiased error estimate at true error 1/2, per subgroup size.

    .. math:: v = \\frac{1}{4 n (2q - 1)^2}, \\qquad q = \\frac{e^\\varepsilon}
              {1 + e^\\varepsilon};

    an empty subgroup has infinite variance (no weight).
    """
    q = rr_keep_probability(epsilon=epsilon)
    counts = np.asarray(counts)
    with np.errstate(divide="ignore"):
        return np.where(
            counts > 0, 0.25 / (np.maximum(counts, 1) * (2 * q - 1) ** 2), np.inf
        )


def combine_estimates(
    estimates: NDArray[np.float64],
    variances: NDArray[np.float64],
    *,
    own: int | None,
    heterogeneity: float,
) -> NDArray[np.float64]:
    """Inverse-variance combination of per-server estimates (rows) of each model (cols).

    With ``own = s``, rows other than s get the extra variance ``heterogeneity**2``;
    with ``own = None`` all rows are pooled as they are. Models no server evaluated get
    1/2.
    """
    extra = np.full(estimates.shape[0], heterogeneity**2)
    if own is not None:
        extra[own] = 0.0
    weights = 1.0 / (variances + extra[:, None])
    total = weights.sum(axis=0)
    combined = np.where(
        total > 0,
        (weights * estimates).sum(axis=0) / np.where(total > 0, total, 1.0),
        0.5,
    )
    return np.clip(combined, 0.0, 1.0)


def final_models(
    weak: LinearModels,
    estimates: NDArray[np.float64],
    variances: NDArray[np.float64],
    *,
    settings: Settings,
    heterogeneity: float,
    names: Sequence[str] | None = None,
) -> dict[str, LinearModels]:
    """Reversal, selection and averaging of all weak models, per server and globally.

    Row s of ``estimates`` (shape ``(S, K)``) holds server s's estimates of the K
    models, ``variances`` their variances (``inf`` where s gave none). Returns the
    ``"global"`` model (all rows pooled) and one model per row, named ``names[s]``
    (default ``"server<s>"``), whose estimates lean towards row s
    (:func:`combine_estimates`).
    """
    names = (
        [f"server{s}" for s in range(estimates.shape[0])] if names is None else names
    )

    def final(errors: NDArray[np.float64]) -> LinearModels:
        reversed_models, _ = reverse_models(weak, errors)
        weights, _, _ = mrma_weights(errors, cutoff=settings.cutoff)
        return average_models(
            reversed_models, weights, normalize=settings.normalize_models
        )

    models = {
        "global": final(
            combine_estimates(estimates, variances, own=None, heterogeneity=0.0)
        )
    }
    for s, name in enumerate(names):
        models[name] = final(
            combine_estimates(estimates, variances, own=s, heterogeneity=heterogeneity)
        )
    return models


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
    (:func:`~ldpfda.client.data.simulated_noise_seed`). The single-server baseline of
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

    # 1. Every server privatizes its training clients and trains M weak models.
    weak_parts = []
    for s, (cfg, (train, _)) in enumerate(zip(configs, populations, strict=True)):
        payload = TrainingPayload.concatenate(
            [
                privatize(
                    x,
                    y,
                    client_ids=ids,
                    seed=simulated_noise_seed(cfg, repeat),
                    epsilon=cfg.epsilon,
                    label_share=cfg.label_share,
                    ledger=ledgers[s],
                )
                for ids, x, y in train.batches(100_000)
            ]
        )
        weak_parts.append(train_weak(payload, cfg, training_rng(cfg, repeat)))
    weak = LinearModels(
        np.concatenate([w.coef for w in weak_parts]),
        np.concatenate([w.intercept for w in weak_parts]),
    )

    # 2. Every server's evaluation clients evaluate all S*M models, one query each.
    estimates = np.empty((s_count, s_count * m))
    variances = np.empty_like(estimates)
    for r, (cfg, (_, evaluation)) in enumerate(zip(configs, populations, strict=True)):
        groups = evaluation_groups(evaluation.n_clients, s_count * m, cfg, repeat)
        ids, x, y = next(evaluation.batches(evaluation.n_clients))
        bits = answer_evaluation(
            weak.coef[groups],
            weak.intercept[groups],
            x,
            y,
            client_ids=ids,
            seed=simulated_noise_seed(cfg, repeat),
            epsilon=cfg.epsilon,
            ledger=ledgers[r],
        )
        est = estimate_errors(bits, groups, n_models=s_count * m, epsilon=cfg.epsilon)
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
