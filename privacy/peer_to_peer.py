r"""Peer-to-peer cluster randomized response (Algorithm 2), for two or K labels.

User :math:`i` randomises her bit with binary randomized response at
:math:`\varepsilon_0` (keep probability
:math:`p = e^{\varepsilon_0}/(1+e^{\varepsilon_0})`) and forwards
:math:`z_i = \tilde y_{J_i}`, the noisy bit of a user :math:`J_i` drawn uniformly with
replacement from her cluster. Toward another user the guarantee is
:math:`\varepsilon_0`. The learner sees every :math:`(x_i, z_i)`, not the :math:`J_i`:
a cluster's :math:`z_i` are a post-processing of the count :math:`m` of noisy ones in
the cluster of size s. With :math:`a` of the other :math:`s-1` users holding label 1,

.. math:: R_a = \mathrm{Bin}(a, p) * \mathrm{Bin}(s-1-a, 1-p), \quad
          P_1(m) = p R_a(m-1) + (1-p) R_a(m), \quad
          P_0(m) = (1-p) R_a(m-1) + p R_a(m)

are the laws of :math:`m` for :math:`y_k = 1, 0`; the exact :math:`\varepsilon(\delta)`
of every pair (:func:`hockey_stick_epsilon`; one order suffices by complementing all
bits) replaces the asymptotic statement of the paper's Theorem 3.

**K labels** (K > 2). User :math:`i` randomises her label by K-ary randomized response
at :math:`\varepsilon_0` and forwards the noisy label of a peer drawn as above. The
forwarded labels are a post-processing of the cluster's multiset of noisy labels,
i.e. of the shuffled outputs of an :math:`\varepsilon_0`-LDP randomizer, so the
"hiding among the clones" bound applies (Feldman, McMillan, Talwar, Theorem 3.2): with
:math:`C \sim \mathrm{Bin}(s-1, e^{-\varepsilon_0})`,
:math:`A \sim \mathrm{Bin}(C, 1/2)`, :math:`\Delta \sim
\mathrm{Bern}(e^{\varepsilon_0}/(1+e^{\varepsilon_0}))`, the pair of laws

.. math:: P = (A + \Delta,\; C - A + 1 - \Delta), \qquad
          Q = (A + 1 - \Delta,\; C - A + \Delta)

dominates every pair of neighbouring clusters, whatever K and the other labels are;
:func:`clone_epsilon` is their exact :math:`\varepsilon(\delta)`. It holds for any
:math:`\varepsilon_0`-LDP randomizer and is never below the exact binary profile
(two classes keep that one). Needs numpy and scipy only; re-exported by
:mod:`ldpfda.labeldp.peer_to_peer`.

References
----------
H. Esfandiari, V. Mirrokni, U. Syed, S. Vassilvitskii, "Label differential privacy via
clustering", AISTATS 2022, Section 5. V. Feldman, A. McMillan, K. Talwar, "Hiding among
the clones: a simple and nearly optimal analysis of privacy amplification by shuffling",
FOCS 2021. B. Balle, J. Bell, A. Gascon, K. Nissim, "The privacy blanket of the shuffle
model", CRYPTO 2019.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import check_binary_labels, check_epsilon, check_int, check_real
from ldpfda.privacy.base import ReleaseEvent
from ldpfda.privacy.random import as_generator
from ldpfda.privacy.randomized_response import BinaryRandomizedResponse

__all__ = [
    "PeerToPeerRelease",
    "clone_epsilon",
    "hockey_stick_epsilon",
    "p2p_epsilon",
    "p2p_guarantee",
    "p2p_local_epsilon",
    "peer_to_peer_rr",
    "pick_peers",
]

#: Rows of the (a, m) tables processed at once (bounds memory for large clusters).
_CHUNK = 256
#: Bisection tolerance and upper end of :func:`p2p_local_epsilon`.
_TOL = 1e-4
_MAX_LOCAL = 20.0


def _count_distributions(
    p: float, s: int, a: NDArray[np.int64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Laws P_1, P_0 of the noisy-bit count m = 0..s, one row per ``a``."""
    support = np.arange(s)
    # scipy.stats takes a quarter of a second to import: only when it is needed.
    from scipy.stats import binom

    ones = binom.pmf(support[None, :], a[:, None], p)
    zeros = binom.pmf(support[None, :], (s - 1 - a)[:, None], 1.0 - p)
    size = 1 << int(math.ceil(math.log2(max(2 * s, 2))))
    r = np.fft.irfft(
        np.fft.rfft(ones, size, axis=1) * np.fft.rfft(zeros, size, axis=1), size, axis=1
    )[:, :s]
    r = np.maximum(r, 0.0)
    shifted = np.concatenate([np.zeros((a.size, 1)), r], axis=1)  # R(m - 1)
    same = np.concatenate([r, np.zeros((a.size, 1))], axis=1)  # R(m)
    return p * shifted + (1 - p) * same, (1 - p) * shifted + p * same


def hockey_stick_epsilon(
    p: ArrayLike, q: ArrayLike, delta: float
) -> NDArray[np.float64]:
    r"""Smallest epsilon with :math:`P(S) \le e^\varepsilon Q(S) + \delta` for all S.

    Row-wise over discrete laws of shape (rows, outcomes): with outcomes sorted by
    privacy loss :math:`\log P(m)/Q(m)` and prefix sums :math:`P_{(j)}, Q_{(j)}`,

    .. math:: \varepsilon(\delta) = \max\Bigl(0, \max_{j: P_{(j)} > \delta}
              \log\frac{P_{(j)} - \delta}{Q_{(j)}}\Bigr).
    """
    pa = np.atleast_2d(np.asarray(p, dtype=float))
    qa = np.atleast_2d(np.asarray(q, dtype=float))
    d = check_real(delta, "delta", low=0.0, high=1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = np.where(pa > 0, np.log(pa) - np.log(qa), -np.inf)
        order = np.argsort(-loss, axis=1, kind="stable")
        cum_p = np.cumsum(np.take_along_axis(pa, order, axis=1), axis=1)
        cum_q = np.cumsum(np.take_along_axis(qa, order, axis=1), axis=1)
        ok = cum_p > d
        cand = np.where(ok, np.log(np.maximum(cum_p - d, 0.0)) - np.log(cum_q), -np.inf)
    cand = np.where(ok & (cum_q <= 0), np.inf, cand)
    return np.maximum(cand.max(axis=1), 0.0)


def p2p_epsilon(*, local_epsilon: float, cluster_size: int, delta: float) -> float:
    r"""Exact :math:`\varepsilon(\delta)` toward the learner for one cluster size: the
    maximum over :math:`a = 0..s-1` of :func:`hockey_stick_epsilon` of
    :math:`(P_1, P_0)`, at most ``local_epsilon``."""
    eps0 = check_epsilon(local_epsilon, "local_epsilon", allow_inf=False)
    s = check_int(cluster_size, "cluster_size", minimum=1)
    d = check_real(delta, "delta", low=0.0, high=1.0)
    p = 1.0 / (1.0 + math.exp(-eps0))
    worst = 0.0
    for start in range(0, s, _CHUNK):
        p1, p0 = _count_distributions(p, s, np.arange(start, min(start + _CHUNK, s)))
        worst = max(worst, float(hockey_stick_epsilon(p1, p0, d).max()))
    return min(worst, eps0)


def clone_epsilon(*, local_epsilon: float, cluster_size: int, delta: float) -> float:
    r""":math:`\varepsilon(\delta)` of the clone pair :math:`(P, Q)` of the module
    docstring for a cluster of ``cluster_size`` users, at most ``local_epsilon``.

    An outcome :math:`(u, v)` has :math:`c = u + v - 1` clones; with
    :math:`p = e^{\varepsilon_0}/(1+e^{\varepsilon_0})`,
    :math:`P(u, v) = w_c\,(p\,B_c(u-1) + (1-p)\,B_c(u))` and :math:`Q` with :math:`p`
    and :math:`1-p` swapped, :math:`w_c = \mathrm{Bin}(c; s-1, e^{-\varepsilon_0})`,
    :math:`B_c = \mathrm{Bin}(c, 1/2)`; swapping the coordinates maps P to Q, so one
    order suffices. The loss :math:`\log P/Q` grows with :math:`r = u/(c - u + 1)`,
    so :math:`P > e^\varepsilon Q` on a tail :math:`u \ge u^*_c`, and
    :math:`\delta(\varepsilon) = \sum_c (P - e^\varepsilon Q)(u \ge u^*_c)` is a sum
    of binomial tails: :math:`O(s)` per :math:`\varepsilon`. The returned epsilon is
    the upper end of a bisection on :math:`\delta(\varepsilon) \le \delta` (width
    below :math:`10^{-12}\varepsilon_0`).
    """
    eps0 = check_epsilon(local_epsilon, "local_epsilon", allow_inf=False)
    s = check_int(cluster_size, "cluster_size", minimum=1)
    d = check_real(delta, "delta", low=0.0, high=1.0)
    from scipy.stats import binom

    p = 1.0 / (1.0 + math.exp(-eps0))
    c = np.arange(s)
    weight = binom.pmf(c, s - 1, math.exp(-eps0))

    def excess(eps: float) -> float:
        e = math.exp(eps)
        rho = (e * p - (1 - p)) / (p - e * (1 - p))  # P > e^eps Q iff r > rho
        start = np.floor(rho * (c + 1) / (1 + rho)).astype(np.int64) + 1
        below, at = binom.sf(start - 2, c, 0.5), binom.sf(start - 1, c, 0.5)
        tail = p * below + (1 - p) * at - e * (p * at + (1 - p) * below)
        return float(np.sum(weight * np.maximum(tail, 0.0)))

    if excess(0.0) <= d:
        return 0.0
    low, high = 0.0, eps0
    while high - low > 1e-12 * eps0:
        mid = 0.5 * (low + high)
        low, high = (low, mid) if excess(mid) <= d else (mid, high)
    return high


def p2p_guarantee(
    *,
    local_epsilon: float,
    cluster_sizes: ArrayLike,
    delta: float | None = None,
    n_classes: int = 2,
) -> tuple[float, float]:
    r"""The :math:`(\varepsilon, \delta)` of Algorithm 2 toward the learner.

    :math:`\delta = 1/s^2` with :math:`s` the smallest non-empty cluster (unless given);
    :math:`\varepsilon = \max_c` over the distinct cluster sizes of
    :func:`p2p_epsilon` (two classes) or :func:`clone_epsilon` (``n_classes`` K > 2).
    """
    sizes = np.asarray(cluster_sizes, dtype=np.int64).reshape(-1)
    sizes = sizes[sizes > 0]
    if sizes.size == 0:
        raise ValueError("cluster_sizes must contain a non-empty cluster")
    s = int(sizes.min())
    d = 1.0 / s**2 if delta is None else check_real(delta, "delta", low=0.0, high=1.0)
    k = check_int(n_classes, "n_classes", minimum=2)
    exact = p2p_epsilon if k == 2 else clone_epsilon
    eps = max(
        exact(local_epsilon=local_epsilon, cluster_size=int(size), delta=d)
        for size in np.unique(sizes)
    )
    return eps, d


def p2p_local_epsilon(*, epsilon: float, cluster_sizes: ArrayLike) -> float:
    r"""Largest ``local_epsilon`` (at most 20, to within 1e-4) whose
    :func:`p2p_guarantee` is at most ``epsilon``, by bisection."""
    target = check_epsilon(epsilon, allow_inf=False)
    low, high = 0.0, _MAX_LOCAL
    if p2p_guarantee(local_epsilon=high, cluster_sizes=cluster_sizes)[0] <= target:
        return high
    while high - low > _TOL:
        mid = 0.5 * (low + high)
        if p2p_guarantee(local_epsilon=mid, cluster_sizes=cluster_sizes)[0] <= target:
            low = mid
        else:
            high = mid
    if low == 0.0:
        raise ValueError(f"no local_epsilon reaches epsilon={target!r} at tol={_TOL!r}")
    return low


@dataclass(frozen=True, eq=False)
class PeerToPeerRelease:
    """Forwarded bits of Algorithm 2 with their guarantee toward the learner."""

    labels: NDArray[np.int8]
    epsilon: float
    delta: float
    event: ReleaseEvent


def pick_peers(u: ArrayLike, counts: ArrayLike) -> NDArray[np.int64]:
    r"""The peer each user draws: :math:`\min(\lfloor u_i n_i\rfloor, n_i - 1)`, from
    uniforms ``u`` in [0, 1) and the size :math:`n_i \ge 1` of each user's cluster."""
    n = np.asarray(counts, dtype=np.int64)
    return np.minimum((np.asarray(u, dtype=float) * n).astype(np.int64), n - 1)


def peer_to_peer_rr(
    labels: ArrayLike,
    clusters: ArrayLike,
    *,
    local_epsilon: float,
    rng: np.random.Generator | int | None = None,
    account: bool = True,
) -> PeerToPeerRelease:
    r"""Run Algorithm 2 for every user at once; ``clusters`` are public.

    ``account=True`` computes the exact :math:`(\varepsilon, \delta)`
    (:func:`p2p_guarantee`); with False the event carries ``local_epsilon``, which
    always holds.
    """
    y = check_binary_labels(labels)
    c = np.asarray(clusters)
    if c.shape != y.shape or c.dtype.kind not in "iu":
        raise ValueError(f"clusters must be integers of shape {y.shape}, got {c.shape}")
    eps0 = check_epsilon(local_epsilon, "local_epsilon", allow_inf=False)
    gen = as_generator(rng)
    noisy = BinaryRandomizedResponse(epsilon=eps0).randomise(y, gen)
    # Users grouped by cluster: member r of cluster k sits at order[start[k] + r].
    order = np.argsort(c, kind="stable")
    ids, start, sizes = np.unique(c[order], return_index=True, return_counts=True)
    slot = np.searchsorted(ids, c)
    pick = start[slot] + pick_peers(gen.random(y.size), sizes[slot])
    if account:
        eps, delta = p2p_guarantee(local_epsilon=eps0, cluster_sizes=sizes)
    else:
        eps, delta = eps0, 0.0
    event = ReleaseEvent.of(
        "peer_to_peer_rr",
        eps,
        delta=delta,
        local_epsilon=eps0,
        min_cluster_size=int(sizes.min()),
    )
    return PeerToPeerRelease(noisy[order[pick]].astype(np.int8), eps, delta, event)
