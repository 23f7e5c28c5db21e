"""Projection of curves onto a B-spline basis, as a scikit-learn transformer.

A wrapper of :mod:`ldpfda.fda.bspline`; importing it imports scikit-learn.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ldpfda.fda.bspline import BSplineProjection

__all__ = ["BSplineProjector"]


class BSplineProjector(TransformerMixin, BaseEstimator):
    r"""Least-squares coefficients of curves in a B-spline basis.

    A scikit-learn wrapper of :class:`~ldpfda.fda.bspline.BSplineProjection`: for the
    basis matrix :math:`\Phi_{ik} = B_k(t_i)` on the grid, the coefficients of a curve
    sampled as :math:`x` are :math:`c = (\Phi^\top\Phi)^{-1}\Phi^\top x`, equal to
    scikit-fda's ``FDataGrid.to_basis`` with the same basis, bit for bit. ``order`` 4
    is cubic and must not exceed ``n_basis``; ``domain_range`` defaults to the grid's.
    :meth:`fit` sets ``grid_points_``, ``design_`` (T, p) and ``projection_`` (p, T);
    ``basis_``, the scikit-fda ``BSplineBasis``, is built (and scikit-fda imported) on
    first access.

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
        spline = BSplineProjection.fit(
            X,
            grid_points,
            n_basis=self.n_basis,
            order=self.order,
            domain_range=self.domain_range,
        )
        self.__dict__.pop("_basis", None)
        self._spline = spline
        self.grid_points_ = spline.grid_points
        self.design_ = spline.design
        self.projection_ = spline.projection  # (p, T)
        return self

    @property
    def basis_(self) -> Any:
        """The fitted scikit-fda ``BSplineBasis`` (built on first access)."""
        spline = self.__dict__.get("_spline")
        if spline is None:
            raise AttributeError("basis_ is set by fit")
        if "_basis" not in self.__dict__:
            from skfda.representation.basis import BSplineBasis

            self._basis = BSplineBasis(
                domain_range=spline.domain_range,
                n_basis=spline.n_basis,
                order=spline.order,
            )
        return self._basis

    @property
    def n_features_out(self) -> int:
        return int(self.n_basis)

    def transform(
        self, X: Any, grid_points: ArrayLike | None = None
    ) -> NDArray[np.float64]:
        """Coefficients, shape ``(n_curves, n_basis)``."""
        check_is_fitted(self, "projection_")
        return self._spline.transform(X, grid_points)

    def coefficient_bound(self, curve_bound: float) -> NDArray[np.float64]:
        """See :meth:`BSplineProjection.coefficient_bound`."""
        check_is_fitted(self, "projection_")
        return self._spline.coefficient_bound(curve_bound)
