"""What a client computes from its raw data before any noise: scaled features."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda.fda.bspline import BSplineProjection
from ldpfda.fda.scaling import CoefficientScaler

__all__ = ["CurveFeaturizer", "Featurizer", "VectorFeaturizer"]


class Featurizer(Protocol):
    """Maps raw client data (curves or vectors) to features in [-1, 1]^p; also the
    interface of a fitted projection, which maps curves to coefficients."""

    @property
    def n_features_out(self) -> int: ...

    def transform(self, X: Any) -> NDArray[np.float64]: ...


class CurveFeaturizer:
    """A projection fitted to the public grid, then rescaling with bounds fixed before
    the private data is seen."""

    def __init__(self, projector: Featurizer, scaler: CoefficientScaler) -> None:
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
        """A :class:`~ldpfda.fda.bspline.BSplineProjection` of the grid, with bounds
        from public calibration curves."""
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
