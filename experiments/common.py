"""What every study does with one repeat: run the engine, then the baselines, and score.

The drivers (:mod:`ldpfda.experiments.synthetic`, :mod:`ldpfda.experiments.realdata`)
draw a repeat's data and clients; :func:`evaluate` runs MRMA through
:func:`ldpfda.engine.run_protocol` (which also reports the weak, MR, MA, voting,
averaging, naive and non-private classifiers) and the LDP baselines of
:mod:`ldpfda.server.baselines`, and scores everything on the same clean test set.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda.config import Settings
from ldpfda.engine import run_protocol
from ldpfda.engine.inprocess import ArrayClients
from ldpfda.privacy.random import derive_seed
from ldpfda.server.baselines import gaussian_classifier, histogram_classifier
from ldpfda.server.fitting import METHODS

__all__ = [
    "ALL_METHODS",
    "BASELINES",
    "REFERENCE_PROTOCOL",
    "default_settings",
    "evaluate",
    "limit_blas_threads",
    "mean_se",
    "reference_settings",
]

#: Baselines added to the engine's methods; "default" is ldpfda's default protocol
#: (one joint hybrid release per client, moment classifier) on the same clients,
#: "noiseless" the same protocol with releases without noise (epsilon = inf, a
#: simulation-only consistency check), "majority" the reference that predicts the
#: clients' most frequent label.
BASELINES = ("histogram", "gaussian", "default", "noiseless", "majority")
#: Every method a study may report, in table order.
ALL_METHODS = (*METHODS, *BASELINES)


#: Settings that select the reference MRMA protocol (Laplace coefficients and
#: randomized-response labels, MRMA server).
REFERENCE_PROTOCOL = {"mechanism": "reference", "method": "mrma"}


def reference_settings(**changes: Any) -> Settings:
    """:class:`Settings` of the reference MRMA protocol with ``changes``."""
    return Settings(**{**REFERENCE_PROTOCOL, **changes})


def default_settings(settings: Settings, *, public: bool = True) -> Settings:
    """``settings`` with ldpfda's default protocol: one joint hybrid release per
    client and the moment classifier, its feature second moment from public features
    when ``public``."""
    return settings.replace(
        mechanism="joint-hybrid",
        method="moment",
        weak_learner="auto",
        label_share=None,
        public_features=public,
    )


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error (NaN for one value) of ``values``."""
    v = np.asarray(values, dtype=float)
    se = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else float("nan")
    return float(v.mean()), se


def limit_blas_threads(threads: int) -> None:
    """Cap the BLAS and OpenMP thread pools of this process at ``threads``.

    scipy's optimizer and scikit-learn are imported first: threadpoolctl only limits
    libraries already loaded, and scipy ships its own OpenBLAS.
    """
    import scipy.optimize  # noqa: F401
    import sklearn.linear_model  # noqa: F401
    from threadpoolctl import threadpool_limits

    threadpool_limits(threads)


def evaluate(
    train: ArrayClients,
    evaluation: ArrayClients,
    test: tuple[NDArray[np.float64], NDArray[np.int8]],
    settings: Settings,
    *,
    seed: int,
    server_rng: np.random.Generator,
    baselines: dict[str, dict[str, Any]] | None = None,
    public: NDArray[np.float64] | None = None,
) -> tuple[dict[str, float], dict[str, Any]]:
    """Run MRMA and the requested baselines on one population; errors on ``test``.

    ``baselines`` maps each baseline to run to its keyword options (kebab-case keys
    allowed). The baselines and the non-private reference use every client of
    ``train`` and ``evaluation``, each spending ``settings.epsilon`` once; ``seed``
    keys the clients' noise (the baselines use their own streams), ``public`` gives the
    "default" protocol its feature second moment unless ``settings.public_features`` is
    False (then, as without ``public``, it is estimated from the releases). Returns
    the test error of every method, and what was chosen without looking at test data
    (selection rule, kept models, histogram cells, Gaussian sigma).
    """
    x_all = np.vstack([train.features(), evaluation.features()])
    y_all = np.concatenate([train.labels, evaluation.labels]).astype(np.int8)
    ids_all = np.concatenate([train.client_ids, evaluation.client_ids])
    result = run_protocol(
        train,
        evaluation,
        settings,
        seed=seed,
        server_rng=server_rng,
        test=test,
        clean_train=(x_all, y_all),
        keep_payload=False,
    )
    errors = dict(result.test_errors)
    extra: dict[str, Any] = {
        "selection_rule": result.selection_rule,
        "n_kept": int(result.kept.sum()),
        "n_reversed": int(result.reversed.sum()),
        "n_weak_models": len(result.weak),
        "n_features": int(x_all.shape[1]),
    }
    for name, options in (baselines or {}).items():
        kwargs = {key.replace("-", "_"): value for key, value in options.items()}
        if name in ("histogram", "gaussian"):
            fit = histogram_classifier if name == "histogram" else gaussian_classifier
            clf: Any = fit(
                x_all,
                y_all,
                epsilon=settings.epsilon,
                client_ids=ids_all,
                seed=seed,
                **kwargs,
            )
            errors[name] = clf.error(*test)
            if name == "histogram":
                extra["histogram_cells"] = clf.partition.n_cells
                extra["histogram_bins_per_axis"] = clf.partition.bins_per_axis
            else:
                extra["gaussian_sigma"] = dict(clf.event.parameters)["sigma"]
        elif name in ("default", "noiseless"):
            gram_from = public if settings.public_features else None
            default = default_settings(settings, public=gram_from is not None)
            if name == "noiseless":
                default = default.replace(epsilon=math.inf)
            moment = run_protocol(
                train,
                evaluation,
                default,
                seed=derive_seed(seed, "default"),
                server_rng=np.random.default_rng(derive_seed(seed, "default-server")),
                test=test,
                public=gram_from,
                keep_payload=False,
            )
            errors[name] = moment.test_errors["moment"]
        elif name == "majority":
            # The class most frequent among the clients' labels, never the test set's.
            majority = int(np.argmax(np.bincount(y_all, minlength=2)))
            errors["majority"] = float(np.mean(test[1] != majority))
            extra["majority_class"] = majority
        else:
            raise ValueError(f"baselines must be among {BASELINES}, got {name!r}")
    return errors, extra
