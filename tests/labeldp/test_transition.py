"""Channels and corrected losses: exact and Monte Carlo unbiasedness."""

from __future__ import annotations

import numpy as np
import pytest

from ldpfda.labeldp import (
    ClusterRR,
    corrected_loss,
    inverse_transition_matrices,
    transition_matrices,
)
from ldpfda.labeldp.mechanisms import resample_labels

RNG = np.random.default_rng(0)
Q = RNG.dirichlet(np.ones(4), size=3)  # three clusters, four classes


@pytest.mark.parametrize("beta", [0.0, 0.3, 0.95])
def test_closed_form_inverse(beta):
    t = transition_matrices(Q, beta)
    inv = inverse_transition_matrices(Q, beta)
    np.testing.assert_allclose(t @ inv, np.broadcast_to(np.eye(4), t.shape), atol=1e-12)
    np.testing.assert_allclose(t.sum(axis=2), 1.0)  # rows are distributions


@pytest.mark.parametrize("lam", [0.2, 0.7, 0.99])
def test_corrected_loss_is_exactly_unbiased(lam):
    losses = RNG.uniform(0, 3, size=4)  # l(h, x, y) for the four labels
    t = transition_matrices(Q, lam)
    for c in range(3):
        # corrected loss of every possible noisy label of one example in cluster c
        noisy = np.arange(4)
        corrected = corrected_loss(
            np.tile(losses, (4, 1)), noisy, np.full(4, c), Q, lam
        )
        # E over y~ ~ T[y, .] equals the clean loss of y, for every true y
        np.testing.assert_allclose(t[c] @ corrected, losses, atol=1e-12)


def test_corrected_loss_matches_the_matrix_form():
    lam, c = 0.6, np.array([0, 1, 2, 1])
    noisy = np.array([3, 0, 2, 2])
    losses = RNG.uniform(size=(4, 4))
    inv = inverse_transition_matrices(Q, lam)
    expected = np.array([inv[c[i]][noisy[i]] @ losses[i] for i in range(4)])
    np.testing.assert_allclose(corrected_loss(losses, noisy, c, Q, lam), expected)


def test_beta_zero_is_the_plain_loss():
    losses = RNG.uniform(size=(5, 4))
    noisy = np.array([0, 1, 2, 3, 0])
    out = corrected_loss(losses, noisy, np.zeros(5, dtype=np.int64), Q, 0.0)
    np.testing.assert_allclose(out, losses[np.arange(5), noisy])


def test_corrected_loss_unbiased_by_monte_carlo():
    lam, true_label, cluster, n = 0.8, 2, 1, 200_000
    losses = np.array([0.3, 1.7, 0.9, 2.5])
    noisy = resample_labels(
        np.full(n, true_label), np.full(n, cluster), Q, lam, np.random.default_rng(42)
    )
    corrected = corrected_loss(
        np.tile(losses, (n, 1)), noisy, np.full(n, cluster), Q, lam
    )
    # Exact standard deviation of one corrected loss, for the tolerance.
    values = corrected_loss(
        np.tile(losses, (4, 1)), np.arange(4), np.full(4, cluster), Q, lam
    )
    probs = transition_matrices(Q, lam)[cluster, true_label]
    sd = np.sqrt(probs @ (values - losses[true_label]) ** 2)
    assert abs(corrected.mean() - losses[true_label]) < 4 * sd / np.sqrt(n)
    # ... and the uncorrected loss is biased well beyond that tolerance
    assert abs(losses[noisy].mean() - losses[true_label]) > 8 * sd / np.sqrt(n)


def test_release_corrected_loss_defaults_to_unbiased():
    labels = np.array([0, 1, 2, 3] * 5)
    clusters = np.repeat([0, 1], 10)
    release = ClusterRR(
        n_classes=4, sigma=2.0, floor=0.2, epsilon_resample=1.0
    ).release(labels, clusters=clusters, rng=1)
    losses = RNG.uniform(size=(20, 4))
    lam = release.resample_probability
    assert release.beta == lam
    q = release.distributions[release.clusters]
    expected = (losses[np.arange(20), release.labels] - lam * (q * losses).sum(1)) / (
        1 - lam
    )
    np.testing.assert_allclose(release.corrected_loss(losses), expected)


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.2])
def test_inverse_needs_beta_below_one(bad):
    with pytest.raises(ValueError, match="beta"):
        inverse_transition_matrices(Q, bad)


def test_release_refuses_beta_above_lambda():
    release = ClusterRR(
        n_classes=4, sigma=2.0, floor=0.2, resample_probability=0.5
    ).release(np.array([0, 1, 2, 3]), clusters=np.zeros(4, int), rng=0)
    with pytest.raises(ValueError, match="beta"):
        release.transition_matrices(beta=0.6)
    with pytest.raises(ValueError, match="beta"):
        release.corrected_targets(beta=-0.1)


def test_distributions_must_be_rows_of_probabilities():
    with pytest.raises(ValueError, match="distributions"):
        transition_matrices(np.array([[0.5, 0.6]]), 0.5)
    with pytest.raises(ValueError, match="distributions"):
        transition_matrices(np.array([[1.2, -0.2]]), 0.5)
