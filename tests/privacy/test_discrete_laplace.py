"""The exact discrete Laplace sampler of the label-DP histograms."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import chi2

from ldpfda.privacy.discrete_laplace import (
    SCALE_DENOMINATOR,
    discrete_laplace,
    rational_scale,
)


def test_scale_is_rounded_up_to_the_grid():
    assert rational_scale(2.0) == Fraction(2)
    s = rational_scale(1.0 / 3.0)
    assert s.denominator <= SCALE_DENOMINATOR
    assert 1.0 / 3.0 <= s < 1.0 / 3.0 + 2.0**-20


@pytest.mark.parametrize("scale", [0.4, 2.0, 7.3])
def test_draws_follow_the_discrete_laplace_law(scale):
    """Pearson test of 2*10^5 draws against P(k) = (1-a)/(1+a) a^|k|, a = e^(-1/s)."""
    n = 200_000
    k = discrete_laplace(scale, n, rng=11)
    assert k.dtype == np.int64
    a = math.exp(-1.0 / float(rational_scale(scale)))
    # Cells -m..m with expected count >= 20, and the two tails.
    m = 0
    while n * (1 - a) / (1 + a) * a ** (m + 1) >= 20:
        m += 1
    support = np.arange(-m, m + 1)
    p = (1 - a) / (1 + a) * a ** np.abs(support)
    tail = a ** (m + 1) / (1 + a)  # P(k > m) = P(k < -m)
    expected = n * np.concatenate([[tail], p, [tail]])
    observed = np.concatenate(
        [
            [np.sum(k < -m)],
            np.bincount(k[np.abs(k) <= m] + m, minlength=2 * m + 1),
            [np.sum(k > m)],
        ]
    )
    stat = float(np.sum((observed - expected) ** 2 / expected))
    assert stat < chi2.isf(1e-4, df=observed.size - 1), stat


def test_seeded_draws_repeat_and_sizes_hold():
    first, again = discrete_laplace(3.0, 50, rng=5), discrete_laplace(3.0, 50, rng=5)
    assert np.array_equal(first, again)
    assert discrete_laplace(3.0, 0, rng=5).shape == (0,)


@pytest.mark.parametrize("scale", [0.0, -1.0, math.inf, math.nan])
def test_bad_scale_is_refused(scale):
    with pytest.raises(ValueError, match="scale"):
        discrete_laplace(scale, 3, rng=0)
