"""The parameter-selection rule: criterion, budget and use of released data only."""

from __future__ import annotations

import numpy as np
import pytest

from ldpfda.labeldp import (
    AutoClusterRR,
    choose_resampling,
    plan_histogram_share,
    predicted_accuracy,
    release_majority_share,
    resampling_epsilon,
    uniform_rr_probability,
)
from ldpfda.labeldp.selection import pilot_epsilon

K = 4


def clustered_labels(n_clusters: int, size: int, purity: float, seed: int):
    """Clusters whose labels are their majority label with probability ``purity``."""
    gen = np.random.default_rng(seed)
    clusters = np.repeat(np.arange(n_clusters), size)
    major = clusters % K
    other = gen.integers(0, K, size=clusters.size)
    labels = np.where(gen.random(clusters.size) < purity, major, other)
    return labels, clusters


def uniform_q(k=K):
    return np.full((1, k), 1 / k)


def test_uniform_rr_criterion_same_for_plain_and_corrected():
    lam = uniform_rr_probability(epsilon=1.0, n_classes=K)
    scores = [
        predicted_accuracy(
            uniform_q(), uniform_q(), resample_probability=lam, beta=b, n_effective=50.0
        )
        for b in (0.0, lam)
    ]
    assert scores[0] == pytest.approx(scores[1], rel=1e-9)


def test_criterion_grows_with_epsilon_and_sample_size():
    def score(eps, n_eff):
        lam = uniform_rr_probability(epsilon=eps, n_classes=K)
        return predicted_accuracy(
            uniform_q(),
            uniform_q(),
            resample_probability=lam,
            beta=lam,
            n_effective=n_eff,
        )

    assert score(0.1, 50) < score(0.5, 50) < score(2.0, 50) <= 1.0
    assert score(0.5, 10) < score(0.5, 100)
    assert score(0.01, 10) == pytest.approx(1 / K, abs=0.02)  # chance


def test_criterion_of_pure_resampling_is_the_majority_share():
    p = np.array([[0.7, 0.1, 0.1, 0.1], [0.1, 0.1, 0.2, 0.6]])
    score = predicted_accuracy(
        p, p, resample_probability=1.0, beta=0.0, n_effective=1e6, weights=[0.5, 0.5]
    )
    assert score == pytest.approx(0.65, abs=1e-6)


def test_choice_never_overspends():
    gen = np.random.default_rng(0)
    noisy = gen.dirichlet(np.ones(K), size=20) + gen.laplace(0, 0.05, size=(20, K))
    for eps2 in (0.0, 0.3, 2.0):
        choice = choose_resampling(
            noisy, np.full(20, 50), epsilon_resample=eps2, n_effective=20.0
        )
        spent = resampling_epsilon(
            resample_probability=choice.resample_probability, q_min=choice.q_min
        )
        assert spent <= eps2 + 1e-12
        assert 0.0 <= choice.beta <= choice.resample_probability


def test_plan_includes_uniform_rr_and_never_scores_below_it():
    plan = plan_histogram_share(
        1.0,
        majority_share=0.3,
        cluster_sizes=np.full(10, 100),
        n_classes=K,
        n_effective=50.0,
        rng=0,
    )
    shares = dict(plan.scores)
    assert 0.0 in shares
    assert shares[plan.share] >= shares[0.0]


def test_rule_prefers_clusters_when_pure_and_uniform_rr_when_useless():
    labels, clusters = clustered_labels(20, 200, purity=0.95, seed=1)
    pure = AutoClusterRR(epsilon=0.2, n_classes=K, n_parameters=12).release(
        labels, clusters=clusters, rng=2
    )
    assert dict(pure.parameters)["histogram_share"] > 0
    labels, clusters = clustered_labels(20, 200, purity=0.0, seed=1)
    useless = AutoClusterRR(epsilon=2.0, n_classes=K, n_parameters=12).release(
        labels, clusters=clusters, rng=2
    )
    assert dict(useless.parameters)["histogram_share"] == 0.0
    np.testing.assert_allclose(useless.distributions, 1 / K)


@pytest.mark.parametrize("eps", [0.1, 0.5, 3.0])
def test_auto_release_spends_exactly_the_budget(eps):
    labels, clusters = clustered_labels(10, 100, purity=0.8, seed=3)
    out = AutoClusterRR(epsilon=eps, n_classes=K, n_parameters=12).release(
        labels, clusters=clusters, rng=4
    )
    assert out.epsilon == pytest.approx(eps, rel=1e-9)
    assert out.events[0].mechanism == "majority_share_laplace"
    assert out.events[0].epsilon == pytest.approx(pilot_epsilon(eps, labels.size))


def test_rule_sees_labels_only_through_cluster_counts():
    # Two training sets with the same per-cluster label counts (labels permuted inside
    # every cluster) give the same choices under the same seed.
    labels, clusters = clustered_labels(10, 100, purity=0.7, seed=5)
    gen = np.random.default_rng(6)
    shuffled = labels.copy()
    for c in range(10):
        idx = np.flatnonzero(clusters == c)
        shuffled[idx] = labels[gen.permutation(idx)]
    mech = AutoClusterRR(epsilon=0.5, n_classes=K, n_parameters=12)
    a = dict(mech.release(labels, clusters=clusters, rng=7).parameters)
    b = dict(mech.release(shuffled, clusters=clusters, rng=7).parameters)
    assert a["choice"] == b["choice"] and a["histogram_share"] == b["histogram_share"]


def test_majority_share_release():
    labels, clusters = clustered_labels(10, 100, purity=1.0, seed=0)
    share, event = release_majority_share(
        labels, clusters, epsilon=1.0, n_clusters=10, n_classes=K, rng=0
    )
    assert abs(share - 1.0) < 20 / 1000  # Laplace(1)/n, far within 20 scales
    assert event.epsilon == 1.0
    with pytest.raises(ValueError, match="epsilon"):
        release_majority_share(
            labels, clusters, epsilon=0.0, n_clusters=10, n_classes=K
        )


@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_auto_epsilon(bad):
    with pytest.raises(ValueError, match="epsilon"):
        AutoClusterRR(epsilon=bad, n_classes=K, n_parameters=3)


def test_auto_reproducible():
    labels, clusters = clustered_labels(10, 100, purity=0.8, seed=3)
    mech = AutoClusterRR(epsilon=0.3, n_classes=K, n_parameters=12)
    a = mech.release(labels, clusters=clusters, rng=9)
    b = mech.release(labels, clusters=clusters, rng=9)
    c = mech.release(labels, clusters=clusters, rng=10)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert not np.array_equal(a.labels, c.labels)
