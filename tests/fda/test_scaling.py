"""Rescaling coefficients into [-1, 1]^p with bounds fixed before the private data."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from ldpfda.fda import (
    BSplineProjector,
    CoefficientScaler,
    CurveFeaturizer,
    VectorFeaturizer,
)


def test_bounds_map_to_minus_one_and_one():
    scaler = CoefficientScaler(low=[-2.0, 0.0, 5.0], high=[2.0, 10.0, 6.0]).fit(3)
    c = np.array(
        [[-2.0, 0.0, 5.0], [2.0, 10.0, 6.0], [0.0, 5.0, 5.5], [1.0, 7.5, 5.25]]
    )
    np.testing.assert_allclose(
        scaler.transform(c),
        [[-1, -1, -1], [1, 1, 1], [0, 0, 0], [0.5, 0.5, -0.5]],
        atol=1e-15,
    )


def test_values_outside_the_bounds_are_clipped():
    scaler = CoefficientScaler(low=-3.0, high=1.0)
    z = scaler.transform(np.array([[-10.0, -3.0, 0.0, 1.0, 1e9]]))
    np.testing.assert_allclose(z, [[-1.0, -1.0, 0.5, 1.0, 1.0]])
    big = np.random.default_rng(0).normal(scale=100, size=(500, 4))
    out = CoefficientScaler(low=-1.0, high=1.0).fit(4).transform(big)
    assert np.all(np.abs(out) <= 1.0)


def test_scalar_bounds_broadcast_to_every_coordinate():
    scaler = CoefficientScaler(low=-4.0, high=4.0).fit(5)
    assert scaler.low_.shape == (5,) and scaler.high_.shape == (5,)
    np.testing.assert_allclose(scaler.transform(np.full((1, 5), 2.0)), 0.5)


def test_from_public_uses_the_calibration_quantiles_and_margin():
    rng = np.random.default_rng(1)
    calib = rng.normal(size=(1000, 3)) * [1.0, 5.0, 0.1]
    scaler = CoefficientScaler.from_public(calib, quantile=0.05, margin=0.1)
    lo, hi = np.quantile(calib, 0.05, axis=0), np.quantile(calib, 0.95, axis=0)
    np.testing.assert_allclose(scaler.low_, lo - 0.1 * (hi - lo))
    np.testing.assert_allclose(scaler.high_, hi + 0.1 * (hi - lo))
    full = CoefficientScaler.from_public(calib)
    np.testing.assert_allclose(full.transform(calib).min(axis=0), -1.0)
    np.testing.assert_allclose(full.transform(calib).max(axis=0), 1.0)


def test_from_public_and_fixed_bounds_do_not_warn():
    coef = np.random.default_rng(2).normal(size=(100, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CoefficientScaler.from_public(coef).transform(coef)
        CoefficientScaler(low=-1.0, high=1.0).fit(4).transform(coef)


def test_scaler_errors_are_named():
    with pytest.raises(ValueError, match="high must be > low"):
        CoefficientScaler(low=1.0, high=1.0).fit(2)
    with pytest.raises(ValueError, match="high must be > low"):
        CoefficientScaler(low=[0.0, 2.0], high=[1.0, 1.0]).fit(2)
    with pytest.raises(ValueError, match="low"):
        CoefficientScaler(low=np.nan, high=1.0).fit(2)
    with pytest.raises(ValueError, match="high"):
        CoefficientScaler(low=0.0, high=np.inf).fit(2)
    scaler = CoefficientScaler(low=[0.0, 0.0, 0.0], high=[1.0, 1.0, 1.0]).fit(3)
    with pytest.raises(ValueError, match="columns"):
        scaler.transform(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="coefficients"):
        scaler.transform(np.array([[0.0, np.nan, 0.0]]))
    with pytest.raises(ValueError, match="coefficients"):
        CoefficientScaler.from_public(np.zeros(5))


def test_curve_featurizer_composes_projection_and_fixed_bounds():
    grid = np.linspace(0, 1, 30)
    rng = np.random.default_rng(4)
    public = rng.normal(size=(200, 30))
    private = rng.normal(size=(50, 30)) * 3  # wider than the calibration data
    featurizer = CurveFeaturizer.calibrated(public, grid, n_basis=6, order=4)
    assert featurizer.n_features_out == 6
    z = featurizer.transform(private)
    assert z.shape == (50, 6) and np.all(np.abs(z) <= 1.0)
    projector = BSplineProjector(n_basis=6, order=4).fit(grid_points=grid)
    expected = featurizer.scaler.transform(projector.transform(private, grid))
    np.testing.assert_allclose(z, expected)
    # The bounds came from the public curves only.
    np.testing.assert_allclose(
        featurizer.scaler.low_, projector.transform(public, grid).min(axis=0)
    )


def test_vector_featurizer_checks_its_shape():
    featurizer = VectorFeaturizer(CoefficientScaler(low=-2.0, high=2.0), 3)
    np.testing.assert_allclose(
        featurizer.transform([[2.0, 0.0, -4.0]]), [[1.0, 0.0, -1.0]]
    )
    with pytest.raises(ValueError, match=r"X must have shape \(n, 3\)"):
        featurizer.transform(np.zeros((2, 4)))


def test_coefficient_bound_as_scaler_bounds_needs_no_clipping():
    # Data-independent bounds: |x(t)| <= B implies |c_k| <= bound_k, so every such curve
    # lands in [-1, 1]^p by the affine map alone.
    grid = np.linspace(0, 1, 40)
    projector = BSplineProjector(n_basis=8, order=4).fit(grid_points=grid)
    bound = projector.coefficient_bound(2.0)
    scaler = CoefficientScaler(low=-bound, high=bound).fit(8)
    curves = np.random.default_rng(5).uniform(-2.0, 2.0, (3000, 40))
    coef = projector.transform(curves, grid)
    unclipped = 2.0 * (coef - scaler.low_) / (scaler.high_ - scaler.low_) - 1.0
    assert np.all(np.abs(unclipped) <= 1.0 + 1e-12)
    np.testing.assert_allclose(scaler.transform(coef), unclipped, atol=1e-12)
