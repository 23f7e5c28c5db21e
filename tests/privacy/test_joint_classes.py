"""The K-class joint release: a uniformly drawn class j and y~_j (1, x), once."""

from __future__ import annotations

import numpy as np
import pytest

from ldpfda.client.protocol import privatize_joint
from ldpfda.privacy.joint import (
    ClassSignedFeatureMechanism,
    ClassSplitMechanism,
    SignedFeatureMechanism,
    split_label_share,
)
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.schema.releases import joint_mechanism

#: Standard errors allowed, per entry, with about 12 entries tested at once.
Z = 4.5


def _blocks_estimate(mech, classes, z):
    """Each release's unbiased estimate K e_j (x) z of U, flattened."""
    n, k = classes.size, mech.n_classes
    u_hat = np.zeros((n, k, z.shape[1]))
    u_hat[np.arange(n), classes] = k * z
    return u_hat.reshape(n, -1)


@pytest.mark.parametrize("mechanism", ["hybrid", "duchi", "piecewise", "laplace"])
def test_one_client_s_release_is_unbiased_with_the_stated_variance(mechanism):
    mech = ClassSignedFeatureMechanism(
        epsilon=2.0, n_features=3, n_classes=3, mechanism=mechanism
    )
    row = np.array([1.0, 0.5, -0.3, 0.9])  # label 1, then the features
    n = 200_000
    classes, z = mech.release(np.tile(row[1:], (n, 1)), np.ones(n), rng=7)
    u_hat = _blocks_estimate(mech, classes, z)
    w = np.concatenate([[1.0], row[1:]])
    truth = np.concatenate([-w, w, -w])
    variance = mech.variance(row[None, :])[0]
    assert np.all(np.abs(u_hat.mean(axis=0) - truth) <= Z * np.sqrt(variance / n))
    # The stated variance against the sample's, within the spread of a sample
    # variance (its fourth central moment over n).
    centred = (u_hat - truth) ** 2
    spread = np.sqrt(centred.var(axis=0) / n)
    assert np.all(np.abs(centred.mean(axis=0) - variance) <= Z * spread)
    # Zero but for the discrete Laplace sampler's grid (2^-21 of its box).
    assert np.all(np.abs(mech.bias(row[None, :])) <= 1e-6)


def test_the_class_conditional_moments_of_a_population_are_estimated_without_bias():
    # The server's estimate of c_k = mean_i y~_ik w_i: the mean release of the
    # clients that drew k (they are a uniformly random subset of the population).
    rng = np.random.default_rng(3)
    n, p, k = 60_000, 3, 3
    y = rng.integers(0, k, n).astype(np.int8)
    x = np.clip(0.3 * (y[:, None] - 1.0) + 0.4 * rng.standard_normal((n, p)), -1, 1)
    payload = privatize_joint(
        x, y, client_ids=np.arange(n), seed=11, epsilon=2.0, n_classes=k
    )
    w = np.hstack([np.ones((n, 1)), x])
    for c in range(k):
        truth = (np.where(y == c, 1.0, -1.0)[:, None] * w).mean(axis=0)
        drawn = payload.releases[payload.classes == c]
        se = drawn.std(axis=0, ddof=1) / np.sqrt(drawn.shape[0])
        assert np.all(np.abs(drawn.mean(axis=0) - truth) <= Z * se)


def test_each_client_releases_once_at_its_epsilon_with_a_uniform_class():
    n, k = 30_000, 4
    x = np.zeros((n, 2))
    y = (np.arange(n) % k).astype(np.int8)
    ledger = PrivacyLedger(budget=3.0, client_ids=np.arange(n))
    payload = privatize_joint(
        x, y, client_ids=np.arange(n), seed=5, epsilon=3.0, n_classes=k, ledger=ledger
    )
    assert ledger.spent(0) == 3.0 and len(ledger.entries) == 1
    event = ledger.entries[0].event
    assert event.mechanism == "class_signed_features"
    assert event.as_dict()["n_classes"] == k
    counts = np.bincount(payload.classes, minlength=k)
    sd = np.sqrt(n * (1 / k) * (1 - 1 / k))
    assert np.all(np.abs(counts - n / k) <= Z * sd)
    # The draw does not depend on the label: the same share of every label drew it.
    same = payload.classes == y
    assert abs(same.mean() - 1 / k) <= Z * np.sqrt((1 / k) * (1 - 1 / k) / n)
    assert payload.n_classes == k and payload.releases.shape == (n, 3)


def test_a_client_s_release_depends_on_the_seed_and_its_id_only():
    x = np.full((6, 2), 0.25)
    y = np.array([0, 1, 2, 0, 1, 2], dtype=np.int8)
    ids = np.arange(10, 16)

    def run(seed, rows=slice(None)):
        return privatize_joint(
            x[rows], y[rows], client_ids=ids[rows], seed=seed, epsilon=4.0, n_classes=3
        )

    first, again, other = run(1), run(1), run(2)
    np.testing.assert_array_equal(first.releases, again.releases)
    np.testing.assert_array_equal(first.classes, again.classes)
    assert not np.array_equal(first.releases, other.releases)
    alone = run(1, slice(3, 4))
    np.testing.assert_array_equal(alone.releases, first.releases[3:4])
    np.testing.assert_array_equal(alone.classes, first.classes[3:4])


def test_two_classes_keep_the_binary_release_and_bad_inputs_are_refused():
    assert type(joint_mechanism(1.0, 3)) is SignedFeatureMechanism
    assert type(joint_mechanism(1.0, 3, n_classes=3)) is ClassSignedFeatureMechanism
    with pytest.raises(ValueError, match="n_classes must be >= 3"):
        ClassSignedFeatureMechanism(epsilon=1.0, n_features=2, n_classes=2)
    with pytest.raises(TypeError, match="n_classes must be an integer"):
        ClassSignedFeatureMechanism(epsilon=1.0, n_features=2, n_classes=3.0)
    with pytest.raises(ValueError, match="epsilon must be in"):
        ClassSignedFeatureMechanism(epsilon=0.0, n_features=2, n_classes=3)
    with pytest.raises(ValueError, match=r"labels must be in \{0, ..., 2\}, got .*3"):
        privatize_joint(
            np.zeros((2, 2)),
            [0, 3],
            client_ids=[0, 1],
            seed=0,
            epsilon=1.0,
            n_classes=3,
        )
    with pytest.raises(ValueError, match=r"labels must be in \{0, 1\}"):
        privatize_joint(
            np.zeros((2, 2)), [0, 2], client_ids=[0, 1], seed=0, epsilon=1.0
        )
    mech = ClassSignedFeatureMechanism(epsilon=1.0, n_features=2, n_classes=3)
    with pytest.raises(ValueError, match="features must be rescaled"):
        mech.release(np.full((1, 2), 2.0), [0], rng=0)
    with pytest.raises(ValueError, match=r"values must have shape \(n_clients, 3\)"):
        mech.randomise(np.zeros((1, 4)), rng=0)
    out = mech.randomise(np.array([[2.0, 0.1, -0.1]]), rng=0)
    assert out.shape == (1, 4) and out[0, 0] in (0.0, 1.0, 2.0)
    low, high = mech.output_range()
    assert np.all((out[:, 1:] >= low) & (out[:, 1:] <= high))


# -- the split release: the label by randomized response, x by the vector mechanism --


@pytest.mark.parametrize("mechanism", ["hybrid", "duchi", "piecewise"])
def test_the_split_release_informs_every_class_without_bias(mechanism):
    mech = ClassSplitMechanism(
        epsilon=3.0, n_features=3, n_classes=4, mechanism=mechanism
    )
    row = np.array([2.0, 0.5, -0.3, 0.9])  # label 2, then the features
    n = 200_000
    reported, z = mech.release(np.tile(row[1:], (n, 1)), np.full(n, 2), rng=9)
    u_hat = mech.blocks(reported, z).reshape(n, -1)
    w = np.concatenate([[1.0], row[1:]])
    truth = np.concatenate([-w, -w, w, -w])
    variance = mech.variance(row[None, :])[0]
    assert np.all(np.abs(u_hat.mean(axis=0) - truth) <= Z * np.sqrt(variance / n))
    centred = (u_hat - truth) ** 2
    spread = np.sqrt(centred.var(axis=0) / n)
    assert np.all(np.abs(centred.mean(axis=0) - variance) <= Z * spread)
    # The constant is not released: the intercept's rows carry the label's noise only.
    assert np.all(z[:, 0] == 1.0)


def test_the_split_release_spends_its_epsilon_once_in_two_halves():
    n, k = 20_000, 3
    x = np.zeros((n, 2))
    y = (np.arange(n) % k).astype(np.int8)
    ledger = PrivacyLedger(budget=4.0, client_ids=np.arange(n))
    payload = privatize_joint(
        x,
        y,
        client_ids=np.arange(n),
        seed=5,
        epsilon=4.0,
        n_classes=k,
        ledger=ledger,
        design="split",
    )
    assert ledger.spent(0) == 4.0 and len(ledger.entries) == 1
    event = ledger.entries[0].event
    assert event.mechanism == "class_split_features"
    mech = payload.release_mechanism()
    assert (
        event.as_dict()["label_share"]
        == mech.label_share
        == split_label_share(4.0, 2, k)
    )
    assert isinstance(mech, ClassSplitMechanism)
    assert mech.labels.epsilon + mech.inner.epsilon == 4.0
    # The reported label keeps the truth at randomized response's rate.
    kept = np.mean(payload.classes == y)
    q = mech.labels.keep_probability
    assert abs(kept - q) <= Z * np.sqrt(q * (1 - q) / n)
    assert payload.design == "split" and payload.releases.shape == (n, 3)


@pytest.mark.parametrize(("epsilon", "split_better"), [(1.0, False), (10.0, True)])
def test_the_class_moments_errors_follow_the_stated_variances(epsilon, split_better):
    # The squared error of the K class moments from each release, over repeated
    # releases of one population, against the sum of the stated variances over n:
    # the draw costs K times the data's own spread, the split the label's noise.
    rng = np.random.default_rng(12)
    n, p, k = 3000, 4, 4
    y = rng.integers(0, k, n).astype(np.int8)
    x = np.clip(0.3 * (y[:, None] - 1.5) + 0.4 * rng.standard_normal((n, p)), -1, 1)
    w = np.hstack([np.ones((n, 1)), x])
    truth = np.where(y[:, None] == np.arange(k), 1.0, -1.0)[:, :, None] * w[:, None]
    truth = truth.mean(axis=0)
    rows = np.column_stack([y, x])
    errors = {}
    for design in ("draw", "split"):
        mech = joint_mechanism(epsilon, p, "hybrid", k, design)
        stated = mech.variance(rows).sum() / n**2
        got = []
        for r in range(40):
            classes, z = mech.release(x, y, rng=100 + r)
            if design == "split":
                estimate = mech.blocks(classes, z).mean(axis=0)
            else:
                estimate = _blocks_estimate(mech, classes, z).mean(axis=0)
            got.append(((estimate.reshape(k, -1) - truth) ** 2).sum())
        got = np.array(got)
        # The draw's stated variance is that of K e_j (x) z, whose mean over the n
        # clients is the estimate here; 40 repeats: the mean within 4.5 s.e.
        assert abs(got.mean() - stated) <= Z * got.std(ddof=1) / np.sqrt(got.size)
        errors[design] = got.mean()
    assert (errors["split"] < errors["draw"]) == split_better


def test_the_split_s_label_share_minimises_the_stated_variance():
    # Evaluated at the box's root mean square, from public quantities only; the
    # variance sum does not depend on the label.
    row = np.r_[0.0, np.full(10, 1 / np.sqrt(3))][None, :]
    for epsilon in (1.0, 5.0, 10.0):
        chosen = split_label_share(epsilon, 10, 3)
        totals = {
            share: ClassSplitMechanism(
                epsilon=epsilon, n_features=10, n_classes=3, label_share=share
            )
            .variance(row)
            .sum()
            for share in (0.05, 0.25, 0.35, 0.5, 0.65, 0.95)
        }
        best = totals[min(totals, key=totals.get)]
        mech = ClassSplitMechanism(epsilon=epsilon, n_features=10, n_classes=3)
        assert mech.label_share == chosen
        assert mech.variance(row).sum() <= best
        other = row.copy()
        other[0, 0] = 2.0
        np.testing.assert_allclose(
            mech.variance(other).sum(), mech.variance(row).sum(), rtol=1e-12
        )
    # At epsilon 10 Hybrid reports more coordinates when x gets more of the budget.
    assert split_label_share(10.0, 10, 3) < 0.5


@pytest.mark.parametrize(("k", "p"), [(3, 10), (4, 12), (10, 12)])
def test_auto_takes_the_release_of_smaller_stated_variance(k, p):
    from ldpfda.schema.releases import multiclass_design

    row = np.r_[0.0, np.full(p, 1 / np.sqrt(3))][None, :]
    for epsilon in (0.5, 1.0, 2.0, 3.0, 5.0, 10.0):
        draw, split = (
            joint_mechanism(epsilon, p, "hybrid", k, d).variance(row).sum()
            for d in ("draw", "split")
        )
        chosen = multiclass_design(epsilon, p, k)
        assert chosen == ("split" if split < draw else "draw")
        mech = joint_mechanism(epsilon, p, "hybrid", k, "auto")
        assert type(mech) is type(joint_mechanism(epsilon, p, "hybrid", k, chosen))
    # Small epsilon: randomized response on K labels at a share of it says little.
    assert multiclass_design(2.0, p, k) == "draw"
    assert multiclass_design(5.0, p, k) == multiclass_design(10.0, p, k) == "split"
    # Two classes keep the binary release whatever the design.
    assert isinstance(
        joint_mechanism(5.0, p, "hybrid", 2, "auto"), SignedFeatureMechanism
    )
