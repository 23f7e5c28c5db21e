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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda._validation import check_epsilon, check_int, check_real
from ldpfda.client.protocol import TrainingPayload, answer_evaluation, privatize
from ldpfda.config import Settings
from ldpfda.datasets.synthetic import make_design
from ldpfda.fda.features import Featurizer
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.random import derive_seed
from ldpfda.privacy.randomized_response import rr_keep_probability
from ldpfda.server.engine import ArrayClients, make_featurizer, run_protocol, train_weak
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
    "combine_estimates",
    "run_multiserver_repeat",
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


def _worst_case_variance(
    counts: NDArray[np.int64], epsilon: float
) -> NDArray[np.float64]:
    """Variance of the debiased error estimate at true error 1/2, per subgroup size."""
    q = rr_keep_probability(epsilon=epsilon)
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


@dataclass
class MultiServerResult:
    """Per-server and global test errors of one repeat, with the estimates used."""

    test_errors: dict[str, dict[str, float]]
    estimates: NDArray[np.float64]  # (S, S*M): server r's estimate of model j
    privacy: dict[str, Any]
    models: dict[str, LinearModels] = field(default_factory=dict)


def _server_data(
    spec: ServerSpec, settings: Settings, seed: int, index: int, repeat: int
):
    design = make_design(
        settings.dataset, feature_shift=spec.feature_shift, label_shift=spec.label_shift
    )
    rng = np.random.default_rng(derive_seed(seed, "data", repeat, index))
    train = design.sample(spec.n_train, rng)
    evaluation = design.sample(spec.n_eval, rng)
    test = design.sample(settings.n_test, rng)
    return train, evaluation, test


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
    population. Client ids are unique across servers. The single-server baseline of
    server s is the MRMA run it would do alone on the same clients (a counterfactual:
    in either world each client releases once).
    """
    if settings.joint_release or settings.protocol != "mrma":
        raise ValueError(
            "multi-server cross-evaluation is part of MRMA and runs the reference "
            "protocol: pass Settings.reference(...), got mechanism="
            f"{settings.mechanism!r}, method={settings.method!r}"
        )
    s_count = len(servers)
    if s_count < 1:
        raise ValueError("servers must name at least one server")
    heterogeneity = check_real(heterogeneity, "heterogeneity", low=0.0)
    m = settings.num_weak_models
    seed = settings.seed
    # One featurizer for everyone, fixed from public calibration data of the base
    # design.
    featurizer: Featurizer = make_featurizer(
        make_design(settings.dataset),
        settings,
        np.random.default_rng(derive_seed(seed, "public", repeat)),
    )
    client_seed = derive_seed(seed, "clients", repeat)

    data, populations, offset = [], [], 0
    for s, spec in enumerate(servers):
        if spec.n_eval < s_count * m:
            raise ValueError(
                f"server {s} has n_eval={spec.n_eval}: at least one evaluation client "
                f"per model of every server ({s_count * m}) is needed"
            )
        (xtr, ytr), (xev, yev), test = _server_data(spec, settings, seed, s, repeat)
        train = ArrayClients(offset + np.arange(spec.n_train), xtr, ytr, featurizer)
        offset += spec.n_train
        evaluation = ArrayClients(offset + np.arange(spec.n_eval), xev, yev, featurizer)
        offset += spec.n_eval
        data.append(test)
        populations.append((train, evaluation))

    budgets = np.concatenate(
        [
            np.full(p.n_clients + e.n_clients, spec.epsilon)
            for spec, (p, e) in zip(servers, populations, strict=True)
        ]
    )
    ledgers = [
        PrivacyLedger(
            budget=spec.epsilon, client_ids=np.concatenate([p.client_ids, e.client_ids])
        )
        for spec, (p, e) in zip(servers, populations, strict=True)
    ]

    # 1. Every server privatizes its training clients and trains M weak models.
    weak_parts = []
    for s, (spec, (train, _)) in enumerate(zip(servers, populations, strict=True)):
        payload = TrainingPayload.concatenate(
            [
                privatize(
                    x,
                    y,
                    client_ids=ids,
                    seed=client_seed,
                    epsilon=spec.epsilon,
                    label_share=settings.label_share,
                    ledger=ledgers[s],
                )
                for ids, x, y in train.batches(100_000)
            ]
        )
        rng = np.random.default_rng(derive_seed(seed, "server", repeat, s))
        weak_parts.append(
            train_weak(payload, settings.replace(epsilon=spec.epsilon), rng)
        )
    weak = LinearModels(
        np.concatenate([w.coef for w in weak_parts]),
        np.concatenate([w.intercept for w in weak_parts]),
    )

    # 2. Every server's evaluation clients evaluate all S*M models, one query each.
    estimates = np.empty((s_count, s_count * m))
    variances = np.empty_like(estimates)
    for r, (spec, (_, evaluation)) in enumerate(zip(servers, populations, strict=True)):
        rng = np.random.default_rng(derive_seed(seed, "groups", repeat, r))
        groups = assign_groups(evaluation.n_clients, s_count * m, rng)
        ids, x, y = next(evaluation.batches(evaluation.n_clients))
        bits = answer_evaluation(
            weak.coef[groups],
            weak.intercept[groups],
            x,
            y,
            client_ids=ids,
            seed=client_seed,
            epsilon=spec.epsilon,
            ledger=ledgers[r],
        )
        est = estimate_errors(bits, groups, n_models=s_count * m, epsilon=spec.epsilon)
        estimates[r] = est.raw
        variances[r] = _worst_case_variance(est.counts, spec.epsilon)

    def final_model(errors: NDArray[np.float64]) -> LinearModels:
        reversed_models, _ = reverse_models(weak, errors)
        weights, _, _ = mrma_weights(errors, cutoff=settings.cutoff)
        return average_models(
            reversed_models, weights, normalize=settings.normalize_models
        )

    models = {
        "global": final_model(
            combine_estimates(estimates, variances, own=None, heterogeneity=0.0)
        )
    }
    for s in range(s_count):
        models[f"server{s}"] = final_model(
            combine_estimates(estimates, variances, own=s, heterogeneity=heterogeneity)
        )

    # 3. Test errors on each server's own population, and the single-server baseline.
    test_errors: dict[str, dict[str, float]] = {}
    for s, (spec, (train, evaluation)) in enumerate(
        zip(servers, populations, strict=True)
    ):
        x_test = featurizer.transform(data[s][0])
        y_test = data[s][1]
        alone = run_protocol(
            train,
            evaluation,
            settings.replace(
                epsilon=spec.epsilon, n_train=spec.n_train, n_eval=spec.n_eval
            ),
            seed=derive_seed(seed, "clients-alone", repeat),
            server_rng=np.random.default_rng(derive_seed(seed, "server", repeat, s)),
            keep_payload=False,
        )
        test_errors[f"server{s}"] = {
            "multi_server": float(models[f"server{s}"].errors(x_test, y_test)[0]),
            "global": float(models["global"].errors(x_test, y_test)[0]),
            "single_server": float(alone.final.errors(x_test, y_test)[0]),
            "voting_all": float((majority_vote(weak, x_test) != y_test).mean()),
        }
    spent = np.concatenate([ledger.spent_all() for ledger in ledgers])
    privacy = {
        "max_spent_over_budget": float(np.max(spent / budgets)),
        "budgets": [spec.epsilon for spec in servers],
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
