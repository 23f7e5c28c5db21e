"""B-spline projection: agreement with scikit-fda, input forms and input errors."""

from __future__ import annotations

import numpy as np
import pytest
import skfda
from skfda.representation.basis import BSplineBasis
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from ldpfda.fda import BSplineProjector, as_curves


def _irregular(
    rng: np.random.Generator, low: float, high: float, size: int
) -> np.ndarray:
    inner = np.sort(rng.uniform(low, high, size - 2))
    return np.concatenate([[low], inner, [high]])


_RNG = np.random.default_rng(2024)
GRIDS = {
    "regular-50": np.linspace(0.0, 1.0, 50),
    "regular-101-shifted": np.linspace(-1.0, 3.0, 101),
    "irregular-40": _irregular(_RNG, 0.0, 2.0, 40),
    "irregular-clustered-60": np.sort(
        np.concatenate([[0.0, 1.0], _RNG.beta(0.5, 0.5, 58)])
    ),
    "small-12": np.linspace(0.0, 1.0, 12),
}
CASES = [
    ("regular-50", 10, 4),
    ("regular-50", 5, 2),
    ("regular-101-shifted", 15, 4),
    ("regular-101-shifted", 7, 5),
    ("irregular-40", 6, 3),
    ("irregular-40", 12, 4),
    ("irregular-clustered-60", 9, 4),
    ("small-12", 4, 4),  # n_basis == order: a single polynomial piece
    ("small-12", 12, 1),  # as many basis functions as points: interpolation
]


def _curves(grid: np.ndarray, n: int = 9, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    smooth = np.sin(np.outer(rng.uniform(1, 6, n), grid)) * rng.uniform(-3, 3, (n, 1))
    return smooth + 0.3 * rng.normal(size=(n, grid.size))


@pytest.mark.parametrize(("grid_name", "n_basis", "order"), CASES)
def test_projection_equals_skfda_to_basis(grid_name, n_basis, order):
    grid = GRIDS[grid_name]
    values = _curves(grid)
    fd = skfda.FDataGrid(values, grid)
    basis = BSplineBasis(domain_range=(grid[0], grid[-1]), n_basis=n_basis, order=order)
    expected = fd.to_basis(basis).coefficients
    projector = BSplineProjector(n_basis=n_basis, order=order).fit(fd)
    np.testing.assert_allclose(projector.transform(fd), expected, rtol=0, atol=1e-8)
    assert projector.transform(fd).shape == (values.shape[0], n_basis)
    assert projector.projection_.shape == (n_basis, grid.size)


@pytest.mark.parametrize(("grid_name", "n_basis", "order"), CASES[:5])
def test_fdatagrid_and_array_plus_grid_give_the_same(grid_name, n_basis, order):
    grid = GRIDS[grid_name]
    values = _curves(grid, seed=1)
    fd = skfda.FDataGrid(values, grid)
    from_fd = BSplineProjector(n_basis=n_basis, order=order).fit(fd)
    from_array = BSplineProjector(n_basis=n_basis, order=order).fit(values, grid)
    from_grid = BSplineProjector(n_basis=n_basis, order=order).fit(grid_points=grid)
    np.testing.assert_array_equal(from_fd.projection_, from_array.projection_)
    np.testing.assert_array_equal(from_fd.projection_, from_grid.projection_)
    expected = from_fd.transform(fd)
    np.testing.assert_array_equal(from_array.transform(values), expected)
    np.testing.assert_array_equal(from_array.transform(values, grid), expected)
    np.testing.assert_array_equal(from_array.transform(fd), expected)
    np.testing.assert_array_equal(as_curves(fd)[0], as_curves(values, grid)[0])


def test_a_spline_in_the_basis_is_recovered_exactly():
    grid = GRIDS["irregular-40"]
    projector = BSplineProjector(n_basis=8, order=4).fit(grid_points=grid)
    coef = np.random.default_rng(3).normal(size=(5, 8))
    curves = coef @ projector.design_.T
    np.testing.assert_allclose(projector.transform(curves), coef, atol=1e-10)


def test_projector_is_an_sklearn_estimator():
    projector = BSplineProjector(n_basis=6, order=3)
    assert projector.get_params() == {"n_basis": 6, "order": 3, "domain_range": None}
    assert clone(projector).get_params() == projector.get_params()
    assert projector.fit(grid_points=GRIDS["regular-50"]) is projector
    assert projector.n_features_out == 6
    with pytest.raises(NotFittedError):
        BSplineProjector().transform(np.zeros((1, 50)), GRIDS["regular-50"])
    with pytest.raises(NotFittedError):
        BSplineProjector().coefficient_bound(1.0)


# --- errors ---------------------------------------------------------------------------


GRID = np.linspace(0.0, 1.0, 20)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_samples_are_refused(bad):
    values = _curves(GRID, n=3)
    values[1, 7] = bad
    projector = BSplineProjector(n_basis=6).fit(grid_points=GRID)
    with pytest.raises(
        ValueError,
        match=r"curves contains 1 NaN or infinite value\(s\), "
        r"first at index \(1, 7\)",
    ):
        projector.transform(values)
    with pytest.raises(ValueError, match="curves contains"):
        projector.transform(skfda.FDataGrid(values, GRID))
    with pytest.raises(ValueError, match="curves contains"):
        BSplineProjector(n_basis=6).fit(values, GRID)


def test_wrong_grid_length_is_refused():
    with pytest.raises(ValueError, match="grid_points has 19 points"):
        BSplineProjector(n_basis=6).fit(_curves(GRID), GRID[:-1])
    with pytest.raises(ValueError, match="grid_points"):
        as_curves(np.zeros((2, 20)), np.linspace(0, 1, 21))


@pytest.mark.parametrize(
    "grid",
    [GRID[::-1], np.r_[GRID[:5], GRID[4], GRID[6:]], np.r_[GRID[:-1], [np.nan]]],
    ids=["decreasing", "repeated-point", "nan-point"],
)
def test_non_increasing_or_non_finite_grid_is_refused(grid):
    with pytest.raises(ValueError, match="grid_points"):
        BSplineProjector(n_basis=6).fit(grid_points=grid)
    with pytest.raises(ValueError, match="grid_points"):
        as_curves(np.zeros((2, 20)), grid)


def test_bad_basis_sizes_are_refused_and_named():
    with pytest.raises(ValueError, match=r"n_basis must be >= order \(4\), got 3"):
        BSplineProjector(n_basis=3, order=4).fit(grid_points=GRID)
    with pytest.raises(ValueError, match="n_basis"):
        BSplineProjector(n_basis=21, order=4).fit(grid_points=GRID)  # more than points
    with pytest.raises(ValueError, match="order"):
        BSplineProjector(n_basis=5, order=0).fit(grid_points=GRID)
    with pytest.raises(TypeError, match="n_basis"):
        BSplineProjector(n_basis=5.0).fit(grid_points=GRID)


def test_other_input_errors_are_named():
    projector = BSplineProjector(n_basis=6).fit(grid_points=GRID)
    with pytest.raises(ValueError, match="differs from the fitted grid"):
        projector.transform(np.zeros((2, 30)), np.linspace(0, 1, 30))
    with pytest.raises(ValueError, match="grid_points are required"):
        as_curves(np.zeros((2, 20)))
    with pytest.raises(ValueError, match="grid_points must not be given"):
        as_curves(skfda.FDataGrid(np.zeros((2, 20)), GRID), GRID)
    with pytest.raises(ValueError, match="curves must be 2-D"):
        as_curves(np.zeros(20), GRID)
    with pytest.raises(ValueError, match="fit needs"):
        BSplineProjector().fit()
    with pytest.raises(ValueError, match="domain_range"):
        BSplineProjector(n_basis=6, domain_range=(0.2, 1.0)).fit(grid_points=GRID)


# --- coefficient bound ----------------------------------------------------------------


@pytest.mark.parametrize(("grid_name", "n_basis", "order"), CASES[:6])
def test_coefficient_bound_bounds_every_curve_within_the_bound(
    grid_name, n_basis, order
):
    grid = GRIDS[grid_name]
    projector = BSplineProjector(n_basis=n_basis, order=order).fit(grid_points=grid)
    curve_bound = 2.5
    bound = projector.coefficient_bound(curve_bound)
    rng = np.random.default_rng(7)
    curves = np.concatenate(
        [
            rng.uniform(-curve_bound, curve_bound, (2000, grid.size)),
            curve_bound * rng.choice([-1.0, 1.0], (2000, grid.size)),  # on the boundary
            np.clip(_curves(grid, n=200, seed=8), -curve_bound, curve_bound),
        ]
    )
    coef = projector.transform(curves, grid)
    assert np.all(np.abs(coef) <= bound * (1 + 1e-12))
    # The bound is attained: for coefficient k the curve sign(P_k) * bound reaches it.
    worst = curve_bound * np.sign(projector.projection_)
    np.testing.assert_allclose(
        np.diag(projector.transform(worst, grid)), bound, rtol=1e-12
    )
