r"""Label-DP epsilon of :class:`~ldpfda.labeldp.ClusterRR`, as maps with inverses.

A release has two parts, and its epsilon is their sum (sequential composition, Dwork
and Roth 2014, Thm 3.16):

1. **Histogram.** Cluster :math:`c` publishes its label distribution plus Laplace noise
   of scale :math:`\sigma/n_c` per entry; one label change moves :math:`1/n_c` between
   two entries (cluster sizes are public), so :math:`\varepsilon_1 = 2/\sigma`.
2. **Resampling.** Each label is kept with probability :math:`1-\lambda`, else redrawn
   from its cluster's released :math:`q_c` (post-processing of the histograms, so
   :math:`\lambda` may depend on it). The output ratio is largest at
   :math:`\tilde y = y_i`: at most :math:`1 + (1-\lambda)/(\lambda q_{\min})
   = e^{\varepsilon_2}`, :math:`q_{\min} = \min_{c, y} q_c(y)`.

With :math:`q_c` uniform no histogram is released and resampling is K-ary randomized
response. Standard library only, so a client of the label-only modes sizes its own
:math:`\lambda`; re-exported by :mod:`ldpfda.labeldp.accounting`.

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

    ``sigma = inf`` (no release) gives 0. Inverse of :func:`histogram_sigma`.

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

    :math:`\lambda` is ``resample_probability`` in (0, 1] (1 gives 0), ``q_min`` the
    smallest released :math:`q_c(y)` over non-empty clusters (0 gives ``inf`` for
    :math:`\lambda < 1`). Inverse of :func:`resampling_probability`.

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

    ``epsilon = 0`` gives 1 (every label redrawn). Inverse of
    :func:`resampling_epsilon` for :math:`q_{\min} \in (0, 1]`.
    """
    epsilon = check_real(epsilon, "epsilon", low=0.0, high=math.inf, high_open=True)
    q_min = check_real(q_min, "q_min", low=0.0, high=1.0, low_open=True)
    return 1.0 / (1.0 + q_min * math.expm1(epsilon))


def uniform_rr_probability(*, epsilon: float, n_classes: int) -> float:
    r"""Resampling probability of UniformRR, :math:`\lambda = K/(e^\varepsilon+K-1)`.

    The label is kept with probability :math:`e^\varepsilon/(e^\varepsilon + K - 1)`,
    as in K-ary randomized response; :func:`resampling_probability` at
    :math:`q_{\min} = 1/K`. ``epsilon = inf`` gives 0. Inverse of
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
