r"""Epsilon of the label-DP mechanisms, as explicit maps with their inverses.

A release of :class:`~ldpfda.labeldp.ClusterRR` has two parts, and its label-DP epsilon
is their sum by sequential composition (Dwork and Roth 2014, Thm 3.16):

1. **Histogram release.** Cluster :math:`c` publishes its empirical label distribution
   :math:`\hat p_c = (n_c(y)/n_c)_y` plus i.i.d. Laplace noise of scale
   :math:`\sigma/n_c` on every entry. Changing one label moves one count from one label
   to another, so :math:`\hat p_c` changes by :math:`1/n_c` in two entries: the L1
   sensitivity is :math:`2/n_c`. Cluster sizes are public (clusters are built from the
   features, which label DP does not protect), so the Laplace mechanism gives
   :math:`\varepsilon_1 = (2/n_c)/(\sigma/n_c) = 2/\sigma` (:func:`histogram_epsilon`).
2. **Resampling.** Every label is kept with probability :math:`1-\lambda` and otherwise
   replaced by a draw from its cluster's released distribution :math:`q_c`, a function
   of the noisy histograms only. Given :math:`q`, example :math:`i` reports
   :math:`\tilde y` with probability :math:`(1-\lambda)\mathbb 1[\tilde y = y_i] +
   \lambda q_c(\tilde y)`, independently of every other label. The ratio of these
   probabilities under two values of :math:`y_i` is largest for
   :math:`\tilde y = y_i`:

   .. math:: \frac{1 - \lambda + \lambda q_c(\tilde y)}{\lambda q_c(\tilde y)}
             \le 1 + \frac{1-\lambda}{\lambda q_{\min}}
             = e^{\varepsilon_2}, \qquad
             q_{\min} = \min_{c, y} q_c(y),

   (:func:`resampling_epsilon`). :math:`q_{\min}` is post-processing of the histogram
   release, so :math:`\lambda` may be chosen from it (adaptive composition of pure DP:
   the joint density ratio factorises into the two ratios).

With :math:`q_c` uniform the histogram is not needed (:math:`\varepsilon_1 = 0`) and
resampling is K-ary randomized response: :math:`\lambda = K/(e^\varepsilon + K - 1)`
(:func:`uniform_rr_probability`).

Every function here validates its arguments like :mod:`ldpfda._validation` and has an
inverse, checked by a round-trip test. A client of the label-only modes sizes its own
resampling probability with :func:`resampling_probability`, so the module lives with
the mechanisms and needs nothing beyond the standard library; the names stay importable
from :mod:`ldpfda.labeldp.accounting`.

References
----------
H. Esfandiari, V. Mirrokni, U. Syed, S. Vassilvitskii, "Label differential privacy via
clustering", AISTATS 2022. C. Dwork, A. Roth, "The algorithmic foundations of
differential privacy", FnT-TCS 9 (2014).
"""

from __future__ import annotations

import math

from ldpfda._validation import check_epsilon, check_int, check_real

__all__ = [
    "histogram_epsilon",
    "histogram_sigma",
    "resampling_epsilon",
    "resampling_probability",
    "uniform_rr_epsilon",
    "uniform_rr_probability",
]


def histogram_epsilon(*, sigma: float) -> float:
    r"""Epsilon of the noisy cluster histograms: :math:`\varepsilon_1 = 2/\sigma`.

    Laplace noise of scale :math:`\sigma/n_c` on a vector of L1 sensitivity
    :math:`2/n_c`. ``sigma = inf`` (no release) gives 0. Inverse of
    :func:`histogram_sigma`.

    References
    ----------
    C. Dwork, F. McSherry, K. Nissim, A. Smith, "Calibrating noise to sensitivity in
    private data analysis", TCC 2006.
    """
    sigma = check_real(sigma, "sigma", low=0.0, low_open=True)
    return 0.0 if math.isinf(sigma) else 2.0 / sigma


def histogram_sigma(*, epsilon: float) -> float:
    r"""Noise factor :math:`\sigma = 2/\varepsilon_1` of the histogram release.

    ``epsilon = inf`` gives 0 (exact histograms). Inverse of :func:`histogram_epsilon`.
    """
    epsilon = check_epsilon(epsilon)
    return 0.0 if math.isinf(epsilon) else 2.0 / epsilon


def resampling_epsilon(*, resample_probability: float, q_min: float) -> float:
    r"""Epsilon of resampling labels from :math:`q_c` with probability :math:`\lambda`.

    .. math:: \varepsilon_2 = \ln\Bigl(1 + \frac{1-\lambda}{\lambda\, q_{\min}}\Bigr)

    :math:`\lambda = 1` gives 0 (labels carry no information about themselves);
    :math:`q_{\min} = 0` with :math:`\lambda < 1` gives ``inf``. Inverse of
    :func:`resampling_probability`.

    Parameters
    ----------
    resample_probability : float
        :math:`\lambda \in (0, 1]`.
    q_min : float
        Smallest released probability :math:`q_c(y)` over non-empty clusters, in [0, 1].

    References
    ----------
    H. Esfandiari et al., AISTATS 2022, Algorithm 1.
    """
    lam = check_real(
        resample_probability,
        "resample_probability (lambda)",
        low=0.0,
        high=1.0,
        low_open=True,
    )
    q_min = check_real(q_min, "q_min", low=0.0, high=1.0)
    if lam == 1.0:
        return 0.0
    if q_min == 0.0:
        return math.inf
    return math.log1p((1.0 - lam) / (lam * q_min))


def resampling_probability(*, epsilon: float, q_min: float) -> float:
    r"""Largest resampling probability :math:`\lambda` that keeps ``epsilon``.

    .. math:: \lambda = \frac{1}{1 + q_{\min}(e^{\varepsilon_2} - 1)}

    ``epsilon = 0`` gives :math:`\lambda = 1` (every label redrawn). Inverse of
    :func:`resampling_epsilon` on :math:`\varepsilon_2 \in [0, \infty)`,
    :math:`q_{\min} \in (0, 1]`.
    """
    epsilon = check_real(epsilon, "epsilon", low=0.0, high=math.inf, high_open=True)
    q_min = check_real(q_min, "q_min", low=0.0, high=1.0, low_open=True)
    return 1.0 / (1.0 + q_min * math.expm1(epsilon))


def uniform_rr_probability(*, epsilon: float, n_classes: int) -> float:
    r"""Resampling probability of UniformRR, :math:`\lambda = K/(e^\varepsilon+K-1)`.

    Redrawing a label uniformly with probability :math:`\lambda` keeps it with
    probability :math:`1 - \lambda + \lambda/K = e^\varepsilon/(e^\varepsilon + K - 1)`,
    the keep-probability of K-ary randomized response
    (:func:`ldpfda.privacy.rr_keep_probability`). It is :func:`resampling_probability`
    with :math:`q_{\min} = 1/K`. ``epsilon = inf`` gives 0. Inverse of
    :func:`uniform_rr_epsilon`.

    References
    ----------
    S. L. Warner, JASA 1965; H. Esfandiari et al., AISTATS 2022, Corollary 1.
    """
    epsilon = check_epsilon(epsilon)
    k = check_int(n_classes, "n_classes", minimum=2)
    if math.isinf(epsilon):
        return 0.0
    return k / (math.expm1(epsilon) + k)


def uniform_rr_epsilon(*, resample_probability: float, n_classes: int) -> float:
    r"""Epsilon of UniformRR with resampling probability :math:`\lambda`.

    .. math:: \varepsilon = \ln\Bigl(1 + \frac{K(1-\lambda)}{\lambda}\Bigr)

    Inverse of :func:`uniform_rr_probability`.
    """
    k = check_int(n_classes, "n_classes", minimum=2)
    return resampling_epsilon(resample_probability=resample_probability, q_min=1.0 / k)
