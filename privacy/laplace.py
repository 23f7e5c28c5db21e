"""The Laplace mechanism for vectors in a box."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import check_epsilon, check_int, check_real
from ldpfda.privacy.base import Mechanism, check_vectors
from ldpfda.privacy.random import RandomLike, as_source, uniform

__all__ = ["LaplaceMechanism", "laplace_epsilon", "laplace_scale"]


def laplace_scale(*, epsilon: float, sensitivity: float) -> float:
    r"""Laplace scale :math:`b = \Delta_1 / \varepsilon` that makes a release of L1
    ``sensitivity`` epsilon-DP (0, no noise, for ``epsilon = inf``).

    References
    ----------
    C. Dwork, F. McSherry, K. Nissim, A. Smith, "Calibrating noise to sensitivity in
    private data analysis", TCC 2006.
    """
    epsilon = check_epsilon(epsilon)
    sensitivity = check_real(sensitivity, "sensitivity", low=0.0, low_open=True)
    return 0.0 if math.isinf(epsilon) else sensitivity / epsilon


def laplace_epsilon(*, scale: float, sensitivity: float) -> float:
    r"""Epsilon :math:`\varepsilon = \Delta_1 / b` of a Laplace release of scale b
    (``inf`` for 0)."""
    scale = check_real(scale, "scale", low=0.0)
    sensitivity = check_real(sensitivity, "sensitivity", low=0.0, low_open=True)
    return math.inf if scale == 0 else sensitivity / scale


class LaplaceMechanism(Mechanism):
    r"""Laplace noise on vectors in the public box :math:`[\ell, u]^p` (``lower``,
    ``upper``), inputs clipped to it.

    A client releases :math:`z = x + b\,\xi`, i.i.d. standard Laplace :math:`\xi_k`,
    :math:`b = \Delta_1/\varepsilon`, :math:`\Delta_1 = p(u - \ell)`: unbiased in the
    box, variance :math:`2b^2` per entry.

    ``sampler="discrete"`` (default) avoids the floating-point leak of :math:`x + b\xi`
    (Mironov 2012): it releases the grid points :math:`\ell + \gamma\,\mathrm{clip}(
    \mathrm{round}((x-\ell)/\gamma) + k, -K, G + K)`, :math:`\gamma = (u-\ell)/G`,
    :math:`G = 2^{21}`, with :math:`P(k) \propto a^{|k|}`, :math:`a = e^{-\gamma/b}`:
    the same output set for every input and the density ratio :math:`e^{\Delta_1/b}`
    (the clamp is post-processing). :math:`k` is drawn by inversion of three uniforms; K
    keeps a tail mass :math:`\ge 2^{-30}` beyond the clamp from every input, so every
    atom owns at least :math:`2^{18}` of the :math:`2^{52}` uniform cells and its
    probability is exact to a relative error below :math:`2^{-17}`; the slack
    :math:`p\,2^{-16}` is taken out of the budget, so the release is epsilon-LDP for a
    per-coordinate epsilon below about 19 (above: ``sampler="continuous"``, the naive
    sampler).

    References
    ----------
    C. Dwork, F. McSherry, K. Nissim, A. Smith, TCC 2006; J. Duchi, M. Jordan,
    M. Wainwright, "Local privacy and statistical minimax rates", FOCS 2013; I. Mironov,
    CCS 2012; C. Canonne, G. Kamath, T. Steinke, NeurIPS 2020 (discrete Laplace).
    """

    name = "laplace"
    _recorded = ("dimension", "scale", "lower", "upper", "sampler")

    #: Grid steps per box width of the discrete sampler (a power of two).
    GRID_STEPS = 2**21
    #: Epsilon slack of the discrete sampler per coordinate (see the class notes).
    SLACK_PER_COORDINATE = 2.0**-16

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
            raise ValueError(
                f"upper must be > lower, got lower={lower!r}, upper={upper!r}"
            )
        if sampler not in ("discrete", "continuous"):
            raise ValueError(
                f"sampler must be 'discrete' or 'continuous', got {sampler!r}"
            )
        self.sampler = sampler
        self.sensitivity = self.dimension * (self.upper - self.lower)
        grid = sampler == "discrete" and self.is_private
        slack = self.dimension * self.SLACK_PER_COORDINATE if grid else 0.0
        if grid and self.epsilon <= 2 * slack:
            raise ValueError(
                f"epsilon must exceed {2 * slack:.3g} for the discrete sampler's "
                f"accounting, got {self.epsilon!r}"
            )
        self.scale = laplace_scale(
            epsilon=self.epsilon - slack, sensitivity=self.sensitivity
        )
        self.grid_step = (self.upper - self.lower) / self.GRID_STEPS
        if grid and self.clamp_steps < self.steps_per_scale:
            raise ValueError(
                f"epsilon per coordinate must be below "
                f"{30 * math.log(2) - 1:.1f} for the discrete sampler, got "
                f"{self.epsilon / self.dimension:.4g}; use sampler='continuous'"
            )

    def randomise(
        self, values: ArrayLike, rng: RandomLike = None
    ) -> NDArray[np.float64]:
        x = np.clip(check_vectors(values, self.dimension), self.lower, self.upper)
        if not self.is_private:
            return x
        rng = as_source(rng)
        u0 = uniform(rng, x.shape)
        if self.sampler == "continuous":
            # Inverse CDF of the Laplace law: -b sign(v) log(1 - 2|v|), v = u - 1/2.
            v = u0 - 0.5
            return x - self.scale * np.sign(v) * np.log1p(-2.0 * np.abs(v))
        # Discrete: k from three uniforms; |k| - 1 = qQ + R in two geometric stages.
        t = self.steps_per_scale
        q = self.block
        a = math.exp(-1.0 / t)
        p_zero = (1.0 - a) / (1.0 + a)
        u1 = uniform(rng, x.shape)
        u2 = uniform(rng, x.shape)
        # Stage 0: k = 0 with probability (1-a)/(1+a), otherwise a fair sign.
        # Stage 1: Q with P(Q >= j) = a^(q j), by inversion of u1.
        blocks = np.floor(np.log(u1) / (-q / t))
        # Stage 2: R on {0..q-1} with P(R >= r) = (a^r - a^q)/(1 - a^q), by inversion:
        # R = floor(-t log(a^q + u2 (1 - a^q))), written with log1p/expm1 for accuracy.
        tail = -math.expm1(-q / t)  # 1 - a^q
        within = np.clip(np.floor(-t * np.log1p(-(1.0 - u2) * tail)), 0.0, q - 1.0)
        magnitude = 1.0 + q * blocks + within
        sign = np.where(u0 < (1.0 + p_zero) / 2.0, -1.0, 1.0)
        k = np.where(np.abs(u0 - 0.5) < p_zero / 2.0, 0.0, sign * magnitude)
        origin = np.round((x - self.lower) / self.grid_step)
        index = np.clip(
            origin + k, -self.clamp_steps, self.GRID_STEPS + self.clamp_steps
        )
        return self.lower + index * self.grid_step

    @property
    def steps_per_scale(self) -> float:
        """t = b / gamma: the noise scale in grid steps."""
        return self.scale / self.grid_step

    @property
    def block(self) -> int:
        """q: block length of the two-stage magnitude draw (a power of two, ~ t/8)."""
        return 1 << max(0, math.floor(math.log2(self.steps_per_scale / 8.0)))

    @property
    def clamp_steps(self) -> int:
        """K: released grid indices lie in [-K, G + K], with (G + K)/t <= 30 ln 2."""
        return math.floor(30 * math.log(2) * self.steps_per_scale) - self.GRID_STEPS

    def bias(self, values: ArrayLike) -> NDArray[np.float64]:
        x = check_vectors(values, self.dimension)
        inside = np.clip(x, self.lower, self.upper)
        if self.sampler == "discrete" and self.is_private:
            steps = np.round((inside - self.lower) / self.grid_step)
            inside = self.lower + steps * self.grid_step
        return inside - x

    def variance(self, values: ArrayLike) -> NDArray[np.float64]:
        """Per-entry variance (the discrete law's, ignoring the 2^-30 clamped tail)."""
        shape = check_vectors(values, self.dimension).shape
        if self.sampler == "continuous" or not self.is_private:
            return np.full(shape, 2.0 * self.scale**2)
        a = math.exp(-1.0 / self.steps_per_scale)
        return np.full(shape, self.grid_step**2 * 2.0 * a / (1.0 - a) ** 2)

    def output_range(self) -> tuple[float, float]:
        """Range of every released coordinate: the clamp (discrete), the box widened
        by ``b ln 2^53`` (continuous: the largest inverse-CDF draw), or the box."""
        if not self.is_private:
            return self.lower, self.upper
        if self.sampler == "discrete":
            reach = self.clamp_steps * self.grid_step
        else:
            reach = self.scale * 53 * math.log(2.0)
        return self.lower - reach, self.upper + reach
