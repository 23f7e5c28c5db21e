"""Penalised least-squares projection of a client's own, irregular observations.

Tolerances follow from the problem: a backward-stable least-squares solve loses about
``cond * eps`` in relative accuracy, and the projection of a curve outside the spline
space is off by at most the projection's infinity norm times the approximation error.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldpfda.fda.bspline import BSplineProjection, bspline_design
from ldpfda.fda.irregular import (
    GAP,
    OK,
    TOO_FEW_POINTS,
    IrregularProjection,
    coefficient_range,
    knots_from_interior,
    roughness_matrix,
)

EPS = np.finfo(float).eps
DAY = (0.0, 24.0)
GRID = np.linspace(0.0, 24.0, 288)  # one point every 5 minutes over a day, in hours
FAST = settings(max_examples=40, deadline=None)


def _lstsq_tolerance(matrix: np.ndarray, scale: float) -> float:
    """Accuracy of a backward-stable least-squares solve: cond(A) * eps per unit of
    the data, times the number of unknowns as the growth factor of the rounding."""
    return float(np.linalg.cond(matrix) * EPS * matrix.shape[1] * scale)


GRIDS = {
    "day-288": (GRID, DAY),
    "day-288-wider-domain": (GRID, (-1.0, 25.0)),
    "unit-50": (np.linspace(0.0, 1.0, 50), (0.0, 1.0)),
    "clustered-60": (
        np.sort(
            np.concatenate([[0.0, 1.0], np.random.default_rng(3).beta(0.5, 0.5, 58)])
        ),
        (0.0, 1.0),
    ),
}
SIZES = [(12, 4), (10, 4), (6, 2), (8, 5), (5, 1), (20, 6)]


@pytest.mark.parametrize(("n_basis", "order"), SIZES)
@pytest.mark.parametrize("name", sorted(GRIDS))
def test_on_a_common_grid_without_penalty_it_is_the_bspline_projection(
    name, n_basis, order
):
    grid, domain = GRIDS[name]
    reference = BSplineProjection.fit(
        grid_points=grid, n_basis=n_basis, order=order, domain_range=domain
    )
    projection = IrregularProjection.equispaced(domain, n_basis, order)
    np.testing.assert_array_equal(projection.knots, reference.knots)
    rng = np.random.default_rng(0)
    curves = rng.normal(size=(30, grid.size))
    fit = projection.fit_curves(
        np.tile(grid, 30), curves.ravel(), np.repeat(np.arange(30), grid.size)
    )
    assert np.all(fit.status == OK)
    expected = reference.transform(curves)
    # Both solve one least-squares problem stably; they differ by rounding only.
    tol = _lstsq_tolerance(reference.design, np.abs(curves).max())
    assert tol < 1e-10
    np.testing.assert_allclose(fit.coefficients, expected, rtol=0, atol=tol)
    np.testing.assert_allclose(
        projection.projection_matrix(grid), reference.projection, rtol=0, atol=tol
    )


def _spline(projection: IrregularProjection, coefficients, t):
    return bspline_design(t, projection.knots, projection.order) @ coefficients


@FAST
@given(
    seed=st.integers(0, 2**32 - 1),
    n_basis=st.integers(4, 14),
    order=st.integers(1, 5),
    extra=st.integers(0, 200),
)
def test_a_spline_is_recovered_from_any_irregular_sample(seed, n_basis, order, extra):
    # A curve inside the spline space is reproduced exactly by least squares from
    # any sample that determines the coefficients; only rounding separates them.
    order = min(order, n_basis)
    projection = IrregularProjection.equispaced(DAY, n_basis, order)
    rng = np.random.default_rng(seed)
    # One point inside every basis function's support (Schoenberg-Whitney), plus
    # uniform extra points: irregular, with a different count on every draw.
    knots = projection.knots
    lows, highs = knots[:n_basis], knots[order : order + n_basis]
    t = np.concatenate(
        [rng.uniform(lows + 0.25 * (highs - lows), highs - 0.25 * (highs - lows))]
        + [rng.uniform(*DAY, size=extra)]
    )
    truth = rng.normal(size=n_basis)
    y = _spline(projection, truth, t)
    got = projection.project_curve(t, y)
    # The first-order norm-wise bound of a backward-stable least-squares solve on
    # data that are themselves rounded (each y_i sums `order` terms of B c):
    # cond(B) * eps * sqrt(m) * (n + order) * ||c||_2 (Higham 2002, ch. 20).
    design = projection.design(t)
    m, n = design.shape
    tol = float(
        np.linalg.cond(design) * EPS * np.sqrt(m) * (n + order) * np.linalg.norm(truth)
    )
    np.testing.assert_allclose(got, truth, rtol=0, atol=tol)


def _heart_rate(t):
    """A daily rhythm in beats per minute: smooth, but not a spline."""
    return (
        70.0
        + 12.0 * np.sin(2 * np.pi * (t - 9.0) / 24.0)
        + 4.0 * np.cos(4 * np.pi * t / 24.0)
    )


def _samples(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "uniform":  # may leave near-gaps by chance
        return np.sort(rng.uniform(*DAY, size=n))
    # a device's clock: a regular grid with jitter of up to half a step, and 20 %
    # of the readings lost
    grid = np.linspace(*DAY, n)
    step = grid[1] - grid[0]
    t = np.clip(grid + rng.uniform(-step / 2, step / 2, size=n), *DAY)
    return t[rng.random(n) >= 0.2]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("n_points", [40, 100, 288])
@pytest.mark.parametrize("kind", ["uniform", "jittered"])
def test_irregular_samples_of_a_smooth_curve_give_its_coefficients(
    kind, seed, n_points
):
    # On a sample t the projection P_t reproduces splines, so P_t x - c = P_t (x - s)
    # with c the coefficients from a dense grid and s their spline: the error is at
    # most ||P_t||_inf (the sample's Lebesgue constant) times the approximation error
    # of s at the sample points.
    projection = IrregularProjection.equispaced(DAY, 12, 4)
    dense = np.linspace(*DAY, 5001)
    c = projection.projection_matrix(dense) @ _heart_rate(dense)
    t = _samples(kind, n_points, np.random.default_rng(seed))
    p_t = projection.projection_matrix(t)
    lebesgue = np.abs(p_t).sum(axis=1).max()
    residual = _heart_rate(t) - _spline(projection, c, t)
    bound = lebesgue * np.abs(residual).max()
    error = np.abs(projection.project_curve(t, _heart_rate(t)) - c).max()
    assert error <= bound + _lstsq_tolerance(projection.design(t), 100.0)
    if kind == "jittered":
        # without near-gaps the Lebesgue constant stays small, and the
        # coefficients are within 1 % of the curve's range (about 30 bpm)
        assert lebesgue < 15 and error < 0.3


def test_nan_values_are_dropped_and_order_does_not_matter():
    projection = IrregularProjection.equispaced(DAY, 10, 4)
    rng = np.random.default_rng(1)
    t = np.sort(rng.uniform(*DAY, size=150))
    y = np.sin(t / 3.0)
    y_gappy = y.copy()
    missing = rng.random(t.size) < 0.2
    y_gappy[missing] = np.nan
    expected = projection.project_curve(t[~missing], y[~missing])
    np.testing.assert_array_equal(projection.project_curve(t, y_gappy), expected)
    order = rng.permutation(t.size)
    np.testing.assert_array_equal(
        projection.project_curve(t[order], y_gappy[order]), expected
    )


def test_shared_timestamps_and_batched_solves_agree():
    # Two or more curves on one set of timestamps use one projection matrix; a curve
    # alone is solved in a batch. The two routes give the same numbers.
    projection = IrregularProjection.equispaced(DAY, 12, 4, penalty=1e-3)
    rng = np.random.default_rng(2)
    t = np.sort(rng.uniform(*DAY, size=100))
    y = rng.normal(size=(5, 100))
    shared = projection.fit_curves(
        np.tile(t, 5), y.ravel(), np.repeat(np.arange(5), 100)
    )
    alone = np.vstack([projection.project_curve(t, row) for row in y])
    tol = _lstsq_tolerance(
        np.vstack([projection.design(t) / 10.0, projection.penalty_rows]), 3.0
    )
    np.testing.assert_allclose(shared.coefficients, alone, rtol=0, atol=tol)


def test_a_gap_leaves_coefficients_undetermined_unless_penalised():
    # No point in [8, 16]: 20 equispaced cubic B-splines on [0, 24] have supports of
    # 4 * 24 / 17 < 8 hours, so some lie inside the gap.
    t = np.concatenate([np.linspace(0.0, 8.0, 60), np.linspace(16.0, 24.0, 60)])
    y = np.cos(t / 4.0)
    plain = IrregularProjection.equispaced(DAY, 20, 4)
    fit = plain.fit_curves(t, y, np.zeros(t.size, np.int64))
    assert fit.status.tolist() == [GAP]
    with pytest.raises(ValueError, match="do not determine all 20 coefficients"):
        plain.project_curve(t, y)
    # the penalty bridges the gap with the smoothest continuation
    smooth = IrregularProjection.equispaced(DAY, 20, 4, penalty=1e-2)
    c = smooth.project_curve(t, y)
    inside = np.linspace(8.0, 16.0, 50)
    assert np.all(np.isfinite(c))
    assert np.abs(_spline(smooth, c, inside)).max() < 2 * np.abs(y).max()


def test_a_strong_penalty_tends_to_the_least_squares_line():
    # R vanishes exactly on linear functions, so as lambda grows the fit tends to the
    # least-squares line, whose B-spline coefficients are a + b * (Greville
    # abscissae). The error falls like 1/lambda: 100 times less for 100 times more.
    rng = np.random.default_rng(4)
    t = np.sort(rng.uniform(*DAY, size=200))
    y = 60 + 0.5 * t + rng.normal(scale=3.0, size=t.size)
    b, a = np.polyfit(t, y, 1)
    knots = IrregularProjection.equispaced(DAY, 12, 4).knots
    greville = np.array([knots[k + 1 : k + 4].mean() for k in range(12)])
    line = a + b * greville
    errors = [
        np.abs(
            IrregularProjection.equispaced(DAY, 12, 4, penalty=lam).project_curve(t, y)
            - line
        ).max()
        for lam in (1e2, 1e4)
    ]
    assert errors[1] < errors[0] / 50


def test_roughness_matrix_is_the_integrated_squared_second_derivative():
    # t^2 lies in the span of cubic splines, and its roughness is
    # int_a^b (2)^2 dt = 4 (b - a), whatever the knots.
    for projection in (
        IrregularProjection.equispaced(DAY, 12, 4),
        IrregularProjection.with_knots(DAY, [1.0, 2.0, 7.5, 20.0], 4),
        IrregularProjection.with_knots(DAY, [3.0, 12.0], 6),
    ):
        dense = np.linspace(*DAY, 2000)
        c = projection.projection_matrix(dense) @ dense**2
        r = projection.roughness
        np.testing.assert_allclose(c @ r @ c, 4.0 * 24.0, rtol=1e-9)
        assert np.allclose(r, r.T) and np.linalg.eigvalsh(r).min() > -1e-9 * r.max()
    np.testing.assert_array_equal(
        roughness_matrix(knots_from_interior(DAY, [12.0], 2), 2), np.zeros((3, 3))
    )


def test_roughness_matrix_equals_scikit_fda():
    basis_module = pytest.importorskip("skfda.representation.basis")
    regularization = pytest.importorskip("skfda.misc.regularization")
    operators = pytest.importorskip("skfda.misc.operators")
    penalty = regularization.L2Regularization(operators.LinearDifferentialOperator(2))
    for kwargs, projection in (
        (
            {"n_basis": 12, "order": 4},
            IrregularProjection.equispaced(DAY, 12, 4),
        ),
        (
            {"knots": [0.0, 2.4, 12.0, 13.2, 24.0], "order": 5},
            IrregularProjection.with_knots(DAY, [2.4, 12.0, 13.2], 5),
        ),
    ):
        expected = penalty.penalty_matrix(
            basis_module.BSplineBasis(domain_range=DAY, **kwargs)
        )
        np.testing.assert_allclose(
            projection.roughness, expected, rtol=0, atol=1e-12 * np.abs(expected).max()
        )


def test_a_client_is_the_mean_of_its_usable_curves():
    projection = IrregularProjection.equispaced(DAY, 10, 4)
    rng = np.random.default_rng(5)
    days = rng.normal(size=(3, GRID.size))
    t = np.tile(GRID, 4)
    y = np.concatenate([days.ravel(), np.full(GRID.size, np.nan)])
    y[3 * GRID.size : 3 * GRID.size + 5] = 1.0  # day 4: 5 points only
    curves = np.repeat(np.arange(4), GRID.size)
    c = projection.project_client(t, y, curves, min_points=20)
    # linear: the mean of the days' coefficients is the coefficient of the mean day
    expected = projection.projection_matrix(GRID) @ days.mean(axis=0)
    np.testing.assert_allclose(c, expected, rtol=0, atol=1e-12)
    fit = projection.fit_clients(
        t, y, np.zeros(t.size, np.int64), curves, 1, min_points=20
    )
    assert fit.n_curves.tolist() == [3] and fit.n_too_few.tolist() == [1]
    assert fit.n_points.tolist() == [3 * GRID.size + 5]


def test_clients_are_independent_of_batching():
    projection = IrregularProjection.equispaced(DAY, 8, 4, penalty=1e-4)
    rng = np.random.default_rng(6)
    n = 7
    t = rng.uniform(*DAY, size=(n, 50)).ravel()
    y = rng.normal(size=t.size)
    who = np.repeat(np.arange(n), 50)
    days = rng.integers(0, 3, size=t.size)
    together = projection.fit_clients(t, y, who, days, n).coefficients
    for i in range(n):
        rows = who == i
        alone = projection.project_client(t[rows], y[rows], days[rows])
        np.testing.assert_allclose(together[i], alone, rtol=0, atol=1e-12)


def test_a_client_without_usable_curves_is_an_error():
    projection = IrregularProjection.equispaced(DAY, 10, 4)
    t = np.linspace(0.0, 24.0, 8)
    with pytest.raises(ValueError, match=r"no usable curve: 2 curve\(s\) with fewer"):
        projection.project_client(
            np.concatenate([t, t]),
            np.ones(16),
            np.repeat([0, 1], 8),
            min_points=10,
        )
    with pytest.raises(ValueError, match="every value is missing"):
        projection.project_client(t, np.full(8, np.nan))


def test_a_curve_with_too_few_points_is_an_error():
    projection = IrregularProjection.equispaced(DAY, 10, 4)
    t = np.linspace(0.0, 24.0, 30)
    y = np.ones(30)
    y[:25] = np.nan
    with pytest.raises(
        ValueError, match=r"5 observed point\(s\), fewer than min_points"
    ):
        projection.project_curve(t, y, min_points=10)
    fit = projection.fit_curves(t, y, np.zeros(30, np.int64), min_points=10)
    assert fit.status.tolist() == [TOO_FEW_POINTS] and fit.n_points.tolist() == [5]


def test_times_outside_the_domain_are_an_error():
    projection = IrregularProjection.equispaced(DAY, 10, 4)
    t = np.append(np.linspace(0.0, 24.0, 29), 25.0)
    with pytest.raises(
        ValueError, match=r"domain \[0.0, 24.0\], got 25.0 at observation 29"
    ):
        projection.project_curve(t, np.ones(30))


def test_infinite_values_are_an_error():
    projection = IrregularProjection.equispaced(DAY, 10, 4)
    y = np.ones(30)
    y[4] = np.inf
    with pytest.raises(ValueError, match="finite or NaN.*observation 4"):
        projection.project_curve(np.linspace(0.0, 24.0, 30), y)


def test_mismatched_shapes_are_an_error():
    projection = IrregularProjection.equispaced(DAY, 10, 4)
    with pytest.raises(
        ValueError, match=r"values must have the shape of times \(30,\)"
    ):
        projection.project_curve(np.linspace(0.0, 24.0, 30), np.ones(29))
    with pytest.raises(ValueError, match=r"curves must have shape \(30,\)"):
        projection.fit_curves(np.linspace(0.0, 24.0, 30), np.ones(30), np.zeros(3))
    with pytest.raises(TypeError, match="curves must be integers"):
        projection.fit_curves(np.linspace(0.0, 24.0, 3), np.ones(3), np.zeros(3))
    with pytest.raises(ValueError, match=r"clients must lie in 0 \.\. 0"):
        projection.fit_clients(
            np.zeros(2), np.ones(2), np.array([0, 1]), np.zeros(2, np.int64), 1
        )


BAD_PARAMETERS = {
    "n-basis-below-order": ((DAY, 3, 4), {}, ValueError, "n_basis must be >= 4"),
    "order-zero": ((DAY, 10, 0), {}, ValueError, "order must be >= 1"),
    "negative-penalty": ((DAY, 10, 4), {"penalty": -1.0}, ValueError, "penalty must"),
    "text-penalty": ((DAY, 10, 4), {"penalty": "x"}, TypeError, "penalty must be a"),
    "penalty-linear": ((DAY, 10, 2), {"penalty": 1.0}, ValueError, "order < 3"),
    "empty-domain": (((1.0, 1.0), 10, 4), {}, ValueError, "start < end"),
    "text-domain": (("ab", 10, 4), {}, TypeError, "two real numbers"),
}


@pytest.mark.parametrize("case", sorted(BAD_PARAMETERS))
def test_bad_parameters_are_named(case):
    args, kwargs, error, match = BAD_PARAMETERS[case]
    with pytest.raises(error, match=match):
        IrregularProjection.equispaced(*args, **kwargs)


@pytest.mark.parametrize(
    ("knots", "match"),
    [([5.0, 3.0], "strictly increasing"), ([0.0, 3.0], "strictly inside")],
)
def test_bad_interior_knots_are_named(knots, match):
    with pytest.raises(ValueError, match=f"interior_knots must be .*{match}"):
        IrregularProjection.with_knots(DAY, knots, 4)


def test_min_points_is_checked():
    projection = IrregularProjection.equispaced(DAY, 10, 4)
    with pytest.raises(ValueError, match="min_points must be >= 1"):
        projection.fit_curves(
            np.zeros(3), np.ones(3), np.zeros(3, np.int64), min_points=0
        )


@FAST
@given(
    seed=st.integers(0, 2**32 - 1),
    low=st.floats(-200.0, 200.0),
    width=st.floats(0.1, 300.0),
    penalty=st.sampled_from([0.0, 1e-4, 1e-1]),
)
def test_coefficients_of_bounded_curves_stay_in_the_coefficient_range(
    seed, low, width, penalty
):
    projection = IrregularProjection.equispaced(DAY, 12, 4, penalty=penalty)
    high = low + width
    lo, hi = projection.coefficient_range(low, high, GRID)
    p = projection.projection_matrix(GRID)
    rng = np.random.default_rng(seed)
    y = rng.uniform(low, high, size=(50, GRID.size))
    # extreme curves: each attains one coordinate's bound
    extreme = np.where(p > 0, high, low)
    c = np.vstack([y, extreme]) @ p.T
    slack = 1e-9 * max(abs(low), abs(high))
    assert np.all(c >= lo - slack) and np.all(c <= hi + slack)
    np.testing.assert_allclose(np.diag(c[50:]), hi, rtol=1e-12, atol=slack)
    # constants are reproduced: the range is centred on the middle of the values
    np.testing.assert_allclose((lo + hi) / 2, low + width / 2, rtol=1e-9, atol=slack)


def test_symmetric_coefficient_range_is_the_bspline_coefficient_bound():
    reference = BSplineProjection.fit(grid_points=GRID, n_basis=12, order=4)
    lo, hi = coefficient_range(reference.projection, -3.0, 3.0)
    np.testing.assert_allclose(hi, reference.coefficient_bound(3.0), rtol=1e-14)
    np.testing.assert_allclose(lo, -reference.coefficient_bound(3.0), rtol=1e-14)


def _population(n: int, rng: np.random.Generator, irregular: bool):
    times = (
        np.sort(rng.uniform(*DAY, size=(n, GRID.size)), axis=1)
        if irregular
        else np.broadcast_to(GRID, (n, GRID.size))
    )
    values = 70 + 10 * np.sin(times / 4.0) + rng.normal(size=times.shape)
    who = np.repeat(np.arange(n), GRID.size)
    return times.ravel(), values.ravel(), who


@pytest.mark.parametrize("irregular", [False, True], ids=["common-grid", "irregular"])
def test_the_batched_fit_of_many_subjects_equals_one_subject_at_a_time(irregular):
    # The batched path (one matrix for a shared grid, batches by point count
    # otherwise) must give each subject what projecting it alone gives.
    projection = IrregularProjection.equispaced(DAY, 12, 4, penalty=1e-4)
    n = 2_000
    t, y, who = _population(n, np.random.default_rng(7), irregular)
    fit = projection.fit_clients(t, y, who, np.zeros_like(who), n, min_points=12)
    assert fit.usable.all() and fit.coefficients.shape == (n, 12)
    for i in (0, 1, 999, n - 1):
        rows = who == i
        alone = projection.project_client(t[rows], y[rows], min_points=12)
        np.testing.assert_allclose(fit.coefficients[i], alone, rtol=1e-9, atol=1e-9)


def test_curve_ids_of_any_size_name_the_same_curves():
    # Days may be named by large numbers (an epoch in milliseconds, say); the ids
    # only group observations, so any ids give the same clients.
    projection = IrregularProjection.equispaced(DAY, 8, 4)
    rng = np.random.default_rng(8)
    t = rng.uniform(*DAY, size=400)
    y = rng.normal(size=400)
    who = np.repeat(np.arange(4), 100)
    small = rng.integers(0, 2, size=400)
    large = small * (1 << 61) + (1 << 60)
    np.testing.assert_array_equal(
        projection.fit_clients(t, y, who, large, 4).coefficients,
        projection.fit_clients(t, y, who, small, 4).coefficients,
    )
