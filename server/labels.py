r"""The server's steps of the label-only modes: clusters, pilots, priors, the fit.

The rounds themselves are :mod:`ldpfda.server.plans`.

Features are public in these modes (``privacy.mechanism = "label-*"``, see
:mod:`ldpfda.client.labeldp_protocol`): every client sends its scaled features in the
clear and one randomized label, and the server fits one multinomial logistic regression
with a corrected loss, each example through its own label channel. Every client
(``n_train + n_eval``) releases once, as in the moment protocol.

``label-uniform``
    Every client applies K-ary randomized response at its epsilon (uniform prior).
``label-cluster`` (federated ClusterRR, no trusted curator)
    1. the server clusters the public features (k-means, seeded, ``labeldp.n-clusters``;
       :func:`cluster_features`);
    2. a *pilot* share of every cluster (``labeldp.pilot-share``, at least one client,
       chosen by the server's seeded randomness from public data only;
       :func:`select_pilots`) applies K-ary randomized response at epsilon;
    3. the server debiases the pilots' counts into a noisy label distribution of every
       cluster (:func:`pilot_histograms`) and post-processes it into priors
       :math:`q_c` with :func:`~ldpfda.labeldp.selection.choose_resampling` (truncation
       and a positive uniform floor, so every :math:`q_c > 0`; :func:`cluster_priors`);
    4. every other client randomizes its label with its cluster's prior at epsilon
       (RR with a prior, :func:`~ldpfda.client.labeldp_protocol.release_labels`).
``label-p2p`` (binary labels)
    The peer-to-peer mechanism: k-means clusters merged to at least
    ``labeldp.min-cluster-size`` :math:`s` members; every client randomizes its bit at
    :math:`\varepsilon_0` = :func:`~ldpfda.labeldp.peer_to_peer.p2p_local_epsilon` for
    the target :math:`(\varepsilon, 1/s^2)`; the relay hands each client its cluster's
    noisy bits (:func:`p2p_blocks`), the client reports one drawn uniformly, and the
    analyst fits on the reported bits with the binary randomized-response channel at
    :math:`\varepsilon_0`.

**Trust model and accounting.** ``label-uniform`` and ``label-cluster`` are local: the
server never sees a true label, and each client's one release is
:math:`\varepsilon`-LDP for its label whatever the server sends it (the client derives
:math:`\lambda` from its own budget, :mod:`ldpfda.client.labeldp_protocol`). A pilot's
label reaches the priors only through its randomized release (post-processing), and the
clusters and pilots depend on public features and the server's seed only, so the whole
transcript is :math:`\varepsilon`-label-DP and every client's ledger holds exactly
:math:`\varepsilon` (one event). In ``label-p2p`` the relay sees
:math:`\varepsilon_0`-LDP bits; the reported bits, and everything fitted on them, are
:math:`(\varepsilon, 1/s^2)`-label-DP toward an analyst who does not see the relay's
bits or the draws. The ledger records that guarantee, with :math:`\varepsilon_0` and
:math:`\delta` among the event's parameters (the event of
:func:`~ldpfda.labeldp.peer_to_peer.peer_to_peer_rr`).

**Training.** Example :math:`i` went through the channel
:math:`T_i = (1-\lambda_i) I + \lambda_i \mathbf 1 q_i^\top` (uniform :math:`q_i` for
pilots, uniform-RR clients and peer-to-peer reports; its cluster's prior otherwise).
:meth:`ForwardCorrectedLogisticRegression.fit_channels
<ldpfda.labeldp.learners.ForwardCorrectedLogisticRegression.fit_channels>` (default,
``labeldp.correction = "forward"``) maximises the likelihood of the released labels
through :math:`T_i`; the backward learner's ``fit_channels`` minimises the unbiased
backward-corrected loss. ``C`` is chosen from ``DEFAULT_CS`` by the held-out likelihood
of the released labels (post-processing).

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
from ldpfda.labeldp.learners import (
    DEFAULT_CS,
    BackwardCorrectedLogisticRegression,
    ForwardCorrectedLogisticRegression,
)
from ldpfda.labeldp.mechanisms import (
    assign_clusters,
    cluster_distributions,
    cluster_label_counts,
)
from ldpfda.labeldp.selection import DEFAULT_FLOORS, Choice, choose_resampling
from ldpfda.privacy.peer_to_peer import p2p_guarantee
from ldpfda.privacy.randomized_response import KaryRandomizedResponse
from ldpfda.schema.payloads import LabelPayload, LinearModels
from ldpfda.schema.releases import uniform_priors
from ldpfda.server.fitting import ProtocolResult, single_model_result

__all__ = [
    "N_CLASSES",
    "cluster_features",
    "cluster_plan_summary",
    "cluster_priors",
    "fit_label_model",
    "label_result",
    "merge_small_clusters",
    "p2p_blocks",
    "p2p_summary",
    "pilot_histograms",
    "prior_rr_rounds",
    "select_pilots",
    "server_priors",
    "uniform_priors",
]

#: The platform's labels are binary.
N_CLASSES = 2
#: Floors of :func:`cluster_priors`: positive, so that every prior is > 0 and every
#: client spends exactly epsilon (a zero entry would force lambda = 1).
PRIOR_FLOORS = tuple(f for f in DEFAULT_FLOORS if f > 0)


# -- the server's steps ----------------------------------------------------------------


def merge_small_clusters(
    features: ArrayLike, clusters: ArrayLike, *, min_size: int
) -> NDArray[np.int64]:
    """Merge every cluster below ``min_size`` members into the one of nearest mean.

    The smallest cluster (lowest index on ties) goes first; means are recomputed after
    every merge. Clusters are renumbered ``0 .. C'-1`` in order of their lowest old
    index. Deterministic, and a function of the public features only.
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
    features: ArrayLike,
    *,
    n_clusters: int,
    min_size: int = 1,
    rng: np.random.Generator,
) -> NDArray[np.int64]:
    """k-means clusters of the public features, at least ``min_size`` clients each.

    :func:`~ldpfda.labeldp.mechanisms.assign_clusters` (its ``random_state`` drawn from
    ``rng``), then :func:`merge_small_clusters`; numbered ``0 .. C-1``.
    """
    c = assign_clusters(features, n_clusters=n_clusters, rng=rng)
    return merge_small_clusters(features, c, min_size=min_size)


def select_pilots(
    clusters: ArrayLike, *, share: float, rng: np.random.Generator
) -> NDArray[np.bool_]:
    r"""The pilots: :math:`\max(1, \lceil \text{share}\cdot n_c\rceil)` per cluster.

    Chosen uniformly within every cluster by ``rng`` (the server's): a function of
    public data only.
    """
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
    :math:`\sqrt{f(1-f)/m_c}\,(e^\varepsilon + K - 1)/(e^\varepsilon - 1)`. Entries may
    leave [0, 1] (:func:`cluster_priors` truncates them). A cluster without pilots gets
    the uniform distribution. Post-processing of the pilots' releases.
    """
    counts = cluster_label_counts(
        labels, clusters, n_clusters=n_clusters, n_classes=n_classes
    )
    m = counts.sum(axis=1, keepdims=True)
    freq = counts / np.maximum(m, 1)
    rr = KaryRandomizedResponse(epsilon=epsilon, n_categories=n_classes)
    hist = rr.debias_frequencies(freq.T).T
    return np.where(m > 0, hist, 1.0 / n_classes)


def cluster_priors(
    noisy_histograms: ArrayLike,
    cluster_sizes: ArrayLike,
    *,
    epsilon: float,
    n_effective: float,
) -> tuple[NDArray[np.float64], Choice]:
    r"""Priors :math:`q_c` from the pilots' histograms (post-processing).

    :func:`~ldpfda.labeldp.selection.choose_resampling` picks the truncation and a
    positive floor (:data:`PRIOR_FLOORS`; floor 1 is the uniform prior, i.e. UniformRR)
    for resampling at ``epsilon``, with ``cluster_sizes`` the clients that will use the
    priors; :func:`~ldpfda.labeldp.mechanisms.cluster_distributions` applies them. Its
    criterion scores one :math:`\lambda` from the smallest prior overall, while each
    client's :math:`\lambda_i` comes from its own prior's minimum and is never larger:
    the criterion is conservative. Its ``beta`` is not used: the learners fit through
    the exact channel.
    """
    choice = choose_resampling(
        noisy_histograms,
        cluster_sizes,
        epsilon_resample=epsilon,
        n_effective=n_effective,
        floors=PRIOR_FLOORS,
    )
    q = cluster_distributions(
        noisy_histograms,
        tau=choice.tau,
        truncation=choice.truncation,
        floor=choice.floor,
    )
    return q, choice


def p2p_blocks(
    noisy_labels: ArrayLike, clusters: ArrayLike
) -> tuple[NDArray[np.int8], NDArray[np.int64], NDArray[np.int64]]:
    """The relay: every client's block of peers' noisy bits.

    Returns ``(peer_labels, offsets, counts)``: client ``i``'s peers are
    ``peer_labels[offsets[i] : offsets[i] + counts[i]]``, the noisy bits of its cluster
    in the order of the rows (client ids), its own among them; the arguments of
    :func:`~ldpfda.client.labeldp_protocol.p2p_forward`.
    """
    bits = np.asarray(noisy_labels, dtype=np.int8)
    c = np.asarray(clusters, dtype=np.int64)
    order = np.argsort(c, kind="stable")
    sizes = np.bincount(c)
    starts = np.cumsum(sizes) - sizes
    return bits[order], starts[c], sizes[c]


def fit_label_model(
    payload: LabelPayload, settings: Settings, rng: np.random.Generator
) -> tuple[LinearModels, Any]:
    """The corrected logistic regression of ``settings.correction`` on ``payload``.

    Returns the binary linear model (class 1 minus class 0 of the multinomial fit) and
    the fitted estimator. ``C`` is chosen from ``DEFAULT_CS`` with a held-out split
    seeded from ``rng``.
    """
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
    model = LinearModels(coef[1:] - coef[:1], intercept[1:] - intercept[:1])
    return model, estimator


def label_result(
    payload: LabelPayload,
    settings: Settings,
    rng: np.random.Generator,
    *,
    privacy: dict[str, Any],
    clean_train: tuple[NDArray[np.float64], NDArray[np.int8]] | None = None,
    keep_payload: bool = True,
) -> ProtocolResult:
    """The analyst of a label-only run: :func:`fit_label_model` as a result.

    ``method = "label"``; its one model is also its ``weak`` and ``reversed_models``.
    The non-private reference is fitted when ``clean_train`` is given.
    """
    final, _ = fit_label_model(payload, settings, rng)
    return single_model_result(
        final,
        method="label",
        payload=payload if keep_payload else payload.head(),
        clean_train=clean_train,
        privacy=privacy,
    )


def cluster_plan_summary(
    clusters: NDArray[np.int64], pilots: NDArray[np.bool_], choice: Choice
) -> dict[str, Any]:
    """What a ``label-cluster`` report says about the clusters, pilots and priors."""
    return {
        "n_clusters": int(clusters.max()) + 1,
        "pilots": int(pilots.sum()),
        "choice": choice.as_dict(),
    }


def p2p_summary(local_epsilon: float, sizes: NDArray[np.int64]) -> dict[str, Any]:
    """What a ``label-p2p`` report says: the two guarantees and the cluster sizes."""
    eps, delta = p2p_guarantee(local_epsilon=local_epsilon, cluster_sizes=sizes)
    return {
        "local_epsilon": local_epsilon,
        "epsilon": eps,
        "delta": delta,
        "n_clusters": int(sizes.size),
        "min_cluster_size": int(sizes.min()),
    }


#: ``release(stage, index, priors)``: the labels that clients ``index`` release with
#: those priors (-1 for a client that released none).
LabelRelease = Callable[
    [str, NDArray[np.int64], NDArray[np.float64]], NDArray[np.int64]
]


def prior_rr_rounds(
    settings: Settings,
    ids: NDArray[np.int64],
    x: NDArray[np.float64],
    server_rng: np.random.Generator,
    release: LabelRelease,
) -> tuple[NDArray[np.int64], NDArray[np.float64], dict[str, Any]]:
    """``label-uniform`` and ``label-cluster``: who releases with which prior, when.

    ``label-uniform``: every client, uniform prior (stage ``"label"``).
    ``label-cluster``: k-means clusters and pilots from ``server_rng`` (in that order),
    the pilots with the uniform prior (``"label-pilots"``), priors from the pilots that
    answered (:func:`server_priors`), then the others with their cluster's prior
    (``"label-others"``). ``release`` does the asking: client-side functions in process,
    queries to the SuperNodes in the Flower app. Returns every client's label (-1 if
    none), its prior and what the report says about the mode.
    """
    labels = np.full(ids.size, -1, dtype=np.int64)
    priors = uniform_priors(ids.size, N_CLASSES)
    info: dict[str, Any] = {"mechanism": settings.mechanism}
    if settings.mechanism == "label-uniform":
        everyone = np.arange(ids.size)
        labels[everyone] = release("label", everyone, priors)
        return labels, priors, info
    if settings.mechanism != "label-cluster":
        raise ValueError(f"not a prior-RR mechanism: {settings.mechanism!r}")
    clusters = cluster_features(x, n_clusters=settings.n_clusters, rng=server_rng)
    pilots = select_pilots(clusters, share=settings.pilot_share, rng=server_rng)
    index = np.flatnonzero(pilots)
    labels[index] = release("label-pilots", index, priors[index])
    answered = pilots & (labels >= 0)
    q, choice = server_priors(
        labels[answered],
        clusters[answered],
        clusters[~pilots],
        settings,
        n_clusters=int(clusters.max()) + 1,
        n_features=x.shape[1],
    )
    rest = np.flatnonzero(~pilots)
    priors[rest] = q[clusters[rest]]
    labels[rest] = release("label-others", rest, priors[rest])
    info.update(cluster_plan_summary(clusters, pilots, choice))
    return labels, priors, info


def server_priors(
    pilot_labels: ArrayLike,
    pilot_clusters: NDArray[np.int64],
    other_clusters: NDArray[np.int64],
    settings: Settings,
    *,
    n_clusters: int,
    n_features: int,
) -> tuple[NDArray[np.float64], Choice]:
    """``label-cluster`` step 3: priors of every cluster from the pilots' labels.

    :func:`pilot_histograms` of the pilots' released labels (``pilot_clusters`` their
    clusters), then :func:`cluster_priors` with the clusters weighted by the clients
    who will use the priors (``other_clusters``); the learner has :math:`(p + 1) K`
    parameters.
    """
    hist = pilot_histograms(
        pilot_labels,
        pilot_clusters,
        n_clusters=n_clusters,
        n_classes=N_CLASSES,
        epsilon=settings.epsilon,
    )
    sizes = np.bincount(other_clusters, minlength=n_clusters)
    n_parameters = (n_features + 1) * N_CLASSES
    return cluster_priors(
        hist,
        sizes,
        epsilon=settings.epsilon,
        n_effective=max(int(sizes.sum()), 1) / n_parameters,
    )
