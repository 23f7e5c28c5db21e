r"""Release descriptions: what each release costs a client and what it may output.

Pure functions of public parameters (epsilon, the feature count p, the mechanism): the
client charges these events to its ledger before it releases, the server to its own
accounting before it asks, and it checks every reply against the output range.
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import check_epsilon, check_int
from ldpfda.privacy.base import ReleaseEvent
from ldpfda.privacy.budget import split_budget
from ldpfda.privacy.joint import (
    ClassSignedFeatureMechanism,
    ClassSplitMechanism,
    SignedFeatureMechanism,
)
from ldpfda.privacy.label_accounting import resampling_probability
from ldpfda.privacy.labels import check_distributions
from ldpfda.privacy.laplace import LaplaceMechanism
from ldpfda.privacy.peer_to_peer import p2p_guarantee
from ldpfda.privacy.randomized_response import (
    BinaryRandomizedResponse,
    FeedbackBit,
    KaryRandomizedResponse,
)

__all__ = [
    "P2P_RR",
    "PRIOR_RR",
    "UNIFORM_RR",
    "check_priors",
    "evaluation_events",
    "joint_mechanism",
    "multiclass_design",
    "label_event",
    "label_events",
    "p2p_event",
    "p2p_relay_event",
    "prior_groups",
    "prior_probabilities",
    "training_mechanisms",
    "uniform_priors",
]

#: Mechanism names of the label-only releases (recorded in every ledger event).
UNIFORM_RR = "label_uniform_rr"
PRIOR_RR = "label_prior_rr"
P2P_RR = "peer_to_peer_rr"

#: Tolerance under which a prior counts as uniform.
_UNIFORM_TOL = 1e-12


@functools.lru_cache(maxsize=256)
def multiclass_design(
    epsilon: float, n_features: int, n_classes: int, mechanism: str = "hybrid"
) -> str:
    r"""The K-class release whose stated variance of the K blocks
    :math:`\tilde y_k (1, x)`, summed over the K (p + 1) entries, is the smaller for a
    client at the box's root mean square, :math:`|x_l| = 1/\sqrt 3`: ``"draw"``
    (:class:`ClassSignedFeatureMechanism`) or ``"split"``
    (:class:`ClassSplitMechanism`, at its own label share). Public quantities only:
    every client and the server choose alike. The split wins from about epsilon 3.25
    to 4.5 (more classes: sooner)."""
    row = np.r_[0.0, np.full(n_features, 1.0 / np.sqrt(3.0))][None, :]
    totals = {
        design: joint_mechanism(epsilon, n_features, mechanism, n_classes, design)
        .variance(row)
        .sum()
        for design in ("draw", "split")
    }
    return "split" if totals["split"] < totals["draw"] else "draw"


def joint_mechanism(
    epsilon: float,
    n_features: int,
    mechanism: str = "hybrid",
    n_classes: int = 2,
    design: str = "draw",
) -> SignedFeatureMechanism | ClassSignedFeatureMechanism | ClassSplitMechanism:
    r"""The mechanism of the joint release: :math:`\tilde y\,(1, x)` for two classes;
    for more a drawn class j and :math:`\tilde y_j\,(1, x)` (``design="draw"``), the
    label and x released apart (``"split"``, :class:`ClassSplitMechanism`), or the
    one of the two with the smaller stated variance (``"auto"``,
    :func:`multiclass_design`)."""
    if n_classes == 2:
        return SignedFeatureMechanism(
            epsilon=epsilon, n_features=n_features, mechanism=mechanism
        )
    if design == "auto":
        design = multiclass_design(epsilon, n_features, n_classes, mechanism)
    if design == "split":
        return ClassSplitMechanism(
            epsilon=epsilon,
            n_features=n_features,
            n_classes=n_classes,
            mechanism=mechanism,
        )
    if design != "draw":
        raise ValueError(f"design must be 'auto', 'draw' or 'split', got {design!r}")
    return ClassSignedFeatureMechanism(
        epsilon=epsilon, n_features=n_features, n_classes=n_classes, mechanism=mechanism
    )


def training_mechanisms(
    epsilon: float, n_features: int, label_share: float | None, n_classes: int = 2
) -> tuple[LaplaceMechanism, KaryRandomizedResponse]:
    """The reference release's mechanisms: Laplace on x, randomized response on y
    (binary, or K-ary for ``n_classes`` K > 2), at the split of the label share."""
    split = split_budget(
        epsilon=epsilon, n_coefficients=n_features, label_share=label_share
    )
    labels = (
        BinaryRandomizedResponse(epsilon=split.label)
        if n_classes == 2
        else KaryRandomizedResponse(epsilon=split.label, n_categories=n_classes)
    )
    return LaplaceMechanism(epsilon=split.coefficients, dimension=n_features), labels


def evaluation_events(*, epsilon: float) -> list[ReleaseEvent]:
    """What one feedback bit costs an evaluation client."""
    return [FeedbackBit(epsilon=epsilon).event()]


# -- label-only releases ---------------------------------------------------------------


def uniform_priors(n: int, n_classes: int) -> NDArray[np.float64]:
    """``n`` copies of the uniform prior over ``n_classes`` labels."""
    return np.full((n, n_classes), 1.0 / n_classes)


def check_priors(priors: ArrayLike, n: int) -> NDArray[np.float64]:
    """``n`` prior rows (one row broadcast to all), positive, each summing to 1."""
    q = np.asarray(priors, dtype=float)
    if q.ndim == 1:
        q = np.broadcast_to(q, (n, q.size))
    q = check_distributions(q, "priors")
    if q.shape[0] != n:
        raise ValueError(f"priors has {q.shape[0]} rows for {n} clients")
    if np.any(q <= 0.0):
        raise ValueError(
            "priors must be > 0 everywhere: with a zero probability randomized "
            f"response with a prior is not differentially private (got {q.min()!r})"
        )
    return q


def prior_probabilities(priors: ArrayLike, *, epsilon: float) -> NDArray[np.float64]:
    r""":math:`\lambda_i = 1/(1 + q_{i,\min}(e^\varepsilon - 1))` of every prior row.

    :func:`~ldpfda.privacy.label_accounting.resampling_probability` per distinct
    :math:`q_{i,\min}`; ``priors`` is ``(n, K)`` with positive rows.
    """
    q = np.atleast_2d(np.asarray(priors, dtype=float))
    epsilon = check_epsilon(epsilon, allow_inf=False)
    q_min, inverse = np.unique(q.min(axis=1), return_inverse=True)
    lam = np.array(
        [resampling_probability(epsilon=epsilon, q_min=float(m)) for m in q_min]
    )
    return lam[inverse.reshape(-1)]


def label_event(prior: NDArray[np.float64], epsilon: float) -> ReleaseEvent:
    """What randomizing a label with ``prior`` (one row) costs: uniform or prior RR."""
    k = prior.size
    lam = resampling_probability(epsilon=epsilon, q_min=float(prior.min()))
    if np.all(np.abs(prior - 1.0 / k) <= _UNIFORM_TOL):
        return ReleaseEvent.of(
            UNIFORM_RR, epsilon, n_classes=k, resample_probability=lam
        )
    return ReleaseEvent.of(
        PRIOR_RR,
        epsilon,
        n_classes=k,
        resample_probability=lam,
        q_min=float(prior.min()),
    )


def prior_groups(q: NDArray[np.float64]) -> tuple[NDArray, NDArray[np.int64]]:
    """Distinct prior rows and the group of every client."""
    rows, inverse = np.unique(q, axis=0, return_inverse=True)
    return rows, inverse.reshape(-1)


def label_events(priors: ArrayLike, *, epsilon: float) -> list[ReleaseEvent]:
    """What a label release costs each client of ``priors`` (one event per row)."""
    q = check_priors(priors, np.atleast_2d(np.asarray(priors)).shape[0])
    epsilon = check_epsilon(epsilon, allow_inf=False)
    rows, inverse = prior_groups(q)
    events = [label_event(row, epsilon) for row in rows]
    return [events[g] for g in inverse]


def _classes(n_classes: int) -> dict[str, int]:
    """The ``n_classes`` parameter of a K-class peer-to-peer event (none for two)."""
    return {} if n_classes == 2 else {"n_classes": n_classes}


@functools.lru_cache(maxsize=16)
def _p2p_event(
    local_epsilon: float, sizes: tuple[int, ...], n_classes: int
) -> ReleaseEvent:
    eps, delta = p2p_guarantee(
        local_epsilon=local_epsilon, cluster_sizes=sizes, n_classes=n_classes
    )
    return ReleaseEvent.of(
        P2P_RR,
        eps,
        delta=delta,
        local_epsilon=local_epsilon,
        min_cluster_size=min(sizes),
        **_classes(n_classes),
    )


def p2p_relay_event(
    *, local_epsilon: float, cluster_sizes: ArrayLike, n_classes: int = 2
) -> ReleaseEvent:
    r"""What a peer-to-peer label costs its client when the relay is the server.

    The relay (the ServerApp) receives the label by (K-ary) randomized response at
    :math:`\varepsilon_0`, so the client is charged :math:`\varepsilon_0` (pure,
    :math:`\delta = 0`), whatever cluster sizes the server claims (a client cannot
    check them); the stronger :math:`(\varepsilon, \delta)` toward an analyst who
    sees only the forwarded bits (:func:`p2p_event`) is recorded as
    ``analyst_epsilon`` and ``analyst_delta``.
    """
    analyst = p2p_event(
        local_epsilon=local_epsilon, cluster_sizes=cluster_sizes, n_classes=n_classes
    )
    return ReleaseEvent.of(
        P2P_RR,
        float(local_epsilon),
        relay="server",
        analyst_epsilon=analyst.epsilon,
        analyst_delta=float(analyst.as_dict()["delta"]),
        min_cluster_size=int(analyst.as_dict()["min_cluster_size"]),
        **_classes(n_classes),
    )


def p2p_event(
    *, local_epsilon: float, cluster_sizes: ArrayLike, n_classes: int = 2
) -> ReleaseEvent:
    r"""What one peer-to-peer release costs: the :math:`(\varepsilon, \delta)` toward
    the analyst.

    ``epsilon`` of the event is :func:`~ldpfda.privacy.peer_to_peer.p2p_guarantee`
    toward the analyst (:math:`\delta = 1/s^2` for the smallest cluster :math:`s`;
    the exact binary profile for two classes, the clone bound for ``n_classes``
    K > 2, recorded as a parameter), with ``local_epsilon`` :math:`\varepsilon_0`
    (what the relay sees) and ``delta`` as parameters: the event of
    :func:`~ldpfda.privacy.peer_to_peer.peer_to_peer_rr`.
    """
    eps0 = check_epsilon(local_epsilon, "local_epsilon", allow_inf=False)
    sizes = np.asarray(cluster_sizes)
    if sizes.ndim != 1 or sizes.dtype.kind not in "iu" or sizes.size == 0:
        raise ValueError(
            f"cluster_sizes must be a non-empty 1-D integer array, got {sizes!r}"
        )
    if np.any(sizes < 1):
        raise ValueError(f"cluster_sizes must be >= 1, got {int(sizes.min())}")
    k = check_int(n_classes, "n_classes", minimum=2)
    return _p2p_event(eps0, tuple(sorted(int(s) for s in sizes)), k)
