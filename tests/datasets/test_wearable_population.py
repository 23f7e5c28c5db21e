"""The wearable dataset of the engine: the shipped spec and the simulated population."""

from __future__ import annotations

import numpy as np
import pytest

from ldpfda.config import Settings
from ldpfda.datasets import population
from ldpfda.datasets.wearable_spec import (
    PUBLIC_SEED_BASE,
    WEARABLE_SPEC,
    calibrated_spec,
    wearable_spec,
    wearable_spec_text,
)
from ldpfda.privacy.random import derive_seed
from ldpfda.schema.spec import FederationSpec

SMALL = {
    "dataset": "wearable",
    "n_train": 60,
    "n_eval": 90,
    "n_test": 200,
    "calibration_size": 50,
    "repeats": 2,
}


def test_the_shipped_spec_describes_a_day_of_heart_rate():
    spec = FederationSpec.loads(WEARABLE_SPEC)
    assert (spec.domain.start, spec.domain.end, spec.domain.unit) == (0, 1440, "min")
    assert spec.channel_names == ("heart_rate",)
    assert spec.labels == ("healthy", "blunted")
    basis = spec.channels[0].basis
    assert (basis.order, basis.size, basis.penalty) == (4, 10, 1.0e4)
    assert spec.channels[0].bounds.kind == "coefficients"
    low, high = spec.coefficient_bounds(0)
    # a day's HR coefficients: tens of bpm wide, within the generator's 40-200 bpm
    assert np.all(40 < low) and np.all(high < 200) and np.all(high - low > 10)
    assert wearable_spec() == spec


def test_the_shipped_text_is_what_the_recipe_gives():
    # The bounds are rounded outwards to 0.01 bpm, so a last-digit difference of
    # floating point between machines could move one by 0.01 at most.
    shipped = FederationSpec.loads(WEARABLE_SPEC)
    recipe = calibrated_spec()
    for side in (0, 1):
        np.testing.assert_allclose(
            recipe.coefficient_bounds(0)[side],
            shipped.coefficient_bounds(0)[side],
            atol=0.0101,
        )
    assert recipe.channels[0].basis == shipped.channels[0].basis
    assert (recipe.domain, recipe.labels, recipe.min_points) == (
        shipped.domain,
        shipped.labels,
        shipped.min_points,
    )
    if recipe == shipped:
        assert wearable_spec_text() == WEARABLE_SPEC, (
            "WEARABLE_SPEC is stale: regenerate it with "
            "python -m ldpfda.datasets.wearable_spec"
        )


def test_another_basis_comes_from_the_same_recipe():
    spec = wearable_spec(6, 3)
    assert spec.n_features == 6 and spec.channels[0].basis.order == 3
    assert spec.channels[0].bounds.kind == "coefficients"


def test_public_seeds_lie_above_every_private_seed():
    seeds = [derive_seed(s, "data", r) for s in range(50) for r in range(5)]
    assert max(seeds) < 2**63 == PUBLIC_SEED_BASE


def test_a_wearable_repeat_holds_spec_features_of_its_subjects():
    from ldpfda.datasets.wearable import make_wearable

    settings = Settings(**SMALL)
    data = population.repeat_data(settings, 0)
    x_train, y_train = data.train
    x_eval, _ = data.evaluation
    assert x_train.shape == (60, 10) and x_eval.shape == (90, 10)
    assert np.all(np.abs(x_train) <= 1.0)
    assert data.featurizer.n_features_out == 10
    np.testing.assert_array_equal(data.featurizer.transform(x_train), x_train)
    # The evaluation clients are the next subjects of the repeat's stream.
    seed = derive_seed(settings.seed, "data", 0)
    curves = make_wearable(3, seed=seed, first_subject=60)
    expected = wearable_spec().featurizer().featurize(curves)
    np.testing.assert_array_equal(x_eval[:3], expected.features)
    np.testing.assert_array_equal(data.evaluation[1][:3], expected.labels)
    assert set(np.unique(y_train)) == {0, 1}


def test_repeats_differ_and_share_the_test_subjects():
    settings = Settings(**SMALL)
    first, second = (
        population.repeat_data(settings, 0),
        population.repeat_data(settings, 1),
    )
    assert not np.array_equal(first.train[0], second.train[0])
    assert first.test is not None and second.test is not None
    np.testing.assert_array_equal(first.test[0], second.test[0])
    again = population.repeat_data(settings.replace(epsilon=1.0), 0)
    np.testing.assert_array_equal(again.train[0], first.train[0])


def test_public_features_come_from_the_public_seed_range():
    from ldpfda.datasets.wearable import make_wearable

    settings = Settings(**SMALL)
    public = population.public_features(settings, 1)
    assert public.shape == (50, 10)
    seed = PUBLIC_SEED_BASE + derive_seed(settings.seed, "public", 1)
    expected = wearable_spec().featurizer().transform(make_wearable(2, seed=seed))
    np.testing.assert_array_equal(public[:2], expected)
    featurizer, grid = population.public_featurizer(settings, 1)
    assert grid is None and featurizer.n_features_out == 10


def test_a_simulated_partition_is_the_engines_client():
    settings = Settings(**SMALL)
    data = population.repeat_data(settings, 0)
    x, y = population.simulated_partition(settings, 0, 61)
    np.testing.assert_array_equal(x[0], data.evaluation[0][1])
    assert y[0] == data.evaluation[1][1]


def test_the_feature_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(population, "_CACHE_BYTES", 10 * 10 * 8)
    monkeypatch.setattr(population, "_cache", type(population._cache)())
    for first in range(3):
        population.wearable_features(10, 4, 0, first, 10)
    assert len(population._cache) == 1


@pytest.mark.parametrize("mechanism", ["joint-hybrid", "reference"])
def test_run_repeat_on_wearable_learns_the_shape(mechanism):
    from ldpfda.engine import run_repeat

    settings = Settings(
        **{**SMALL, "n_train": 300, "n_eval": 600, "n_test": 2000},
        mechanism=mechanism,
        epsilon=10.0,
        num_weak_models=10,
        subsample_size=50,
    )
    errors = run_repeat(settings, 0).test_errors
    # Over seeds 0-7 at these sizes: non-private 0.12 +- 0.009, the default protocol
    # 0.16 +- 0.02, the reference MRMA 0.34 +- 0.07 (mean +- sd); the bounds are
    # about four standard deviations above the means.
    assert errors["non_private"] < 0.17
    if mechanism == "joint-hybrid":
        assert errors["moment"] < 0.25
    else:
        assert errors["mrma"] < 0.6 and {"mr", "ma", "voting", "naive"} <= set(errors)
