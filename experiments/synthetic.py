"""Driver of the synthetic studies (vector design, functional curves, ablations).

One repeat draws its data exactly as :func:`ldpfda.server.engine.run_repeat` does (same
seeds, same order of draws), so the MRMA numbers of a repeat are the engine's own; the
baselines are then run on the very same clients.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ldpfda.config import Settings
from ldpfda.datasets.population import make_featurizer, public_features
from ldpfda.datasets.synthetic import make_design
from ldpfda.engine.inprocess import ArrayClients
from ldpfda.experiments.common import evaluate
from ldpfda.privacy.random import derive_seed

__all__ = ["run_point"]


def run_point(
    settings: Settings, repeat: int, baselines: dict[str, dict[str, Any]] | None = None
) -> tuple[dict[str, float], dict[str, Any]]:
    """Errors of every method in repeat ``repeat`` of ``settings`` (an embedded design).

    Training clients have ids ``0 .. n_train-1``, evaluation clients the next
    ``n_eval``; data, client noise and server randomness come from
    ``(settings.seed, repeat)`` as in :func:`~ldpfda.server.engine.run_repeat`.
    """
    design = make_design(settings.dataset)
    data_rng = np.random.default_rng(derive_seed(settings.seed, "data", repeat))
    featurizer = make_featurizer(design, settings, data_rng)
    x_train, y_train = design.sample(settings.n_train, data_rng)
    x_eval, y_eval = design.sample(settings.n_eval, data_rng)
    x_test, y_test = design.sample(settings.n_test, data_rng)
    train = ArrayClients(np.arange(settings.n_train), x_train, y_train, featurizer)
    evaluation = ArrayClients(
        settings.n_train + np.arange(settings.n_eval), x_eval, y_eval, featurizer
    )
    return evaluate(
        train,
        evaluation,
        (featurizer.transform(x_test), y_test),
        settings,
        seed=derive_seed(settings.seed, "clients", repeat),
        server_rng=np.random.default_rng(derive_seed(settings.seed, "server", repeat)),
        baselines=baselines,
        public=public_features(settings, repeat, featurizer=featurizer)
        if baselines and "default" in baselines
        else None,
    )
