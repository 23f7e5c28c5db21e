"""Multi-server MRMA: servers with different populations evaluate each other's models.

Every server s (its own clients, epsilon and shifted distribution) trains M weak
models; subgroups of every server's evaluation clients, one query each, evaluate all
S*M models, so server r's bits estimate each model's error on population r without
bias. Server s weighs its own estimates by :math:`1/v_s` and server r's by
:math:`1/(v_r + \\tau^2)`, :math:`v` the worst-case (error 1/2) variance of the
debiased estimate and :math:`\\tau` the assumed spread of a model's error across
populations; the global model pools all by :math:`1/v_r`. Reversal, selection and
averaging then run over all S*M models. Only the reference MRMA protocol has weak
models to evaluate (:meth:`ldpfda.config.Settings.reference`). With K > 2 classes
(``n_classes``) every model is K rows, its evaluators answer the same bit "was the
model wrong on me" (the error's worst-case variance is still that at 1/2), and, as in
single-server K-class MRMA, no model is reversed: a model at or below chance weighs 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ldpfda._validation import check_epsilon, check_int, check_real
from ldpfda.config import Settings
from ldpfda.privacy.random import derive_seed
from ldpfda.privacy.randomized_response import rr_keep_probability
from ldpfda.schema.payloads import LinearModels, TrainingPayload
from ldpfda.server.mrma import (
    ErrorEstimates,
    average_models,
    estimate_errors,
    model_rows,
    mrma_weights,
    reverse_models,
)
from ldpfda.server.plans import Plan, ask_feedback, planned_ids, train_round
from ldpfda.server.session import Session

__all__ = [
    "ServerSpec",
    "check_reference",
    "combine_estimates",
    "final_models",
    "evaluate_phase",
    "model_slices",
    "train_phase",
    "training_rng",
    "worst_case_variance",
]

_NONE = np.zeros(0, dtype=np.int64)


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


def model_slices(rows: dict[int, slice], n_classes: int) -> dict[int, slice]:
    """Each server's models among all (by model) from its rows (a K-class model is K
    consecutive rows)."""
    k = model_rows(n_classes)
    return {r: slice(s.start // k, s.stop // k) for r, s in rows.items()}


def training_rng(settings: Settings, repeat: int) -> np.random.Generator:
    """Server ``settings.server_id``'s randomness for its weak models' subsamples."""
    return np.random.default_rng(
        derive_seed(settings.seed, "server", repeat, settings.server_id)
    )


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

    With ``own = s`` rows other than s get the extra variance ``heterogeneity**2``
    (``None``: all pooled as they are); a model nobody evaluated gets 1/2.
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
    n_classes: int = 2,
) -> dict[str, LinearModels]:
    """Reversal, selection and averaging of all weak models, per server and globally.

    Row s of ``estimates`` (S, K) and ``variances`` (``inf`` where none) is server s's;
    returns the ``"global"`` model (all rows pooled) and per row the model named
    ``names[s]`` (default ``"server<s>"``), its estimates leaning towards row s.
    """
    names = (
        [f"server{s}" for s in range(estimates.shape[0])] if names is None else names
    )

    k = n_classes

    def final(errors: NDArray[np.float64]) -> LinearModels:
        models = reverse_models(weak, errors)[0] if k == 2 else weak
        weights, _, _ = mrma_weights(
            errors, cutoff=settings.cutoff, reversal=k == 2, n_classes=k
        )
        return average_models(
            models, weights, normalize=settings.normalize_models, n_classes=k
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


def train_phase(
    session: Session,
    settings: Settings,
    train_ids: NDArray[np.int64],
    n_features: int,
    repeat: int,
    n_classes: int = 2,
) -> tuple[TrainingPayload, LinearModels]:
    """Phase ``train``: :func:`~ldpfda.server.plans.train_round` on the server's
    :func:`training_rng` (K-class weak models for ``n_classes`` K > 2)."""
    rng = training_rng(settings, repeat)
    planned = planned_ids(settings)
    plan = Plan(
        settings,
        train_ids,
        _NONE,
        n_features,
        rng,
        planned=planned,
        n_classes=n_classes,
    )
    payload, weak = train_round(session, plan)
    assert isinstance(payload, TrainingPayload)
    return payload, weak


def evaluate_phase(
    session: Session,
    settings: Settings,
    eval_ids: NDArray[np.int64],
    weak: LinearModels,
    n_features: int,
    repeat: int,
    n_classes: int = 2,
) -> tuple[NDArray[np.int64], ErrorEstimates]:
    """Phase ``evaluate``: each evaluation client (subgroups from the server's own
    ``groups`` stream) answers for one of all the models; the clients whose bit came
    back, by id, and every model's error estimate from them."""
    session.status("evaluate", eval_clients=int(eval_ids.size), models=len(weak))
    rng = np.random.default_rng(
        derive_seed(settings.seed, "groups", repeat, settings.server_id)
    )
    planned = planned_ids(settings)
    plan = Plan(
        settings, _NONE, eval_ids, n_features, rng, planned=planned, n_classes=n_classes
    )
    answered, bits, groups = ask_feedback(session, plan, weak)
    m = len(weak) // (1 if n_classes == 2 else n_classes)
    estimates = estimate_errors(bits, groups, n_models=m, epsilon=settings.epsilon)
    return answered, estimates
