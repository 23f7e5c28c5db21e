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

    **Floating-point safety.** Sampling :math:`x + b\xi` in floating point leaks
    :math:`x` through the low-order bits of the output (Mironov 2012): the set of
    reachable doubles depends on :math:`x`. The default ``sampler="discrete"`` releases
    instead :math:`\gamma(\mathrm{round}(x/\gamma) + k)` with :math:`k` two-sided
    geometric, :math:`P(k) \propto e^{-|k|\gamma/b}` (the discrete Laplace law on the grid
    :math:`\gamma\mathbb{Z}`, :math:`\gamma = (\mathrm{upper}-\mathrm{lower})2^{-21}`),
    clamped to :math:`[\mathrm{lower} - R, \mathrm{upper} + R]` where the tail beyond
    :math:`R` has probability :math:`2^{-30}`. Every output is a grid point whatever the
    input, so no low-order bit carries information. Its privacy: inputs on the grid differ
    by at most :math:`\Delta_1/\gamma` steps, giving the ratio :math:`e^{\Delta_1/b}`
    exactly as in the continuous case; the sampler turns one 53-bit uniform into
    :math:`k` by inverting the CDF, which reproduces every atom of probability
    :math:`\ge 2^{-30}` (all atoms after the clamp) to a relative error below
    :math:`2^{-22}`, adding at most :math:`p\,2^{-20}` to epsilon. That slack is taken
    out of the budget (``scale`` uses :math:`\varepsilon - p\,2^{-20}`), so the release
    is epsilon-LDP as stated. ``sampler="continuous"`` is the naive inverse-CDF sampler,
    kept for comparison.

    Parameters
    ----------
    epsilon : float
        Total epsilon of one vector release, in (0, inf].
    dimension : int
        Length p of each client's vector.
    lower, upper : float
        The box, fixed before any private data is seen.
    sampler : {"discrete", "continuous"}
        Floating-point-safe discrete sampler (default) or the naive continuous one.

    References
    ----------
    C. Dwork, F. McSherry, K. Nissim, A. Smith, TCC 2006; J. Duchi, M. Jordan,
    M. Wainwright, "Local privacy and statistical minimax rates", FOCS 2013;
    I. Mironov, "On significance of the least significant bits for differential
    privacy", CCS 2012; C. Canonne, G. Kamath, T. Steinke, "The discrete Gaussian for
    differential privacy", NeurIPS 2020 (discrete Laplace).
    """

    name = "laplace"

    #: Grid steps per box width of the discrete sampler (a power of two).
    GRID_STEPS = 2**21
    #: Clamp where the tail probability of the noise falls to this value.
    TAIL = 2.0**-30
    #: Epsilon slack of the discrete sampler per coordinate (see the class notes).
    SLACK_PER_COORDINATE = 2.0**-20

    def __init__(
        self,
        *,
        epsilon: float,
        dimension: int,
        lower: float = -1.0,
        upper: float = 1.0,
        sampler: str = "discrete",
    ) -> None:
        super().__init__(epsilon=epsilon)
        self.dimension = check_int(dimension, "dimension", minimum=1)
        self.lower = check_real(lower, "lower")
        self.upper = check_real(upper, "upper")
        if not self.upper > self.lower:
            raise ValueError(f"upper must be > lower, got lower={lower!r}, upper={upper!r}")
        if sampler not in ("discrete", "continuous"):
            raise ValueError(
                f"sampler must be 'discrete' or 'continuous', got {sampler!r}"
            )
        self.sampler = sampler
        effective = self.epsilon
        if sampler == "discrete" and self.is_private:
            slack = self.dimension * self.SLACK_PER_COORDINATE
            if self.epsilon <= 2 * slack:
                raise ValueError(
                    f"epsilon must exceed {2 * slack:.3g} for the discrete sampler's "
                    f"accounting, got {self.epsilon!r}"
                )
            effective = self.epsilon - slack
        self.scale = laplace_scale(epsilon=effective, sensitivity=self.sensitivity)
        self.grid_step = (self.upper - self.lower) / self.GRID_STEPS

    @property
    def sensitivity(self) -> float:
        return self.dimension * (self.upper - self.lower)

    def parameters(self) -> dict[str, Any]:
        return {"dimension": self.dimension, "scale": self.scale,
                "lower": self.lower, "upper": self.upper, "sampler": self.sampler}

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
        if self.sampler == "continuous":
            # Inverse CDF of the Laplace law: -b sign(u) log(1 - 2|u|), |u| < 1/2.
            return x - self.scale * np.sign(u) * np.log1p(-2.0 * np.abs(u))
        return self._discrete(x, u)

    @property
    def _decay(self) -> float:
        """a = exp(-gamma / b): ratio of successive atoms of the discrete noise."""
        return math.exp(-self.grid_step / self.scale)

    @property
    def clamp_steps(self) -> int:
        """Largest |k| released; beyond it the tail mass (< 2^-30) sits on the clamp."""
        a = self._decay
        return max(1, math.floor(math.log(self.TAIL * (1 + a) / 2) / math.log(a)))

    def _discrete(self, x: NDArray[np.float64], u: NDArray[np.float64]
                  ) -> NDArray[np.float64]:
        # Two-sided geometric k by inversion of one uniform: the sign of u - 1/2 gives the
        # sign, w = 1 - 2|u - 1/2| (uniform on (0, 1)) the magnitude through
        # P(|k| >= m) = 2 a^m / (1 + a) for m >= 1.
        a = self._decay
        w = 1.0 - 2.0 * np.abs(u)
        magnitude = np.floor(np.log(w * (1.0 + a) / 2.0) / math.log(a)) + 1.0
        magnitude = np.clip(magnitude, 0.0, float(self.clamp_steps))
        k = np.where(u < 0, -magnitude, magnitude)
        origin = np.round((x - self.lower) / self.grid_step)
        return self.lower + (origin + k) * self.grid_step

    def bias(self, values: ArrayLike) -> NDArray[np.float64]:
        x = self._check_values(values)
        inside = np.clip(x, self.lower, self.upper)
        if self.sampler == "discrete" and self.is_private:
            steps = np.round((inside - self.lower) / self.grid_step)
            inside = self.lower + steps * self.grid_step
        return inside - x

    def variance(self, values: ArrayLike) -> NDArray[np.float64]:
        """Per-entry variance (the discrete law's, ignoring the 2^-30 clamped tail)."""
        shape = self._check_values(values).shape
        if self.sampler == "continuous" or not self.is_private:
            return np.full(shape, 2.0 * self.scale**2)
        a = self._decay
        return np.full(shape, self.grid_step**2 * 2.0 * a / (1.0 - a) ** 2)

    def log_density_ratio_bound(self) -> float:
        """Largest log ratio of output densities over neighbouring inputs (= epsilon)."""
        return self.sensitivity / self.scale if self.scale > 0 else math.inf
