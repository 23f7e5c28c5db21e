"""DP-SGD baseline: accounting round trip, training and validation."""

from __future__ import annotations

import numpy as np
import pytest

from ldpfda.labeldp import (
    DPSGDLogisticRegression,
    calibrate_noise_multiplier,
    dpsgd_epsilon,
)
from tests.labeldp.test_learners import X_TEST, Y_TEST, X, Y


@pytest.mark.parametrize("eps", [0.2, 2.0])
def test_calibration_inverts_the_accountant(eps):
    kwargs = {"sampling_probability": 0.01, "steps": 500, "delta": 1e-4}
    sigma = calibrate_noise_multiplier(epsilon=eps, **kwargs)
    assert dpsgd_epsilon(noise_multiplier=sigma, **kwargs) <= eps
    assert dpsgd_epsilon(noise_multiplier=sigma / 1.01, **kwargs) > eps


def test_epsilon_decreases_with_noise():
    kwargs = {"sampling_probability": 0.05, "steps": 100, "delta": 1e-5}
    values = [dpsgd_epsilon(noise_multiplier=s, **kwargs) for s in (0.8, 1.5, 4.0)]
    assert values[0] > values[1] > values[2]


def test_dpsgd_learns_and_records_its_budget():
    model = DPSGDLogisticRegression(
        epsilon=2.0, batch_size=100, epochs=5, random_state=0
    ).fit(X, Y)
    assert model.score(X_TEST, Y_TEST) > 0.9
    assert model.epsilon_ <= 2.0 and model.delta_ == pytest.approx(1 / len(Y))
    assert model.event_.mechanism == "dp_sgd"
    assert model.n_steps_ == int(np.ceil(5 / (100 / len(Y))))


def test_dpsgd_reproducible():
    kwargs = {"epsilon": None, "noise_multiplier": 1.0, "batch_size": 100, "epochs": 1}
    a = DPSGDLogisticRegression(random_state=4, **kwargs).fit(X, Y).coef_
    b = DPSGDLogisticRegression(random_state=4, **kwargs).fit(X, Y).coef_
    c = DPSGDLogisticRegression(random_state=5, **kwargs).fit(X, Y).coef_
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_dpsgd_epsilon(bad):
    with pytest.raises(ValueError, match="epsilon"):
        DPSGDLogisticRegression(epsilon=bad).fit(X, Y)


def test_dpsgd_needs_one_privacy_parameter():
    with pytest.raises(ValueError, match="noise_multiplier"):
        DPSGDLogisticRegression(epsilon=1.0, noise_multiplier=1.0).fit(X, Y)


@pytest.mark.parametrize(
    ("name", "value"),
    [("clip_norm", 0.0), ("epochs", 0.0), ("learning_rate", -1.0), ("batch_size", 0)],
)
def test_dpsgd_parameters(name, value):
    with pytest.raises(ValueError, match=name):
        DPSGDLogisticRegression(**{name: value}).fit(X, Y)


def test_accountant_validation():
    with pytest.raises(ValueError, match="noise_multiplier"):
        dpsgd_epsilon(
            noise_multiplier=0.0, sampling_probability=0.1, steps=1, delta=1e-5
        )
    with pytest.raises(ValueError, match="delta"):
        dpsgd_epsilon(
            noise_multiplier=1.0, sampling_probability=0.1, steps=1, delta=0.0
        )
