"""Epsilon maps of the label-DP releases: formulas, round trips and validation."""

from __future__ import annotations

import math

import pytest

from ldpfda.labeldp import (
    histogram_epsilon,
    histogram_sigma,
    resampling_epsilon,
    resampling_probability,
    uniform_rr_epsilon,
    uniform_rr_probability,
)
from ldpfda.privacy import rr_keep_probability


@pytest.mark.parametrize("eps", [0.01, 0.5, 1.0, 7.0])
def test_histogram_round_trip(eps):
    assert histogram_sigma(epsilon=eps) == pytest.approx(2.0 / eps)
    assert histogram_epsilon(sigma=histogram_sigma(epsilon=eps)) == pytest.approx(eps)


def test_histogram_limits():
    assert histogram_epsilon(sigma=math.inf) == 0.0
    assert histogram_sigma(epsilon=math.inf) == 0.0


@pytest.mark.parametrize("eps", [0.0, 0.05, 1.0, 6.0])
@pytest.mark.parametrize("q_min", [0.001, 0.05, 0.5])
def test_resampling_round_trip(eps, q_min):
    lam = resampling_probability(epsilon=eps, q_min=q_min)
    assert 0 < lam <= 1
    assert resampling_epsilon(resample_probability=lam, q_min=q_min) == pytest.approx(
        eps, abs=1e-12
    )


def test_resampling_epsilon_formula_and_limits():
    assert resampling_epsilon(resample_probability=0.5, q_min=0.1) == pytest.approx(
        math.log(1 + 0.5 / (0.5 * 0.1))
    )
    assert resampling_epsilon(resample_probability=1.0, q_min=0.0) == 0.0
    assert resampling_epsilon(resample_probability=0.9, q_min=0.0) == math.inf


@pytest.mark.parametrize("k", [2, 3, 10])
@pytest.mark.parametrize("eps", [0.05, 1.0, 4.0])
def test_uniform_rr_is_kary_rr(k, eps):
    lam = uniform_rr_probability(epsilon=eps, n_classes=k)
    assert lam == pytest.approx(k / (math.exp(eps) + k - 1))
    assert 1 - lam + lam / k == pytest.approx(
        rr_keep_probability(epsilon=eps, n_categories=k)
    )
    assert uniform_rr_epsilon(resample_probability=lam, n_classes=k) == pytest.approx(
        eps
    )
    # The special case of cluster resampling with q uniform.
    assert resampling_probability(epsilon=eps, q_min=1 / k) == pytest.approx(lam)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan])
def test_epsilon_must_be_positive(bad):
    with pytest.raises(ValueError, match="epsilon"):
        histogram_sigma(epsilon=bad)
    with pytest.raises(ValueError, match="epsilon"):
        uniform_rr_probability(epsilon=bad, n_classes=3)


def test_epsilon_type_error():
    with pytest.raises(TypeError, match="epsilon"):
        histogram_sigma(epsilon="1")


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5])
def test_lambda_outside_unit_interval(bad):
    with pytest.raises(ValueError, match="lambda"):
        resampling_epsilon(resample_probability=bad, q_min=0.1)


@pytest.mark.parametrize("bad", [-0.1, 1.1])
def test_q_min_outside_unit_interval(bad):
    with pytest.raises(ValueError, match="q_min"):
        resampling_epsilon(resample_probability=0.5, q_min=bad)


def test_sigma_must_be_positive():
    with pytest.raises(ValueError, match="sigma"):
        histogram_epsilon(sigma=0.0)


def test_resampling_epsilon_must_be_non_negative():
    with pytest.raises(ValueError, match="epsilon"):
        resampling_probability(epsilon=-0.5, q_min=0.1)


def test_n_classes_at_least_two():
    with pytest.raises(ValueError, match="n_classes"):
        uniform_rr_probability(epsilon=1.0, n_classes=1)
