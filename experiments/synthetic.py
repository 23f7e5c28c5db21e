"""Driver of the synthetic studies (vector design, functional curves, ablations).

A repeat's data are drawn exactly as :func:`ldpfda.engine.run_repeat` draws them (same
seeds, same order of draws), so the MRMA numbers of a repeat are the engine's own; the
baselines then run on the very same clients.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda.config import Settings
from ldpfda.datasets.population import public_features, repeat_data
from ldpfda.engine.inprocess import ArrayClients
from ldpfda.experiments.common import evaluate
from ldpfda.fda.features import Featurizer
from ldpfda.privacy.random import derive_seed

__all__ = ["Repeat", "draw_repeat", "run_point"]


@dataclass(frozen=True)
class Repeat:
    """The clients and the clean, scaled test set of one repeat of ``settings``."""

    settings: Settings
    repeat: int
    featurizer: Featurizer
    train: ArrayClients
    evaluation: ArrayClients
    test: tuple[NDArray[np.float64], NDArray[np.int8]]

    @property
    def client_seed(self) -> int:
        """The run seed that keys every client's noise."""
        return derive_seed(self.settings.seed, "clients", self.repeat)

    def server_rng(self) -> np.random.Generator:
        """A fresh generator of the server's randomness."""
        return np.random.default_rng(
            derive_seed(self.settings.seed, "server", self.repeat)
        )

    @functools.cached_property
    def public(self) -> NDArray[np.float64]:
        """The repeat's public, unlabeled scaled features."""
        return public_features(self.settings, self.repeat, featurizer=self.featurizer)


def draw_repeat(settings: Settings, repeat: int) -> Repeat:
    """Repeat ``repeat``: training clients ``0 .. n_train-1``, evaluators next."""
    data = repeat_data(settings, repeat)
    featurizer = data.featurizer
    assert data.test is not None
    x_test, y_test = data.test
    return Repeat(
        settings,
        repeat,
        featurizer,
        ArrayClients(np.arange(settings.n_train), *data.train, featurizer),
        ArrayClients(
            settings.n_train + np.arange(settings.n_eval), *data.evaluation, featurizer
        ),
        (featurizer.transform(x_test), y_test),
    )


def run_point(
    settings: Settings, repeat: int, baselines: dict[str, dict[str, Any]] | None = None
) -> tuple[dict[str, float], dict[str, Any]]:
    """Errors of every method in repeat ``repeat`` of ``settings``."""
    data = draw_repeat(settings, repeat)
    return evaluate(
        data.train,
        data.evaluation,
        data.test,
        settings,
        seed=data.client_seed,
        server_rng=data.server_rng(),
        baselines=baselines,
        public=data.public if {"default", "noiseless"} & set(baselines or ()) else None,
    )
