"""Rescaling of coefficient vectors into [-1, 1]^p with bounds fixed in advance."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import check_finite_array

__all__ = ["CoefficientScaler"]


class CoefficientScaler:
    r"""Affine map of each coordinate from [low_k, high_k] onto [-1, 1], then clipping.

    .. math::

        z_k = \mathrm{clip}\Big(\frac{2 (c_k - \ell_k)}{h_k - \ell_k} - 1, -1, 1\Big)

    The bounds must be fixed before the private data is seen: given directly
    (``low``/``high``, scalars or per-coordinate arrays broadcast to p), or from public
    calibration data (:meth:`from_public`).
    """

    def __init__(
        self, low: float | ArrayLike = -1.0, high: float | ArrayLike = 1.0
    ) -> None:
        self.low = low
        self.high = high

    def _set(self, low: ArrayLike, high: ArrayLike, n_features: int | None) -> None:
        lo = check_finite_array(low, "low")
        hi = check_finite_array(high, "high")
        if n_features is not None:
            lo = np.broadcast_to(lo, (n_features,)).copy()
            hi = np.broadcast_to(hi, (n_features,)).copy()
        if not np.all(hi > lo):
            raise ValueError("high must be > low in every coordinate")
        self.low_, self.high_ = np.atleast_1d(lo), np.atleast_1d(hi)

    def fit(self, n_features: int | None = None) -> CoefficientScaler:
        """Fix the bounds given at construction (broadcast to ``n_features``)."""
        self._set(self.low, self.high, n_features)
        return self

    @classmethod
    def from_public(
        cls, coefficients: ArrayLike, *, margin: float = 0.0, quantile: float = 0.0
    ) -> CoefficientScaler:
        """Bounds from public calibration coefficients: each coordinate's ``quantile``
        .. ``1 - quantile`` range, widened by ``margin`` times its width each side."""
        c = check_finite_array(coefficients, "coefficients", ndim=2)
        lo = np.quantile(c, quantile, axis=0)
        hi = np.quantile(c, 1.0 - quantile, axis=0)
        width = np.maximum(hi - lo, 1e-12)
        scaler = cls(lo - margin * width, hi + margin * width)
        return scaler.fit(c.shape[1])

    def transform(self, coefficients: ArrayLike) -> NDArray[np.float64]:
        """Scaled and clipped coefficients in [-1, 1]^p."""
        if not hasattr(self, "low_"):
            self.fit()
        c = check_finite_array(coefficients, "coefficients", ndim=2)
        if self.low_.size not in (1, c.shape[1]):
            raise ValueError(
                f"coefficients have {c.shape[1]} columns but the bounds have "
                f"{self.low_.size}"
            )
        z = 2.0 * (c - self.low_) / (self.high_ - self.low_) - 1.0
        return np.clip(z, -1.0, 1.0)
