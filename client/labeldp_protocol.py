r"""What a client releases in the label-only modes (issue 5), as vectorised functions.

In these modes (``privacy.mechanism = "label-uniform" | "label-cluster" | "label-p2p"``)
a client's features (its curve's scaled B-spline coefficients) are **public**: it sends
them in the clear and they cost no epsilon. Only its label is private, and it leaves the
client already randomized. Row ``i`` of every array belongs to client
``client_ids[i]``; a client's noise comes from its own keyed stream (run seed, client
id, purpose), so it gives the same answer alone (a Flower SuperNode) or in a batch (the
in-process engine).

**RR with a prior** (:func:`release_labels`). The server gives client :math:`i` a
label distribution :math:`q_i` (its cluster's prior, or the uniform one). The client
keeps its label with probability :math:`1-\lambda_i` and otherwise draws one from
:math:`q_i`:

.. math:: P(\tilde y \mid y) = (1-\lambda_i)\,\mathbb 1[\tilde y = y]
          + \lambda_i\, q_i(\tilde y),
          \qquad \lambda_i = \frac{1}{1 + q_{i,\min}(e^\varepsilon - 1)},

the largest :math:`\lambda_i` that the client's own epsilon allows
(:func:`~ldpfda.privacy.label_accounting.resampling_probability`): the ratio of the
output probabilities under two labels is at most
:math:`1 + (1-\lambda_i)/(\lambda_i q_{i,\min}) = e^\varepsilon`
(:func:`~ldpfda.privacy.label_accounting.resampling_epsilon`). The client computes
:math:`\lambda_i` itself from its budget and the prior it received, so no prior a
server sends can make it spend more than :math:`\varepsilon`; a prior with a zero entry
is refused. With the uniform prior this is K-ary randomized response
(:math:`\lambda = K/(e^\varepsilon + K - 1)`, UniformRR).

**Peer-to-peer** (:func:`p2p_randomize`, :func:`p2p_forward`). A client randomizes its
label by randomized response at :math:`\varepsilon_0` (K-ary for K > 2 classes) and
hands it to the relay; later it receives the noisy labels of its cluster, draws one
uniformly (with replacement, possibly its own) and reports it. The reported labels are
:math:`(\varepsilon, \delta = 1/s^2)`-label-DP toward the analyst
(:func:`~ldpfda.privacy.peer_to_peer.p2p_guarantee`), while the relay sees
:math:`\varepsilon_0`-LDP labels. Forwarding is post-processing: it costs nothing.

References
----------
H. Esfandiari, V. Mirrokni, U. Syed, S. Vassilvitskii, "Label differential privacy via
clustering", AISTATS 2022 (Algorithms 1 and 2). S. L. Warner, "Randomized response",
JASA 1965.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import (
    check_binary_labels,
    check_class_labels,
    check_epsilon,
    check_finite_array,
)
from ldpfda.exceptions import BudgetExceededError
from ldpfda.privacy.base import ReleaseEvent
from ldpfda.privacy.labels import check_labels
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.peer_to_peer import pick_peers
from ldpfda.privacy.random import ClientStreams
from ldpfda.privacy.randomized_response import (
    BinaryRandomizedResponse,
    KaryRandomizedResponse,
)
from ldpfda.schema.releases import (
    check_priors,
    label_event,
    p2p_relay_event,
    prior_groups,
    prior_probabilities,
)

__all__ = [
    "P2P_DRAW_STREAM",
    "P2P_RR_STREAM",
    "PRIOR_STREAM",
    "check_public_features",
    "p2p_forward",
    "p2p_randomize",
    "release_labels",
]

PRIOR_STREAM = "labeldp/prior-rr"
P2P_RR_STREAM = "labeldp/p2p-rr"
P2P_DRAW_STREAM = "labeldp/p2p-draw"


def check_public_features(features: ArrayLike) -> NDArray[np.float64]:
    """Scaled features ``(n, p)``: finite and within [-1, 1] (the featurizer's box)."""
    x = check_finite_array(features, "features", ndim=2)
    if np.any(np.abs(x) > 1.0 + 1e-12):
        raise ValueError(
            "features must be rescaled into [-1, 1] by the run's featurizer "
            f"(got max |x| = {np.abs(x).max():.6g})"
        )
    return x


def release_labels(
    labels: ArrayLike,
    priors: ArrayLike,
    *,
    client_ids: ArrayLike,
    seed: int,
    epsilon: float,
    ledger: PrivacyLedger | None = None,
    release: int = 0,
) -> NDArray[np.int64]:
    r"""Each client randomizes its label with its prior (see the module docstring).

    Parameters
    ----------
    labels : array of shape (n,)
        True labels in :math:`\{0, \dots, K-1\}`, :math:`K` = the priors' width.
    priors : array of shape (n, K) or (K,)
        The prior :math:`q_i` of every client (one row for all), positive rows that sum
        to 1. The uniform prior gives K-ary randomized response.
    client_ids : array of shape (n,)
    seed : int
        The run seed (keys every client's stream ``labeldp/prior-rr#<release>``).
    epsilon : float
        Each client's epsilon for this release, in (0, inf).
    ledger : PrivacyLedger, optional
        Charged with one event per client (:func:`label_events`) before anything is
        released; if any client cannot afford it, nobody releases
        (:class:`~ldpfda.BudgetExceededError`).
    release : int
        Index of this release for these clients (fresh noise for each index).

    Returns
    -------
    ndarray of int64, shape (n,)
        The randomized labels.
    """
    ids = _client_ids(client_ids)
    epsilon = check_epsilon(epsilon, allow_inf=False)
    q = check_priors(priors, ids.size)
    y = check_labels(labels, q.shape[1])
    if y.size != ids.size:
        raise ValueError(f"labels has {y.size} entries for {ids.size} clients")
    rows, group = prior_groups(q)
    if ledger is not None:
        _charge_groups(ledger, [label_event(row, epsilon) for row in rows], group, ids)
    lam = prior_probabilities(rows, epsilon=epsilon)[group]
    u = (
        ClientStreams(seed, ids)
        .stream(f"{PRIOR_STREAM}#{release}")
        .uniform((ids.size, 2))
    )
    cdf = np.cumsum(q, axis=1)
    drawn = np.minimum((u[:, 1:] >= cdf).sum(axis=1), q.shape[1] - 1)
    return np.where(u[:, 0] < lam, drawn, y)


def _charge_groups(
    ledger: PrivacyLedger,
    events: list[ReleaseEvent],
    group: NDArray[np.int64],
    ids: NDArray[np.int64],
) -> None:
    """Charge ``events[group[i]]`` to client ``ids[i]``, for all or for nobody."""
    cost = np.array([e.epsilon for e in events])[group]
    for value in np.unique(cost):
        broke = ~ledger.can_spend(float(value), ids[cost == value])
        if np.any(broke):
            first = int(ids[cost == value][broke][0])
            raise BudgetExceededError(
                f"label release of epsilon={value:.6g} would exceed the budget "
                f"{ledger.budget:.6g} of {int(broke.sum())} client(s), e.g. client "
                f"{first} (already spent {ledger.spent(first):.6g})"
            )
    for g, event in enumerate(events):
        ledger.charge(event, ids[group == g])


def _client_ids(client_ids: ArrayLike) -> NDArray[np.int64]:
    ids = np.asarray(client_ids)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"client_ids must be integers, got dtype {ids.dtype}")
    return ids.astype(np.int64).reshape(-1)


# -- peer to peer ----------------------------------------------------------------------


def _labels(
    values: ArrayLike, n_classes: int, name: str = "labels"
) -> NDArray[np.int8]:
    """Labels in {0, 1} (two classes) or in 0 .. K - 1, as int8."""
    if n_classes == 2:
        return check_binary_labels(values, name)
    return check_class_labels(values, n_classes, name)


def p2p_randomize(
    labels: ArrayLike,
    *,
    client_ids: ArrayLike,
    seed: int,
    local_epsilon: float,
    cluster_sizes: ArrayLike,
    ledger: PrivacyLedger | None = None,
    release: int = 0,
    n_classes: int = 2,
) -> NDArray[np.int8]:
    r"""Step 1 of the peer-to-peer mechanism: every client's label by randomized
    response at :math:`\varepsilon_0`.

    Each client flips its bit with probability :math:`1/(1 + e^{\varepsilon_0})`
    (``n_classes`` K > 2: keeps its label with probability
    :math:`e^{\varepsilon_0}/(e^{\varepsilon_0} + K - 1)`, else reports one of the
    K - 1 others uniformly), noise from its stream ``labeldp/p2p-rr#<release>``. The
    ledger is charged :func:`~ldpfda.schema.releases.p2p_relay_event` (what the
    relay, the server, sees) before anything is released.
    """
    ids = _client_ids(client_ids)
    y = _labels(labels, n_classes)
    if y.size != ids.size:
        raise ValueError(f"labels has {y.size} entries for {ids.size} clients")
    event = p2p_relay_event(
        local_epsilon=local_epsilon, cluster_sizes=cluster_sizes, n_classes=n_classes
    )
    if ledger is not None:
        ledger.charge(event, ids)
    stream = ClientStreams(seed, ids).stream(f"{P2P_RR_STREAM}#{release}")
    eps0 = float(local_epsilon)
    mechanism = (
        BinaryRandomizedResponse(epsilon=eps0)
        if n_classes == 2
        else KaryRandomizedResponse(epsilon=eps0, n_categories=n_classes)
    )
    return mechanism.randomise(y, stream).astype(np.int8)


def p2p_forward(
    peer_labels: ArrayLike,
    offsets: ArrayLike,
    counts: ArrayLike,
    *,
    client_ids: ArrayLike,
    seed: int,
    release: int = 0,
    n_classes: int = 2,
) -> NDArray[np.int8]:
    r"""Step 2: every client reports the noisy label of a peer it draws uniformly.

    Client ``i``'s peers are ``peer_labels[offsets[i] : offsets[i] + counts[i]]`` (its
    cluster's noisy labels in ``0 .. n_classes - 1``, ordered by client id, its own
    among them); it draws one with replacement using its stream
    ``labeldp/p2p-draw#<release>``. Post-processing of released labels: no epsilon is
    charged.
    """
    ids = _client_ids(client_ids)
    bits = _labels(peer_labels, n_classes, "peer_labels")
    start = np.asarray(offsets).reshape(-1)
    size = np.asarray(counts).reshape(-1)
    for name, value in (("offsets", start), ("counts", size)):
        if value.dtype.kind not in "iu" or value.size != ids.size:
            raise ValueError(
                f"{name} must hold one integer per client ({ids.size}), got {value!r}"
            )
    if np.any(size < 1) or np.any(start < 0) or np.any(start + size > bits.size):
        raise ValueError(
            "every client needs a non-empty block of peers within peer_labels"
        )
    u = (
        ClientStreams(seed, ids)
        .stream(f"{P2P_DRAW_STREAM}#{release}")
        .uniform((ids.size,))
    )
    return bits[start + pick_peers(u, size)]
