"""What every study does with one repeat: run the engine, then the baselines, and score.

The drivers (:mod:`ldpfda.experiments.synthetic`, :mod:`ldpfda.experiments.realdata`)
draw the data of a repeat and build the clients; :func:`evaluate` runs MRMA through
:func:`ldpfda.server.engine.run_protocol` (which also reports the weak, MR, MA, voting,
averaging, naive and non-private classifiers) and the LDP baselines of
:mod:`ldpfda.server.baselines`, and scores everything on the same clean test set.
"""

from __future__ import annotations

import dataclasses
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
    "evaluate",
    "reference_settings",
]

#: Baselines this package adds to the engine's methods; "default" is ldpfda's
#: default protocol (one joint hybrid release per client, moment classifier) on the
#: same clients.
BASELINES = ("histogram", "gaussian", "default")
#: Every method a study may report, in table order.
ALL_METHODS = (*METHODS, *BASELINES)


#: Settings that select the reference MRMA protocol (Laplace coefficients and
#: randomized-response labels, MRMA server), applied where the Settings have them.
REFERENCE_PROTOCOL = {"mechanism": "reference", "method": "mrma"}


def reference_settings(**changes: Any) -> Settings:
    """:class:`Settings` of the reference MRMA protocol with ``changes``.

    Where the core offers other release protocols, the reference one is pinned unless
    ``changes`` choose another.
    """
    names = {f.name for f in dataclasses.fields(Settings)}
    pinned = {k: v for k, v in REFERENCE_PROTOCOL.items() if k in names}
    return Settings(**{**pinned, **changes})


def _kebab(options: dict[str, Any]) -> dict[str, Any]:
    return {key.replace("-", "_"): value for key, value in options.items()}


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

    Parameters
    ----------
    train, evaluation : ArrayClients
        MRMA's training and evaluation clients (disjoint ids).
    test : (features, labels)
        Clean, scaled test features and their labels.
    settings : Settings
        Epsilon and MRMA parameters.
    seed : int
        Run seed keying every client's noise (baselines use their own streams).
    server_rng : Generator
        The MRMA server's randomness.
    baselines : dict, optional
        ``{"histogram": {...}, "gaussian": {...}}``: the baselines to run and their
        keyword options (kebab-case keys allowed). The baselines and the non-private
        reference use every client of ``train`` and ``evaluation``, each client
        spending the same ``settings.epsilon`` once.
    public : array, optional
        Public, unlabeled scaled features for the "default" protocol's feature second
        moment; without them it estimates the moment from the releases.

    Returns
    -------
    errors : dict
        Test error of every method.
    extra : dict
        What was chosen without looking at test data (selection rule, kept models,
        histogram cells, Gaussian sigma), for the record.
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
        kwargs = _kebab(options)
        if name == "histogram":
            hist = histogram_classifier(
                x_all,
                y_all,
                epsilon=settings.epsilon,
                client_ids=ids_all,
                seed=seed,
                **kwargs,
            )
            errors["histogram"] = hist.error(*test)
            extra["histogram_cells"] = hist.partition.n_cells
            extra["histogram_bins_per_axis"] = hist.partition.bins_per_axis
        elif name == "gaussian":
            gauss = gaussian_classifier(
                x_all,
                y_all,
                epsilon=settings.epsilon,
                client_ids=ids_all,
                seed=seed,
                **kwargs,
            )
            errors["gaussian"] = gauss.error(*test)
            extra["gaussian_sigma"] = dict(gauss.event.parameters)["sigma"]
        elif name == "default":
            default = settings.replace(
                mechanism="joint-hybrid",
                method="moment",
                weak_learner="auto",
                label_share=None,
                public_features=public is not None,
            )
            moment = run_protocol(
                train,
                evaluation,
                default,
                seed=derive_seed(seed, "default"),
                server_rng=np.random.default_rng(derive_seed(seed, "default-server")),
                test=test,
                public=public,
                keep_payload=False,
            )
            errors["default"] = moment.test_errors["moment"]
        else:
            raise ValueError(f"baselines must be among {BASELINES}, got {name!r}")
    return errors, extra
