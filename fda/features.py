"""What a client computes from its raw curve before any noise: scaled coefficients."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda.fda.bspline import BSplineProjection
from ldpfda.fda.scaling import CoefficientScaler

__all__ = ["CurveFeaturizer", "Featurizer", "Projector", "VectorFeaturizer"]


class Featurizer(Protocol):
    """Maps raw client data (curves or vectors) to features in [-1, 1]^p."""

    @property
    def n_features_out(self) -> int: ...

    def transform(self, X: Any) -> NDArray[np.float64]: ...


class Projector(Protocol):
    """Maps sampled curves to basis coefficients: a fitted
    :class:`~ldpfda.fda.bspline.BSplineProjection` or
    :class:`~ldpfda.fda.BSplineProjector`."""

    @property
    def n_features_out(self) -> int: ...

    def transform(self, X: Any) -> NDArray[np.float64]: ...


class CurveFeaturizer:
    """B-spline projection followed by rescaling with bounds fixed in advance.

    Parameters
    ----------
    projector : BSplineProjection or BSplineProjector
        Already fitted to the (public) sampling grid.
    scaler : CoefficientScaler
        Bounds fixed before the private data is seen.
    """

    def __init__(self, projector: Projector, scaler: CoefficientScaler) -> None:
        self.projector = projector
        self.scaler = scaler

    @property
    def n_features_out(self) -> int:
        return self.projector.n_features_out

    def transform(self, X: Any) -> NDArray[np.float64]:
        return self.scaler.transform(self.projector.transform(X))

    @classmethod
    def calibrated(
        cls,
        public_curves: Any,
        grid_points: ArrayLike | None = None,
        *,
        n_basis: int = 10,
        order: int = 4,
        quantile: float = 0.0,
        margin: float = 0.0,
    ) -> CurveFeaturizer:
        """Fit the projection to the grid and the bounds to public calibration
        curves.

        The projection is a :class:`~ldpfda.fda.bspline.BSplineProjection` (numpy and
        scipy only).
        """
        projector = BSplineProjection.fit(
            public_curves, grid_points, n_basis=n_basis, order=order
        )
        coefficients = projector.transform(public_curves, grid_points)
        scaler = CoefficientScaler.from_public(
            coefficients, quantile=quantile, margin=margin
        )
        return cls(projector, scaler)


class VectorFeaturizer:
    """Rescaling only, for data that are already finite vectors (the vector design)."""

    def __init__(self, scaler: CoefficientScaler, n_features: int) -> None:
        self.scaler = scaler.fit(n_features) if not hasattr(scaler, "low_") else scaler
        self._n = int(n_features)

    @property
    def n_features_out(self) -> int:
        return self._n

    def transform(self, X: Any) -> NDArray[np.float64]:
        x = np.asarray(X, dtype=float)
        if x.ndim != 2 or x.shape[1] != self._n:
            raise ValueError(f"X must have shape (n, {self._n}), got {x.shape}")
        return self.scaler.transform(x)
