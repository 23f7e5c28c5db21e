r"""The server's steps of the label-only modes: clusters, pilots, priors, the fit.

Features are public in these modes (``privacy.mechanism = "label-*"``): every client
sends its scaled features in the clear and one randomized label, and the server fits one
multinomial logistic regression through each example's label channel
:math:`T_i = (1-\lambda_i) I + \lambda_i \mathbf 1 q_i^\top`. ``label-uniform`` uses
the uniform prior; ``label-cluster`` (federated ClusterRR, no trusted curator) takes
each cluster's prior from its pilots' K-ary randomized-response labels;
``label-p2p`` lets the relay hand each client its cluster's noisy bits
(:func:`p2p_blocks`). The rounds are :mod:`ldpfda.server.plans`; the trust model and
the accounting are in ``docs/flower.md``.

References
----------
H. Esfandiari, V. Mirrokni, U. Syed, S. Vassilvitskii, "Label differential privacy via
clustering", AISTATS 2022. G. Patrini et al., "Making deep neural networks robust to
label noise: a loss correction approach", CVPR 2017.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda.config import Settings
from ldpfda.labeldp.mechanisms import (
    assign_clusters,
    cluster_distributions,
    cluster_label_counts,
)
from ldpfda.labeldp.selection import DEFAULT_FLOORS, choose_resampling
from ldpfda.privacy.randomized_response import KaryRandomizedResponse
from ldpfda.schema.payloads import LabelPayload, LinearModels
from ldpfda.schema.releases import uniform_priors
from ldpfda.server.fitting import ProtocolResult, single_model_result

__all__ = [
    "cluster_features",
    "label_result",
    "merge_small_clusters",
    "p2p_blocks",
    "pilot_histograms",
    "prior_rr_rounds",
    "select_pilots",
]

#: Floors of the ``label-cluster`` priors: positive, so that every prior is > 0 and
#: every client spends exactly epsilon (a zero entry would force lambda = 1).
PRIOR_FLOORS = tuple(f for f in DEFAULT_FLOORS if f > 0)


def merge_small_clusters(
    features: ArrayLike, clusters: ArrayLike, *, min_size: int
) -> NDArray[np.int64]:
    """Merge every cluster below ``min_size`` members into the one of nearest mean.

    The smallest cluster (lowest index on ties) goes first; means are recomputed after
    every merge; clusters are renumbered ``0 .. C'-1`` in order of their lowest old
    index.
    """
    x = np.asarray(features, dtype=float)
    c = np.asarray(clusters, dtype=np.int64).copy()
    if min_size > c.size:
        raise ValueError(
            f"min_cluster_size must be <= the number of clients {c.size}, got "
            f"{min_size}"
        )
    while True:
        ids, sizes = np.unique(c, return_counts=True)
        small = int(np.argmin(sizes))
        if sizes[small] >= min_size:
            break
        means = np.array([x[c == i].mean(axis=0) for i in ids])
        dist = np.sum((means - means[small]) ** 2, axis=1)
        dist[small] = np.inf
        c[c == ids[small]] = ids[int(np.argmin(dist))]
    return np.unique(c, return_inverse=True)[1].reshape(-1).astype(np.int64)


def cluster_features(
    features: ArrayLike, *, n_clusters: int, min_size: int = 1, rng: np.random.Generator
) -> NDArray[np.int64]:
    """k-means clusters of the public features, merged to ``min_size`` clients each."""
    c = assign_clusters(features, n_clusters=n_clusters, rng=rng)
    return merge_small_clusters(features, c, min_size=min_size)


def select_pilots(
    clusters: ArrayLike, *, share: float, rng: np.random.Generator
) -> NDArray[np.bool_]:
    r"""The pilots: :math:`\max(1, \lceil \text{share}\cdot n_c\rceil)` per cluster,
    chosen uniformly within it by the server's ``rng``."""
    c = np.asarray(clusters, dtype=np.int64)
    perm = rng.permutation(c.size)
    order = perm[np.argsort(c[perm], kind="stable")]
    sizes = np.bincount(c)
    starts = np.cumsum(sizes) - sizes
    rank = np.empty(c.size, dtype=np.int64)
    rank[order] = np.arange(c.size) - starts[c[order]]
    quota = np.maximum(1, np.ceil(share * sizes)).astype(np.int64)
    return rank < quota[c]


def pilot_histograms(
    labels: ArrayLike,
    clusters: ArrayLike,
    *,
    n_clusters: int,
    n_classes: int,
    epsilon: float,
) -> NDArray[np.float64]:
    r"""Debiased label distribution of every cluster from its pilots' K-RR labels.

    With :math:`f_c` the released frequencies of cluster :math:`c`'s :math:`m_c`
    pilots and :math:`R` the K-RR channel,
    :math:`\hat p_c = R^{-\top} f_c` is unbiased for the pilots' label distribution,
    with entries of standard deviation about
    :math:`\sqrt{f(1-f)/m_c}\,(e^\varepsilon + K - 1)/(e^\varepsilon - 1)`; entries may
    leave [0, 1]. A cluster without pilots gets the uniform distribution.
    """
    counts = cluster_label_counts(
        labels, clusters, n_clusters=n_clusters, n_classes=n_classes
    )
    m = counts.sum(axis=1, keepdims=True)
    freq = counts / np.maximum(m, 1)
    rr = KaryRandomizedResponse(epsilon=epsilon, n_categories=n_classes)
    hist = rr.debias_frequencies(freq.T).T
    return np.where(m > 0, hist, 1.0 / n_classes)


def p2p_blocks(
    noisy_labels: ArrayLike, clusters: ArrayLike
) -> tuple[NDArray[np.int8], NDArray[np.int64], NDArray[np.int64]]:
    """The relay: every client's block of peers' noisy bits.

    Returns ``(peer_labels, offsets, counts)``: client ``i``'s peers are
    ``peer_labels[offsets[i] : offsets[i] + counts[i]]``, the noisy bits of its cluster
    in row order, its own among them.
    """
    bits = np.asarray(noisy_labels, dtype=np.int8)
    c = np.asarray(clusters, dtype=np.int64)
    order = np.argsort(c, kind="stable")
    sizes = np.bincount(c)
    starts = np.cumsum(sizes) - sizes
    return bits[order], starts[c], sizes[c]


def label_result(
    payload: LabelPayload,
    settings: Settings,
    rng: np.random.Generator,
    *,
    privacy: dict[str, Any],
) -> ProtocolResult:
    """The analyst of a label-only run: the corrected logistic regression of
    ``settings.correction``, ``C`` chosen from ``DEFAULT_CS`` on a held-out split seeded
    from ``rng``, with K = the priors' width; its binary model is class 1 minus class 0
    of the multinomial fit, a K-class one (K > 2) the fit's K rows."""
    # Imported here: they are scikit-learn estimators, and the ServerApp of every
    # other protocol would pay scikit-learn's import (1.5 s of CPU) for nothing.
    from ldpfda.labeldp.learners import (
        DEFAULT_CS,
        BackwardCorrectedLogisticRegression,
        ForwardCorrectedLogisticRegression,
    )

    cls = (
        ForwardCorrectedLogisticRegression
        if settings.correction == "forward"
        else BackwardCorrectedLogisticRegression
    )
    estimator = cls(Cs=DEFAULT_CS, random_state=int(rng.integers(2**31 - 1)))
    estimator.fit_channels(
        payload.features,
        payload.labels,
        priors=payload.priors,
        resample_probabilities=payload.resample_probabilities,
    )
    coef, intercept = estimator.coef_, estimator.intercept_
    k = payload.priors.shape[1]
    model = (
        LinearModels(coef[1:] - coef[:1], intercept[1:] - intercept[:1])
        if k == 2
        else LinearModels(coef, intercept)
    )
    result = single_model_result(
        model, method="label", payload=payload, privacy=privacy
    )
    result.n_classes = k
    return result


def prior_rr_rounds(
    settings: Settings,
    ids: NDArray[np.int64],
    x: NDArray[np.float64],
    server_rng: np.random.Generator,
    release: Callable[..., NDArray[np.int64]],
    n_classes: int = 2,
) -> tuple[NDArray[np.int64], NDArray[np.float64], dict[str, Any]]:
    r"""``label-uniform`` and ``label-cluster``: who releases with which prior, when.

    ``label-uniform``: every client, uniform prior (stage ``"label"``).
    ``label-cluster``: k-means clusters and pilots from ``server_rng`` (in that order),
    the pilots with the uniform prior (``"label-pilots"``), then the others
    (``"label-others"``) with their cluster's prior from the pilots that answered:
    :func:`pilot_histograms`, then :func:`~ldpfda.labeldp.selection.choose_resampling`
    picks the truncation and a positive floor (floor 1 is the uniform prior) for the
    others, with :math:`(p + 1) K` learner parameters (K = ``n_classes``: priors and
    pilot histograms have K entries). Its criterion scores one
    :math:`\lambda` from the smallest prior overall, never below a client's own
    :math:`\lambda_i` (conservative); its ``beta`` is not used, as the learners fit
    through the exact channel. ``release(stage, index, priors)`` asks clients
    ``index`` for their labels (-1 if none). Returns every client's label, its prior
    and what the report says about the mode.
    """
    priors = uniform_priors(ids.size, n_classes)
    info: dict[str, Any] = {"mechanism": settings.mechanism}
    if settings.mechanism == "label-uniform":
        return release("label", np.arange(ids.size), priors), priors, info
    labels = np.full(ids.size, -1, dtype=np.int64)
    clusters = cluster_features(x, n_clusters=settings.n_clusters, rng=server_rng)
    pilots = select_pilots(clusters, share=settings.pilot_share, rng=server_rng)
    n_clusters = int(clusters.max()) + 1
    index = np.flatnonzero(pilots)
    labels[index] = release("label-pilots", index, priors[index])
    answered = pilots & (labels >= 0)
    hist = pilot_histograms(
        labels[answered],
        clusters[answered],
        n_clusters=n_clusters,
        n_classes=n_classes,
        epsilon=settings.epsilon,
    )
    rest = np.flatnonzero(~pilots)
    sizes = np.bincount(clusters[rest], minlength=n_clusters)
    choice = choose_resampling(
        hist,
        sizes,
        epsilon_resample=settings.epsilon,
        n_effective=max(int(sizes.sum()), 1) / ((x.shape[1] + 1) * n_classes),
        floors=PRIOR_FLOORS,
    )
    q = cluster_distributions(
        hist, tau=choice.tau, truncation=choice.truncation, floor=choice.floor
    )
    priors[rest] = q[clusters[rest]]
    labels[rest] = release("label-others", rest, priors[rest])
    info.update(
        n_clusters=n_clusters, pilots=int(pilots.sum()), choice=choice.as_dict()
    )
    return labels, priors, info
