"""ClusterRR and UniformRR: validation, reproducibility and what a release records."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldpfda.labeldp import (
    ClusterRR,
    UniformRR,
    cluster_distributions,
    cluster_label_counts,
    noisy_cluster_histograms,
)
from ldpfda.privacy import KaryRandomizedResponse

LABELS = np.array([0, 0, 1, 2, 2, 2, 1, 0, 1, 1])
CLUSTERS = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])


def make(**kwargs):
    params = {"n_classes": 3, "sigma": 2.0, "floor": 0.1, "epsilon_resample": 1.0}
    params.update(kwargs)
    return ClusterRR(**params)


@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_uniform_rr_epsilon(bad):
    with pytest.raises(ValueError, match="epsilon"):
        UniformRR(epsilon=bad, n_classes=3)


def test_uniform_rr_refuses_infinite_epsilon():
    with pytest.raises(ValueError, match="epsilon"):
        UniformRR(epsilon=math.inf, n_classes=3)


@pytest.mark.parametrize("bad", [-1.0, -0.01])
def test_cluster_rr_epsilon_resample(bad):
    with pytest.raises(ValueError, match="epsilon"):
        make(epsilon_resample=bad)


@pytest.mark.parametrize("bad", [0.0, -0.2, 1.01])
def test_cluster_rr_lambda(bad):
    with pytest.raises(ValueError, match="lambda"):
        make(epsilon_resample=None, resample_probability=bad)


def test_cluster_rr_needs_exactly_one_of_lambda_and_epsilon():
    with pytest.raises(ValueError, match="lambda"):
        make(epsilon_resample=None)
    with pytest.raises(ValueError, match="lambda"):
        make(resample_probability=0.5)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("sigma", 0.0),
        ("sigma", -2.0),
        ("tau", -0.1),
        ("tau", 1.5),
        ("floor", -0.1),
        ("floor", 2.0),
        ("truncation", "round"),
        ("n_clusters", 0),
    ],
)
def test_cluster_rr_parameters(name, value):
    with pytest.raises(ValueError, match=name):
        make(**{name: value})


def test_beta_outside_zero_one():
    with pytest.raises(ValueError, match="beta"):
        make(beta=1.5)
    with pytest.raises(ValueError, match="beta"):
        UniformRR(epsilon=1.0, n_classes=3, beta=-0.5)


def test_no_histogram_requires_a_full_floor():
    with pytest.raises(ValueError, match="floor"):
        make(sigma=math.inf, floor=0.5)
    out = make(sigma=math.inf, floor=1.0).release(LABELS, clusters=CLUSTERS, rng=0)
    assert out.noisy_histograms is None
    np.testing.assert_allclose(out.distributions, 1 / 3)
    assert out.epsilon == pytest.approx(1.0)  # only the resampling step spends


def test_labels_must_be_classes():
    with pytest.raises(ValueError, match="labels"):
        make().release(np.array([0, 3]), clusters=np.array([0, 0]), rng=0)
    with pytest.raises(TypeError, match="labels"):
        make().release(np.array(["a", "b"]), clusters=np.array([0, 0]), rng=0)


def test_clusters_or_features_exactly_one():
    with pytest.raises(ValueError, match="clusters"):
        make().release(LABELS, rng=0)
    with pytest.raises(ValueError, match="clusters"):
        make().release(LABELS, clusters=CLUSTERS, features=np.zeros((10, 2)), rng=0)


def test_zero_probabilities_with_lambda_below_one_are_refused():
    mech = make(
        floor=0.0,
        truncation="zero",
        tau=0.5,
        epsilon_resample=None,
        resample_probability=0.5,
        sigma=0.01,
    )
    with pytest.raises(ValueError, match="lambda"):
        mech.release(LABELS, clusters=CLUSTERS, rng=0)


def test_same_seed_same_release_different_seed_different():
    a = make().release(LABELS, clusters=CLUSTERS, rng=7)
    b = make().release(LABELS, clusters=CLUSTERS, rng=7)
    c = make().release(LABELS, clusters=CLUSTERS, rng=8)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.noisy_histograms, b.noisy_histograms)
    assert not np.array_equal(a.noisy_histograms, c.noisy_histograms)


def test_uniform_rr_reproducible():
    y = np.arange(200) % 3
    a = UniformRR(epsilon=0.5, n_classes=3).release(y, rng=1).labels
    b = UniformRR(epsilon=0.5, n_classes=3).release(y, rng=1).labels
    c = UniformRR(epsilon=0.5, n_classes=3).release(y, rng=2).labels
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_release_records_events_and_is_immutable():
    out = make().release(LABELS, clusters=CLUSTERS, rng=0)
    names = [e.mechanism for e in out.events]
    assert names == ["cluster_histogram_laplace", "cluster_resampling"]
    assert out.epsilon == pytest.approx(1.0 + 1.0)
    with pytest.raises(ValueError):
        out.labels[0] = 2
    np.testing.assert_array_equal(out.cluster_sizes, [5, 5])


def test_lambda_one_spends_nothing_on_resampling():
    out = make(epsilon_resample=0.0).release(LABELS, clusters=CLUSTERS, rng=0)
    assert out.resample_probability == 1.0
    assert [e.mechanism for e in out.events] == ["cluster_histogram_laplace"]


def test_release_from_features_clusters_with_kmeans():
    x = np.concatenate([np.zeros((5, 2)), np.full((5, 2), 10.0)])
    out = make(n_clusters=2).release(LABELS, features=x, rng=0)
    assert set(out.clusters[:5]) != set(out.clusters[5:])
    assert out.distributions.shape == (2, 3)


def test_uniform_rr_channel_is_kary_randomized_response():
    out = UniformRR(epsilon=0.8, n_classes=4).release(np.array([0, 1, 2, 3]), rng=0)
    rr = KaryRandomizedResponse(epsilon=0.8, n_categories=4)
    np.testing.assert_allclose(out.transition_matrices()[0], rr.transition_matrix())
    assert out.q_min == pytest.approx(0.25)


def test_uniform_rr_output_law():
    n = 40_000
    out = UniformRR(epsilon=1.0, n_classes=3).release(np.zeros(n, dtype=int), rng=3)
    keep = math.e / (math.e + 2)
    freq = np.mean(out.labels == 0)
    assert abs(freq - keep) < 4 * math.sqrt(keep * (1 - keep) / n)


def test_histogram_helpers():
    counts = cluster_label_counts(LABELS, CLUSTERS, n_clusters=3, n_classes=3)
    np.testing.assert_array_equal(counts, [[2, 1, 2], [1, 3, 1], [0, 0, 0]])
    noisy = noisy_cluster_histograms(counts, sigma=1.0, rng=0)
    np.testing.assert_allclose(noisy[2], 1 / 3)  # empty cluster: uniform, no noise
    q = cluster_distributions(np.array([[0.7, -0.1, 0.4]]), tau=0.05, floor=0.3)
    np.testing.assert_allclose(q.sum(), 1.0)
    assert q.min() >= 0.1 - 1e-12
    zero = cluster_distributions(
        np.array([[0.7, 0.02, 0.4]]), tau=0.05, truncation="zero"
    )
    assert zero[0, 1] == 0.0
