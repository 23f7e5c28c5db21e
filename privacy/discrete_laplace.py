r"""Exact discrete Laplace noise for integer statistics (counts, sums of counts).

``count + k`` with :math:`P(k) \propto e^{-|k|/s}` is :math:`\Delta_1/s`-DP for L1
sensitivity :math:`\Delta_1` (in counts) with no floating-point caveat (Mironov 2012):
the output is an integer and :math:`k` is drawn exactly from uniform integers. The
scale is rounded *up* to a multiple of :math:`2^{-20}` (:func:`rational_scale`).

References
----------
C. Canonne, G. Kamath, T. Steinke, "The discrete Gaussian for differential privacy",
NeurIPS 2020, Algorithms 1 and 2. I. Mironov, "On significance of the least significant
bits for differential privacy", CCS 2012.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from ldpfda._validation import check_int, check_real
from ldpfda.privacy.random import as_generator

__all__ = ["SCALE_DENOMINATOR", "discrete_laplace", "rational_scale"]

#: Denominator of the rational scales (a float scale is rounded up to a multiple).
SCALE_DENOMINATOR = 2**20

Rng = np.random.Generator | int | None


def rational_scale(scale: float) -> Fraction:
    """The smallest multiple of ``2**-20`` that is ``>= scale`` (a Fraction)."""
    value = check_real(scale, "scale", low=0.0, low_open=True, high_open=True)
    return Fraction(math.ceil(value * SCALE_DENOMINATOR), SCALE_DENOMINATOR)


def _bernoulli_exp_below_one(
    num: NDArray[np.int64], den: NDArray[np.int64], gen: np.random.Generator
) -> NDArray[np.bool_]:
    r"""Bernoulli(:math:`e^{-\gamma}`), :math:`\gamma = num/den \in [0, 1]`, exactly
    (CKS Algorithm 1: Bernoulli(:math:`\gamma/k`), k = 1, 2, ... up to a 0; 1 if k is
    odd)."""
    out = np.empty(num.shape, dtype=bool)
    active = np.arange(num.size)
    k = np.ones(num.shape, dtype=np.int64)
    while active.size:
        success = gen.integers(0, den[active] * k[active]) < num[active]
        k[active[success]] += 1
        done = active[~success]
        out[done] = k[done] % 2 == 1
        active = active[success]
    return out


def _bernoulli_exp(
    num: NDArray[np.int64], den: NDArray[np.int64], gen: np.random.Generator
) -> NDArray[np.bool_]:
    r"""Bernoulli(:math:`e^{-\gamma}`) for any :math:`\gamma = num/den \ge 0`."""
    whole, rest = np.divmod(num, den)
    out = np.ones(num.shape, dtype=bool)
    active = np.flatnonzero(whole > 0)
    step = 0
    # e^{-gamma} = e^{-1} ** floor(gamma) * e^{-frac(gamma)}: one e^{-1} coin per unit.
    while active.size:
        ones = np.ones(active.size, dtype=np.int64)
        out[active] &= _bernoulli_exp_below_one(ones, ones, gen)
        step += 1
        active = active[out[active] & (whole[active] > step)]
    live = np.flatnonzero(out)
    out[live] = _bernoulli_exp_below_one(rest[live], den[live], gen)
    return out


def discrete_laplace(scale: float, size: int, rng: Rng = None) -> NDArray[np.int64]:
    r"""``size`` integers with :math:`P(k) \propto e^{-|k|/s}`, exactly.

    :math:`s = S/T` is :func:`rational_scale` of ``scale``. CKS Algorithm 2: draw
    :math:`U` uniform on :math:`\{0..S-1\}`, kept with probability :math:`e^{-U/S}`,
    and :math:`V \ge 0` with :math:`P(V = v) \propto e^{-v}`; then
    :math:`Y = \lfloor (U + SV)/T \rfloor` has :math:`P(Y \ge y) = e^{-y/s}`; a fair
    sign makes it two-sided, rejecting ``(-, 0)``. Rejected entries are redrawn.
    """
    s = rational_scale(scale)
    n = check_int(size, "size", minimum=0)
    gen = as_generator(rng)
    big_s, big_t = s.numerator, s.denominator  # s = S/T
    out = np.zeros(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        m = todo.size
        u = gen.integers(0, big_s, size=m)
        keep = _bernoulli_exp(u, np.full(m, big_s, dtype=np.int64), gen)
        v = np.zeros(m, dtype=np.int64)
        active = np.flatnonzero(keep)
        while active.size:
            ones = np.ones(active.size, dtype=np.int64)
            more = _bernoulli_exp_below_one(ones, ones, gen)
            v[active[more]] += 1
            active = active[more]
        y = (u + big_s * v) // big_t
        negative = gen.integers(0, 2, size=m) == 1
        ok = keep & ~(negative & (y == 0))
        out[todo[ok]] = np.where(negative[ok], -y[ok], y[ok])
        todo = todo[~ok]
    return out
