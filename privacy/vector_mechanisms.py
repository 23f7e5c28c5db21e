r"""Mechanisms that release a whole vector in :math:`[-1, 1]^p` at the whole budget.

Laplace noise has variance :math:`O(p^2/\varepsilon^2)` per coordinate,
:class:`DuchiMechanism` :math:`O(p/\varepsilon^2)`; :class:`PiecewiseMechanism` and
:class:`HybridMechanism` report k sampled coordinates at :math:`\varepsilon/k` each. All
are unbiased on the box (inputs are clipped to it) and output no input-dependent
low-order bits (Mironov, CCS 2012): piecewise outputs are snapped to a fixed grid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import check_epsilon, check_int, check_real
from ldpfda.privacy.base import Mechanism, check_vectors
from ldpfda.privacy.laplace import LaplaceMechanism
from ldpfda.privacy.random import RandomLike, uniform

__all__ = [
    "EPSILON_STAR",
    "ROUNDING_SLACK",
    "VECTOR_MECHANISMS",
    "DuchiMechanism",
    "HybridMechanism",
    "PiecewiseMechanism",
    "ProductMoments",
    "duchi_bound",
    "duchi_epsilon",
    "hybrid_piecewise_probability",
    "make_vector_mechanism",
    "piecewise_bound",
    "piecewise_epsilon",
    "product_moments",
    "random_subsets",
    "sampled_dimensions",
]

#: Names accepted by :func:`make_vector_mechanism`.
VECTOR_MECHANISMS = ("laplace", "duchi", "piecewise", "hybrid")

#: Relative widening of :meth:`output_range` over the exact bound: the piecewise
#: sampler's affine maps may round a few ulps past it.
ROUNDING_SLACK = 1e-9

#: Threshold of the hybrid mechanism (Wang et al. 2019, Lemma 4): below it the piecewise
#: part does not help, and the hybrid mechanism is Duchi's one-dimensional mechanism.
EPSILON_STAR = math.log(
    (
        -5.0
        + 2.0 * (6353.0 - 405.0 * math.sqrt(241.0)) ** (1.0 / 3.0)
        + 2.0 * (6353.0 + 405.0 * math.sqrt(241.0)) ** (1.0 / 3.0)
    )
    / 27.0
)


def _duchi_counts(dimension: int) -> tuple[int, int, int]:
    """(n_+, n_0, A_p) of the sign patterns of dimension p (see duchi_bound)."""
    p = dimension
    n_zero = math.comb(p, p // 2) if p % 2 == 0 else 0
    return (2**p - n_zero) // 2, n_zero, math.comb(p - 1, p // 2)


def duchi_bound(*, epsilon: float, dimension: int) -> float:
    r"""Output magnitude B that makes :class:`DuchiMechanism` unbiased at ``epsilon``.

    .. math::
        B = \frac{2^p + (e^\varepsilon - 1)\, n_+}{(e^\varepsilon - 1)\, A_p},
        \qquad n_+ = \tfrac12\big(2^p - n_0\big),\;
        n_0 = \binom{p}{p/2}\,[p \text{ even}],\;
        A_p = \binom{p-1}{\lfloor p/2 \rfloor},

    :math:`n_+` (:math:`n_0`) counting sign patterns :math:`r \in \{\pm1\}^p` with
    :math:`\sum r > 0` (:math:`= 0`). ``epsilon = inf`` gives :math:`n_+/A_p`.

    References
    ----------
    J. C. Duchi, M. I. Jordan, M. J. Wainwright, JASA 2018, Section 4.2.3.
    """
    epsilon = check_epsilon(epsilon)
    p = check_int(dimension, "dimension", minimum=1)
    n_plus, _, a_p = _duchi_counts(p)
    if math.isinf(epsilon):
        return n_plus / a_p
    return (2.0**p / math.expm1(epsilon) + n_plus) / a_p


def duchi_epsilon(*, bound: float, dimension: int) -> float:
    r"""Epsilon of :class:`DuchiMechanism` with output magnitude ``bound``.

    .. math:: \varepsilon = \ln\Big(1 + \frac{2^p}{A_p B - n_+}\Big),
              \qquad B \ge n_+/A_p \;(\text{equality: } \infty).
    """
    p = check_int(dimension, "dimension", minimum=1)
    n_plus, _, a_p = _duchi_counts(p)
    bound = check_real(bound, "bound", low=n_plus / a_p)
    excess = a_p * bound - n_plus
    return math.inf if excess <= 0 else math.log1p(2.0**p / excess)


def piecewise_bound(*, epsilon: float) -> float:
    r"""Output bound C of the one-dimensional piecewise mechanism at ``epsilon``.

    .. math:: C = \frac{e^{\varepsilon/2} + 1}{e^{\varepsilon/2} - 1}
              \quad (1 \text{ for } \varepsilon = \infty)

    References
    ----------
    N. Wang et al., ICDE 2019, Algorithm 2.
    """
    epsilon = check_epsilon(epsilon)
    if math.isinf(epsilon):
        return 1.0
    return 1.0 + 2.0 / math.expm1(epsilon / 2.0)


def piecewise_epsilon(*, bound: float) -> float:
    r"""Epsilon :math:`\varepsilon = 2 \ln\frac{C + 1}{C - 1}` of the piecewise
    mechanism with output bound :math:`C \ge 1` (``inf`` for 1)."""
    bound = check_real(bound, "bound", low=1.0)
    return math.inf if bound == 1.0 else 2.0 * math.log((bound + 1.0) / (bound - 1.0))


def hybrid_piecewise_probability(*, epsilon: float) -> float:
    r"""Probability that the hybrid mechanism uses its piecewise part.

    .. math:: \alpha = \begin{cases} 1 - e^{-\varepsilon/2}
              & \varepsilon > \varepsilon^* \approx 0.61 \\
              0 & \varepsilon \le \varepsilon^* \end{cases}

    which minimises the worst-case variance (Wang et al. 2019, Lemma 4).
    """
    epsilon = check_epsilon(epsilon)
    if epsilon <= EPSILON_STAR:
        return 0.0
    return 1.0 if math.isinf(epsilon) else -math.expm1(-epsilon / 2.0)


def sampled_dimensions(*, epsilon: float, dimension: int) -> int:
    r"""Coordinates k a client reports under Wang et al.'s dimension sampling.

    .. math:: k = \max\big(1, \min(p, \lfloor \varepsilon / 2.5 \rfloor)\big)
              \quad (p \text{ for } \varepsilon = \infty)

    References
    ----------
    N. Wang et al., ICDE 2019, Algorithm 4 and Eq. (12).
    """
    epsilon = check_epsilon(epsilon)
    p = check_int(dimension, "dimension", minimum=1)
    if math.isinf(epsilon):
        return p
    return max(1, min(p, math.floor(epsilon / 2.5)))


@dataclass(frozen=True)
class ProductMoments:
    r"""How the second moments of a release z of :math:`x \in [-1, 1]^p` depend on x.

    .. math::
        E[z_i z_j \mid x] = a_{ij}\, x_i x_j \;(i \ne j), \qquad
        E[z_j^2 \mid x] = c_j + s_j x_j^2 .

    ``offdiagonal`` is :math:`a_{ij}` (diagonal ignored), ``offset`` :math:`c_j`,
    ``slope`` :math:`s_j`; entries with a zero factor are not identified.
    """

    offdiagonal: NDArray[np.float64]
    offset: NDArray[np.float64]
    slope: NDArray[np.float64]

    @property
    def dimension(self) -> int:
        return int(self.offset.size)

    def identified(self) -> NDArray[np.bool_]:
        """Which entries of :math:`E[xx^\\top]` the releases identify."""
        mask = self.offdiagonal != 0
        np.fill_diagonal(mask, self.slope != 0)
        return mask

    def second_moment(
        self, released: ArrayLike
    ) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        r"""Unbiased estimate of :math:`E[xx^\top]` from releases, and the mask of
        :meth:`identified` entries (the others are 0).

        .. math:: \hat M_{ij} = \frac{\overline{z_i z_j}}{a_{ij}}, \qquad
                  \hat M_{jj} = \frac{\overline{z_j^2} - c_j}{s_j}
        """
        z = np.asarray(released, dtype=float)
        if z.ndim != 2 or z.shape[1] != self.dimension:
            raise ValueError(
                f"released must have shape (n, {self.dimension}), got {z.shape}"
            )
        return self.second_moment_of_sums(z.T @ z, z.shape[0])

    def second_moment_of_sums(
        self, products: ArrayLike, n: int
    ) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        r""":meth:`second_moment` from :math:`\sum_i z_i z_i^\top` of n releases."""
        centred = np.asarray(products, dtype=float) / max(n, 1) - np.diag(self.offset)
        factor = self.offdiagonal.copy()
        np.fill_diagonal(factor, self.slope)
        mask = self.identified()
        return np.where(mask, centred / np.where(mask, factor, 1.0), 0.0), mask


def product_moments(mechanism: Mechanism) -> ProductMoments:
    """The :class:`ProductMoments` of a vector mechanism (Laplace: additive noise, so
    :math:`a_{ij} = s_j = 1` and :math:`c_j` is the sampler's variance)."""
    if not isinstance(
        mechanism, DuchiMechanism | _SampledCoordinateMechanism | LaplaceMechanism
    ):
        raise TypeError(
            f"mechanism must be a vector mechanism, got {type(mechanism).__name__}"
        )
    p = mechanism.dimension
    if isinstance(mechanism, LaplaceMechanism) or not mechanism.is_private:
        # Additive noise (or none): its variance is the offset.
        noise = mechanism.variance(np.zeros((1, p)))[0]
        return ProductMoments(np.ones((p, p)), noise, np.ones(p))
    return mechanism.product_moments()


class _VectorMechanism(Mechanism):
    """Shared input handling of the mechanisms on :math:`[-1, 1]^p`."""

    def __init__(self, *, epsilon: float, dimension: int) -> None:
        super().__init__(epsilon=epsilon)
        self.dimension = check_int(dimension, "dimension", minimum=1)

    def bias(self, values: ArrayLike) -> NDArray[np.float64]:
        """Zero inside the box; inputs outside are clipped first."""
        x = check_vectors(values, self.dimension)
        return np.clip(x, -1.0, 1.0) - x

    def output_range(self) -> tuple[float, float]:
        """Range of every released coordinate: :meth:`output_bound`, widened by
        :data:`ROUNDING_SLACK` (``[-1, 1]`` without noise)."""
        if not self.is_private:
            return -1.0, 1.0
        bound = self.output_bound() * (1.0 + ROUNDING_SLACK)
        return -bound, bound

    def output_bound(self) -> float:  # pragma: no cover - abstract
        """The largest magnitude of a released coordinate (exact arithmetic)."""
        raise NotImplementedError


class DuchiMechanism(_VectorMechanism):
    r"""Duchi et al.'s mechanism on :math:`[-1, 1]^p`; outputs in :math:`\{\pm B\}^p`.

    A client draws independent signs :math:`v_j` with :math:`P(v_j = 1) = (1 + x_j)/2`,
    then a sign pattern :math:`r \in \{\pm1\}^p` with

    .. math:: P(r) = w(r)/N, \quad w(r) = \begin{cases} e^\varepsilon & \sum_j r_j > 0
              \\ 1 & \sum_j r_j \le 0 \end{cases}, \quad
              N = 2^p + (e^\varepsilon - 1)\, n_+,

    and releases :math:`z = B\,(v \odot r)`, B from :func:`duchi_bound`: a mixture of
    weights in :math:`[1, e^\varepsilon]/N` (ties of even p at weight 1), exactly
    epsilon-LDP, with :math:`E[z \mid x] = x`,
    :math:`\mathrm{Var}(z_j \mid x) = B^2 - x_j^2` and, for :math:`i \ne j`,
    :math:`E[z_i z_j \mid x] = B^2 \rho\, x_i x_j`,
    :math:`\rho = \sum_k \pi_k \big(1 - 4k(p-k)/(p(p-1))\big)` (:math:`\pi_k`: k minus
    signs in r).

    References
    ----------
    J. C. Duchi, M. I. Jordan, M. J. Wainwright, "Minimax optimal procedures for locally
    private estimation", JASA 113(521), 2018; N. Wang et al., ICDE 2019, Algorithm 3.
    """

    name = "duchi"
    _recorded = ("dimension", "bound")

    def __init__(self, *, epsilon: float, dimension: int) -> None:
        super().__init__(epsilon=epsilon, dimension=dimension)
        self.bound = duchi_bound(epsilon=self.epsilon, dimension=self.dimension)

    def output_bound(self) -> float:
        return self.bound

    def flip_count_probabilities(self) -> NDArray[np.float64]:
        r""":math:`\pi_k`, the probability of k minus signs in r, k = 0..p."""
        p = self.dimension
        k = np.arange(p + 1)
        # Weights relative to e^eps, finite for any epsilon.
        rel = np.where(p - 2 * k > 0, 1.0, math.exp(-self.epsilon))
        w = np.array([math.comb(p, int(j)) for j in k], dtype=float) * rel
        return w / w.sum()

    def randomise(
        self, values: ArrayLike, rng: RandomLike = None
    ) -> NDArray[np.float64]:
        x = np.clip(check_vectors(values, self.dimension), -1.0, 1.0)
        if not self.is_private:
            return x
        n, p = x.shape
        u = uniform(rng, (n, 2 * p + 1))
        v = np.where(u[:, :p] < (1.0 + x) / 2.0, 1.0, -1.0)
        cdf = np.cumsum(self.flip_count_probabilities())
        flips = np.minimum(np.searchsorted(cdf, u[:, p], side="right"), p)
        # A uniformly random set of `flips` coordinates: those whose key ranks lowest
        # (the first `flips` of the keys' sorting order).
        order = np.argsort(u[:, p + 1 :], axis=1)
        r = np.empty((n, p))
        signs = np.where(np.arange(p) < flips[:, None], -1.0, 1.0)
        np.put_along_axis(r, order, signs, axis=1)
        return self.bound * v * r

    def variance(self, values: ArrayLike) -> NDArray[np.float64]:
        x = np.clip(check_vectors(values, self.dimension), -1.0, 1.0)
        if not self.is_private:
            return np.zeros_like(x)
        return self.bound**2 - x**2

    def product_moments(self) -> ProductMoments:
        p = self.dimension
        rho = 1.0
        if p > 1:
            k = np.arange(p + 1)
            pairs = 1.0 - 4.0 * k * (p - k) / (p * (p - 1))
            rho = float(self.flip_count_probabilities() @ pairs)
            # Exactly 0 for odd p (a rounding residue otherwise).
            rho = 0.0 if abs(rho) < 1e-12 else rho
        b2 = self.bound**2
        return ProductMoments(np.full((p, p), b2 * rho), np.full(p, b2), np.zeros(p))


def random_subsets(u: NDArray[np.float64], dimension: int) -> NDArray[np.int64]:
    r"""A uniformly random k-subset of ``0 .. dimension - 1`` per row of uniforms
    ``u`` (n, k), as k distinct indices (Floyd's algorithm).

    Step i (:math:`j = p - k + i`) draws :math:`t = \lfloor u_i (j + 1) \rfloor` and
    takes t, or j if t is taken already; every k-subset then has probability
    :math:`1/\binom{p}{k}` (up to the :math:`2^{-52}` grid of the uniforms).

    References
    ----------
    J. Bentley, R. Floyd, "Programming pearls: a sample of brilliance", CACM 30(9),
    1987.
    """
    n, k = u.shape
    picks = np.empty((n, k), dtype=np.int64)
    for i, j in enumerate(range(dimension - k, dimension)):
        t = np.minimum((u[:, i] * (j + 1)).astype(np.int64), j)
        taken = (picks[:, :i] == t[:, None]).any(axis=1)
        picks[:, i] = np.where(taken, j, t)
    return picks


class _SampledCoordinateMechanism(_VectorMechanism):
    r"""Dimension sampling around a one-dimensional mechanism (Wang et al., Alg. 4).

    A client draws a uniformly random set S of ``n_sampled`` = k coordinates (default
    :func:`sampled_dimensions`), releases each :math:`x_j, j \in S`, at
    :math:`\epsilon' = \varepsilon/k` and reports :math:`z_j = (p/k)\, y_j` on S, 0
    elsewhere: epsilon-LDP by composition, unbiased, with
    :math:`\mathrm{Var}(z_j) = \frac{p}{k}\big(\mathrm{Var}(y_j) + x_j^2\big) - x_j^2`.
    The one-dimensional release is piecewise with probability
    :attr:`piecewise_probability`, else Duchi's (bound :attr:`duchi_bound_1d`). A client
    draws :math:`k (1 + m)` uniforms: k pick S (:func:`random_subsets`), m release each
    coordinate of S; nothing is computed for the others.
    """

    _recorded: tuple[str, ...] = ("dimension", "n_sampled")
    #: Uniforms each client draws per coordinate for the one-dimensional mechanism.
    _draws_per_coordinate = 2
    #: Grid cells over [-C, C] that piecewise outputs are snapped to.
    SNAP_CELLS = 2**20

    def __init__(
        self, *, epsilon: float, dimension: int, n_sampled: int | None = None
    ) -> None:
        super().__init__(epsilon=epsilon, dimension=dimension)
        if n_sampled is None:
            n_sampled = sampled_dimensions(
                epsilon=self.epsilon, dimension=self.dimension
            )
        self.n_sampled = check_int(
            n_sampled, "n_sampled", minimum=1, maximum=self.dimension
        )
        share = self.epsilon / self.n_sampled
        if self.is_private and self.coordinate_epsilon <= 0.5 * share:
            raise ValueError(
                f"epsilon is too small for the snapped sampler's accounting, got "
                f"{self.epsilon!r}"
            )

    @property
    def coordinate_epsilon(self) -> float:
        r"""Epsilon of each reported coordinate's noise, :math:`\varepsilon/k - s`,
        :math:`s = (e^{\varepsilon/2k} + 1)\,2^{-28}`.

        Piecewise outputs are snapped to :attr:`SNAP_CELLS` cells on :math:`[-C, C]`.
        Each cell owns at least :math:`2^{32}/(e^{\varepsilon/2k}+1)` of the
        :math:`2^{52}` uniform cells and roundings move its edges by a few, so its
        probability is exact to a relative error below :math:`s/2`.
        """
        share = self.epsilon / self.n_sampled
        return share - (math.exp(min(share, 1400.0) / 2.0) + 1.0) * 2.0**-28

    @property
    def scale(self) -> float:
        """The factor p/k applied to every reported coordinate."""
        return self.dimension / self.n_sampled

    @property
    def piecewise_probability(self) -> float:
        r""":math:`\alpha`, the probability of the piecewise part (1 unless hybrid)."""
        return 1.0

    @property
    def duchi_bound_1d(self) -> float:
        """:math:`B_1` of the one-dimensional Duchi part."""
        return duchi_bound(epsilon=self.coordinate_epsilon, dimension=1)

    def output_bound(self) -> float:
        """:math:`(p/k)` times the largest of C and :math:`B_1` that may be used."""
        alpha = self.piecewise_probability
        bounds = [self.duchi_bound_1d] if alpha < 1.0 else []
        if alpha > 0.0:
            bounds.append(piecewise_bound(epsilon=self.coordinate_epsilon))
        return self.scale * max(bounds)

    def _one_dimensional(self, t: NDArray, u: NDArray) -> NDArray[np.float64]:
        """The one-dimensional releases of t from the uniforms u."""
        raise NotImplementedError  # pragma: no cover - abstract

    def randomise(
        self, values: ArrayLike, rng: RandomLike = None
    ) -> NDArray[np.float64]:
        x = np.clip(check_vectors(values, self.dimension), -1.0, 1.0)
        if not self.is_private:
            return x
        n, p = x.shape
        k, m = self.n_sampled, self._draws_per_coordinate
        # k uniforms pick the coordinates, m more release each picked one.
        u = uniform(rng, (n, k * (1 + m)))
        picks = random_subsets(u[:, :k], p)
        y = self._one_dimensional(
            np.take_along_axis(x, picks, axis=1), u[:, k:].reshape(n, k, m)
        )
        z = np.zeros((n, p))
        np.put_along_axis(z, picks, self.scale * y, axis=1)
        return z

    def variance(self, values: ArrayLike) -> NDArray[np.float64]:
        x = np.clip(check_vectors(values, self.dimension), -1.0, 1.0)
        if not self.is_private:
            return np.zeros_like(x)
        alpha = self.piecewise_probability
        e = math.expm1(self.coordinate_epsilon / 2.0)
        y_var = x**2 / e + (e + 4.0) / (3.0 * e**2)
        if alpha < 1.0:
            y_var = alpha * y_var + (1.0 - alpha) * (self.duchi_bound_1d**2 - x**2)
        return self.scale * (y_var + x**2) - x**2

    def product_moments(self) -> ProductMoments:
        p, k = self.dimension, self.n_sampled
        both = k * (k - 1) / (p * (p - 1)) if p > 1 else 1.0
        # E[y^2 | t] = c + s t^2 for the one-dimensional release.
        alpha = self.piecewise_probability
        e = math.expm1(self.coordinate_epsilon / 2.0)
        c = alpha * (e + 4.0) / (3.0 * e**2)
        if alpha < 1.0:
            c += (1.0 - alpha) * self.duchi_bound_1d**2
        return ProductMoments(
            np.full((p, p), self.scale**2 * both),
            np.full(p, self.scale * c),
            np.full(p, self.scale * (alpha * (1.0 + 1.0 / e))),
        )


def _piecewise_release(
    t: NDArray[np.float64], epsilon: float, u_side: NDArray, u_pos: NDArray
) -> NDArray[np.float64]:
    """The one-dimensional piecewise mechanism from two uniforms per value."""
    half = math.exp(epsilon / 2.0)
    c = piecewise_bound(epsilon=epsilon)
    left = (c + 1.0) / 2.0 * t - (c - 1.0) / 2.0
    right = left + c - 1.0
    inside = left + u_pos * (c - 1.0)
    # Outside [left, right]: uniform on [-C, left) U (right, C], total length C + 1.
    w = u_pos * (c + 1.0)
    below = left + c
    outside = np.where(w < below, -c + w, right + (w - below))
    y = np.where(u_side < half / (half + 1.0), inside, outside)
    # Snap to a fixed grid on [-C, C]: the output set no longer depends on t.
    step = 2.0 * c / _SampledCoordinateMechanism.SNAP_CELLS
    return -c + np.round((y + c) / step) * step


class PiecewiseMechanism(_SampledCoordinateMechanism):
    r"""Wang et al.'s piecewise mechanism with dimension sampling.

    **One coordinate** :math:`t \in [-1, 1]` at budget :math:`\epsilon'`: with
    :math:`C = (e^{\epsilon'/2}+1)/(e^{\epsilon'/2}-1)`,
    :math:`\ell(t) = \frac{C+1}{2}t - \frac{C-1}{2}` and :math:`r(t) = \ell(t) + C - 1`,
    the output y has density :math:`p = \frac{e^{\epsilon'} - e^{\epsilon'/2}}
    {2e^{\epsilon'/2} + 2}` on :math:`[\ell(t), r(t)]` and :math:`p/e^{\epsilon'}` on
    the rest of :math:`[-C, C]`, hence epsilon'-LDP, unbiased, with

    .. math:: \mathrm{Var}(y \mid t) = \frac{t^2}{e^{\epsilon'/2} - 1}
              + \frac{e^{\epsilon'/2} + 3}{3 (e^{\epsilon'/2} - 1)^2}.

    References
    ----------
    N. Wang, X. Xiao, Y. Yang, J. Zhao, S. C. Hui, H. Shin, J. Shin, G. Yu, "Collecting
    and analyzing multidimensional data with local differential privacy", ICDE 2019,
    Algorithms 2 and 4.
    """

    name = "piecewise"

    def parameters(self) -> dict[str, Any]:
        return {
            **super().parameters(),
            "bound": piecewise_bound(epsilon=self.coordinate_epsilon),
        }

    def _one_dimensional(self, t: NDArray, u: NDArray) -> NDArray[np.float64]:
        return _piecewise_release(t, self.coordinate_epsilon, u[..., 0], u[..., 1])


class HybridMechanism(_SampledCoordinateMechanism):
    r"""Wang et al.'s hybrid mechanism with dimension sampling.

    **One coordinate** at budget :math:`\epsilon'`: with probability :math:`\alpha`
    (:func:`hybrid_piecewise_probability`) the piecewise mechanism, else Duchi's
    one-dimensional mechanism, which reports :math:`\pm B_1`,
    :math:`B_1 = (e^{\epsilon'}+1)/(e^{\epsilon'}-1)`, with
    :math:`P(+B_1) = \frac12 + \frac{t}{2B_1}`: a mixture, chosen independently of t,
    of two epsilon'-LDP unbiased parts, with

    .. math:: \mathrm{Var}(y \mid t) = \alpha\,\mathrm{Var}_{PM}(t)
              + (1 - \alpha)(B_1^2 - t^2).

    References
    ----------
    N. Wang et al., ICDE 2019, Section III-C, Lemma 4 and Algorithm 4; J. C. Duchi,
    M. I. Jordan, M. J. Wainwright, JASA 2018.
    """

    name = "hybrid"
    _recorded = ("dimension", "n_sampled", "piecewise_probability")
    _draws_per_coordinate = 3

    @property
    def piecewise_probability(self) -> float:
        return hybrid_piecewise_probability(epsilon=self.coordinate_epsilon)

    def _one_dimensional(self, t: NDArray, u: NDArray) -> NDArray[np.float64]:
        b1 = self.duchi_bound_1d
        duchi = np.where(u[..., 1] < 0.5 + t / (2.0 * b1), b1, -b1)
        alpha = self.piecewise_probability
        if alpha == 0.0:
            return duchi
        pm = _piecewise_release(t, self.coordinate_epsilon, u[..., 1], u[..., 2])
        return np.where(u[..., 0] < alpha, pm, duchi)


def make_vector_mechanism(name: str, *, epsilon: float, dimension: int) -> Mechanism:
    """The vector mechanism ``name`` (one of :data:`VECTOR_MECHANISMS`) on [-1, 1]^p."""
    if name not in VECTOR_MECHANISMS:
        raise ValueError(f"mechanism must be one of {VECTOR_MECHANISMS}, got {name!r}")
    classes = (LaplaceMechanism, DuchiMechanism, PiecewiseMechanism, HybridMechanism)
    return classes[VECTOR_MECHANISMS.index(name)](epsilon=epsilon, dimension=dimension)
