r"""A seeded statistical audit of a local randomizer's epsilon.

A local randomizer :math:`M` is epsilon-LDP if, for any two inputs :math:`x, x'` and any
set of outputs :math:`S`, :math:`P(M(x) \in S) \le e^\varepsilon P(M(x') \in S)`.
:func:`estimate_epsilon` runs the mechanism ``n`` times on each of two neighbouring
inputs, maps every output to a real statistic, bins it, and estimates for every bin
:math:`b`

.. math:: \hat\ell_b = \log\frac{\hat p_b}{\hat p'_b}, \qquad
          \widehat{\mathrm{se}}_b^2 = \frac{1 - \hat p_b}{k_b}
                                   + \frac{1 - \hat p'_b}{k'_b}

(the delta-method variance of a log ratio of two independent binomial proportions with
counts :math:`k_b, k'_b`). Only bins with at least ``min_count`` outputs on both sides
enter, so the normal approximation holds. With :math:`B` such bins and the Bonferroni
quantile :math:`z = \Phi^{-1}(1 - \alpha / (2B))`, the intervals
:math:`\hat\ell_b \pm z\,\widehat{\mathrm{se}}_b` hold simultaneously with
probability about :math:`1 - \alpha`, so

* ``lower_bound`` :math:`= \max_b (|\hat\ell_b| - z\,\widehat{\mathrm{se}}_b)` is a
  lower confidence bound on the mechanism's epsilon: a mechanism **violates** a claimed
  epsilon when ``lower_bound > epsilon``, i.e. when some bin's estimate exceeds epsilon
  by more than its own sampling margin;
* ``upper_bound`` :math:`= \max_b (|\hat\ell_b| + z\,\widehat{\mathrm{se}}_b)` bounds
  the largest binned log ratio from above. When the statistic and the bins capture the
  worst case (the extreme inputs and a bin where the density ratio reaches
  :math:`e^\varepsilon`), the true epsilon lies between the two bounds: the audit is
  *tight*.

A bin with ``min_count`` outputs on one side and none on the other (disjoint supports,
e.g. a mechanism that adds no noise) has an unbounded ratio; it counts as a violation
when even the exact one-sided upper confidence bound on the empty side,
:math:`1 - (\alpha/(2B))^{1/n}`, leaves a log ratio above epsilon.

References
----------
Z. Ding, Y. Wang, G. Wang, D. Zhang, D. Kifer, "Detecting violations of differential
privacy", CCS 2018; M. Jagielski, J. Ullman, A. Oprea, "Auditing differentially private
machine learning: how private is private SGD?", NeurIPS 2020.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.stats import norm

__all__ = ["PrivacyAudit", "estimate_epsilon"]

MechanismFn = Callable[[NDArray, np.random.Generator], ArrayLike]
Statistic = Callable[[NDArray], ArrayLike]


@dataclass(frozen=True)
class PrivacyAudit:
    r"""Outcome of :func:`estimate_epsilon`.

    Attributes
    ----------
    estimate : float
        :math:`\max_b |\hat\ell_b|` over the bins used.
    margin : float
        :math:`z\,\widehat{\mathrm{se}}_b` of the bin that attains ``estimate``.
    lower_bound, upper_bound : float
        Simultaneous (Bonferroni) confidence bounds on the largest binned log ratio.
    n_bins : int
        Number of bins with at least ``min_count`` outputs on both sides.
    z : float
        The Bonferroni normal quantile.
    log_ratios, standard_errors : ndarray
        Per-bin estimates for the bins used.
    """

    estimate: float
    margin: float
    lower_bound: float
    upper_bound: float
    n_bins: int
    z: float
    log_ratios: NDArray[np.float64]
    standard_errors: NDArray[np.float64]

    def violates(self, epsilon: float) -> bool:
        """True if some log ratio exceeds ``epsilon`` beyond its sampling error."""
        return bool(self.lower_bound > epsilon)

    def brackets(self, epsilon: float) -> bool:
        """True if ``epsilon`` lies within the simultaneous bounds (a tight audit)."""
        return bool(self.lower_bound <= epsilon <= self.upper_bound)


def _batch(x: ArrayLike, n: int) -> NDArray:
    value = np.asarray(x)
    return np.repeat(value[None, ...], n, axis=0)


def estimate_epsilon(
    mechanism_fn: MechanismFn,
    x: ArrayLike,
    x_prime: ArrayLike,
    *,
    n: int,
    bins: ArrayLike,
    rng: np.random.Generator | int,
    statistic: Statistic | None = None,
    alpha: float = 1e-3,
    min_count: int = 100,
) -> PrivacyAudit:
    r"""Estimate a mechanism's epsilon from its outputs on two neighbouring inputs.

    Parameters
    ----------
    mechanism_fn : callable ``(values, rng) -> outputs``
        Releases a batch of ``n`` inputs (row ``i`` of ``values`` is one client's input,
        every row a copy of ``x`` or ``x_prime``); ``mechanism.randomise`` fits.
    x, x_prime : array-like
        One client's input and its neighbour; use the extreme pair, where the ratio of
        output densities is largest.
    n : int
        Releases per input.
    bins : array-like of float
        Increasing interior bin edges of the statistic; ``-inf`` and ``+inf`` are added
        on the outside, so no output is dropped. Bin ``b`` is ``[edge_{b-1}, edge_b)``.
        For categories ``0..K-1`` use the half-integers ``0.5, ..., K - 1.5``.
    rng : Generator or int
        Source of the mechanism's randomness (fixed seed for a reproducible test).
    statistic : callable ``outputs -> (n,) array``, optional
        A real summary of each output (a coordinate, a projection, the privacy-loss
        statistic). By post-processing any statistic keeps the ratio within epsilon; the
        audit is tight when the statistic determines the density ratio. Default: the
        outputs themselves, which must then be one number per release.
    alpha : float
        Family-wise error rate of the simultaneous intervals.
    min_count : int
        Smallest count, on both sides, for a bin to enter the delta-method estimate.
    """
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    edges = np.concatenate([[-np.inf], np.asarray(bins, dtype=float), [np.inf]])
    if not np.all(np.diff(edges) > 0):
        raise ValueError("bins must be strictly increasing")

    def counts_of(value: ArrayLike) -> NDArray[np.int64]:
        out = np.asarray(mechanism_fn(_batch(value, n), gen))
        t = np.asarray(statistic(out) if statistic is not None else out, dtype=float)
        if t.shape != (n,):
            raise ValueError(
                f"the statistic must give one number per release, got {t.shape}"
            )
        index = np.searchsorted(edges, t, side="right") - 1
        return np.bincount(index, minlength=edges.size - 1)

    k, k_prime = counts_of(x), counts_of(x_prime)
    p, p_prime = k / n, k_prime / n

    both = (k >= min_count) & (k_prime >= min_count)
    one_sided = ((k >= min_count) & (k_prime == 0)) | (
        (k_prime >= min_count) & (k == 0)
    )
    n_tests = int(both.sum() + one_sided.sum())
    if n_tests == 0:
        raise ValueError(
            "no bin has enough outputs; choose bins where both inputs have mass"
        )
    z = float(norm.isf(alpha / (2.0 * n_tests)))

    log_ratio = np.log(p[both]) - np.log(p_prime[both])
    se = np.sqrt((1.0 - p[both]) / k[both] + (1.0 - p_prime[both]) / k_prime[both])
    lower_terms = list(np.abs(log_ratio) - z * se)

    # Disjoint supports: exact upper bound on the empty side, normal lower bound on the
    # other (both at the Bonferroni level).
    empty_upper = -math.expm1(math.log(alpha / (2.0 * n_tests)) / n)
    for b in np.flatnonzero(one_sided):
        full = max(p[b], p_prime[b])
        full_lower = full - z * math.sqrt(full * (1.0 - full) / n)
        lower_terms.append(
            math.log(full_lower / empty_upper) if full_lower > 0 else 0.0
        )

    if log_ratio.size:
        best = int(np.argmax(np.abs(log_ratio)))
        estimate, margin = float(abs(log_ratio[best])), float(z * se[best])
        upper = float(np.max(np.abs(log_ratio) + z * se))
    else:
        estimate, margin, upper = math.inf, math.inf, math.inf
    if np.any(one_sided):
        estimate, upper = math.inf, math.inf
    return PrivacyAudit(
        estimate=estimate,
        margin=margin,
        lower_bound=float(max(lower_terms)),
        upper_bound=upper,
        n_bins=int(both.sum()),
        z=z,
        log_ratios=log_ratio,
        standard_errors=se,
    )
