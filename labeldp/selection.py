r"""Choosing ClusterRR's parameters for a target epsilon from released statistics only.

The rule sees the true labels only through differentially private releases charged to
the same budget.

**Criterion.** The predicted share of training examples whose true label a learner
recovers under a configuration (sampling distributions :math:`q_c`, resampling
probability :math:`\lambda`, correction :math:`\beta`). For an example of cluster
:math:`c` and label :math:`y`, the expected corrected label vector and its variance are

.. math:: v = [T_c(\lambda) R_c]_{y\cdot}, \qquad
          \sigma_j^2 = [T_c(\lambda) (R_c \circ R_c)]_{yj} - v_j^2,

with :math:`R_c = T_c(\beta)^{-1}` (:math:`R_c = I` for the plain learner,
:math:`\beta = 0`). A linear learner with :math:`d` parameters fitted on :math:`n`
examples has average leverage :math:`d/n`: the precision of an average over
:math:`n_{\mathrm{eff}} = n/d` examples, so

.. math:: P_c(y) = P\Bigl(\arg\max_j \bigl(v_j
          + \tfrac{\sigma_j}{\sqrt{n_{\mathrm{eff}}}} Z_j\bigr) = y\Bigr),
          \qquad Z_j \sim N(0, 1)\ \text{i.i.d.},

by Gauss-Hermite quadrature, and the criterion is
:math:`\sum_c \frac{n_c}{n} \sum_y p_c(y) P_c(y)`. It charges cluster resampling its
full bias (the within-cluster label is a function of the example), and it is
post-processing with the noisy histograms standing in for :math:`p_c`.

**Budget split** (:class:`AutoClusterRR`). The histogram's epsilon is fixed before
the histogram is released: (1) a *pilot* releases the majority share
:math:`\pi = \frac1n\sum_c \max_y n_c(y)` at a small :math:`\varepsilon_0`
(:func:`release_majority_share`); (2) :func:`plan_histogram_share` splits the rest
into :math:`\varepsilon_1 + \varepsilon_2` by simulation on a model fitted to
:math:`\hat\pi`; (3) the histograms are released at :math:`\varepsilon_1` and
:func:`choose_resampling` picks :math:`\tau`, truncation, floor, :math:`\lambda` and
:math:`\beta`. The total is :math:`\varepsilon_0 + \varepsilon_1 + \varepsilon_2 =
\varepsilon`.

References
----------
H. Esfandiari, V. Mirrokni, U. Syed, S. Vassilvitskii, "Label differential privacy via
clustering", AISTATS 2022. C. Dwork, A. Roth, "The algorithmic foundations of
differential privacy" (2014): Laplace mechanism, composition, post-processing.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np
from numpy.polynomial.hermite_e import hermegauss
from numpy.typing import ArrayLike, NDArray
from scipy.special import ndtr

from ldpfda._validation import check_epsilon, check_int, check_real
from ldpfda.labeldp.accounting import (
    histogram_sigma,
    resampling_epsilon,
    resampling_probability,
    uniform_rr_probability,
)
from ldpfda.labeldp.mechanisms import (
    LabelRelease,
    Rng,
    Truncation,
    UniformRR,
    _given_clusters,
    _normalised,
    _q_min,
    _resample_release,
    check_labels,
    cluster_distributions,
    cluster_label_counts,
    noisy_cluster_histograms,
)
from ldpfda.labeldp.transition import inverse_transition_matrices, transition_matrices
from ldpfda.privacy.base import ReleaseEvent
from ldpfda.privacy.discrete_laplace import discrete_laplace
from ldpfda.privacy.random import as_generator

__all__ = [
    "AutoClusterRR",
    "Choice",
    "Plan",
    "choose_resampling",
    "pilot_epsilon",
    "plan_histogram_share",
    "predicted_accuracy",
    "release_majority_share",
]

#: Search grid of the post-processing step (the floors may be narrowed by a caller).
DEFAULT_TAUS: tuple[float, ...] = (0.0, 0.05, 0.1)
DEFAULT_FLOORS: tuple[float, ...] = (0.0, 0.1, 0.25, 0.5, 1.0)
DEFAULT_TRUNCATIONS: tuple[Truncation, ...] = ("clip", "zero")
#: Candidate histogram shares of the budget after the pilot.
DEFAULT_SHARES: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
#: Target standard deviation and largest budget share of the pilot.
PILOT_STD, PILOT_MAX_SHARE = 0.02, 0.1
_NODES, _WEIGHTS = hermegauss(16)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()
#: Relative tolerance under which two predicted accuracies count as equal.
_TIE = 1e-9


def predicted_accuracy(
    label_distributions: ArrayLike,
    distributions: ArrayLike,
    *,
    resample_probability: float,
    beta: float,
    n_effective: float,
    weights: ArrayLike | None = None,
) -> float:
    r"""Predicted share of true labels a learner recovers (the selection criterion).

    :math:`\sum_c w_c \sum_y p_c(y) P_c(y)` (module docstring) for the (estimated)
    label distributions :math:`p_c` and the configuration's sampling distributions
    :math:`q_c` (both (C, K)), :math:`\lambda \in [0, 1]`, :math:`\beta \in [0,
    \lambda]` below 1, :math:`n_{\mathrm{eff}} = n/d` examples per model parameter and
    cluster shares :math:`w_c = n_c/n` (default equal).
    """
    p = np.asarray(label_distributions, dtype=float)
    q = np.asarray(distributions, dtype=float)
    lam = check_real(
        resample_probability, "resample_probability (lambda)", low=0.0, high=1.0
    )
    b = check_real(beta, "beta", low=0.0, high=lam)
    n_eff = check_real(n_effective, "n_effective", low=0.0, low_open=True)
    n_clusters, k = q.shape
    w = np.full(n_clusters, 1 / n_clusters) if weights is None else np.asarray(weights)
    t = transition_matrices(q, lam)
    r = inverse_transition_matrices(q, b)  # refuses beta = 1
    v = t @ r
    var = np.maximum(t @ (r * r) - v * v, 0.0)
    sd = np.sqrt(var / n_eff)
    diag_v, diag_sd = (np.einsum("cyy->cy", a)[:, :, None, None] for a in (v, sd))
    # Competitor j of true label y, at quadrature node z: v_y - v_j + sd_y z.
    num = diag_v - v[:, :, :, None] + diag_sd * _NODES
    den = sd[:, :, :, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        phi = np.where(
            den > 0, ndtr(num / np.where(den > 0, den, 1.0)), np.heaviside(num, 0.5)
        )
    phi[:, np.arange(k), np.arange(k), :] = 1.0
    wins = np.prod(phi, axis=2) @ _WEIGHTS  # (C, K)
    return float(np.sum(w[:, None] * p * wins))


@dataclass(frozen=True)
class Choice:
    """A resampling configuration picked by :func:`choose_resampling`."""

    tau: float
    truncation: Truncation
    floor: float
    resample_probability: float
    beta: float
    q_min: float
    score: float

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _estimate_distributions(noisy: NDArray[np.float64]) -> NDArray[np.float64]:
    """Plug-in label distributions: noisy histograms clipped at 0 and renormalised."""
    return _normalised(np.maximum(noisy, 0.0))


def _score_candidates(
    estimate: NDArray,
    truth: NDArray,
    noisy: NDArray,
    sizes: NDArray,
    epsilon_resample: float,
    n_effective: float,
    floors: Sequence[float] = DEFAULT_FLOORS,
) -> tuple[Choice, float]:
    """Best choice by the criterion on ``estimate``, and its criterion on ``truth``."""
    weights = sizes / max(sizes.sum(), 1)
    criterion = partial(predicted_accuracy, n_effective=n_effective, weights=weights)
    best: tuple[tuple[float, float, float], Choice, NDArray] | None = None
    seen: set[bytes] = set()
    grid = itertools.product(DEFAULT_TRUNCATIONS, DEFAULT_TAUS, floors)
    for truncation, tau, floor in grid:
        q = cluster_distributions(noisy, tau=tau, truncation=truncation, floor=floor)
        key = q.tobytes()
        if key in seen:
            continue
        seen.add(key)
        q_min = _q_min(q, sizes)
        if epsilon_resample == 0.0 or q_min == 0.0:
            lam = 1.0
        else:
            lam = resampling_probability(epsilon=epsilon_resample, q_min=q_min)
        for beta in (0.0, lam) if lam < 1.0 else (0.0,):
            score = criterion(estimate, q, resample_probability=lam, beta=beta)
            # Ties: prefer the unbiased correction, then the larger floor.
            rank = (score, beta, floor)
            top = None if best is None else best[0]
            if (
                top is None
                or score > top[0] * (1 + _TIE)
                or (
                    abs(score - top[0]) <= _TIE * max(abs(top[0]), 1e-300)
                    and rank[1:] > top[1:]
                )
            ):
                choice = Choice(
                    float(tau), truncation, float(floor), lam, beta, q_min, score
                )
                best = (rank, choice, q)
    assert best is not None
    _, choice, q = best
    lam, beta = choice.resample_probability, choice.beta
    return choice, criterion(truth, q, resample_probability=lam, beta=beta)


def choose_resampling(
    noisy_histograms: ArrayLike,
    cluster_sizes: ArrayLike,
    *,
    epsilon_resample: float,
    n_effective: float,
    floors: Sequence[float] = DEFAULT_FLOORS,
) -> Choice:
    r"""Pick :math:`\tau`, truncation, floor, :math:`\lambda`, :math:`\beta` (step 3).

    Every combination of :data:`DEFAULT_TRUNCATIONS`, :data:`DEFAULT_TAUS` and
    ``floors`` gives a :math:`q_c`
    (:func:`~ldpfda.labeldp.mechanisms.cluster_distributions`); :math:`\lambda` is the
    largest that ``epsilon_resample`` allows with the realised :math:`q_{\min}` (1 when
    it is 0), :math:`\beta \in \{0, \lambda\}`. The winner maximises
    :func:`predicted_accuracy` on the noisy histograms (clipped at 0, renormalised).
    """
    noisy = np.asarray(noisy_histograms, dtype=float)
    sizes = np.asarray(cluster_sizes, dtype=float)
    eps2 = check_real(
        epsilon_resample, "epsilon_resample", low=0.0, high=math.inf, high_open=True
    )
    estimate = _estimate_distributions(noisy)
    return _score_candidates(
        estimate, estimate, noisy, sizes, eps2, n_effective, floors
    )[0]


def _uniform_choice(epsilon: float, n_classes: int, n_effective: float) -> Choice:
    """UniformRR at ``epsilon`` with the better correction by the criterion."""
    lam = uniform_rr_probability(epsilon=epsilon, n_classes=n_classes)
    # q is also the label distribution: the criterion of UniformRR does not use it.
    q = np.full((1, n_classes), 1.0 / n_classes)
    scores = {
        b: predicted_accuracy(
            q, q, resample_probability=lam, beta=b, n_effective=n_effective
        )
        for b in (0.0, lam)
    }
    # The criterion is invariant to the linear correction here (both give the same
    # z-scores); the tie goes to the unbiased one.
    beta = lam if scores[lam] >= scores[0.0] * (1 - 1e-6) else 0.0
    return Choice(0.0, "clip", 1.0, lam, beta, 1.0 / n_classes, scores[beta])


def pilot_epsilon(epsilon: float, n_samples: int) -> float:
    r"""Epsilon of the pilot majority-share release, from public quantities only.

    The pilot :math:`\hat\pi = \pi + \mathrm{Laplace}(1/(n\varepsilon_0))` has
    standard deviation :math:`\sqrt2/(n\varepsilon_0)`, hence
    :math:`\varepsilon_0 = \min(\sqrt2/(n\,s), \rho\,\varepsilon)` with
    :math:`s` = :data:`PILOT_STD`, :math:`\rho` = :data:`PILOT_MAX_SHARE`.
    """
    epsilon = check_epsilon(epsilon, allow_inf=False)
    n = check_int(n_samples, "n_samples", minimum=1)
    return min(math.sqrt(2.0) / (n * PILOT_STD), PILOT_MAX_SHARE * epsilon)


def release_majority_share(
    labels: ArrayLike,
    clusters: ArrayLike,
    *,
    epsilon: float,
    n_clusters: int,
    n_classes: int,
    rng: Rng = None,
) -> tuple[float, ReleaseEvent]:
    r"""Laplace release of the share of examples with their cluster's majority label.

    .. math:: \hat\pi = \frac1n\Bigl(\sum_c \max_y n_c(y) + k\Bigr),
              \qquad P(k) \propto e^{-\varepsilon |k|}

    One label change moves the sum of the cluster maxima by at most 1 (sensitivity 1):
    epsilon-label-DP, with exact discrete Laplace noise on the integer sum.

    References
    ----------
    C. Dwork, F. McSherry, K. Nissim, A. Smith, TCC 2006.
    """
    epsilon = check_epsilon(epsilon, allow_inf=False)
    counts = cluster_label_counts(
        labels, clusters, n_clusters=n_clusters, n_classes=n_classes
    )
    n = max(int(counts.sum()), 1)
    noise = discrete_laplace(1.0 / epsilon, 1, as_generator(rng))[0]
    noisy = (counts.max(axis=1).sum() + noise) / n
    event = ReleaseEvent.of("majority_share_laplace", epsilon, scale=1.0 / epsilon)
    return float(noisy), event


@dataclass(frozen=True)
class Plan:
    """The split chosen by :func:`plan_histogram_share` and every candidate's score."""

    share: float
    scores: tuple[tuple[float, float], ...]


def plan_histogram_share(
    epsilon: float,
    *,
    majority_share: float,
    cluster_sizes: ArrayLike,
    n_classes: int,
    n_effective: float,
    rng: Rng = None,
) -> Plan:
    r"""Choose the histogram's share of ``epsilon`` before the histogram is released.

    Every cluster is modelled with label distribution
    :math:`(\hat\pi, (1-\hat\pi)/(K-1), \dots)` (``majority_share`` clipped to
    :math:`[1/K, 1]`). For each share :math:`s > 0` of :data:`DEFAULT_SHARES` the
    release (Laplace noise at :math:`\varepsilon_1 = s\varepsilon`, then
    :func:`choose_resampling` at :math:`\varepsilon_2 = (1-s)\varepsilon`) is simulated
    once with randomness independent of the data and scored by
    :func:`predicted_accuracy` against the model; share 0 is UniformRR at ``epsilon``.
    """
    epsilon = check_epsilon(epsilon, allow_inf=False)
    k = check_int(n_classes, "n_classes", minimum=2)
    sizes = np.asarray(cluster_sizes, dtype=float)
    pi = min(max(float(majority_share), 1.0 / k), 1.0)
    model = np.full((sizes.size, k), (1.0 - pi) / (k - 1))
    model[:, 0] = pi
    gen = as_generator(rng)
    scores: list[tuple[float, float]] = []
    for share in DEFAULT_SHARES:
        if share == 0.0:
            scores.append((0.0, _uniform_choice(epsilon, k, n_effective).score))
            continue
        sigma = histogram_sigma(epsilon=share * epsilon)
        noise = discrete_laplace(sigma, model.size, gen).reshape(model.shape)
        noisy = model + noise / np.maximum(sizes, 1.0)[:, None]
        eps2 = (1.0 - share) * epsilon
        _, true_score = _score_candidates(
            _estimate_distributions(noisy), model, noisy, sizes, eps2, n_effective
        )
        scores.append((share, true_score))
    best = max(score for _, score in scores)
    chosen = min(share for share, score in scores if score >= best * (1 - _TIE))
    return Plan(share=chosen, scores=tuple(scores))


@dataclass(kw_only=True, eq=False)
class AutoClusterRR:
    r"""ClusterRR with every parameter chosen for a target epsilon (module docstring).

    ``release`` spends exactly ``epsilon``; the release recommends :math:`\beta` (0: the
    plain learner, :math:`\lambda`: the unbiased correction). ``n_parameters`` counts
    the parameters of the learner to be trained (public; :math:`(p+1)K` for logistic
    regression on p features).

    References
    ----------
    H. Esfandiari et al., "Label differential privacy via clustering", AISTATS 2022.
    """

    name = "auto_cluster_rr"
    epsilon: float
    n_classes: int
    n_parameters: int

    def __post_init__(self) -> None:
        self.epsilon = check_epsilon(self.epsilon, allow_inf=False)
        self.n_classes = check_int(self.n_classes, "n_classes", minimum=2)
        self.n_parameters = check_int(self.n_parameters, "n_parameters", minimum=1)

    def release(
        self, labels: ArrayLike, *, clusters: ArrayLike, rng: Rng = None
    ) -> LabelRelease:
        """Spend ``epsilon`` on the labels of a clustered training set."""
        k = self.n_classes
        y = check_labels(labels, k)
        c, n_clusters = _given_clusters(clusters, y)
        gen = as_generator(rng)
        n = y.size
        n_eff = n / self.n_parameters
        sizes = np.bincount(c, minlength=n_clusters)

        eps0 = pilot_epsilon(self.epsilon, n)
        pi_hat, pilot_event = release_majority_share(
            y, c, epsilon=eps0, n_clusters=n_clusters, n_classes=k, rng=gen
        )
        rest = self.epsilon - eps0
        plan = plan_histogram_share(
            rest,
            majority_share=pi_hat,
            cluster_sizes=sizes,
            n_classes=k,
            n_effective=n_eff,
            rng=np.random.default_rng(gen.integers(2**63)),
        )
        info: dict[str, Any] = {
            "mechanism": self.name,
            "pilot_epsilon": eps0,
            "majority_share": pi_hat,
            "histogram_share": plan.share,
            "plan_scores": plan.scores,
        }
        if plan.share == 0.0:
            choice = _uniform_choice(rest, k, n_eff)
            release = UniformRR(epsilon=rest, n_classes=k, beta=choice.beta).release(
                y, rng=gen
            )
        else:
            eps1 = plan.share * rest
            eps2 = rest - eps1
            sigma = histogram_sigma(epsilon=eps1)
            # Step 2 alone: lambda is chosen after seeing the noisy histograms.
            counts = cluster_label_counts(y, c, n_clusters=n_clusters, n_classes=k)
            noisy = noisy_cluster_histograms(counts, sigma=sigma, rng=gen)
            choice = choose_resampling(
                noisy, sizes, epsilon_resample=eps2, n_effective=n_eff
            )
            lam = choice.resample_probability
            spent = resampling_epsilon(resample_probability=lam, q_min=choice.q_min)
            if spent > eps2 * (1 + 1e-9) + 1e-12:
                raise RuntimeError(
                    "internal error: the chosen lambda overspends epsilon_resample"
                )
            q = cluster_distributions(
                noisy, tau=choice.tau, truncation=choice.truncation, floor=choice.floor
            )
            release = _resample_release(
                y, c, q, lam, gen, sizes, noisy, sigma, choice.beta
            )
            info.update(sigma=sigma, tau=choice.tau, truncation=choice.truncation)
            info["floor"] = choice.floor
        info["choice"] = choice.as_dict()
        # The sub-release records at most its mechanism, which info's replaces.
        return replace(
            release,
            events=(pilot_event, *release.events),
            parameters=tuple(sorted(info.items())),
        )
