"""The server's fits on released data: the moment classifier, MRMA's steps, results.

Who asks whom for what is :mod:`ldpfda.server.plans`; this module only learns from
what came back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda.config import Settings
from ldpfda.privacy.joint import ClassSplitMechanism
from ldpfda.privacy.laplace import LaplaceMechanism
from ldpfda.privacy.randomized_response import rr_keep_probability
from ldpfda.schema.payloads import JointPayload, LinearModels, Payload, TrainingPayload
from ldpfda.server.learners import (
    FlipCorrectedLogisticRegression,
    MomentLinearClassifier,
    MomentMulticlassClassifier,
    MomentSplitClassifier,
    ReleaseMoments,
    as_weak_learner,
)
from ldpfda.server.mrma import (
    average_models,
    ensemble_errors,
    estimate_errors,
    fit_linear,
    fit_weak_models,
    majority_vote,
    mrma_weights,
    reverse_models,
)

__all__ = [
    "METHODS",
    "MOMENT_BLOCK",
    "NATARAJAN_ALPHA",
    "MomentSums",
    "ProtocolResult",
    "aggregate",
    "assess_signal",
    "make_learner",
    "model_error",
    "model_report",
    "moment_result",
    "no_signal_warning",
    "public_gram",
    "score",
    "single_model_result",
    "train_weak",
]

#: Methods a run may report, in table order: a ``moment`` run reports ``moment``, a
#: label-only run ``label`` (both ``non_private`` when given clean data), an ``mrma``
#: run all the others.
METHODS = (
    "moment",
    "label",
    "mrma",
    "mr",
    "ma",
    "weak",
    "voting",
    "averaging",
    "naive",
    "non_private",
)

#: L2 strength of the flip-corrected logistic weak learner (``weak_learner =
#: "natarajan"``), chosen on the validation seed of the issue-6 study.
NATARAJAN_ALPHA = 10.0


@dataclass
class ProtocolResult:
    """Everything one run of the protocol produced (no raw client data)."""

    final: LinearModels
    weak: LinearModels
    reversed_models: LinearModels
    reversed: NDArray[np.bool_]
    estimated_errors: NDArray[np.float64]
    weights: NDArray[np.float64]
    kept: NDArray[np.bool_]
    selection_rule: str
    payload: Payload
    baselines: dict[str, LinearModels]
    privacy: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)
    test_errors: dict[str, float] = field(default_factory=dict)
    weak_test_errors: NDArray[np.float64] | None = None
    method: str = "mrma"
    #: Whether the releases carried signal the model could use (:func:`_signal`).
    signal: dict[str, Any] = field(default_factory=dict)
    #: K: an ``mrma`` run's ``weak`` holds K rows per model when K > 2.
    n_classes: int = 2

    def report(self) -> dict[str, Any]:
        """A JSON-ready summary: per-model estimates, weights, flags, errors, privacy
        (``models`` is empty but in an ``mrma`` run)."""
        models = []
        for j in range(self.estimated_errors.size if self.method == "mrma" else 0):
            item = {
                "estimated_error": float(self.estimated_errors[j]),
                "reversed": bool(self.reversed[j]),
                "kept": bool(self.kept[j]),
                "weight": float(self.weights[j]),
            }
            if self.weak_test_errors is not None:
                item["test_error"] = float(self.weak_test_errors[j])
            models.append(item)
        return {
            "final_model": model_report(self.final),
            "method": self.method,
            "selection_rule": self.selection_rule,
            "models": models,
            "test_errors": dict(self.test_errors),
            "signal": dict(self.signal),
            "privacy": self.privacy,
            "timings": dict(self.timings),
        }


def model_report(model: LinearModels) -> dict[str, Any]:
    """The first model of ``model`` as a report's ``coef`` and ``intercept``; a K-class
    model (K rows) as one row of each per class."""
    if len(model) > 1:
        return {"coef": model.coef.tolist(), "intercept": model.intercept.tolist()}
    return {"coef": model.coef[0].tolist(), "intercept": float(model.intercept[0])}


def model_error(model: LinearModels, x: NDArray[np.float64], y: ArrayLike) -> float:
    """Test error of a one-model binary classifier, or of a K-row K-class one
    (the class of the largest score)."""
    if len(model) == 1:
        return float(model.errors(x, y)[0])
    predicted = np.argmax(model.decision_function(x), axis=1)
    return float(np.mean(predicted != np.asarray(y)))


def public_gram(public: ArrayLike) -> NDArray[np.float64]:
    r""":math:`\frac1m \sum_i (1, x_i)(1, x_i)^\top` over public features ``(m, p)``."""
    x = np.asarray(public, dtype=float)
    w = np.hstack([np.ones((x.shape[0], 1)), x])
    return w.T @ w / w.shape[0]


def make_learner(
    payload: Payload,
    settings: Settings,
    public: NDArray[np.float64] | None = None,
    *,
    learner: str | None = None,
) -> Any:
    """The estimator that learns from ``payload`` (``settings.learner`` by default).

    None for the string learners of :func:`~ldpfda.server.mrma.fit_linear`. The moment
    classifier removes the release noise from the feature second moment, or takes that
    moment from the ``public`` features when ``settings.public_features`` is True; for
    the reference release it, like ``"natarajan"``, corrects the label flip rate.
    Refuses a joint payload with a learner other than ``"moment"``, and public features
    asked for but not given.
    """
    name = learner or settings.learner
    if isinstance(payload, JointPayload) and name != "moment":
        raise ValueError(f"joint releases need the 'moment' learner, got {name!r}")
    if name in ("logistic", "svm"):
        return None
    rows = None
    if settings.public_features and name == "moment":
        if public is None:
            raise ValueError(
                "settings.public_features is True but no public features were given "
                "(pass public=..., see public_features(), or set public_features=False)"
            )
        rows = np.asarray(public, dtype=float)
    if isinstance(payload, JointPayload):
        mech = payload.release_mechanism()
        inner = mech.inner
        if payload.n_classes > 2:
            # The split learner takes the whole release (its label's probabilities).
            split = isinstance(mech, ClassSplitMechanism)
            fitter = MomentSplitClassifier if split else MomentMulticlassClassifier
            return fitter(
                n_classes=payload.n_classes,
                public=rows,
                mechanism=mech if split else inner,
                threshold=settings.threshold,
                no_signal_fit=settings.no_signal_fit,
                rule=settings.multiclass_rule,
            )
        return MomentLinearClassifier(
            joint=True,
            public=rows,
            mechanism=inner,
            threshold=settings.threshold,
            no_signal_fit=settings.no_signal_fit,
        )
    assert isinstance(payload, TrainingPayload)  # labels.py fits label-only ones
    if payload.n_classes > 2:
        raise ValueError(
            f"K = {payload.n_classes} classes of the reference release take the "
            f"'logistic' or 'svm' weak learner, got {name!r}"
        )
    rho = 1.0 - rr_keep_probability(epsilon=payload.label_epsilon)
    if name == "natarajan":
        return FlipCorrectedLogisticRegression(alpha=NATARAJAN_ALPHA, flip_rate=rho)
    features = LaplaceMechanism(
        epsilon=payload.feature_epsilon, dimension=payload.features.shape[1]
    )
    return MomentLinearClassifier(
        mechanism=features,
        public=rows,
        label_flip_rate=rho,
        threshold=settings.threshold,
        no_signal_fit=settings.no_signal_fit,
    )


def _fit(
    payload: Payload, settings: Settings, public: NDArray[np.float64] | None, **kw: Any
) -> tuple[LinearModels, Any]:
    """One model of :func:`make_learner`'s estimator on every payload, and the fitted
    estimator (None for a string learner)."""
    estimator = make_learner(payload, settings, public, **kw)
    if isinstance(payload, JointPayload):
        fitted = estimator.fit(payload.releases, payload.classes)
        return fitted.to_linear_models(), fitted
    assert isinstance(payload, TrainingPayload)
    if estimator is None:
        k = payload.n_classes
        return fit_linear(payload.features, payload.labels, n_classes=k), None
    fitted = estimator.fit(payload.features, payload.labels)
    return fitted.to_linear_models(), fitted


#: A model that puts at least this share of the reference features in one class is
#: taken as predicting one class: it carries no signal.
ONE_CLASS_SHARE = 0.99


def _signal(
    final: LinearModels, estimator: Any = None, rule: str = ""
) -> dict[str, Any]:
    r"""What the released quantities say of the model's signal (see
    :func:`assess_signal`): no signal when the fitted coefficients are all zero, or
    for MRMA when the feedback bits put every weak model's error at 1/2 (selection
    rule ``equal``). For the moment classifier ``signal_to_noise`` is
    :math:`\|\hat c\|^2 / (d\hat\sigma^2)`, the released cross moment against its
    own noise (about 1 when the labels say nothing of the features)."""
    out: dict[str, Any] = {"no_signal": False, "reason": ""}
    if isinstance(estimator, MomentLinearClassifier):
        c = estimator.cross_moment_
        level = c.size * estimator.noise_variance_
        # c is (d,) for two classes, (d, K) for K: every class's moment counts.
        out["signal_to_noise"] = float(np.vdot(c, c) / level) if level > 0 else np.inf
        # What the second moment came from, and what the fit fell back to ("": none).
        out["gram_source"] = estimator.gram_source_
        out["fallback"] = estimator.fallback_
    if rule == "equal":
        out["reason"] = (
            "the feedback bits put every weak model's error at 1/2: none can be told "
            "from a coin"
        )
    if not np.any(final.coef):
        out["reason"] = "the fitted coefficients are all zero"
    out["no_signal"] = bool(out["reason"])
    return out


def assess_signal(
    result: ProtocolResult,
    public: NDArray[np.float64] | None,
    test: tuple[NDArray[np.float64], Any] | None,
) -> None:
    """Complete ``result.signal`` with reference features (unlabeled: the ``public``
    calibration features, else the features of ``test``): the model carries no
    signal when it puts at least :data:`ONE_CLASS_SHARE` of them in
    one class. No label is looked at."""
    features, what = public, "public calibration features"
    if features is None and test is not None:
        features, what = test[0], "test features"
    if features is None or len(features) == 0 or result.signal.get("no_signal"):
        return
    scores = result.final.decision_function(features)
    # One row: the sign of its score; K rows (K classes): the highest score.
    predicted = scores[:, 0] > 0 if scores.shape[1] == 1 else scores.argmax(axis=1)
    share = float(np.bincount(predicted.astype(np.int64)).max() / len(features))
    result.signal["one_class_share"] = share
    if share >= ONE_CLASS_SHARE:
        result.signal["no_signal"] = True
        result.signal["reason"] = (
            f"it puts {100 * share:.0f} % of the {len(features)} {what} in one class"
        )


def no_signal_warning(
    signal: dict[str, Any], *, n_clients: int, epsilon: float, n_features: int
) -> str | None:
    """The warning for a model without signal (None when it has some): why, and
    what would help."""
    if not signal.get("no_signal"):
        return None
    snr = signal.get("signal_to_noise")
    noise = "" if snr is None else f" (released cross moment {snr:.2g} x its noise)"
    return (
        f"the fitted model carries no signal: {signal['reason']}{noise}. {n_clients} "
        "clients "
        f"at epsilon {epsilon:g} are too few for {n_features} features: the release "
        "noise swamps what the labels say. More clients (the noise variance of the "
        "released means falls as 1/n), a larger epsilon or fewer features "
        "(fda.n-basis, for curves) would help; its predictions are no better than a "
        "guess."
    )


def single_model_result(
    final: LinearModels, *, method: str, payload: Any, privacy: dict[str, Any]
) -> ProtocolResult:
    """The result of a one-model server: its model is also its ``weak`` and
    ``reversed_models``, with no estimates or weights."""
    return ProtocolResult(
        final=final,
        weak=final,
        reversed_models=final,
        reversed=np.zeros(1, dtype=bool),
        estimated_errors=np.full(1, np.nan),
        weights=np.ones(1),
        kept=np.ones(1, dtype=bool),
        selection_rule="none",
        payload=payload,
        baselines={},
        privacy=privacy,
        method=method,
        signal=_signal(final),
    )


#: Consecutive client ids whose releases :class:`MomentSums` sums as one block.
MOMENT_BLOCK = 1 << 16


def _block_counts(ids: NDArray[np.int64]) -> tuple[NDArray, NDArray]:
    """The blocks of ``ids`` and how many ids each holds (no temporaries the size of
    ``ids`` when they ascend)."""
    if ids.size and np.all(ids[1:] > ids[:-1]):
        blocks = np.arange(ids[0] // MOMENT_BLOCK, ids[-1] // MOMENT_BLOCK + 1)
        counts = np.diff(
            np.searchsorted(ids, np.append(blocks, blocks[-1] + 1) * MOMENT_BLOCK)
        )
        return blocks[counts > 0], counts[counts > 0]
    return np.unique(ids // MOMENT_BLOCK, return_counts=True)


class MomentSums:
    r"""The sufficient statistics of joint releases for the moment classifier,
    added chunk by chunk: the learners' :class:`~ldpfda.server.learners.ReleaseMoments`
    (per group, the class a K-class release drew or one group for two classes: count,
    mean and scatter matrix; over every release :math:`\sum z z^\top` and
    :math:`\sum (z \circ z)(z \circ z)^\top`), which their ``fit_moments`` fits.

    They depend only on the set of (client id, release) pairs, not on how these
    arrive: releases are taken in blocks of :data:`MOMENT_BLOCK` consecutive ids, a
    block's moments computed over its rows in id order once every ``expected``
    client of it came (or at :meth:`finish`), and blocks merged in increasing order.
    So a chunked in-process run and a Flower run (its whole payload is one chunk)
    fit the same model bit for bit, and a run of one block fits as the moment
    classifier does on the releases themselves. ``keep`` also keeps the releases
    (:meth:`payload`); memory is otherwise a few blocks whatever the number of
    clients. ``class_blocks`` maps a block's (groups, releases) to every class's
    rows (n, K, d) for a release that informs every class
    (:meth:`~ldpfda.privacy.joint.ClassSplitMechanism.blocks`).
    """

    @classmethod
    def of(
        cls, like: JointPayload, expected: NDArray[np.int64], keep: bool
    ) -> MomentSums:
        """Empty sums for the releases ``like`` describes, of clients ``expected``."""
        mech = like.release_mechanism()
        k = like.n_classes
        blocks = mech.blocks if isinstance(mech, ClassSplitMechanism) else None
        return cls(expected, like.n_features + 1, 1 if k == 2 else k, keep, blocks)

    def __init__(
        self,
        expected: NDArray[np.int64],
        dimension: int,
        n_groups: int,
        keep: bool,
        class_blocks: Callable[[NDArray, NDArray], NDArray[np.float64]] | None = None,
    ) -> None:
        blocks, counts = _block_counts(np.asarray(expected, dtype=np.int64))
        self._expected = dict(zip(blocks.tolist(), counts.tolist(), strict=True))
        self._pending: dict[int, list[tuple[NDArray, ...]]] = {}
        self._done: dict[int, ReleaseMoments] = {}
        self._order = blocks.tolist()
        self._next = 0
        self.k, self.keep, self.class_blocks = n_groups, keep, class_blocks
        self.total = ReleaseMoments.of(
            np.zeros((0, dimension)), np.zeros(0, np.int64), self.k
        )
        self._kept: list[tuple[NDArray, ...]] = []
        #: Releases added so far.
        self.added = 0

    def add(
        self,
        ids: NDArray[np.int64],
        releases: NDArray[np.float64],
        groups: NDArray[np.int64] | None = None,
    ) -> None:
        """Add the releases of clients ``ids`` (groups: their drawn classes)."""
        g = np.zeros(ids.size, np.int64) if groups is None else groups.astype(np.int64)
        rows = (ids.astype(np.int64), releases.astype(np.float64), g)
        self.added += ids.size
        if self.keep:
            self._kept.append(rows)
        block = rows[0] // MOMENT_BLOCK
        for b in np.unique(block).tolist():
            mask = block == b
            self._pending.setdefault(b, []).append(tuple(r[mask] for r in rows))
            got = sum(part[0].size for part in self._pending[b])
            if got >= self._expected.get(b, -1):
                self._close(b)
        self._merge_ready()

    def _close(self, b: int) -> None:
        ids, z, g = (np.concatenate(c) for c in zip(*self._pending.pop(b), strict=True))
        order = np.argsort(ids, kind="stable")
        if self.class_blocks is None:
            self._done[b] = ReleaseMoments.of(z[order], g[order], self.k)
        else:
            u = self.class_blocks(g[order], z[order])
            self._done[b] = ReleaseMoments.of_blocks(u, z[order])

    def _merge_ready(self) -> None:
        while self._next < len(self._order) and self._order[self._next] in self._done:
            self.total.merge(self._done.pop(self._order[self._next]))
            self._next += 1

    def finish(self) -> ReleaseMoments:
        """Close every block (those with missing clients too); the merged moments."""
        for b in list(self._pending):
            self._close(b)
        self._order = sorted({*self._order[self._next :], *self._done})
        self._next = 0
        self._merge_ready()
        return self.total

    def payload(self, like: JointPayload) -> JointPayload:
        """The kept releases as ``like``'s payload, ordered by client id (none
        unless ``keep``)."""
        if not self._kept:
            return like
        ids, z, g = (np.concatenate(c) for c in zip(*self._kept, strict=True))
        order = np.argsort(ids, kind="stable")
        classes = None if like.classes is None else g[order]
        return replace(like, client_ids=ids[order], releases=z[order], classes=classes)


def moment_result(
    payload: Payload,
    settings: Settings,
    *,
    privacy: dict[str, Any],
    public: NDArray[np.float64] | None = None,
    sums: MomentSums | None = None,
) -> ProtocolResult:
    """The server of a ``moment`` run: one moment classifier on every release.

    A joint release is fit from its :class:`MomentSums`: ``sums`` (added chunk by
    chunk; ``payload`` then only describes the release), or the whole ``payload`` as
    one chunk. The fit does not depend on the order of the payloads.
    """
    if not isinstance(payload, JointPayload):
        final, estimator = _fit(payload, settings, public, learner="moment")
    else:
        if sums is None:
            sums = MomentSums.of(payload, payload.client_ids, False)
            sums.add(payload.client_ids, payload.releases, payload.classes)
        estimator = make_learner(payload, settings, public, learner="moment")
        estimator = estimator.fit_moments(sums.finish())
        final = estimator.to_linear_models()
    result = single_model_result(
        final, method="moment", payload=payload, privacy=privacy
    )
    result.signal = _signal(final, estimator)
    return result


def train_weak(
    payload: Payload,
    settings: Settings,
    server_rng: np.random.Generator,
    *,
    public: NDArray[np.float64] | None = None,
) -> LinearModels:
    """Server step 1 of MRMA: M weak classifiers on random subsamples of the payloads.

    The weak learner is ``settings.learner`` (:func:`make_learner`). Payloads must be
    ordered by client id so that a run does not depend on the order in which clients
    answered.
    """
    estimator = make_learner(payload, settings, public)
    if isinstance(payload, JointPayload):
        features, labels = payload.releases, None
    else:
        assert isinstance(payload, TrainingPayload)
        features, labels = payload.features, payload.labels
    return fit_weak_models(
        features,
        labels,
        n_models=settings.num_weak_models,
        subsample_size=settings.subsample_size,
        learner=settings.learner if estimator is None else as_weak_learner(estimator),
        rng=server_rng,
        n_classes=payload.n_classes,
    )


def aggregate(
    weak: LinearModels,
    bits: NDArray[np.int8],
    groups: NDArray[np.int64],
    payload: Payload,
    settings: Settings,
    *,
    privacy: dict[str, Any],
    public: NDArray[np.float64] | None = None,
) -> ProtocolResult:
    """Server steps 3-6 of MRMA and the baselines, from the evaluation bits.

    ``bits[i]`` is the feedback of the evaluator in subgroup ``groups[i]``. The naive
    baseline is one model of the run's weak learner on all training payloads. With
    K > 2 classes (the payload's ``n_classes``) no model is reversed: a model at or
    below chance weighs 0 (docs/estimators.md, "K classes" of MRMA), so ``mrma`` and
    ``ma`` coincide.
    """
    assert isinstance(payload, (TrainingPayload, JointPayload))  # MRMA's releases
    k = payload.n_classes
    m = len(weak) // (1 if k == 2 else k)
    estimates = estimate_errors(bits, groups, n_models=m, epsilon=settings.epsilon)
    e = estimates.clipped
    reversed_models, flipped = (
        reverse_models(weak, e) if k == 2 else (weak, np.zeros(m, dtype=bool))
    )
    weights, kept, rule = mrma_weights(
        e, cutoff=settings.cutoff, reversal=k == 2, n_classes=k
    )
    norm = settings.normalize_models
    final = average_models(reversed_models, weights, normalize=norm, n_classes=k)
    ma_weights, _, _ = mrma_weights(
        e, cutoff=settings.cutoff, reversal=False, n_classes=k
    )
    baselines = {
        "ma": average_models(weak, ma_weights, normalize=norm, n_classes=k),
        "averaging": average_models(weak, np.ones(m), normalize=norm, n_classes=k),
        "naive": _fit(payload, settings, public)[0],
    }
    return ProtocolResult(
        final=final,
        weak=weak,
        reversed_models=reversed_models,
        reversed=flipped,
        estimated_errors=e,
        weights=weights,
        kept=kept,
        selection_rule=rule,
        payload=payload,
        baselines=baselines,
        privacy=privacy,
        signal=_signal(final, rule=rule),
        n_classes=k,
    )


def score(result: ProtocolResult, x: NDArray[np.float64], y: NDArray[np.int8]) -> None:
    """Fill ``result.test_errors`` with every method's error on clean test data."""
    y = np.asarray(y)
    k = result.n_classes
    errors = {result.method: model_error(result.final, x, y)}
    if result.method == "mrma":
        weak_errors = ensemble_errors(result.weak, x, y, k)
        result.weak_test_errors = weak_errors
        errors["weak"] = float(weak_errors.mean())
        errors["mr"] = float(ensemble_errors(result.reversed_models, x, y, k).mean())
        errors["voting"] = float((majority_vote(result.weak, x, k) != y).mean())
    for name, model in result.baselines.items():
        errors[name] = model_error(model, x, y)
    result.test_errors = {m: errors[m] for m in METHODS if m in errors}
