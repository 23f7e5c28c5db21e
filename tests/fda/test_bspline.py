"""The numpy B-spline core reproduces scikit-fda's basis, and scipy's, bit for bit.

Fixed-seed tables and the Flower-equals-in-process tests pin numbers computed through
this projection, so agreement is checked with exact equality, not a tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest

from ldpfda.datasets.synthetic import make_design
from ldpfda.fda import BSplineProjection, BSplineProjector, CurveFeaturizer
from ldpfda.fda.bspline import bspline_design, bspline_knots

skfda = pytest.importorskip("skfda")
BSplineBasis = pytest.importorskip("skfda.representation.basis").BSplineBasis

_RNG = np.random.default_rng(11)
DESIGN_GRID = make_design("functional").grid_points
GRIDS = {
    "functional-design": DESIGN_GRID,
    "regular-50": np.linspace(0.0, 1.0, 50),
    "regular-101-shifted": np.linspace(-1.0, 3.0, 101),
    "odd-range-77": np.linspace(0.3, 7.7, 77),
    "irregular-40": np.concatenate([[0.0], np.sort(_RNG.uniform(0.0, 2.0, 38)), [2.0]]),
    "irregular-clustered-60": np.sort(
        np.concatenate([[0.0, 1.0], _RNG.beta(0.5, 0.5, 58)])
    ),
    "interior-30": np.sort(_RNG.uniform(0.1, 0.9, 30)),
    "log-64": np.logspace(-2.0, 1.0, 64),
    "small-12": np.linspace(0.0, 1.0, 12),
}
SIZES = [(10, 4), (4, 4), (5, 2), (7, 5), (12, 1), (15, 3), (20, 6), (12, 12)]


def _domains(grid: np.ndarray) -> list[tuple[float, float]]:
    low, high = float(grid[0]), float(grid[-1])
    return [(low, high), (low - 0.5, high + 0.25), (min(low, 0.0), max(high, 10.0))]


CASES = [
    pytest.param(grid, domain, n_basis, order, id=f"{name}-{d}-{n_basis}-{order}")
    for name, grid in GRIDS.items()
    for d, domain in enumerate(_domains(grid))
    for n_basis, order in SIZES
    if n_basis <= grid.size
]


def _skfda_design(grid, domain, n_basis, order):
    basis = BSplineBasis(domain_range=domain, n_basis=n_basis, order=order)
    return basis, basis(grid)[:, :, 0].T


def _knots(rng: np.random.Generator, order: int, kind: str) -> np.ndarray:
    lo, hi = np.sort(rng.normal(0.0, 10.0, 2)) + np.array([0.0, 1e-3])
    if kind == "uniform":
        return bspline_knots((lo, hi), int(rng.integers(order, order + 30)), order)
    inner = np.sort(rng.uniform(lo, hi, int(rng.integers(1, 15))))
    if kind == "repeated":
        inner = np.sort(np.r_[inner, rng.choice(inner, min(order, inner.size))])
    return np.r_[np.repeat(lo, order), inner, np.repeat(hi, order)]


@pytest.mark.parametrize("kind", ["uniform", "uneven", "repeated"])
@pytest.mark.parametrize("order", range(1, 8))
def test_design_equals_scipys_design_matrix_exactly(order, kind):
    """Any knot vector (uneven, repeated interior knots) and any points within it,
    the boundary knots and the knots themselves among them: the irregular path
    evaluates the basis at each subject's own timestamps."""
    interpolate = pytest.importorskip("scipy.interpolate")
    rng = np.random.default_rng([order, len(kind)])
    for _ in range(40):
        t = _knots(rng, order, kind)
        lo, hi = t[order - 1], t[-order]
        x = np.sort(np.r_[lo, rng.uniform(lo, hi, int(rng.integers(1, 200))), hi])
        x = np.r_[x, t[order:-order]] if kind != "uniform" else x
        ours = bspline_design(x, t, order)
        theirs = interpolate.BSpline.design_matrix(x, t, order - 1).toarray()
        assert ours.shape == theirs.shape
        assert np.array_equal(ours, theirs)


def test_design_refuses_points_outside_the_boundary_knots():
    knots = bspline_knots((0.0, 1.0), 6, 4)
    with pytest.raises(ValueError, match=r"within the boundary knots \[0.0, 1.0\]"):
        bspline_design([0.5, 1.0 + 1e-12], knots, 4)


@pytest.mark.parametrize(("grid", "domain", "n_basis", "order"), CASES)
def test_design_and_projection_equal_skfda_exactly(grid, domain, n_basis, order):
    basis, expected_design = _skfda_design(grid, domain, n_basis, order)
    expected_projection, *_ = np.linalg.lstsq(
        expected_design, np.eye(grid.size), rcond=None
    )
    knots = bspline_knots(domain, n_basis, order)
    assert knots.size == n_basis + order
    np.testing.assert_array_equal(knots[order - 1 : n_basis + 1], basis.knots)
    np.testing.assert_array_equal(knots[:order], np.full(order, basis.knots[0]))
    np.testing.assert_array_equal(knots[-order:], np.full(order, basis.knots[-1]))
    assert np.array_equal(bspline_design(grid, knots, order), expected_design)

    spline = BSplineProjection.fit(
        grid_points=grid, n_basis=n_basis, order=order, domain_range=domain
    )
    assert spline.design.shape == (grid.size, n_basis)
    assert np.array_equal(spline.design, expected_design)
    assert np.array_equal(spline.projection, expected_projection)
    projector = BSplineProjector(n_basis, order, domain).fit(grid_points=grid)
    assert np.array_equal(projector.design_, expected_design)
    assert np.array_equal(projector.projection_, expected_projection)
    assert projector.basis_ == basis


def test_functional_design_features_equal_the_skfda_computation():
    design = make_design("functional")
    grid = design.grid_points
    public, _ = design.sample(1000, rng=1)
    private, _ = design.sample(300, rng=2)
    featurizer = CurveFeaturizer.calibrated(public, grid, n_basis=10, order=4)
    assert isinstance(featurizer.projector, BSplineProjection)

    _, phi = _skfda_design(grid, (0.0, 1.0), 10, 4)
    projection, *_ = np.linalg.lstsq(phi, np.eye(grid.size), rcond=None)
    assert np.array_equal(featurizer.projector.projection, projection)
    assert np.array_equal(
        featurizer.projector.transform(private), private @ projection.T
    )
    # The sklearn transformer and the light core give the same features.
    projector = BSplineProjector(n_basis=10, order=4).fit(public, grid)
    via_sklearn = CurveFeaturizer(projector, featurizer.scaler)
    assert np.array_equal(via_sklearn.transform(private), featurizer.transform(private))
    fd = skfda.FDataGrid(private, grid)
    assert np.array_equal(projector.transform(fd), featurizer.projector.transform(fd))
    assert np.array_equal(
        projector.coefficient_bound(2.0), featurizer.projector.coefficient_bound(2.0)
    )


def test_basis_is_built_on_first_access_and_reset_by_refit():
    projector = BSplineProjector(n_basis=6, order=3)
    assert not hasattr(projector, "basis_")
    projector.fit(grid_points=GRIDS["regular-50"])
    first = projector.basis_
    assert first is projector.basis_
    assert first == BSplineBasis(domain_range=(0.0, 1.0), n_basis=6, order=3)
    projector.set_params(n_basis=8).fit(grid_points=GRIDS["regular-101-shifted"])
    assert projector.basis_ == BSplineBasis(
        domain_range=(-1.0, 3.0), n_basis=8, order=3
    )


def test_projection_keeps_the_projector_errors():
    grid = np.linspace(0.0, 1.0, 20)
    with pytest.raises(ValueError, match=r"n_basis must be >= order \(4\), got 3"):
        BSplineProjection.fit(grid_points=grid, n_basis=3, order=4)
    with pytest.raises(ValueError, match="fit needs"):
        BSplineProjection.fit()
    with pytest.raises(ValueError, match="domain_range"):
        BSplineProjection.fit(grid_points=grid, n_basis=6, domain_range=(0.2, 1.0))
    spline = BSplineProjection.fit(grid_points=grid, n_basis=6)
    with pytest.raises(ValueError, match="differs from the fitted grid"):
        spline.transform(np.zeros((2, 30)), np.linspace(0, 1, 30))
