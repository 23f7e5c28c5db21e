"""The K-class study's driver: irregular curves, the five columns, the budget, the
fallback of a failed moment fit, the study file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ldpfda.experiments import runner
from ldpfda.experiments.common import reference_settings
from ldpfda.experiments.multiclass import STUDY_METHODS, balanced_error, run_point
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
    # Every column's balanced error, and a uniform guess's.
    assert set(extra["balanced"]) == {*STUDY_METHODS, "guess"}
    assert extra["balanced"]["guess"] == 0.75
    assert all(0.0 <= e <= 1.0 for e in extra["balanced"].values())
    # The majority class is right on its own class only.
    assert extra["balanced"]["majority"] == 0.75
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


def test_balanced_error_does_not_reward_favouring_a_class():
    # A split without replacement: class 0 is rare among the clients, so frequent in
    # the test rows. Always predicting it has plain error 0.4 but balanced error
    # 1 - 1/K, as has any prediction drawn without looking at the curves, whatever
    # classes it favours (here 60 % class 0, over 20,000 rows).
    k = 5
    y = np.repeat(np.arange(k), [12_000, 2_000, 2_000, 2_000, 2_000])
    rare = np.zeros(y.size, dtype=int)
    assert np.mean(rare != y) == pytest.approx(0.4)
    assert balanced_error(rare, y, k) == pytest.approx(1 - 1 / k, abs=1e-15)
    favour = np.array([0.6, 0.1, 0.1, 0.1, 0.1])
    blind = np.random.default_rng(3).choice(k, size=y.size, p=favour)
    # Balanced error = 1 - (1/K) sum_c recall_c; recall_c ~ Binomial(n_c, q_c) / n_c:
    # standard deviation sqrt(sum_c q_c (1 - q_c) / n_c) / K = 0.0031 here.
    sd = np.sqrt(np.sum(favour * (1 - favour) / np.bincount(y))) / k
    assert abs(balanced_error(blind, y, k) - (1 - 1 / k)) < 4 * sd
    # Its plain error is 1 - sum_c q_c pi_c = 0.6, far below a guess's 0.8.
    plain = 1 - favour @ (np.bincount(y) / y.size)
    assert abs(np.mean(blind != y) - plain) < 4 * np.sqrt(plain * (1 - plain) / y.size)
    assert plain == pytest.approx(0.6)
    # Perfect predictions; a missing class is left out; no class (-1) is a guess.
    assert balanced_error(y, y, k) == 0.0
    assert balanced_error(np.array([1, 1]), np.array([1, 2]), 3) == 0.5
    assert balanced_error(np.full(4, -1), np.array([0, 0, 1, 2]), 3) == pytest.approx(
        2 / 3
    )


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
