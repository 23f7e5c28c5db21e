r"""DP-SGD for multinomial logistic regression, the baseline of the label-DP study.

Every step samples a Poisson batch (each example independently with probability
:math:`q = B/n`), clips every example's gradient to L2 norm :math:`C`, adds Gaussian
noise :math:`N(0, \sigma^2 C^2 I)` to the sum and divides by the expected batch size
:math:`qn`:

.. math:: W \leftarrow W - \eta\, \frac{1}{qn}\Bigl(\sum_{i \in B_t}
          g_i \min\bigl(1, C/\lVert g_i\rVert\bigr) + \sigma C \xi_t\Bigr).

The per-example gradient is :math:`g_i = (s_i - e_{y_i}) \tilde x_i^\top`, so
:math:`\lVert g_i\rVert_F = \lVert s_i - e_{y_i}\rVert_2 \lVert\tilde x_i\rVert_2`
and a step is two matrix products. Epsilon comes from dp-accounting's RDP accountant
(:func:`dpsgd_epsilon`), at :math:`\delta = 1/n`. DP-SGD protects features
and labels alike, so its guarantee implies label DP.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from dp_accounting import dp_event, rdp
from numpy.typing import ArrayLike
from scipy.special import softmax

from ldpfda._validation import check_epsilon, check_int, check_real
from ldpfda.labeldp.learners import _check_xy, _LinearClassifier
from ldpfda.privacy.base import ReleaseEvent

__all__ = ["DPSGDLogisticRegression", "calibrate_noise_multiplier", "dpsgd_epsilon"]


def dpsgd_epsilon(
    *, noise_multiplier: float, sampling_probability: float, steps: int, delta: float
) -> float:
    r"""Epsilon of ``steps`` Poisson-subsampled Gaussian steps (RDP accountant).

    ``noise_multiplier`` :math:`\sigma` is the noise standard deviation over the
    clipping norm.

    References
    ----------
    I. Mironov, K. Talwar, L. Zhang, "Renyi differential privacy of the sampled
    Gaussian mechanism", arXiv:1908.10530 (2019); dp-accounting's ``RdpAccountant``.
    """
    sigma = check_real(noise_multiplier, "noise_multiplier", low=0.0, low_open=True)
    q = check_real(
        sampling_probability, "sampling_probability", low=0.0, high=1.0, low_open=True
    )
    t = check_int(steps, "steps", minimum=1)
    d = check_real(delta, "delta", low=0.0, high=1.0, low_open=True, high_open=True)
    accountant = rdp.RdpAccountant()
    event = dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma))
    accountant.compose(dp_event.SelfComposedDpEvent(event, t))
    # The accountant logs (and then skips) fractional orders whose series does not
    # converge for small sigma; the bound over the remaining orders is still valid.
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return float(accountant.get_epsilon(d))
    finally:
        logger.setLevel(level)


def calibrate_noise_multiplier(
    *, epsilon: float, sampling_probability: float, steps: int, delta: float
) -> float:
    r"""Smallest noise multiplier whose :func:`dpsgd_epsilon` is at most ``epsilon``.

    Bisection on :math:`\log\sigma` (epsilon decreases with :math:`\sigma`) to relative
    precision 1e-3; the returned :math:`\sigma` is on the safe side.
    """
    target = check_epsilon(epsilon, allow_inf=False)

    eps_of = partial(
        dpsgd_epsilon,
        sampling_probability=sampling_probability,
        steps=steps,
        delta=delta,
    )
    low, high = 0.05, 1.0
    while eps_of(noise_multiplier=high) > target:
        low, high = high, 2.0 * high
        if high > 1e7:
            raise ValueError(f"no noise multiplier reaches epsilon={target!r}")
    if eps_of(noise_multiplier=low) <= target:
        return low
    while high / low > 1.0 + 1e-3:
        mid = math.sqrt(low * high)
        if eps_of(noise_multiplier=mid) <= target:
            high = mid
        else:
            low = mid
    return high


@dataclass(kw_only=True, eq=False, repr=False)
class DPSGDLogisticRegression(_LinearClassifier):
    r"""Multinomial logistic regression trained by DP-SGD (numpy, vectorised).

    Parameters
    ----------
    epsilon, noise_multiplier : float or None
        Exactly one: a target epsilon (the noise multiplier :math:`\sigma` is then
        calibrated at fit time) or a fixed :math:`\sigma`.
    clip_norm, learning_rate : float
        :math:`C` (fixed before seeing the data) and :math:`\eta`.
    batch_size, epochs
        Expected batch size :math:`B` (sampling probability :math:`B/n`) and passes over
        the data (``steps = ceil(epochs n / B)``).
    n_classes, random_state
        K (default ``max(y) + 1``) and the seed of batch sampling and noise.

    Attributes
    ----------
    noise_multiplier_, epsilon_, delta_, n_steps_, event_
        What was spent, with its :class:`~ldpfda.privacy.ReleaseEvent`.

    References
    ----------
    M. Abadi, A. Chu, I. Goodfellow, H. B. McMahan, I. Mironov, K. Talwar, L. Zhang,
    "Deep learning with differential privacy", CCS 2016.
    """

    epsilon: float | None = 1.0
    noise_multiplier: float | None = None
    clip_norm: float = 1.0
    batch_size: int = 500
    epochs: float = 20.0
    learning_rate: float = 1.0
    n_classes: int | None = None
    random_state: int | None = None

    def fit(self, X: ArrayLike, y: ArrayLike) -> DPSGDLogisticRegression:
        x, labels, k = _check_xy(X, y, self.n_classes)
        n, p = x.shape
        if (self.epsilon is None) == (self.noise_multiplier is None):
            raise ValueError("give exactly one of epsilon and noise_multiplier")
        clip = check_real(self.clip_norm, "clip_norm", low=0.0, low_open=True)
        batch = check_int(self.batch_size, "batch_size", minimum=1, maximum=n)
        epochs = check_real(self.epochs, "epochs", low=0.0, low_open=True)
        lr = check_real(self.learning_rate, "learning_rate", low=0.0, low_open=True)
        delta, rate = 1.0 / n, batch / n
        steps = max(1, math.ceil(epochs / rate))
        # Both functions validate the epsilon or noise multiplier they are given.
        accounting: dict[str, Any] = dict(
            sampling_probability=rate, steps=steps, delta=delta
        )
        sigma = self.noise_multiplier
        if sigma is None:
            assert self.epsilon is not None  # exactly one of the two was given
            sigma = calibrate_noise_multiplier(epsilon=self.epsilon, **accounting)
        achieved = dpsgd_epsilon(noise_multiplier=sigma, **accounting)

        gen = np.random.default_rng(self.random_state)
        xt = np.hstack([x, np.ones((n, 1))])
        x_norm = np.linalg.norm(xt, axis=1)
        onehot = np.eye(k)
        w = np.zeros((k, p + 1))
        for _ in range(steps):
            size = gen.binomial(n, rate)
            index = (
                gen.choice(n, size=size, replace=False) if size else np.zeros(0, int)
            )
            residual = softmax(xt[index] @ w.T, axis=1) - onehot[labels[index]]
            norms = np.linalg.norm(residual, axis=1) * x_norm[index]
            scale = np.minimum(1.0, clip / np.maximum(norms, 1e-12))
            grad_sum = (residual * scale[:, None]).T @ xt[index]
            noise = gen.normal(0.0, sigma * clip, size=w.shape)
            w -= lr * (grad_sum + noise) / (rate * n)
        self._set_weights(w)
        self.noise_multiplier_ = float(sigma)
        self.epsilon_ = float(achieved)
        self.delta_ = float(delta)
        self.n_steps_ = int(steps)
        self.event_ = ReleaseEvent.of(
            "dp_sgd",
            achieved,
            delta=delta,
            noise_multiplier=self.noise_multiplier_,
            sampling_probability=rate,
            steps=steps,
            clip_norm=clip,
        )
        return self
