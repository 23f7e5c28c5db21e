"""The Laplace mechanism for vectors in a box."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import check_epsilon, check_int, check_real
from ldpfda.privacy.base import Mechanism
from ldpfda.privacy.random import RandomLike, uniform

__all__ = ["LaplaceMechanism", "laplace_epsilon", "laplace_scale"]


def laplace_scale(*, epsilon: float, sensitivity: float) -> float:
    r"""Laplace scale that makes a release of L1 ``sensitivity`` epsilon-DP.

    .. math:: b = \Delta_1 / \varepsilon

    ``epsilon = inf`` gives ``b = 0`` (no noise). Inverse of :func:`laplace_epsilon`.

    References
    ----------
    C. Dwork, F. McSherry, K. Nissim, A. Smith, "Calibrating noise to sensitivity in
    private data analysis", TCC 2006.
    """
    epsilon = check_epsilon(epsilon)
    sensitivity = check_real(sensitivity, "sensitivity", low=0.0, low_open=True)
    return 0.0 if math.isinf(epsilon) else sensitivity / epsilon


def laplace_epsilon(*, scale: float, sensitivity: float) -> float:
    r"""Epsilon of a Laplace release with scale ``b``: :math:`\varepsilon = \Delta_1 / b`.

    ``scale = 0`` gives ``inf``. Inverse of :func:`laplace_scale`.
    """
    scale = check_real(scale, "scale", low=0.0)
    sensitivity = check_real(sensitivity, "sensitivity", low=0.0, low_open=True)
    return math.inf if scale == 0 else sensitivity / scale


class LaplaceMechanism(Mechanism):
    r"""Laplace noise on vectors in :math:`[\mathrm{lower}, \mathrm{upper}]^p`.

    Each client releases :math:`z = x + (b\,\xi_1, \dots, b\,\xi_p)` with i.i.d. standard
    Laplace :math:`\xi_k`. Two inputs in the box differ by at most
    :math:`\Delta_1 = p(\mathrm{upper} - \mathrm{lower})` in L1 norm, so
    :math:`b = p(\mathrm{upper}-\mathrm{lower})/\varepsilon` makes the whole vector
    epsilon-LDP; equivalently, every coordinate spends :math:`\varepsilon/p`. Inputs are
    clipped to the box first, so values outside it cannot break the guarantee.

    The release is unbiased for inputs in the box, with variance :math:`2b^2` per entry.

    Parameters
    ----------
    epsilon : float
        Total epsilon of one vector release, in (0, inf].
    dimension : int
        Length p of each client's vector.
    lower, upper : float
        The box, fixed before any private data is seen.

    References
    ----------
    C. Dwork, F. McSherry, K. Nissim, A. Smith, TCC 2006; J. Duchi, M. Jordan,
    M. Wainwright, "Local privacy and statistical minimax rates", FOCS 2013.
    """

    name = "laplace"

    def __init__(
        self, *, epsilon: float, dimension: int, lower: float = -1.0, upper: float = 1.0
    ) -> None:
        super().__init__(epsilon=epsilon)
        self.dimension = check_int(dimension, "dimension", minimum=1)
        self.lower = check_real(lower, "lower")
        self.upper = check_real(upper, "upper")
        if not self.upper > self.lower:
            raise ValueError(f"upper must be > lower, got lower={lower!r}, upper={upper!r}")
        self.scale = laplace_scale(epsilon=self.epsilon, sensitivity=self.sensitivity)

    @property
    def sensitivity(self) -> float:
        return self.dimension * (self.upper - self.lower)

    def parameters(self) -> dict[str, Any]:
        return {"dimension": self.dimension, "scale": self.scale,
                "lower": self.lower, "upper": self.upper}

    def _check_values(self, values: ArrayLike) -> NDArray[np.float64]:
        x = np.asarray(values, dtype=float)
        if x.ndim != 2 or x.shape[1] != self.dimension:
            raise ValueError(
                f"values must have shape (n_clients, {self.dimension}), got {x.shape}"
            )
        if not np.all(np.isfinite(x)):
            raise ValueError("values contain NaN or infinite entries")
        return x

    def randomise(self, values: ArrayLike, rng: RandomLike = None) -> NDArray[np.float64]:
        x = np.clip(self._check_values(values), self.lower, self.upper)
        if not self.is_private:
            return x
        u = uniform(rng, x.shape) - 0.5
        # Inverse CDF of the Laplace law: -b sign(u) log(1 - 2|u|), u uniform on (-1/2, 1/2).
        return x - self.scale * np.sign(u) * np.log1p(-2.0 * np.abs(u))

    def bias(self, values: ArrayLike) -> NDArray[np.float64]:
        x = self._check_values(values)
        return np.clip(x, self.lower, self.upper) - x

    def variance(self, values: ArrayLike) -> NDArray[np.float64]:
        return np.full(self._check_values(values).shape, 2.0 * self.scale**2)

    def log_density_ratio_bound(self) -> float:
        """Largest log ratio of output densities over neighbouring inputs (= epsilon)."""
        return self.sensitivity / self.scale if self.scale > 0 else math.inf
