"""Seeded statistical privacy tests on neighbouring datasets (one label changed).

Each mechanism is audited with :func:`label_audit.audit` against its claimed epsilon;
the same audit must flag a deliberately mis-scaled version of the mechanism.
"""

from __future__ import annotations

import numpy as np
import pytest

import ldpfda.labeldp.mechanisms as mechanisms
from ldpfda.labeldp import ClusterRR, UniformRR, histogram_sigma, p2p_guarantee
from ldpfda.labeldp.accounting import resampling_probability
from ldpfda.labeldp.peer_to_peer import peer_to_peer_rr
from ldpfda.privacy.randomized_response import KaryRandomizedResponse
from tests.labeldp.label_audit import audit, compare

# One cluster of four examples; the neighbours differ in example 0's label.
D = np.array([0, 0, 0, 0])
D_PRIME = np.array([1, 0, 0, 0])
CLUSTERS = np.zeros(4, dtype=np.int64)
EPS_HIST, EPS_RESAMPLE = 1.0, 0.5
N_DRAWS = 2000


def _cluster_events() -> list[tuple[str, object]]:
    """Cells of (noisy share of label 1, noisy share of label 0, label of example 0).

    Beyond both means (1/4 and 0 for label 1, 3/4 and 1 for label 0) the Laplace ratio
    is exactly e^{eps_1/2} per entry, so the tail cells make the histogram part tight;
    below 0 the share of label 1 is clipped and q sits on its floor, where the
    resampling ratio is largest.
    """
    events = []
    for low, high in ((-np.inf, 0.0), (0.0, 0.25), (0.25, np.inf)):
        for b0 in (0, 1):
            for label in (0, 1):

                def event(out, low=low, high=high, b0=b0, label=label) -> bool:
                    h = out.noisy_histograms[0]
                    return (
                        low < h[1] <= high
                        and (h[0] < 0.75) == bool(b0)
                        and out.labels[0] == label
                    )

                events.append(
                    (f"hist1 in ({low},{high}],hist0<.75={b0},y0={label}", event)
                )
    return events


def _cluster_rr(floor: float):
    mech = ClusterRR(
        n_classes=2,
        sigma=histogram_sigma(epsilon=EPS_HIST),
        floor=floor,
        epsilon_resample=EPS_RESAMPLE,
    )
    return lambda labels, gen: mech.release(labels, clusters=CLUSTERS, rng=gen)


def _audit_cluster_rr(floor: float):
    """Audit ClusterRR with uniform floor ``floor`` on D vs D' against its claim."""
    return audit(
        _cluster_rr(floor),
        D,
        D_PRIME,
        _cluster_events(),
        epsilon=EPS_HIST + EPS_RESAMPLE,
        n=N_DRAWS,
        seed=11,
    )


def test_cluster_rr_keeps_its_epsilon():
    result = _audit_cluster_rr(0.2)
    assert not result.violated, result


def test_cluster_rr_audit_flags_too_little_histogram_noise(monkeypatch):
    true_noise = mechanisms.noisy_cluster_histograms

    def quarter_noise(counts, *, sigma, rng=None):
        return true_noise(counts, sigma=sigma / 4.0, rng=rng)

    monkeypatch.setattr(mechanisms, "noisy_cluster_histograms", quarter_noise)
    result = _audit_cluster_rr(0.2)
    assert result.violated, result


def test_cluster_rr_audit_flags_lambda_from_the_wrong_q_min(monkeypatch):
    # The broken mechanism sizes lambda as if q were uniform (q_min = 1/K) while the
    # released q has much smaller entries: the resampling step overspends.
    def uniform_q_min(*, epsilon, q_min):
        return resampling_probability(epsilon=epsilon, q_min=0.5)

    monkeypatch.setattr(mechanisms, "resampling_probability", uniform_q_min)
    result = _audit_cluster_rr(0.02)
    assert result.violated, result


def _uniform_audit(mech, n: int = 20_000):
    """UniformRR randomises every example independently, so one release of n copies
    of a label gives n independent draws of the output law of that label."""
    k = mech.n_classes
    counts = [
        np.bincount(mech.release(np.full(n, label), rng=seed).labels, minlength=k)
        for label, seed in ((0, 3), (1, 4))
    ]
    names = [f"y={j}" for j in range(k)]
    return compare(counts[0], counts[1], n, names, epsilon=mech.epsilon)


def test_uniform_rr_keeps_its_epsilon():
    n = 20_000
    result = _uniform_audit(UniformRR(epsilon=1.0, n_classes=3), n)
    assert not result.violated, result
    # Tight: the log ratio at the true label is epsilon, within sampling error.
    p, p_prime = result.frequencies["y=0"]
    se = np.sqrt((1 - p) / (n * p) + (1 - p_prime) / (n * p_prime))
    assert abs(np.log(p / p_prime) - 1.0) < 4 * se


def test_uniform_rr_audit_flags_a_doubled_epsilon():
    class Broken(UniformRR):
        """Randomises with twice the epsilon it reports."""

        def release(self, labels, *, rng=None):
            out = super().release(labels, rng=rng)
            rr = KaryRandomizedResponse(epsilon=2 * self.epsilon, n_categories=3)
            noisy = rr.randomise(np.asarray(labels), rng)
            return mechanisms.LabelRelease(
                labels=noisy,
                clusters=out.clusters,
                distributions=out.distributions,
                resample_probability=out.resample_probability,
                cluster_sizes=out.cluster_sizes,
                events=out.events,
                beta=out.beta,
            )

    assert _uniform_audit(Broken(epsilon=1.0, n_classes=3)).violated


# Peer to peer: one cluster of 50 users, 10 of the others hold label 1.
P2P_D = np.array([0] * 40 + [1] * 10)
P2P_D_PRIME = np.array([1] + [0] * 39 + [1] * 10)
P2P_CLUSTERS = np.zeros(50, dtype=np.int64)
LOCAL_EPS = 1.0


def _p2p_events() -> list[tuple[str, object]]:
    events = [
        (f"sum>={t}", lambda out, t=t: int(out.labels.sum()) >= t)
        for t in range(16, 30, 3)
    ]
    events += [
        (f"sum<={t}", lambda out, t=t: int(out.labels.sum()) <= t)
        for t in range(10, 22, 3)
    ]
    events.append(("z0=1", lambda out: out.labels[0] == 1))
    return events


def test_peer_to_peer_keeps_its_epsilon_delta():
    eps, delta = p2p_guarantee(local_epsilon=LOCAL_EPS, cluster_sizes=[50])
    assert eps < 0.5 * LOCAL_EPS  # the amplification the test relies on

    def release(y, g):
        return peer_to_peer_rr(
            y, P2P_CLUSTERS, local_epsilon=LOCAL_EPS, rng=g, account=False
        )

    result = audit(
        release,
        P2P_D,
        P2P_D_PRIME,
        _p2p_events(),
        epsilon=eps,
        delta=delta,
        n=3000,
        seed=5,
    )
    assert not result.violated, result


def test_peer_to_peer_audit_flags_forwarding_ones_own_bit(monkeypatch):
    # Broken: every user forwards her own noisy bit (no resampling), yet the amplified
    # guarantee is claimed.
    eps, delta = p2p_guarantee(local_epsilon=LOCAL_EPS, cluster_sizes=[50])
    rr = mechanisms.KaryRandomizedResponse(epsilon=LOCAL_EPS, n_categories=2)

    class Out:
        def __init__(self, labels):
            self.labels = labels

    result = audit(
        lambda y, g: Out(rr.randomise(y, g)),
        P2P_D,
        P2P_D_PRIME,
        _p2p_events(),
        epsilon=eps,
        delta=delta,
        n=3000,
        seed=5,
    )
    assert result.violated, result


@pytest.mark.parametrize("floor", [0.1, 1.0])
def test_recorded_epsilon_matches_the_formula(floor):
    mech = ClusterRR(n_classes=3, sigma=4.0, floor=floor, epsilon_resample=0.7)
    out = mech.release(
        np.array([0, 1, 2, 0, 0, 1]), clusters=np.array([0, 0, 0, 1, 1, 1]), rng=0
    )
    assert out.epsilon == pytest.approx(0.5 + 0.7)
    lam = out.resample_probability
    assert np.log1p((1 - lam) / (lam * out.q_min)) == pytest.approx(0.7)
