"""Peer-to-peer randomized response: the exact (epsilon, delta) and the release."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from ldpfda.labeldp import (
    p2p_epsilon,
    p2p_guarantee,
    p2p_local_epsilon,
    peer_to_peer_rr,
)
from ldpfda.labeldp.peer_to_peer import hockey_stick_epsilon
from ldpfda.privacy.peer_to_peer import clone_epsilon


def _forwarded_law(
    labels: tuple[int, ...], eps0: float, k: int = 2
) -> dict[tuple, float]:
    """Exact law of the forwarded labels of one cluster (K-ary RR), by enumeration."""
    s = len(labels)
    p = math.exp(eps0) / (math.exp(eps0) + k - 1)
    other = (1 - p) / (k - 1)
    law: dict[tuple, float] = {}
    for noisy in itertools.product(range(k), repeat=s):
        weight = math.prod(p if noisy[i] == labels[i] else other for i in range(s))
        for picks in itertools.product(range(s), repeat=s):
            z = tuple(noisy[j] for j in picks)
            law[z] = law.get(z, 0.0) + weight / s**s
    return law


@pytest.mark.parametrize("delta", [0.0, 0.02, 0.1])
def test_exact_count_bound_covers_the_enumerated_outputs(delta):
    # The learner sees the forwarded bits; their law is a garbling of the count law,
    # so the enumerated epsilon can only be smaller than the count-level one.
    eps0, s = 1.0, 3
    bound = p2p_epsilon(local_epsilon=eps0, cluster_size=s, delta=delta)
    for others in itertools.product((0, 1), repeat=s - 1):
        a, b = _forwarded_law((1, *others), eps0), _forwarded_law((0, *others), eps0)
        keys = sorted(a)
        pa, pb = np.array([a[k] for k in keys]), np.array([b[k] for k in keys])
        worst = max(
            hockey_stick_epsilon(pa, pb, delta)[0],
            hockey_stick_epsilon(pb, pa, delta)[0],
        )
        assert worst <= bound + 1e-12


@pytest.mark.parametrize("delta", [0.0, 0.05])
def test_clone_bound_covers_the_enumerated_k_ary_outputs(delta):
    # K = 3 labels, a cluster of 3: every assignment of the two others' labels; the
    # clone bound holds for any eps0-LDP randomizer, so it covers each pair.
    eps0, s, k = 1.0, 3, 3
    bound = clone_epsilon(local_epsilon=eps0, cluster_size=s, delta=delta)
    for others in itertools.product(range(k), repeat=s - 1):
        a = _forwarded_law((1, *others), eps0, k)
        b = _forwarded_law((0, *others), eps0, k)
        keys = sorted(a)
        pa, pb = np.array([a[q] for q in keys]), np.array([b[q] for q in keys])
        assert hockey_stick_epsilon(pa, pb, delta)[0] <= bound + 1e-12


@pytest.mark.parametrize(("s", "eps0"), [(1, 1.0), (3, 0.5), (40, 2.0), (150, 1.0)])
@pytest.mark.parametrize("delta", [0.0, 1e-4, 0.05])
def test_clone_bound_is_the_hockey_stick_of_the_full_clone_laws(s, eps0, delta):
    # The tail sums equal sorting every outcome (c, u) of P and Q by its loss.
    from scipy.stats import binom

    p = math.exp(eps0) / (1 + math.exp(eps0))
    c, u = np.arange(s)[:, None], np.arange(s + 1)[None, :]
    weight = binom.pmf(c, s - 1, math.exp(-eps0))
    below, at = binom.pmf(u - 1, c, 0.5), binom.pmf(u, c, 0.5)
    law_p = (weight * (p * below + (1 - p) * at)).ravel()
    law_q = (weight * (p * at + (1 - p) * below)).ravel()
    full = min(hockey_stick_epsilon(law_p, law_q, delta)[0], eps0)
    bound = clone_epsilon(local_epsilon=eps0, cluster_size=s, delta=delta)
    assert full <= bound <= full + 1e-9


@pytest.mark.parametrize(("s", "eps0"), [(10, 1.0), (50, 2.0), (200, 0.5)])
def test_clone_bound_is_above_the_exact_binary_profile(s, eps0):
    # The binary mechanism is one eps0-LDP randomizer: its exact profile cannot exceed
    # the bound for all of them, and two classes keep the exact one.
    delta = 1 / s**2
    exact = p2p_epsilon(local_epsilon=eps0, cluster_size=s, delta=delta)
    clone = clone_epsilon(local_epsilon=eps0, cluster_size=s, delta=delta)
    assert exact <= clone <= eps0
    assert p2p_guarantee(local_epsilon=eps0, cluster_sizes=[s])[0] == exact
    assert p2p_guarantee(local_epsilon=eps0, cluster_sizes=[s], n_classes=3) == (
        clone,
        delta,
    )


def test_hockey_stick_of_randomized_response():
    p = math.e / (1 + math.e)
    law1, law0 = np.array([1 - p, p]), np.array([p, 1 - p])
    assert hockey_stick_epsilon(law1, law0, 0.0)[0] == pytest.approx(1.0)
    # with delta = p - (1 - p) the sets {1} need no epsilon at all
    assert hockey_stick_epsilon(law1, law0, 2 * p - 1)[0] == pytest.approx(
        0.0, abs=1e-12
    )


def test_amplification_grows_with_the_cluster_size():
    eps = [
        p2p_guarantee(local_epsilon=1.0, cluster_sizes=[s])[0] for s in (10, 100, 1000)
    ]
    assert eps[0] > eps[1] > eps[2]
    assert eps[0] <= 1.0
    assert p2p_guarantee(local_epsilon=1.0, cluster_sizes=[10])[1] == pytest.approx(
        0.01
    )


@pytest.mark.parametrize(("s", "eps0"), [(500, 0.5), (1000, 1.0)])
def test_exact_bound_below_the_clones_bound(s, eps0):
    # Feldman, McMillan & Talwar (2021), Thm 3.1, for n = s users, delta = 1/s^2.
    delta = 1 / s**2
    assert eps0 <= math.log(s / (16 * math.log(2 / delta)))
    e = math.exp(eps0)
    clones = math.log1p(
        (e - 1)
        / (e + 1)
        * (8 * math.sqrt(e * math.log(4 / delta)) / math.sqrt(s) + 8 * e / s)
    )
    assert p2p_epsilon(local_epsilon=eps0, cluster_size=s, delta=delta) <= clones
    # The numerical clone bound is the pair (P, Q) that closed form bounds.
    assert clone_epsilon(local_epsilon=eps0, cluster_size=s, delta=delta) <= clones


def test_guarantee_takes_the_worst_cluster():
    eps_small, delta = p2p_guarantee(local_epsilon=1.0, cluster_sizes=[20, 200])
    assert delta == pytest.approx(1 / 400)
    assert eps_small == pytest.approx(
        p2p_epsilon(local_epsilon=1.0, cluster_size=20, delta=1 / 400)
    )


def test_local_epsilon_inverse():
    sizes = [80, 120]
    eps0 = p2p_local_epsilon(epsilon=0.5, cluster_sizes=sizes)
    assert p2p_guarantee(local_epsilon=eps0, cluster_sizes=sizes)[0] <= 0.5
    assert p2p_guarantee(local_epsilon=eps0 + 2e-3, cluster_sizes=sizes)[0] > 0.5


def test_users_forward_a_bit_of_their_own_cluster():
    labels = np.array([1] * 6 + [0] * 6)
    clusters = np.array([0] * 6 + [1] * 6)
    # flips w.p. 2e-9 each: none in 12 users (fixed seed)
    out = peer_to_peer_rr(labels, clusters, local_epsilon=20.0, rng=0)
    np.testing.assert_array_equal(out.labels, labels)
    assert out.epsilon <= 20.0 and out.delta == pytest.approx(1 / 36)


def test_forwarded_bit_law():
    # Cluster of 4 with two ones: each forwarded bit is 1 w.p. mean noisy bit = 1/2.
    n = 20_000
    labels = np.tile([1, 1, 0, 0], n)
    clusters = np.repeat(np.arange(n), 4)
    out = peer_to_peer_rr(labels, clusters, local_epsilon=1.0, rng=1, account=False)
    assert abs(out.labels.mean() - 0.5) < 4 * math.sqrt(0.25 / (4 * n))


def test_peer_to_peer_reproducible():
    labels = np.arange(40) % 2
    clusters = np.arange(40) % 4
    a = peer_to_peer_rr(labels, clusters, local_epsilon=1.0, rng=3, account=False)
    b = peer_to_peer_rr(labels, clusters, local_epsilon=1.0, rng=3, account=False)
    c = peer_to_peer_rr(labels, clusters, local_epsilon=1.0, rng=4, account=False)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert not np.array_equal(a.labels, c.labels)


def test_peer_to_peer_validation():
    with pytest.raises(ValueError, match="epsilon"):
        peer_to_peer_rr(np.array([0, 1]), np.array([0, 0]), local_epsilon=0.0)
    with pytest.raises(ValueError, match="labels"):
        peer_to_peer_rr(np.array([0, 2]), np.array([0, 0]), local_epsilon=1.0)
    with pytest.raises(ValueError, match="delta"):
        p2p_epsilon(local_epsilon=1.0, cluster_size=5, delta=-0.1)
