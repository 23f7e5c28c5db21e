r"""Label-DP epsilon of :class:`~ldpfda.labeldp.ClusterRR`, as maps with inverses.

A release's epsilon is the sum (sequential composition) of its noisy cluster
histograms' and its resampling's; with uniform :math:`q_c` no histogram is released and
resampling is K-ary randomized response. Standard library only, so a client of the
label-only modes sizes its own :math:`\lambda`; re-exported by
:mod:`ldpfda.labeldp.accounting`.

References
----------
H. Esfandiari, V. Mirrokni, U. Syed, S. Vassilvitskii, "Label differential privacy via
clustering", AISTATS 2022. C. Dwork, A. Roth, "The algorithmic foundations of
differential privacy", FnT-TCS 9 (2014), Thm 3.16.
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
    r"""Epsilon :math:`\varepsilon_1 = 2/\sigma` of the noisy cluster histograms (0 for
    ``sigma = inf``, no release): cluster :math:`c` publishes its label distribution
    plus Laplace noise of scale :math:`\sigma/n_c` per entry, and one label change moves
    :math:`1/n_c` between two entries (cluster sizes are public).

    References
    ----------
    C. Dwork, F. McSherry, K. Nissim, A. Smith, "Calibrating noise to sensitivity in
    private data analysis", TCC 2006.
    """
    sigma = check_real(sigma, "sigma", low=0.0, low_open=True)
    return 0.0 if math.isinf(sigma) else 2.0 / sigma


def histogram_sigma(*, epsilon: float) -> float:
    r"""Noise factor :math:`\sigma = 2/\varepsilon_1` of the histogram release (0, exact
    histograms, for ``epsilon = inf``)."""
    epsilon = check_epsilon(epsilon)
    return 0.0 if math.isinf(epsilon) else 2.0 / epsilon


def resampling_epsilon(*, resample_probability: float, q_min: float) -> float:
    r"""Epsilon of keeping each label with probability :math:`1 - \lambda`, else
    redrawing it from its cluster's released :math:`q_c`: the output ratio is largest at
    the true label,

    .. math:: e^{\varepsilon_2} = 1 + \frac{1-\lambda}{\lambda\, q_{\min}},

    :math:`\lambda \in (0, 1]` (1 gives 0), ``q_min`` the smallest released
    :math:`q_c(y)` over non-empty clusters (0 gives ``inf`` for :math:`\lambda < 1`).

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
    r"""Largest resampling probability that keeps ``epsilon`` (1 for ``epsilon = 0``):

    .. math:: \lambda = \frac{1}{1 + q_{\min}(e^{\varepsilon_2} - 1)}
    """
    epsilon = check_real(epsilon, "epsilon", low=0.0, high=math.inf, high_open=True)
    q_min = check_real(q_min, "q_min", low=0.0, high=1.0, low_open=True)
    return 1.0 / (1.0 + q_min * math.expm1(epsilon))


def uniform_rr_probability(*, epsilon: float, n_classes: int) -> float:
    r"""Resampling probability :math:`\lambda = K/(e^\varepsilon+K-1)` of UniformRR
    (0 for ``epsilon = inf``): K-ary randomized response, which keeps the label with
    probability :math:`e^\varepsilon/(e^\varepsilon + K - 1)`.

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
    r"""Epsilon :math:`\ln(1 + K(1-\lambda)/\lambda)` of UniformRR with resampling
    probability :math:`\lambda`."""
    k = check_int(n_classes, "n_classes", minimum=2)
    return resampling_epsilon(resample_probability=resample_probability, q_min=1.0 / k)
