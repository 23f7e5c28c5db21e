"""The no-signal check: judged from released quantities and unlabeled reference
features only, it flags a federation too small for its epsilon and not a large one."""

from __future__ import annotations

import numpy as np

from ldpfda.config import Settings
from ldpfda.datasets.population import public_features, repeat_data
from ldpfda.engine import run_repeat
from ldpfda.schema.payloads import LinearModels
from ldpfda.server.fitting import (
    ONE_CLASS_SHARE,
    _signal,
    assess_signal,
    no_signal_warning,
    single_model_result,
)


def test_twenty_clients_at_epsilon_5_give_a_model_without_signal():
    # Seed 11: 20 clients' releases shrink the moment fit until it puts every public
    # calibration vector in one class; the warning says why and what would help.
    settings = Settings(n_train=10, n_eval=10, n_test=2000, seed=11)
    result = run_repeat(settings, 0)
    assert result.signal["no_signal"] is True
    public = public_features(
        settings, 0, featurizer=repeat_data(settings, 0).featurizer
    )
    predicted = result.final.predict(public)[:, 0]
    assert max(predicted.mean(), 1 - predicted.mean()) >= ONE_CLASS_SHARE
    assert "public calibration features in one class" in result.signal["reason"]
    warning = no_signal_warning(result.signal, n_clients=20, epsilon=5.0, n_features=4)
    assert warning is not None
    assert "20 clients at epsilon 5 are too few for 4 features" in warning
    assert "More clients" in warning and "a larger epsilon" in warning
    assert result.report()["signal"]["no_signal"] is True


def test_three_thousand_clients_carry_signal():
    result = run_repeat(Settings(n_test=2000, seed=2), 0)
    assert result.signal["no_signal"] is False and result.signal["reason"] == ""
    assert result.signal["signal_to_noise"] > 5
    assert (
        no_signal_warning(result.signal, n_clients=3000, epsilon=5, n_features=4)
        is None
    )


def _result(coef, intercept=0.0):
    final = LinearModels(np.array([coef], dtype=float), np.array([intercept]))
    return single_model_result(final, method="moment", payload=None, privacy={})


def test_zero_coefficients_and_coin_like_feedback_carry_no_signal():
    assert (
        _result([0.0, 0.0]).signal["reason"] == "the fitted coefficients are all zero"
    )
    model = LinearModels(np.ones((1, 2)), np.zeros(1))
    assert "1/2" in _signal(model, rule="equal")["reason"]
    assert _signal(model, rule="cutoff")["no_signal"] is False


def test_one_class_is_judged_on_features_without_labels():
    x = np.random.default_rng(0).uniform(-1, 1, size=(500, 2))
    constant = _result([0.01, 0.0], intercept=0.5)  # positive on all of [-1, 1]^2
    assess_signal(constant, None, (x, None))  # test features, labels not given
    assert (
        constant.signal["no_signal"]
        and "500 test features" in (constant.signal["reason"])
    )
    balanced = _result([1.0, 0.0])
    assess_signal(balanced, x, None)
    assert not balanced.signal["no_signal"]
    assert 0.4 < balanced.signal["one_class_share"] < 0.6
