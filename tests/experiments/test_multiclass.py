"""The K-class study's driver: irregular curves, the five columns, the budget, the
fallback of a failed moment fit, the study file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ldpfda.experiments import runner
from ldpfda.experiments.common import reference_settings
from ldpfda.experiments.multiclass import STUDY_METHODS, run_point
from ldpfda.experiments.realdata import irregular_coefficients, split_real
from ldpfda.fda.irregular import IrregularProjection

pytest.importorskip("aeon")

CONF = Path(__file__).parents[2] / "experiments" / "conf" / "kclass.toml"


def _real_settings(epsilon: float, n_basis: int, order: int, seed: int = 0):
    # The study's [settings]: the split rule sets the group and ensemble sizes.
    return reference_settings(
        epsilon=epsilon,
        n_basis=n_basis,
        order=order,
        num_weak_models=5,
        subsample_size=2,
        n_train=2,
        n_eval=5,
        seed=seed,
    )


def test_irregular_curves_are_fitted_on_their_own_points(no_network):
    from ldpfda.experiments.realdata import _load

    data = _load("PickupGestureWiimoteZ")
    coefficients = irregular_coefficients(data, 12, 4)
    assert coefficients.shape == (100, 12) and np.all(np.isfinite(coefficients))
    projection = IrregularProjection.equispaced((0.0, 1.0), 12, 4)
    for i in (0, 57, 99):
        seen = np.isfinite(data.times[i])
        one = projection.project_curve(data.times[i, seen], data.curves[i, seen])
        assert np.allclose(coefficients[i], one, rtol=0, atol=1e-10)
    split = split_real(_real_settings(1.0, 12, 4), 0, dataset="PickupGestureWiimoteZ")
    assert split.n_classes == 10 and split.public.shape == (20, 12)
    features = split.train.features()
    assert features.shape == (32, 12) and np.abs(features).max() <= 1.0


def test_every_column_on_basic_motions_spends_epsilon(no_network):
    errors, extra = run_point(_real_settings(5.0, 2, 2), 0, dataset="BasicMotions-K")
    assert tuple(errors) == STUDY_METHODS
    assert all(0.0 <= e <= 1.0 for e in errors.values())
    assert extra["n_classes"] == 4 and extra["n_features"] == 12
    assert sum(extra[f"n_{g}"] for g in ("calibration", "train", "eval", "test")) == 80
    for spent in extra["spent"].values():
        assert abs(spent - 5.0) < 1e-12
    assert not extra["default_fit_failed"]
    # With 4 classes and 12 features the split release has the smaller stated
    # variance at epsilon 5, the drawn class at epsilon 2: the default is that
    # release's column to the last bit (the same client streams).
    assert extra["default_release"] == "split"
    assert errors["default"] == errors["default_split"] != errors["default_draw"]
    low, low_extra = run_point(_real_settings(2.0, 2, 2), 0, dataset="BasicMotions-K")
    assert low_extra["default_release"] == "draw"
    assert low["default"] == low["default_draw"]
    # Deterministic: the same repeat gives the same numbers.
    again, _ = run_point(_real_settings(5.0, 2, 2), 0, dataset="BasicMotions-K")
    assert again == errors


def test_a_class_drawn_by_one_client_takes_the_common_score(no_network):
    # Repeat 1 of the study's seed on PickupGestureWiimoteZ (56 clients, 10 classes):
    # a class is drawn by fewer than 2 clients; the moment fit gives it the common
    # score and fits the others, and the record says so.
    errors, extra = run_point(
        _real_settings(1.0, 12, 4, seed=2026), 1, dataset="PickupGestureWiimoteZ"
    )
    assert not extra["default_fit_failed"]
    assert "drawn by fewer than 2 clients" in extra["default_fallback"]
    assert extra["spent"]["default"] == 1.0


def test_the_study_file_plans_every_point():
    conf = runner.load_config(CONF)
    tasks = runner.plan(conf)
    assert len(tasks) == 7 * 5 * 20
    by_name = {t["point"]["dataset"]: t for t in tasks}
    assert by_name["wearable-5"]["settings"]["data.n-classes"] == 5
    assert by_name["wearable-3"]["settings"]["data.dataset"] == "wearable"
    assert by_name["JapaneseVowels-K"]["settings"]["fda.n-basis"] == 1
    assert {t["point"]["epsilon"] for t in tasks} == {0.5, 1.0, 2.0, 5.0, 10.0}
    quick = runner.plan(runner.load_config(CONF, quick=True))
    assert len(quick) == 3 * 2 * 2


def test_the_wearable_default_with_three_conditions():
    settings = reference_settings(
        dataset="wearable",
        n_classes=3,
        epsilon=5.0,
        n_train=100,
        n_eval=300,
        n_test=1000,
        calibration_size=200,
        num_weak_models=10,
        subsample_size=20,
    )
    errors, extra = run_point(settings, 0, dataset="wearable-3")
    assert tuple(errors) == STUDY_METHODS and extra["n_classes"] == 3
    assert (extra["n_train"], extra["n_eval"]) == (100, 300)
    for spent in extra["spent"].values():
        assert abs(spent - 5.0) < 1e-12
    assert errors["non_private"] < errors["majority"]
