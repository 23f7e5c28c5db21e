"""The MRMA server steps: weak models, error estimation, reversal, selection, averaging.

References
----------
Q. Qin, Z. Bai, "Classification under local differential privacy with model reversal and
model averaging", JMLR 27(5), 2026 (arXiv 2602.05797).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import check_epsilon, check_finite_array, check_int, check_real
from ldpfda.privacy.random import as_generator
from ldpfda.privacy.randomized_response import FeedbackBit
from ldpfda.schema.payloads import LinearModels

__all__ = [
    "LEARNERS",
    "ErrorEstimates",
    "LinearModels",
    "assign_groups",
    "average_models",
    "ensemble_errors",
    "ensemble_predictions",
    "estimate_errors",
    "fit_linear",
    "fit_weak_models",
    "majority_vote",
    "model_rows",
    "mrma_weights",
    "reverse_models",
]

LEARNERS = ("logistic", "svm")


def fit_linear(
    X: ArrayLike,
    y: ArrayLike,
    *,
    learner: str = "logistic",
    random_state: int | None = None,
    n_classes: int = 2,
) -> LinearModels:
    """One linear classifier on (X, y): unregularized ``logistic`` regression or a
    hinge-loss linear ``svm`` (C = 1); a single class gives the constant classifier.

    With ``n_classes`` K > 2 the model has K rows (multinomial logistic, one-vs-rest
    svm), see :func:`_k_rows` for classes the sample lacks.
    """
    if learner not in LEARNERS:
        raise ValueError(f"learner must be one of {LEARNERS}, got {learner!r}")
    x = np.asarray(X, dtype=float)
    y = np.asarray(y)
    if n_classes > 2:
        return _k_rows(x, y, n_classes, lambda: _sklearn(learner, random_state))
    if np.unique(y).size < 2:
        sign = 1.0 if (y.size and y[0] == 1) else -1.0
        return LinearModels(np.zeros((1, x.shape[1])), np.array([sign]))
    model = _fitted(_sklearn(learner, random_state), x, y)
    # One row for two classes, one per class for more (multinomial logistic).
    return LinearModels(model.coef_, np.atleast_1d(model.intercept_))


def _sklearn(learner: str, random_state: int | None) -> Any:
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    if learner == "logistic":
        return LogisticRegression(C=np.inf, max_iter=1000)
    return LinearSVC(C=1.0, loss="hinge", max_iter=20000, random_state=random_state)


def _fitted(model: Any, x: NDArray[np.float64], y: NDArray) -> Any:
    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings():
        # Unregularized fits on small, noisy samples may stop at max_iter; the direction
        # is what the protocol uses, so a non-converged fit is still a valid weak model.
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(x, y)
    return model


def _k_rows(
    x: NDArray[np.float64], y: NDArray, n_classes: int, make: Callable[[], Any]
) -> LinearModels:
    r"""A K-row model (scores of classes 0 .. K - 1) fitted on the classes present.

    Two present classes give sklearn's one row w as the scores :math:`\mp w/2`. A
    class absent from the sample gets coefficients 0 and an intercept 1 below
    :math:`\min_k (b_k - \|\beta_k\|_1)` over the present ones: it is never predicted
    on the feature box [-1, 1]^p, and the model stays finite for averaging.
    """
    present = np.unique(y).astype(np.int64)
    coef = np.zeros((n_classes, x.shape[1]))
    intercept = np.zeros(n_classes)
    if present.size >= 2:
        model = _fitted(make(), x, y)
        w, b = model.coef_, np.atleast_1d(model.intercept_)
        if present.size == 2:
            w, b = np.vstack([-w / 2, w / 2]), np.concatenate([-b / 2, b / 2])
        coef[present], intercept[present] = w, b
    floor = np.min(intercept[present] - np.abs(coef[present]).sum(axis=1)) - 1.0
    absent = np.setdiff1d(np.arange(n_classes), present)
    intercept[absent] = floor
    return LinearModels(coef, intercept)


def fit_weak_models(
    features: ArrayLike,
    labels: ArrayLike | None,
    *,
    n_models: int = 50,
    subsample_size: int = 50,
    learner: str | Callable[[NDArray, NDArray | None], LinearModels] = "logistic",
    rng: np.random.Generator | int | None = None,
    n_classes: int = 2,
) -> LinearModels:
    """Train ``n_models`` classifiers, each on its own subsample without replacement.

    With ``n_classes`` K > 2 every model is K consecutive rows (:func:`split_models`).

    ``learner`` is a name of :data:`LEARNERS` (:func:`fit_linear`, with a random state
    drawn after each subsample) or any ``(features, labels) -> LinearModels`` (labels
    None for label-free releases). BLAS is limited to one thread meanwhile: fifty tiny
    fits spend most of their time waking BLAS threads (5.4 s of a 9.3 s million-client
    run with two threads, 0.3 s with one).
    """
    import scipy.optimize  # noqa: F401  (load its BLAS so the limit reaches it)
    from threadpoolctl import threadpool_limits

    x = check_finite_array(features, "features", ndim=2)
    y = None if labels is None else np.asarray(labels)
    n = x.shape[0]
    n_models = check_int(n_models, "n_models", minimum=1)
    subsample_size = check_int(subsample_size, "subsample_size", minimum=2)
    if subsample_size > n:
        raise ValueError(
            f"subsample_size must be <= the number of training payloads ({n}), "
            f"got {subsample_size}"
        )
    if isinstance(learner, str):
        if learner not in LEARNERS:
            raise ValueError(f"learner must be one of {LEARNERS}, got {learner!r}")
        if y is None:
            raise ValueError(f"learner {learner!r} needs labels")
    elif not callable(learner):
        raise TypeError(f"learner must be callable, got {type(learner).__name__}")
    gen = as_generator(rng)

    def named(xs: NDArray, ys: NDArray | None) -> LinearModels:
        assert ys is not None and isinstance(learner, str)  # refused above otherwise
        seed = int(gen.integers(2**31 - 1))
        return fit_linear(
            xs, ys, learner=learner, random_state=seed, n_classes=n_classes
        )

    fit = named if isinstance(learner, str) else learner
    rows = model_rows(n_classes)
    coefs, intercepts = [], []
    with threadpool_limits(limits=1, user_api="blas"):
        for _ in range(n_models):
            idx = gen.choice(n, size=subsample_size, replace=False)
            model = fit(x[idx], None if y is None else y[idx])
            coefs.append(model.coef[:rows])
            intercepts.append(model.intercept[:rows])
    return LinearModels(np.vstack(coefs), np.concatenate(intercepts))


def assign_groups(
    n_evaluators: int, n_models: int, rng: np.random.Generator | int | None = None
) -> NDArray[np.int64]:
    """The model of each evaluator: ``n_models`` disjoint subgroups of (almost) equal
    size."""
    n_evaluators = check_int(n_evaluators, "n_evaluators", minimum=1)
    n_models = check_int(n_models, "n_models", minimum=1)
    if n_evaluators < n_models:
        raise ValueError(
            f"the evaluation group ({n_evaluators} clients) must have at least one "
            f"client per model ({n_models} models)"
        )
    return as_generator(rng).permutation(np.arange(n_evaluators) % n_models)


@dataclass(frozen=True)
class ErrorEstimates:
    r"""Each model's error estimate from feedback bits: ``raw``
    :math:`(\bar o + q - 1)/(2q - 1)` (unbiased) and ``clipped`` to [0, 1]."""

    raw: NDArray[np.float64]
    clipped: NDArray[np.float64]
    counts: NDArray[np.int64]
    mean_bits: NDArray[np.float64]
    epsilon: float
    standard_error: NDArray[np.float64]


def estimate_errors(
    bits: ArrayLike, groups: ArrayLike, *, n_models: int, epsilon: float
) -> ErrorEstimates:
    r"""Estimate each model's error from its subgroup's randomized-response bits.

    .. math:: \hat e_j = \frac{\bar o_j + q - 1}{2q - 1}, \qquad
              q = \frac{e^\varepsilon}{1 + e^\varepsilon},

    with :math:`\bar o_j` the mean bit of subgroup j, is unbiased since
    :math:`E[o] = q e + (1 - q)(1 - e)`; a subgroup without a valid bit gives 1/2.
    """
    o = np.asarray(bits)
    g = np.asarray(groups)
    if o.shape != g.shape or o.ndim != 1:
        raise ValueError(
            f"bits and groups must be 1-D of one length, got {o.shape}, {g.shape}"
        )
    bad = ~np.isin(o, (0, 1))
    if np.any(bad):
        raise ValueError(f"bits must be in {{0, 1}}, got {o[bad][0]!r}")
    n_models = check_int(n_models, "n_models", minimum=1)
    if g.size and (g.min() < 0 or g.max() >= n_models):
        raise ValueError(f"groups must be in [0, {n_models}), got {g.min()}..{g.max()}")
    mechanism = FeedbackBit(epsilon=check_epsilon(epsilon))
    counts = np.bincount(g, minlength=n_models)
    sums = np.bincount(g, weights=o.astype(float), minlength=n_models)
    mean_bits = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    raw = np.where(counts > 0, mechanism.debias_mean(np.nan_to_num(mean_bits)), 0.5)
    q = mechanism.keep_probability
    p1 = np.clip(np.nan_to_num(mean_bits, nan=0.5), 0, 1)
    se = np.sqrt(p1 * (1 - p1) / np.maximum(counts, 1)) / (2 * q - 1)
    return ErrorEstimates(
        raw, np.clip(raw, 0.0, 1.0), counts, mean_bits, mechanism.epsilon, se
    )


def model_rows(n_classes: int) -> int:
    """Rows of one model of an ensemble: 1 for two classes (the sign of one score), K
    for K > 2 (one score per class)."""
    return 1 if n_classes == 2 else check_int(n_classes, "n_classes", minimum=3)


def ensemble_predictions(
    models: LinearModels, X: ArrayLike, n_classes: int = 2
) -> NDArray[np.int64]:
    """Every model's labels, shape (n, M): the sign of its score, or for K classes
    the class of its largest score (the first on a tie)."""
    if n_classes == 2:
        return models.predict(X).astype(np.int64)
    scores = models.decision_function(X)
    return scores.reshape(scores.shape[0], -1, n_classes).argmax(axis=2)


def ensemble_errors(
    models: LinearModels, X: ArrayLike, y: ArrayLike, n_classes: int = 2
) -> NDArray[np.float64]:
    """Misclassification rate of each model of the ensemble on (X, y)."""
    predicted = ensemble_predictions(models, X, n_classes)
    return (predicted != np.asarray(y)[:, None]).mean(axis=0)


def reverse_models(
    models: LinearModels, errors: ArrayLike, *, n_classes: int = 2
) -> tuple[LinearModels, NDArray[np.bool_]]:
    """Model reversal: negate every classifier whose estimated error exceeds 1/2.

    With ``n_classes`` K > 2 the rule carried over literally (the ablation of
    docs/estimators.md, not what :func:`~ldpfda.server.fitting.aggregate` does):
    negate every K-row model whose estimated accuracy is below chance 1/K.
    """
    e = np.asarray(errors, dtype=float)
    flip = e > 0.5 if n_classes == 2 else e > 1.0 - 1.0 / n_classes
    sign = np.repeat(np.where(flip, -1.0, 1.0), model_rows(n_classes))
    return LinearModels(models.coef * sign[:, None], models.intercept * sign), flip


def mrma_weights(
    errors: ArrayLike,
    *,
    cutoff: float = 0.2,
    reversal: bool = True,
    n_classes: int = 2,
) -> tuple[NDArray[np.float64], NDArray[np.bool_], str]:
    r"""Selection and weights of model averaging, and the name of the rule applied.

    With reversal, model j is kept if :math:`|1/2 - \hat e_j| > 1/2 - c` and weighted by
    :math:`|1/2 - \hat e_j|`, normalised over the kept models; without reversal (the
    "MA only" ablation) the score is :math:`(1/2 - \hat e_j)_+`, keeping
    :math:`\hat e_j < c`. If no model passes the cut-off (``'cutoff'``), every model
    with a positive score is weighted (``'no-selection'``), and if none has one, all
    equally (``'equal'``).

    With ``n_classes`` K > 2, 1/2 becomes the chance error :math:`h = 1 - 1/K`: the
    score is the estimated accuracy above chance :math:`(h - \hat e_j)_+` (a model at
    or below chance weighs 0), or :math:`|h - \hat e_j|` with ``reversal`` (the
    negation ablation), and the cut-off keeps :math:`\hat e_j < 2ch`, which is
    :math:`\hat e_j < c` at K = 2.
    """
    e = np.asarray(errors, dtype=float)
    cutoff = check_real(cutoff, "cutoff", low=0.0, high=0.5)
    chance = 0.5 if n_classes == 2 else 1.0 - 1.0 / n_classes
    score = np.abs(chance - e) if reversal else np.clip(chance - e, 0.0, None)
    kept = score > (chance - cutoff if n_classes == 2 else chance * (1 - 2 * cutoff))
    rule = "cutoff"
    if not np.any(kept):
        kept = score > 0
        rule = "no-selection"
    if not np.any(kept):
        kept = np.ones(e.size, dtype=bool)
        return kept / kept.sum(), kept, "equal"
    weights = np.where(kept, score, 0.0)
    return weights / weights.sum(), kept, rule


def average_models(
    models: LinearModels,
    weights: ArrayLike,
    *,
    normalize: bool = True,
    n_classes: int = 2,
) -> LinearModels:
    r"""Weighted average of the models' (intercept, coefficient) vectors: one model.

    The scale of an unregularized logistic fit on a small noisy sample is arbitrary, so
    with ``normalize`` every :math:`(b, \beta)` is scaled to unit norm first and the
    weights alone decide each model's influence.

    With ``n_classes`` K > 2 every model is a K x (p + 1) score matrix, which a common
    shift of its K rows leaves unchanged: each is centred over its rows, scaled to unit
    Frobenius norm (with ``normalize``) and the matrices averaged into one K-row model.
    """
    w = np.asarray(weights, dtype=float)
    if n_classes > 2:
        k = model_rows(n_classes)
        full = np.hstack([models.intercept[:, None], models.coef])
        full = full.reshape(-1, k, full.shape[1])
        full = full - full.mean(axis=1, keepdims=True)
        if normalize:
            norm = np.sqrt(np.sum(full**2, axis=(1, 2)))
            full = full / np.where(norm > 0, norm, 1.0)[:, None, None]
        mean = np.average(full, axis=0, weights=w)
        return LinearModels(mean[:, 1:], mean[:, 0])
    coef, intercept = models.coef, models.intercept
    if normalize:
        norm = np.sqrt(np.sum(coef**2, axis=1) + intercept**2)
        norm = np.where(norm > 0, norm, 1.0)
        coef, intercept = coef / norm[:, None], intercept / norm
    return LinearModels(
        np.average(coef, axis=0, weights=w)[None, :],
        np.array([np.average(intercept, weights=w)]),
    )


def majority_vote(
    models: LinearModels, X: ArrayLike, n_classes: int = 2
) -> NDArray[np.int8]:
    """Majority vote of the models' labels (ties go to class 1; for K > 2 classes, to
    the lowest of the tied classes)."""
    if n_classes == 2:
        return (models.predict(X).mean(axis=1) >= 0.5).astype(np.int8)
    predicted = ensemble_predictions(models, X, n_classes)
    votes = (predicted[:, :, None] == np.arange(n_classes)).sum(axis=1)
    return votes.argmax(axis=1).astype(np.int8)
