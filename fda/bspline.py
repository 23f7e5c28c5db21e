r"""B-spline basis and least-squares projection with numpy only.

What a client runs: :class:`BSplineProjection` maps sampled curves to B-spline
coefficients by one precomputed :math:`p\times T` matrix, without scikit-learn or
scikit-fda (:class:`~ldpfda.fda.BSplineProjector` wraps it for scikit-learn). The
basis is scikit-fda's ``BSplineBasis(domain_range, n_basis, order)``, bit for bit: the
same knots (:func:`bspline_knots`) and the de Boor recursion that scipy's
``BSpline.design_matrix`` runs, which scikit-fda itself calls (:func:`bspline_design`,
in numpy alone).

References
----------
C. de Boor, *A Practical Guide to Splines*, revised ed., Springer 2001, ch. IX.
J. O. Ramsay, B. W. Silverman, *Functional Data Analysis*, 2nd ed., Springer 2005,
ch. 3-5.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import check_finite_array, check_int

__all__ = [
    "BSplineProjection",
    "as_curves",
    "bspline_design",
    "bspline_knots",
]


def _check_grid(grid_points: ArrayLike) -> NDArray[np.float64]:
    """``grid_points`` as a finite, strictly increasing float array of >= 2 points."""
    grid = check_finite_array(grid_points, "grid_points", ndim=1)
    if grid.size < 2:
        raise ValueError(f"grid_points must have at least 2 points, got {grid.size}")
    if not np.all(np.diff(grid) > 0):
        raise ValueError("grid_points must be strictly increasing")
    return grid


def as_curves(
    X: Any, grid_points: ArrayLike | None = None, *, name: str = "curves"
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``(values, grid)``, values ``(n_curves, n_points)``, from an ``FDataGrid``
    (recognised by its attributes, without importing scikit-fda) or a 2-D array plus
    grid points; non-finite samples and bad grids raise a ``ValueError``."""
    if hasattr(X, "data_matrix") and hasattr(X, "grid_points"):  # skfda.FDataGrid
        if X.dim_domain != 1 or X.dim_codomain != 1:
            raise ValueError(
                f"{name} must be univariate functions of one variable, got "
                f"dim_domain={X.dim_domain}, dim_codomain={X.dim_codomain}"
            )
        if grid_points is not None:
            raise ValueError("grid_points must not be given with an FDataGrid")
        values = check_finite_array(X.data_matrix[..., 0], name, ndim=2)
        return values, _check_grid(X.grid_points[0])
    if grid_points is None:
        raise ValueError(f"grid_points are required when {name} are a plain array")
    values = check_finite_array(X, name, ndim=2)
    grid = _check_grid(grid_points)
    if values.shape[1] != grid.size:
        raise ValueError(
            f"{name} have {values.shape[1]} samples per curve but grid_points has "
            f"{grid.size} points"
        )
    return values, grid


def bspline_knots(
    domain_range: tuple[float, float], n_basis: int, order: int
) -> NDArray[np.float64]:
    """Knot vector of scikit-fda's ``BSplineBasis(domain_range, n_basis, order)``:
    ``n_basis - order + 2`` equispaced knots, the ends repeated ``order - 1`` more
    times."""
    inner = np.linspace(
        float(domain_range[0]), float(domain_range[1]), n_basis - order + 2
    )
    return np.concatenate(
        [np.repeat(inner[0], order - 1), inner, np.repeat(inner[-1], order - 1)]
    )


def bspline_design(
    grid_points: ArrayLike, knots: ArrayLike, order: int
) -> NDArray[np.float64]:
    r"""Dense basis matrix :math:`\Phi_{ik} = B_k(t_i)` (T, n_basis) on points within
    the boundary knots.

    De Boor's recursion (de Boor 2001, ch. X), vectorised over the points, with the
    operations in the order scipy's ``BSpline.design_matrix`` runs them, so that the
    two agree bit for bit (tests/fda/test_bspline.py checks it) without a host
    importing scipy.interpolate (0.4-0.6 s of every ClientApp process otherwise).
    """
    x = np.asarray(grid_points, dtype=float)
    t = np.asarray(knots, dtype=float)
    k = order - 1
    n = t.size - order  # basis functions
    if k < 0 or n < order:
        raise ValueError(f"{t.size} knots do not hold a basis of order {order}")
    if x.size and not (t[k] <= x.min() and x.max() <= t[n]):
        raise ValueError(
            f"points must lie within the boundary knots [{t[k]}, {t[n]}], got "
            f"[{x.min()}, {x.max()}]"
        )
    # the knot interval [t[l], t[l + 1]) of every point; the last point of the
    # domain belongs to the last interval
    ell = np.clip(np.searchsorted(t, x, side="right") - 1, k, n - 1)
    h = np.zeros((order, x.size))
    h[0] = 1.0
    for j in range(1, order):
        before = h[:j].copy()
        h[0] = 0.0
        for m in range(1, j + 1):
            right, left = t[ell + m], t[ell + m - j]
            apart = right != left
            w = before[m - 1] / np.where(apart, right - left, 1.0)
            h[m - 1] += np.where(apart, w * (right - x), 0.0)
            h[m] = np.where(apart, w * (x - left), 0.0)
    phi = np.zeros((x.size, n))
    rows = np.arange(x.size)
    for c in range(order):
        phi[rows, ell - k + c] = h[c]
    return phi


@dataclass(frozen=True, eq=False)
class BSplineProjection:
    r"""Least-squares coefficients of curves sampled on one grid, as a linear map.

    For the basis matrix :math:`\Phi_{ik} = B_k(t_i)` on the grid, a curve sampled as
    :math:`x` has coefficients :math:`c = (\Phi^\top\Phi)^{-1}\Phi^\top x = P x`.
    :meth:`fit` builds it, computing :math:`P` once.
    """

    n_basis: int
    order: int
    domain_range: tuple[float, float]
    grid_points: NDArray[np.float64] = field(repr=False)
    #: :math:`\Phi`, shape (T, p).
    design: NDArray[np.float64] = field(repr=False)
    #: :math:`P`, shape (p, T).
    projection: NDArray[np.float64] = field(repr=False)

    @classmethod
    def fit(
        cls,
        X: Any = None,
        grid_points: ArrayLike | None = None,
        *,
        n_basis: int = 10,
        order: int = 4,
        domain_range: tuple[float, float] | None = None,
    ) -> BSplineProjection:
        """The projection for the grid of curves ``X`` (or for ``grid_points``), on
        ``domain_range`` (the grid's range if None), which must contain the grid."""
        order = check_int(order, "order", minimum=1)
        n_basis = check_int(n_basis, "n_basis", minimum=1)
        if n_basis < order:
            raise ValueError(f"n_basis must be >= order ({order}), got {n_basis}")
        if X is not None:
            _, grid = as_curves(X, grid_points)
        elif grid_points is not None:
            grid = _check_grid(grid_points)
        else:
            raise ValueError("fit needs curves or grid_points")
        if grid.size < n_basis:
            raise ValueError(
                f"n_basis must be <= the number of grid points ({grid.size}), "
                f"got {n_basis}"
            )
        domain = (
            (float(grid[0]), float(grid[-1]))
            if domain_range is None
            else (float(domain_range[0]), float(domain_range[1]))
        )
        if not (
            domain[0] <= grid[0] and grid[-1] <= domain[1] and domain[0] < domain[1]
        ):
            raise ValueError(f"domain_range {domain} must contain the grid")
        phi = bspline_design(grid, bspline_knots(domain, n_basis, order), order)
        projection, *_ = np.linalg.lstsq(phi, np.eye(grid.size), rcond=None)
        # lstsq of two float64 arrays is float64; the stub only promises a float.
        return cls(
            n_basis, order, domain, grid, phi, cast(NDArray[np.float64], projection)
        )

    @property
    def n_features_out(self) -> int:
        return self.n_basis

    @property
    def knots(self) -> NDArray[np.float64]:
        """The full knot vector (boundary knots repeated ``order`` times)."""
        return bspline_knots(self.domain_range, self.n_basis, self.order)

    def transform(
        self, X: Any, grid_points: ArrayLike | None = None
    ) -> NDArray[np.float64]:
        """Coefficients, shape ``(n_curves, n_basis)``, of curves on the fitted grid."""
        values, grid = as_curves(
            X,
            self.grid_points
            if grid_points is None and not hasattr(X, "data_matrix")
            else grid_points,
        )
        if grid.shape != self.grid_points.shape or not np.allclose(
            grid, self.grid_points
        ):
            raise ValueError(
                f"curves are sampled on a grid of {grid.size} points that differs "
                f"from the fitted grid of {self.grid_points.size} points"
            )
        return values @ self.projection.T

    def coefficient_bound(self, curve_bound: float) -> NDArray[np.float64]:
        r"""Largest :math:`|c_k|` over curves with :math:`|x(t_i)| \le` ``curve_bound``:
        :math:`\|P_k\|_1` ``curve_bound``, a data-independent bound."""
        return np.abs(self.projection).sum(axis=1) * float(curve_bound)
