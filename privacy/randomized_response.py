"""Randomized response: binary, K-ary, and the release of an evaluation feedback bit."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import check_epsilon, check_int, check_real
from ldpfda.privacy.base import Mechanism
from ldpfda.privacy.random import RandomLike, uniform

__all__ = [
    "BinaryRandomizedResponse",
    "FeedbackBit",
    "KaryRandomizedResponse",
    "rr_epsilon",
    "rr_keep_probability",
]


def rr_keep_probability(*, epsilon: float, n_categories: int = 2) -> float:
    r"""Probability that K-ary randomized response reports the true category.

    .. math:: q = \frac{e^\varepsilon}{e^\varepsilon + K - 1}
              \quad (1 \text{ for } \varepsilon = \infty)

    References
    ----------
    S. L. Warner, "Randomized response", JASA 60 (1965); P. Kairouz, S. Oh,
    P. Viswanath, "Extremal mechanisms for local differential privacy", NeurIPS 2014.
    """
    epsilon = check_epsilon(epsilon)
    k = check_int(n_categories, "n_categories", minimum=2)
    if math.isinf(epsilon):
        return 1.0
    # Written to stay finite for large epsilon.
    return 1.0 / (1.0 + (k - 1) * math.exp(-epsilon))


def rr_epsilon(*, keep_probability: float, n_categories: int = 2) -> float:
    r"""Epsilon :math:`\ln\frac{q (K - 1)}{1 - q}` of K-ary randomized response that
    keeps the truth with probability :math:`q \in (1/K, 1]`."""
    k = check_int(n_categories, "n_categories", minimum=2)
    q = check_real(
        keep_probability, "keep_probability", low=1.0 / k, high=1.0, low_open=True
    )
    return math.inf if q == 1.0 else math.log(q * (k - 1) / (1.0 - q))


class KaryRandomizedResponse(Mechanism):
    r"""K-ary randomized response on categories :math:`\{0, \dots, K-1\}`.

    A client keeps its category with probability
    :math:`q = e^\varepsilon/(e^\varepsilon+K-1)`, else reports one of the other
    :math:`K-1` uniformly: output ratios are at most
    :math:`q / ((1-q)/(K-1)) = e^\varepsilon`.

    References
    ----------
    S. L. Warner, JASA 1965; P. Kairouz, S. Oh, P. Viswanath, NeurIPS 2014.
    """

    name = "randomized_response"
    _recorded: tuple[str, ...] = ("n_categories", "keep_probability")

    def __init__(self, *, epsilon: float, n_categories: int = 2) -> None:
        super().__init__(epsilon=epsilon)
        self.n_categories = check_int(n_categories, "n_categories", minimum=2)
        self.keep_probability = rr_keep_probability(
            epsilon=self.epsilon, n_categories=self.n_categories
        )

    @property
    def other_probability(self) -> float:
        """Probability of reporting one given wrong category."""
        return (1.0 - self.keep_probability) / (self.n_categories - 1)

    def _check_values(self, values: ArrayLike) -> NDArray[np.int64]:
        y = np.asarray(values)
        if y.dtype.kind not in "biuf":
            raise TypeError(f"values must be integer categories, got dtype {y.dtype}")
        bad = ~np.isin(y, np.arange(self.n_categories))
        if np.any(bad):
            raise ValueError(
                f"values must be in {{0, ..., {self.n_categories - 1}}}, "
                f"got {y[bad].flat[0]!r}"
            )
        return y.astype(np.int64)

    def randomise(self, values: ArrayLike, rng: RandomLike = None) -> NDArray[np.int64]:
        y = self._check_values(values)
        if not self.is_private:
            return y.copy()
        k = self.n_categories
        # One uniform per value: below q keep; otherwise its position in the remaining
        # mass picks one of the K-1 other categories uniformly.
        u = uniform(rng, y.shape)
        keep = u < self.keep_probability
        step = np.minimum(
            ((u - self.keep_probability) / self.other_probability).astype(np.int64),
            k - 2,
        )
        return np.where(keep, y, (y + 1 + np.maximum(step, 0)) % k)

    def transition_matrix(self) -> NDArray[np.float64]:
        """T[i, j] = P(report j | true category i)."""
        k = self.n_categories
        t = np.full((k, k), self.other_probability)
        np.fill_diagonal(t, self.keep_probability)
        return t

    def bias(self, values: ArrayLike) -> NDArray[np.float64]:
        """Bias of the reported one-hot indicator, shape ``values.shape + (K,)``."""
        y = self._check_values(values)
        return self.transition_matrix()[y] - np.eye(self.n_categories)[y]

    def variance(self, values: ArrayLike) -> NDArray[np.float64]:
        """Variance of the reported one-hot indicator, shape ``values.shape + (K,)``."""
        p = self.transition_matrix()[self._check_values(values)]
        return p * (1.0 - p)

    def debias_frequencies(self, reported: ArrayLike) -> NDArray[np.float64]:
        """Unbiased estimate of the true category frequencies from reported ones."""
        f = np.asarray(reported, dtype=float)
        return np.linalg.solve(self.transition_matrix().T, f)


class BinaryRandomizedResponse(KaryRandomizedResponse):
    r"""Randomized response on a bit, kept with probability
    :math:`q = e^\varepsilon/(1+e^\varepsilon)`.

    Output bias :math:`(1-q)(1-2y)`, variance :math:`q(1-q)`; :meth:`debias_mean`
    estimates the true mean as :math:`(\bar o + q - 1)/(2q - 1)`.

    References
    ----------
    S. L. Warner, "Randomized response", JASA 60 (1965).
    """

    name = "binary_randomized_response"
    _recorded = ("keep_probability",)

    def __init__(self, *, epsilon: float) -> None:
        super().__init__(epsilon=epsilon, n_categories=2)

    def bias(self, values: ArrayLike) -> NDArray[np.float64]:
        y = self._check_values(values)
        return (1.0 - self.keep_probability) * (1.0 - 2.0 * y.astype(np.float64))

    def variance(self, values: ArrayLike) -> NDArray[np.float64]:
        q = self.keep_probability
        return np.full(self._check_values(values).shape, q * (1.0 - q))

    def debias_mean(self, reported_mean: ArrayLike) -> NDArray[np.float64]:
        """Unbiased estimate of the true mean of the bits from the reported mean."""
        q = self.keep_probability
        return (np.asarray(reported_mean, dtype=float) + q - 1.0) / (2.0 * q - 1.0)


class FeedbackBit(BinaryRandomizedResponse):
    """Randomized response on an evaluation client's bit ``1{model wrong on my label}``,
    at its whole epsilon; named apart so the release shows in the client's ledger."""

    name = "feedback_bit"
