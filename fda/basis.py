"""Projection of curves onto a B-spline basis as one precomputed linear map."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator, TransformerMixin

from ldpfda._validation import check_finite_array, check_int

__all__ = ["BSplineProjector", "as_curves"]


def _check_grid(grid_points: ArrayLike) -> NDArray[np.float64]:
    grid = check_finite_array(grid_points, "grid_points", ndim=1)
    if grid.size < 2:
        raise ValueError(f"grid_points must have at least 2 points, got {grid.size}")
    if not np.all(np.diff(grid) > 0):
        raise ValueError("grid_points must be strictly increasing")
    return grid


def as_curves(
    X: Any, grid_points: ArrayLike | None = None
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Return ``(values, grid)`` from an ``FDataGrid`` or a 2-D array plus grid points.

    Values are ``(n_curves, n_points)``; NaN/inf samples, a grid of the wrong length
    and a non-increasing grid are refused with a ``ValueError`` naming the problem.
    """
    if hasattr(X, "data_matrix") and hasattr(X, "grid_points"):  # skfda.FDataGrid
        if X.dim_domain != 1 or X.dim_codomain != 1:
            raise ValueError(
                f"curves must be univariate functions of one variable, got "
                f"dim_domain={X.dim_domain}, dim_codomain={X.dim_codomain}"
            )
        if grid_points is not None:
            raise ValueError("grid_points must not be given with an FDataGrid")
        values = check_finite_array(X.data_matrix[..., 0], "curves", ndim=2)
        return values, _check_grid(X.grid_points[0])
    if grid_points is None:
        raise ValueError("grid_points are required when curves are a plain array")
    values = check_finite_array(X, "curves", ndim=2)
    grid = _check_grid(grid_points)
    if values.shape[1] != grid.size:
        raise ValueError(
            f"curves have {values.shape[1]} samples per curve but grid_points has "
            f"{grid.size} points"
        )
    return values, grid


class BSplineProjector(TransformerMixin, BaseEstimator):
    r"""Least-squares coefficients of curves in a B-spline basis.

    For a fixed grid :math:`t_1<\dots<t_T` and the basis matrix
    :math:`\Phi_{ik} = B_k(t_i)`, the coefficients of a curve sampled as :math:`x` are
    :math:`c = (\Phi^\top\Phi)^{-1}\Phi^\top x`. The :math:`p\times T` map is computed
    once in :meth:`fit` and applied to all curves at once, so projecting a million
    curves is one matrix product. It equals scikit-fda's ``FDataGrid.to_basis`` with
    the same basis.

    Parameters
    ----------
    n_basis : int, default 10
        Number of basis functions p.
    order : int, default 4
        Spline order (4 = cubic). Must not exceed ``n_basis``.
    domain_range : tuple of float, optional
        The basis domain; the grid's range if None.

    Attributes
    ----------
    grid_points_ : ndarray of shape (T,)
    projection_ : ndarray of shape (p, T)
        The linear map from sampled values to coefficients.
    basis_ : skfda BSplineBasis

    References
    ----------
    J. O. Ramsay, B. W. Silverman, *Functional Data Analysis*, 2nd ed., Springer 2005,
    ch. 4-5. C. Ramos-Carreño et al., "scikit-fda: a Python package for functional data
    analysis", J. Stat. Softw. 109 (2024).
    """

    def __init__(
        self,
        n_basis: int = 10,
        order: int = 4,
        domain_range: tuple[float, float] | None = None,
    ) -> None:
        self.n_basis = n_basis
        self.order = order
        self.domain_range = domain_range

    def fit(
        self, X: Any = None, grid_points: ArrayLike | None = None
    ) -> BSplineProjector:
        """Precompute the projection for the grid of ``X`` (or for ``grid_points``)."""
        from skfda.representation.basis import BSplineBasis

        order = check_int(self.order, "order", minimum=1)
        n_basis = check_int(self.n_basis, "n_basis", minimum=1)
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
            if self.domain_range is None
            else (float(self.domain_range[0]), float(self.domain_range[1]))
        )
        if not (
            domain[0] <= grid[0] and grid[-1] <= domain[1] and domain[0] < domain[1]
        ):
            raise ValueError(f"domain_range {domain} must contain the grid")
        basis = BSplineBasis(domain_range=domain, n_basis=n_basis, order=order)
        phi = basis(grid)[:, :, 0].T  # (T, p)
        projection, *_ = np.linalg.lstsq(phi, np.eye(grid.size), rcond=None)
        self.basis_ = basis
        self.grid_points_ = grid
        self.design_ = phi
        self.projection_ = projection  # (p, T)
        return self

    @property
    def n_features_out(self) -> int:
        return int(self.n_basis)

    def transform(
        self, X: Any, grid_points: ArrayLike | None = None
    ) -> NDArray[np.float64]:
        """Coefficients, shape ``(n_curves, n_basis)``."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "projection_")
        values, grid = as_curves(
            X,
            self.grid_points_
            if grid_points is None and not hasattr(X, "data_matrix")
            else grid_points,
        )
        if grid.shape != self.grid_points_.shape or not np.allclose(
            grid, self.grid_points_
        ):
            raise ValueError(
                f"curves are sampled on a grid of {grid.size} points that differs "
                f"from the fitted grid of {self.grid_points_.size} points"
            )
        return values @ self.projection_.T

    def coefficient_bound(self, curve_bound: float) -> NDArray[np.float64]:
        r"""Largest :math:`|c_k|` over all curves with :math:`|x(t_i)| \le`
        ``curve_bound``.

        Row ``k`` of the projection bounds it by :math:`\|P_k\|_1 \cdot`
        ``curve_bound``: a data-independent bound.
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "projection_")
        return np.abs(self.projection_).sum(axis=1) * float(curve_bound)
