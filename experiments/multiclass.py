"""Driver of the K-class study (issue 17): real multi-class curves and the wearable
default with K conditions, the columns below at the same per-client budget.

A real data set (:data:`~ldpfda.datasets.real.REAL_DATASETS`, K-class names) is split
by the real-data study's rule (:func:`~ldpfda.experiments.realdata.split_real`); the
wearable default (settings ``data.dataset = "wearable"``, ``data.n-classes`` K) is
drawn as the synthetic studies draw it. Columns (:data:`STUDY_METHODS`), every client
of the training and evaluation groups taking part and spending ``epsilon`` in total:

- ``default``: the K-class default protocol, one joint release per client at its
  whole epsilon (``privacy.multiclass-release = "auto"``: the drawn class or the split
  release, whichever has the smaller stated variance), the K-class moment classifier;
- ``default_lda``: the same releases (same client streams), the classifier's LDA rule
  (``server.multiclass-rule = "lda"``): a second fit, no second release;
- ``default_draw`` and ``default_split``: the default with each release on the same
  client streams (``"draw"``: a drawn class j and y~_j (1, x); ``"split"``: the label
  by K-ary randomized response and x by Hybrid, the epsilon split to minimise the
  stated variance, every client informing every class); ``default`` is one of them
  to the last bit;
- ``mrma``: K-class MRMA on the reference release (K-ary randomized response on the
  label), weak models from the training clients, feedback from the evaluators;
- ``one_vs_rest``: K binary default runs at epsilon / K on the labels 1{y = k}, the
  class of the largest score (:func:`~ldpfda.experiments.kclass.one_vs_rest`);
- ``non_private``: multinomial logistic regression on the clean features of the same
  clients;
- ``majority``: the class most frequent among the clients' labels.

Each run also records every column's balanced error (``extra["balanced"]``: the mean
over the test rows' classes of the error within the class) and a uniform guess's,
1 - 1/K. A predictor that does not look at the curves has balanced error 1 - 1/K in
expectation whatever classes it favours, while its plain error rewards favouring the
classes that are rare among the clients: the real sets' rows split without
replacement, so a class rare in the federation is frequent in the test rows.

The joint-release columns take the feature second moment from the public
calibration rows (real data) or the public sample (wearable).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda.config import Settings
from ldpfda.engine import run_protocol
from ldpfda.engine.inprocess import ArrayClients
from ldpfda.experiments.common import default_settings
from ldpfda.experiments.kclass import one_vs_rest, release_and_fit
from ldpfda.experiments.realdata import SplitRule, split_real
from ldpfda.experiments.synthetic import draw_repeat
from ldpfda.privacy.random import derive_seed
from ldpfda.schema.payloads import LinearModels
from ldpfda.schema.releases import multiclass_design
from ldpfda.server.fitting import model_error

__all__ = ["STUDY_METHODS", "balanced_error", "evaluate_kclass", "run_point"]

#: The study's columns, in table order.
STUDY_METHODS = (
    "default",
    "default_lda",
    "default_draw",
    "default_split",
    "mrma",
    "one_vs_rest",
    "non_private",
    "majority",
)


def evaluate_kclass(
    train: ArrayClients,
    evaluation: ArrayClients,
    test: tuple[NDArray[np.float64], NDArray[np.int8]],
    settings: Settings,
    *,
    n_classes: int,
    seed: int,
    server_rng: np.random.Generator,
    public: NDArray[np.float64],
) -> tuple[dict[str, float], dict[str, Any]]:
    """Test errors of :data:`STUDY_METHODS` on one population with K classes.

    ``settings`` is the reference MRMA protocol; ``seed`` keys MRMA's clients (the
    other columns derive their own streams from it), ``server_rng`` its server.
    """
    k = n_classes
    x_all = np.vstack([train.features(), evaluation.features()])
    y_all = np.concatenate([train.labels, evaluation.labels]).astype(np.int8)
    mrma = run_protocol(
        train,
        evaluation,
        settings,
        seed=seed,
        server_rng=server_rng,
        test=test,
        clean_train=(x_all, y_all),
        keep_payload=False,
        n_classes=k,
    )
    default = default_settings(settings)
    # Both K-class releases on the same client streams; the default ("auto") is the
    # one of them with the smaller stated variance, the same numbers to the last bit.
    chosen = multiclass_design(settings.epsilon, x_all.shape[1], k, "hybrid")
    fits = {
        design: _default_fit(
            train,
            evaluation,
            test,
            default.replace(multiclass_release=design),
            k,
            derive_seed(seed, "default"),
            public,
        )
        for design in ("draw", "split")
    }
    fit = fits[chosen]
    scores, spent = one_vs_rest(
        train,
        evaluation,
        default,
        k,
        test[0],
        seed=derive_seed(seed, "one-vs-rest"),
        public=public,
    )
    majority = int(np.argmax(np.bincount(y_all, minlength=k)))
    predicted = {
        "default": _classes(fit["model"], test[0]),
        "default_lda": _classes(fit["lda_model"], test[0]),
        "default_draw": _classes(fits["draw"]["model"], test[0]),
        "default_split": _classes(fits["split"]["model"], test[0]),
        "mrma": _classes(mrma.final, test[0]),
        "one_vs_rest": scores.argmax(axis=1),
        "non_private": _classes(mrma.baselines["non_private"], test[0]),
        "majority": np.full(len(test[1]), majority),
    }
    errors = {
        "default": fit["error"],
        "default_lda": fit["lda_error"],
        "default_draw": fits["draw"]["error"],
        "default_split": fits["split"]["error"],
        "mrma": mrma.test_errors["mrma"],
        "one_vs_rest": float(np.mean(scores.argmax(axis=1) != test[1])),
        "non_private": mrma.test_errors["non_private"],
        "majority": float(np.mean(test[1] != majority)),
    }
    extra = {
        "n_classes": k,
        "balanced": {
            **{m: balanced_error(p, test[1], k) for m, p in predicted.items()},
            "guess": 1.0 - 1.0 / k,
        },
        "majority_class": majority,
        "default_release": chosen,
        "default_fit_failed": fit["failed"],
        "default_fallback": fit["fallback"],
        "default_lda_fallback": fit["lda_fallback"],
        "default_draw_fallback": fits["draw"]["fallback"],
        "default_split_fallback": fits["split"]["fallback"],
        "n_features": int(x_all.shape[1]),
        "spent": {
            "default": fit["spent"],
            "default_draw": fits["draw"]["spent"],
            "default_split": fits["split"]["spent"],
            "mrma": float(mrma.privacy["max_spent"]),
            "one_vs_rest": spent,
        },
    }
    return errors, extra


def _default_fit(
    train: ArrayClients,
    evaluation: ArrayClients,
    test: tuple[NDArray[np.float64], NDArray[np.int8]],
    settings: Settings,
    k: int,
    seed: int,
    public: NDArray[np.float64],
) -> dict[str, Any]:
    """The default protocol's K-class release under ``settings`` and its fit, with
    both rules on the same releases: test errors, the most spent, the fallbacks."""
    try:
        joint = release_and_fit(train, evaluation, settings, k, seed, public)
        lda = release_and_fit(
            train, evaluation, settings.replace(multiclass_rule="lda"), k, seed, public
        )
    except ValueError as exc:
        # The moment classifier gives a class drawn by fewer than 2 clients the
        # common score, and refuses only when no class is drawn twice: no model, so
        # a uniform guess (expected error 1 - 1/K); every client has released.
        if "must be drawn" not in str(exc):
            raise
        guess = 1.0 - 1.0 / k
        return {
            "error": guess,
            "lda_error": guess,
            "spent": settings.epsilon,
            "fallback": "",
            "lda_fallback": None,
            "failed": True,
            "model": None,
            "lda_model": None,
        }
    return {
        "error": model_error(joint.final, *test),
        "lda_error": model_error(lda.final, *test),
        "spent": float(joint.privacy["max_spent"]),
        "fallback": str(joint.signal.get("fallback", "")),
        "lda_fallback": str(lda.signal.get("fallback", "")),
        "failed": False,
        "model": joint.final,
        "lda_model": lda.final,
    }


def _classes(model: LinearModels | None, x: NDArray[np.float64]) -> NDArray[np.intp]:
    """The class of the largest score of a K-row model; -1 (no class) without one."""
    if model is None:
        return np.full(len(x), -1)
    return np.argmax(model.decision_function(x), axis=1)


def balanced_error(predicted: ArrayLike, y: ArrayLike, n_classes: int) -> float:
    """Mean over the classes present in ``y`` of the error within the class.

    A prediction of no class (-1) counts as a uniform guess, 1 - 1/K.
    """
    predicted, y = np.asarray(predicted), np.asarray(y)
    errors = [
        np.mean(
            np.where(
                predicted[y == c] < 0, 1.0 - 1.0 / n_classes, predicted[y == c] != c
            )
        )
        for c in range(n_classes)
        if np.any(y == c)
    ]
    return float(np.mean(errors))


def run_point(
    settings: Settings,
    repeat: int,
    baselines: dict[str, dict[str, Any]] | None = None,
    *,
    dataset: str,
    rule: SplitRule | None = None,
) -> tuple[dict[str, float], dict[str, Any]]:
    """Errors of :data:`STUDY_METHODS` in repeat ``repeat`` on ``dataset``: the
    wearable default when ``settings.dataset`` is ``"wearable"`` (K its
    ``n_classes``), else the real data set of that name, split by ``rule``.
    ``baselines`` is not used (the columns are fixed)."""
    if settings.dataset == "wearable":
        data = draw_repeat(settings, repeat)
        errors, extra = evaluate_kclass(
            data.train,
            data.evaluation,
            data.test,
            settings,
            n_classes=settings.n_classes,
            seed=data.client_seed,
            server_rng=data.server_rng(),
            public=data.public,
        )
        extra.update(n_train=settings.n_train, n_eval=settings.n_eval)
        return errors, extra
    split = split_real(settings, repeat, dataset=dataset, rule=rule)
    errors, extra = evaluate_kclass(
        split.train,
        split.evaluation,
        split.test,
        split.settings,
        n_classes=split.n_classes,
        seed=split.seed,
        server_rng=np.random.default_rng(split.server_seed),
        public=split.public,
    )
    extra.update(split.sizes)
    return errors, extra
