r"""Label-DP release of a training set: cluster-based and uniform randomized response.

Both take the true labels of a whole training set (a trusted curator holds them) and
return a :class:`LabelRelease`. ClusterRR is a central mechanism (its second step
depends on everybody's labels), not a local :class:`~ldpfda.privacy.Mechanism`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import check_epsilon, check_finite_array, check_int, check_real
from ldpfda.labeldp.accounting import (
    histogram_epsilon,
    resampling_epsilon,
    resampling_probability,
    uniform_rr_probability,
)
from ldpfda.labeldp.transition import (
    check_distributions,
    corrected_loss,
    corrected_targets,
    transition_matrices,
)
from ldpfda.privacy.base import ReleaseEvent
from ldpfda.privacy.discrete_laplace import discrete_laplace
from ldpfda.privacy.labels import check_labels
from ldpfda.privacy.random import as_generator
from ldpfda.privacy.randomized_response import KaryRandomizedResponse

__all__ = [
    "ClusterRR",
    "LabelRelease",
    "Truncation",
    "UniformRR",
    "assign_clusters",
    "check_labels",
    "cluster_distributions",
    "cluster_label_counts",
    "noisy_cluster_histograms",
    "resample_labels",
]

Truncation = Literal["clip", "zero"]
Rng = np.random.Generator | int | None


def assign_clusters(
    features: ArrayLike, *, n_clusters: int = 100, rng: Rng = None
) -> NDArray[np.int64]:
    """Cluster examples on their (public) features with scikit-learn's k-means.

    Costs no label-DP epsilon; KMeans's ``random_state`` is drawn from ``rng``.

    References
    ----------
    H. Esfandiari et al., AISTATS 2022, Section 7 (100 k-means clusters).
    """
    x = check_finite_array(features, "features", ndim=2)
    k = check_int(n_clusters, "n_clusters", minimum=1)
    if k > x.shape[0]:
        raise ValueError(
            f"n_clusters must be <= the number of examples {x.shape[0]}, got {k}"
        )
    from sklearn.cluster import KMeans  # imported only when clustering

    seed = int(as_generator(rng).integers(0, 2**31 - 1))
    return KMeans(n_clusters=k, random_state=seed).fit_predict(x).astype(np.int64)


def cluster_label_counts(
    labels: ArrayLike, clusters: ArrayLike, *, n_clusters: int, n_classes: int
) -> NDArray[np.int64]:
    """Counts :math:`n_c(y)` of every label in every cluster, shape (C, K)."""
    k = check_int(n_classes, "n_classes", minimum=2)
    c_total = check_int(n_clusters, "n_clusters", minimum=1)
    y = check_labels(labels, k)
    c, _ = _given_clusters(clusters, y, c_total)
    return np.bincount(c * k + y, minlength=c_total * k).reshape(c_total, k)


def noisy_cluster_histograms(
    counts: ArrayLike, *, sigma: float, rng: Rng = None
) -> NDArray[np.float64]:
    r"""Laplace release of every cluster's label distribution (Algorithm 1, step 2).

    .. math:: \tilde p_c(y) = \frac{n_c(y) + k_{cy}}{n_c},
              \qquad P(k_{cy} = k) \propto e^{-|k|/\sigma}\ \text{i.i.d.}

    The noise is exact discrete Laplace on the integer counts (no floating-point side
    channel). One label change moves two counts by 1: :math:`2/\sigma`-label-DP. An
    empty cluster releases the uniform distribution.
    """
    n = np.asarray(counts)
    if n.ndim != 2 or n.dtype.kind not in "iu" or np.any(n < 0):
        raise ValueError("counts must be a 2-D array of non-negative integer counts")
    sigma = check_real(
        sigma, "sigma", low=0.0, high=math.inf, low_open=True, high_open=True
    )
    size = n.sum(axis=1, keepdims=True).astype(float)
    noise = discrete_laplace(sigma, n.size, as_generator(rng)).reshape(n.shape)
    return np.where(size > 0, (n + noise) / np.maximum(size, 1.0), 1.0 / n.shape[1])


def cluster_distributions(
    noisy_histograms: ArrayLike,
    *,
    tau: float = 0.0,
    truncation: Truncation = "clip",
    floor: float = 0.0,
) -> NDArray[np.float64]:
    r"""Turn noisy histograms into sampling distributions :math:`q_c` (steps 3-4).

    ``truncation="clip"`` clips every entry to :math:`[\tau, 1]`; ``"zero"`` sets the
    entries below :math:`\tau` to 0 and clips the rest at 1. Rows are renormalised (a
    row with no mass left becomes uniform) and mixed with the uniform law by the floor
    :math:`\omega \in [0, 1]`:
    :math:`q_c = (1 - \omega)\, \bar p_c / \mathbf 1^\top \bar p_c + \omega / K`.
    """
    p = check_finite_array(noisy_histograms, "noisy_histograms", ndim=2)
    tau = check_real(tau, "tau", low=0.0, high=1.0)
    floor = check_real(floor, "floor", low=0.0, high=1.0)
    if _check_truncation(truncation) == "clip":
        trunc = np.clip(p, tau, 1.0)
    else:
        trunc = np.maximum(np.where(p < tau, 0.0, np.minimum(p, 1.0)), 0.0)
    return (1.0 - floor) * _normalised(trunc) + floor / p.shape[1]


def _check_truncation(truncation: Any) -> Truncation:
    if truncation not in ("clip", "zero"):
        raise ValueError(f"truncation must be 'clip' or 'zero', got {truncation!r}")
    return truncation


def _normalised(rows: NDArray[np.float64]) -> NDArray[np.float64]:
    """Rows divided by their sums (uniform where the sum is not positive)."""
    total = rows.sum(axis=1, keepdims=True)
    return np.where(
        total > 0, rows / np.where(total > 0, total, 1.0), 1.0 / rows.shape[1]
    )


def _frozen(array: ArrayLike, dtype: type) -> NDArray:
    out: NDArray = np.array(array, dtype=dtype)
    out.setflags(write=False)
    return out


def _q_min(q: NDArray[np.float64], sizes: NDArray) -> float:
    """Smallest probability of ``q`` over the non-empty clusters (1 if none)."""
    used = sizes > 0
    return float(q[used].min()) if np.any(used) else 1.0


@dataclass(frozen=True, eq=False)
class LabelRelease:
    r"""What a label-DP mechanism publishes about a training set.

    One event per part of the release that spends epsilon (resampling with
    :math:`\lambda = 1` spends none); ``beta`` is the recommended correction in
    :math:`[0, \lambda]`, ``parameters`` the mechanism's settings (for reports).
    """

    labels: NDArray[np.int64]
    clusters: NDArray[np.int64]
    distributions: NDArray[np.float64]
    resample_probability: float
    cluster_sizes: NDArray[np.int64]
    events: tuple[ReleaseEvent, ...]
    noisy_histograms: NDArray[np.float64] | None = None
    beta: float = 0.0
    parameters: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        put = partial(object.__setattr__, self)  # the fields of a frozen dataclass
        put("labels", _frozen(self.labels, np.int64))
        put("clusters", _frozen(self.clusters, np.int64))
        put("distributions", _frozen(check_distributions(self.distributions), float))
        put("cluster_sizes", _frozen(self.cluster_sizes, np.int64))
        if self.noisy_histograms is not None:
            put("noisy_histograms", _frozen(self.noisy_histograms, float))
        put("beta", self.check_beta(self.beta))

    @property
    def n_classes(self) -> int:
        return int(self.distributions.shape[1])

    @property
    def epsilon(self) -> float:
        """Label-DP epsilon of the whole release (sequential composition)."""
        return float(sum(event.epsilon for event in self.events))

    @property
    def q_min(self) -> float:
        """Smallest released probability over the non-empty clusters."""
        return _q_min(self.distributions, self.cluster_sizes)

    def check_beta(self, beta: float | None) -> float:
        """Validate a correction parameter: ``None`` means :math:`\\lambda`."""
        lam = self.resample_probability
        return lam if beta is None else check_real(beta, "beta", low=0.0, high=lam)

    def transition_matrices(self, beta: float | None = None) -> NDArray[np.float64]:
        r""":math:`T_c(\beta)` of every cluster, (C, K, K); default :math:`\lambda`."""
        return transition_matrices(self.distributions, self.check_beta(beta))

    def corrected_targets(self, beta: float | None = None) -> NDArray[np.float64]:
        r"""Rows :math:`[T_{c_i}(\beta)^{-1}]_{\tilde y_i,\cdot}`, shape (n, K)."""
        return corrected_targets(
            self.labels, self.clusters, self.distributions, self.check_beta(beta)
        )

    def corrected_loss(self, losses: ArrayLike, beta: float | None = None) -> NDArray:
        r"""Backward-corrected loss of every example from its losses for all labels."""
        b = self.check_beta(beta)
        return corrected_loss(losses, self.labels, self.clusters, self.distributions, b)


def resample_labels(
    labels: NDArray[np.int64],
    clusters: NDArray[np.int64],
    q: NDArray[np.float64],
    lam: float,
    gen: np.random.Generator,
) -> NDArray[np.int64]:
    r"""Keep each label w.p. :math:`1-\lambda`, else draw it from :math:`q_c` (step 5).

    One uniform decides the redraw, another inverts the cluster's cumulative law.
    """
    n = labels.size
    redraw = gen.random(n) < lam
    cdf = np.cumsum(q, axis=1)
    cdf[:, -1] = 1.0
    u = gen.random(n)
    drawn = (u[:, None] >= cdf[clusters]).sum(axis=1)
    return np.where(redraw, np.minimum(drawn, q.shape[1] - 1), labels)


def _given_clusters(
    clusters: ArrayLike, labels: NDArray[np.int64], n_clusters: int | None = None
) -> tuple[NDArray[np.int64], int]:
    """Checked clusters of ``labels`` and their count (default: the largest + 1)."""
    c0 = np.asarray(clusters)
    if n_clusters is None:
        n_clusters = int(c0.max()) + 1 if c0.size else 1
    c = check_labels(c0, n_clusters, "clusters")
    if c.shape != labels.shape:
        raise ValueError(
            f"labels and clusters differ in length: {labels.size} != {c.size}"
        )
    return c, n_clusters


def _resample_release(
    labels: NDArray[np.int64],
    clusters: NDArray[np.int64],
    q: NDArray[np.float64],
    lam: float,
    gen: np.random.Generator,
    sizes: NDArray,
    noisy: NDArray[np.float64] | None,
    sigma: float,
    beta: float,
    parameters: tuple[tuple[str, Any], ...] = (),
) -> LabelRelease:
    """Step 5 after the histogram release ``noisy`` at ``sigma`` (None: no histogram),
    with the events of both."""
    events = []
    if noisy is not None:
        events.append(
            ReleaseEvent.of(
                "cluster_histogram_laplace",
                histogram_epsilon(sigma=sigma),
                sigma=sigma,
                n_clusters=int(q.shape[0]),
            )
        )
    q_min = _q_min(q, sizes)
    eps_2 = resampling_epsilon(resample_probability=lam, q_min=q_min)
    if eps_2 > 0:  # lambda = 1 redraws every label and spends nothing
        events.append(
            ReleaseEvent.of(
                "cluster_resampling", eps_2, resample_probability=lam, q_min=q_min
            )
        )
    return LabelRelease(
        labels=resample_labels(labels, clusters, q, lam, gen),
        clusters=clusters,
        distributions=q,
        resample_probability=lam,
        cluster_sizes=sizes,
        events=tuple(events),
        noisy_histograms=noisy,
        beta=beta,
        parameters=parameters,
    )


@dataclass(kw_only=True, eq=False)
class ClusterRR:
    r"""Cluster-based randomized response with a trusted curator (Algorithm 1).

    Clusters are given or come from k-means on the features (``n_clusters``). The label
    histograms are released (:func:`noisy_cluster_histograms`) and turned into
    :math:`q_c` (:func:`cluster_distributions`: ``tau``, ``truncation``, ``floor``);
    each label is then replaced with probability :math:`\lambda` by a draw from its
    cluster's :math:`q_c`. The release is
    :math:`(\varepsilon_1 + \varepsilon_2)`-label-DP with
    :math:`\varepsilon_1 = 2/\sigma` and
    :math:`\varepsilon_2 = \ln(1 + (1-\lambda)/(\lambda q_{\min}))`, :math:`q_{\min}`
    the smallest released probability (:mod:`ldpfda.labeldp.accounting`).

    Parameters
    ----------
    sigma : float
        Histogram noise factor in (0, inf]; ``inf`` releases no histogram and needs
        ``floor=1`` (uniform :math:`q_c`, i.e. UniformRR).
    resample_probability, epsilon_resample : float, optional
        Exactly one: a fixed :math:`\lambda \in (0, 1]` or a fixed
        :math:`\varepsilon_2 \ge 0`; the other follows from the realised
        :math:`q_{\min}`.
    beta : float, optional
        Correction recommended with the release; default :math:`\lambda` (unbiased).

    References
    ----------
    H. Esfandiari, V. Mirrokni, U. Syed, S. Vassilvitskii, "Label differential privacy
    via clustering", AISTATS 2022.
    """

    name = "cluster_rr"
    n_classes: int
    sigma: float
    tau: float = 0.0
    truncation: Truncation = "clip"
    floor: float = 0.0
    resample_probability: float | None = None
    epsilon_resample: float | None = None
    n_clusters: int = 100
    beta: float | None = None

    def __post_init__(self) -> None:
        check_int(self.n_classes, "n_classes", minimum=2)
        check_real(self.sigma, "sigma", low=0.0, low_open=True)
        check_real(self.tau, "tau", low=0.0, high=1.0)
        check_real(self.floor, "floor", low=0.0, high=1.0)
        check_int(self.n_clusters, "n_clusters", minimum=1)
        _check_truncation(self.truncation)
        if math.isinf(self.sigma) and self.floor != 1.0:
            raise ValueError(
                f"sigma=inf releases no histogram, so floor must be 1 (uniform q), "
                f"got floor={self.floor!r}"
            )
        if (self.resample_probability is None) == (self.epsilon_resample is None):
            raise ValueError(
                "give exactly one of resample_probability (lambda) and epsilon_resample"
            )
        if (lam := self.resample_probability) is not None:
            check_real(
                lam, "resample_probability (lambda)", low=0.0, high=1.0, low_open=True
            )
        if (eps := self.epsilon_resample) is not None:
            check_real(eps, "epsilon_resample", low=0.0, high=math.inf, high_open=True)
        if self.beta is not None:
            check_real(self.beta, "beta", low=0.0, high=1.0)

    def release(
        self,
        labels: ArrayLike,
        *,
        clusters: ArrayLike | None = None,
        features: ArrayLike | None = None,
        rng: Rng = None,
    ) -> LabelRelease:
        """Release noisy labels of a training set; give ``clusters`` or ``features``."""
        k = int(self.n_classes)
        y = check_labels(labels, k)
        gen = as_generator(rng)
        if (clusters is None) == (features is None):
            raise ValueError("give exactly one of clusters and features")
        n_clusters: int | None = None
        if clusters is None:
            assert features is not None  # exactly one of the two was given
            clusters = assign_clusters(features, n_clusters=self.n_clusters, rng=gen)
            n_clusters = int(self.n_clusters)
        c, n_clusters = _given_clusters(clusters, y, n_clusters)
        counts = cluster_label_counts(y, c, n_clusters=n_clusters, n_classes=k)
        sizes = counts.sum(axis=1)
        noisy: NDArray[np.float64] | None = None
        if math.isinf(self.sigma):
            q = np.full((n_clusters, k), 1.0 / k)
        else:
            noisy = noisy_cluster_histograms(counts, sigma=self.sigma, rng=gen)
            q = cluster_distributions(
                noisy, tau=self.tau, truncation=self.truncation, floor=self.floor
            )
        q_min = _q_min(q, sizes)
        if self.resample_probability is not None:
            lam = float(self.resample_probability)
            if lam < 1.0 and q_min == 0.0:
                raise ValueError(
                    "a released probability is 0 and resample_probability (lambda) "
                    "< 1: the resampling step would not be differentially private; "
                    "use floor > 0, truncation='clip' with tau > 0, or lambda = 1"
                )
        elif q_min == 0.0:
            lam = 1.0  # spends 0 <= epsilon_resample
        else:
            # __post_init__ saw exactly one of resample_probability and epsilon_resample
            assert self.epsilon_resample is not None
            lam = resampling_probability(epsilon=self.epsilon_resample, q_min=q_min)
        beta = lam if self.beta is None else min(float(self.beta), lam)
        settings = ("floor", "n_clusters", "sigma", "tau", "truncation")
        params = {"mechanism": self.name, **{f: getattr(self, f) for f in settings}}
        recorded = tuple(sorted(params.items()))
        return _resample_release(
            y, c, q, lam, gen, sizes, noisy, float(self.sigma), beta, recorded
        )


@dataclass(kw_only=True, eq=False)
class UniformRR:
    r"""K-ary randomized response on every label, with its correction (Corollary 1).

    Each label is resampled uniformly with probability
    :math:`\lambda = K/(e^\varepsilon + K - 1)`
    (:class:`~ldpfda.privacy.KaryRandomizedResponse`): :class:`ClusterRR` with one
    cluster, no histogram and :math:`q = \mathbf 1/K`, so the same corrections apply
    with :math:`T = (1-\lambda) I + (\lambda/K)\mathbf 1 \mathbf 1^\top`. ``beta`` is
    the recommended correction (default :math:`\lambda`).

    References
    ----------
    S. L. Warner, JASA 1965; H. Esfandiari et al., AISTATS 2022, Corollary 1.
    """

    name = "uniform_rr"
    epsilon: float
    n_classes: int
    beta: float | None = None

    def __post_init__(self) -> None:
        self.epsilon = check_epsilon(self.epsilon, allow_inf=False)
        self.n_classes = check_int(self.n_classes, "n_classes", minimum=2)
        if self.beta is not None:
            self.beta = check_real(self.beta, "beta", low=0.0, high=1.0)

    @property
    def resample_probability(self) -> float:
        return uniform_rr_probability(epsilon=self.epsilon, n_classes=self.n_classes)

    def release(self, labels: ArrayLike, *, rng: Rng = None) -> LabelRelease:
        """Release noisy labels; all examples form the single cluster 0."""
        k = self.n_classes
        y = check_labels(labels, k)
        rr = KaryRandomizedResponse(epsilon=self.epsilon, n_categories=k)
        noisy = rr.randomise(y, as_generator(rng))
        lam = self.resample_probability
        beta = lam if self.beta is None else min(self.beta, lam)
        event = ReleaseEvent.of(
            self.name, self.epsilon, n_classes=k, keep_probability=rr.keep_probability
        )
        return LabelRelease(
            labels=noisy,
            clusters=np.zeros(y.size, dtype=np.int64),
            distributions=np.full((1, k), 1.0 / k),
            resample_probability=lam,
            cluster_sizes=np.array([y.size]),
            events=(event,),
            beta=beta,
            parameters=(("mechanism", self.name),),
        )
