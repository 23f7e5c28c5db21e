"""MRMA server steps: error estimation, reversal, selection, averaging, weak models."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldpfda.client.protocol import answer_evaluation
from ldpfda.server.mrma import (
    ErrorEstimates,
    LinearModels,
    assign_groups,
    average_models,
    estimate_errors,
    fit_linear,
    fit_weak_models,
    majority_vote,
    mrma_weights,
    reverse_models,
)

# --- estimate_errors ------------------------------------------------------------------


def _keep(epsilon: float) -> float:
    return math.exp(epsilon) / (1 + math.exp(epsilon))


@pytest.mark.parametrize(
    ("true_error", "epsilon"), [(0.3, 1.0), (0.8, 0.5), (0.5, 2.0)]
)
def test_estimate_errors_is_unbiased_with_the_exact_variance(true_error, epsilon):
    # Every evaluator of model j answers through the client protocol with a constant
    # model that is wrong on exactly a fraction `true_error` of its subgroup.
    n_models, group, n_seeds = 20, 200, 30
    n = n_models * group
    labels = (np.arange(n) % 10 >= round(10 * true_error)).astype(np.int8)
    groups = np.arange(n) // group  # contiguous blocks: each holds whole label periods
    assert all(
        np.mean(labels[groups == j] == 0) == pytest.approx(true_error)
        for j in range(n_models)
    )
    raw, se = [], []
    for seed in range(n_seeds):
        # The model always says 1: wrong exactly on the label-0 clients.
        bits = answer_evaluation(
            np.zeros(4),
            1.0,
            np.zeros((n, 4)),
            labels,
            client_ids=np.arange(n),
            seed=seed,
            epsilon=epsilon,
        )
        est = estimate_errors(bits, groups, n_models=n_models, epsilon=epsilon)
        raw.append(est.raw)
        se.append(est.standard_error)
    raw = np.concatenate(raw)
    # Fixed true bits: each report is Bernoulli(q) or Bernoulli(1-q), so
    # Var(mean bit) = q (1 - q) / m and Var(raw) = q (1 - q) / (m (2q - 1)^2).
    q = _keep(epsilon)
    var = q * (1 - q) / (group * (2 * q - 1) ** 2)
    assert abs(raw.mean() - true_error) < 3 * math.sqrt(var / raw.size)
    # The spread matches too (raw is close to normal: SE of s^2 is var sqrt(2/(N-1))).
    assert abs(raw.var(ddof=1) - var) < 5 * var * math.sqrt(2 / (raw.size - 1))
    # The reported standard error is the plug-in sqrt(o(1-o)/m) / (2q-1) of an evaluator
    # population (true bits random), so E[se^2] = (p(1-p) - Var(o)) / (m (2q-1)^2) with
    # p = E[o]; its spread is at most (|1-2p| sd(o) + sqrt(2) Var(o)) / (m (2q-1)^2).
    se2 = np.concatenate(se) ** 2
    p_bar = q * true_error + (1 - q) * (1 - true_error)
    v_o, c = q * (1 - q) / group, group * (2 * q - 1) ** 2
    expected = (p_bar * (1 - p_bar) - v_o) / c
    spread = (abs(1 - 2 * p_bar) * math.sqrt(v_o) + math.sqrt(2) * v_o) / c
    assert abs(se2.mean() - expected) < 5 * spread / math.sqrt(se2.size)


def test_estimate_errors_counts_means_and_clipping():
    epsilon = 0.5
    q = _keep(epsilon)
    bits = np.array([1, 1, 1, 0, 0, 0, 1, 0])
    groups = np.array([0, 0, 0, 1, 1, 1, 2, 2])
    est = estimate_errors(bits, groups, n_models=4, epsilon=epsilon)
    assert isinstance(est, ErrorEstimates) and est.epsilon == epsilon
    np.testing.assert_array_equal(est.counts, [3, 3, 2, 0])
    np.testing.assert_allclose(est.mean_bits[:3], [1.0, 0.0, 0.5])
    assert np.isnan(est.mean_bits[3])
    expected_raw = (np.array([1.0, 0.0, 0.5]) + q - 1) / (2 * q - 1)
    np.testing.assert_allclose(est.raw[:3], expected_raw)
    assert est.raw[0] > 1 and est.raw[1] < 0  # raw is unbiased, so it leaves [0, 1]
    np.testing.assert_allclose(est.clipped, [1.0, 0.0, 0.5, 0.5])
    assert est.raw[3] == 0.5  # a model nobody evaluated is uninformative
    assert np.all((est.clipped >= 0) & (est.clipped <= 1))


def test_estimate_errors_without_noise_is_the_mean_bit():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2, 1000)
    groups = rng.integers(0, 7, 1000)
    est = estimate_errors(bits, groups, n_models=7, epsilon=math.inf)
    expected = np.bincount(groups, weights=bits) / np.bincount(groups)
    np.testing.assert_allclose(est.raw, expected)
    np.testing.assert_allclose(est.clipped, expected)


def test_estimate_errors_refuses_bad_inputs():
    bits, groups = np.array([0, 1, 1]), np.array([0, 1, 1])
    with pytest.raises(ValueError, match="bits"):
        estimate_errors(np.array([0, 2, 1]), groups, n_models=2, epsilon=1.0)
    with pytest.raises(ValueError, match="groups"):
        estimate_errors(bits, np.array([0, 2, 1]), n_models=2, epsilon=1.0)
    with pytest.raises(ValueError, match="groups"):
        estimate_errors(bits, np.array([0, -1, 1]), n_models=2, epsilon=1.0)
    with pytest.raises(ValueError, match="one length"):
        estimate_errors(bits, groups[:2], n_models=2, epsilon=1.0)
    for epsilon in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="epsilon"):
            estimate_errors(bits, groups, n_models=2, epsilon=epsilon)
    with pytest.raises(ValueError, match="n_models"):
        estimate_errors(bits, groups, n_models=0, epsilon=1.0)
    with pytest.raises(TypeError):
        estimate_errors(bits, groups, 2, 1.0)  # keyword-only


# --- reversal -------------------------------------------------------------------------


def _models(m: int = 5, p: int = 3, seed: int = 0) -> LinearModels:
    rng = np.random.default_rng(seed)
    return LinearModels(rng.normal(size=(m, p)), rng.normal(size=m))


def test_reverse_models_negates_exactly_those_worse_than_chance():
    models = _models()
    errors = np.array([0.2, 0.5, 0.5000001, 0.9, 0.0])
    reversed_, flipped = reverse_models(models, errors)
    np.testing.assert_array_equal(flipped, [False, False, True, True, False])
    np.testing.assert_array_equal(reversed_.coef[flipped], -models.coef[flipped])
    np.testing.assert_array_equal(
        reversed_.intercept[flipped], -models.intercept[flipped]
    )
    np.testing.assert_array_equal(reversed_.coef[~flipped], models.coef[~flipped])
    np.testing.assert_array_equal(
        reversed_.intercept[~flipped], models.intercept[~flipped]
    )
    # A reversed model predicts the other class wherever its score is non-zero.
    x = np.random.default_rng(1).uniform(-1, 1, (200, 3))
    before, after = models.predict(x), reversed_.predict(x)
    np.testing.assert_array_equal(after[:, flipped], 1 - before[:, flipped])
    # ...so its error on any data is one minus the original error.
    y = np.random.default_rng(2).integers(0, 2, 200)
    np.testing.assert_allclose(
        reversed_.errors(x, y)[flipped], 1 - models.errors(x, y)[flipped]
    )


# --- selection and weights ------------------------------------------------------------


def test_mrma_weights_with_reversal_keep_models_far_from_chance():
    errors = np.array([0.1, 0.35, 0.5, 0.65, 0.95])
    weights, kept, rule = mrma_weights(errors, cutoff=0.2)
    # |1/2 - e| = 0.4, 0.15, 0, 0.15, 0.45 > 1/2 - c = 0.3
    assert rule == "cutoff"
    np.testing.assert_array_equal(kept, [True, False, False, False, True])
    np.testing.assert_allclose(weights, np.array([0.4, 0, 0, 0, 0.45]) / 0.85)


def test_mrma_weights_without_reversal_only_trust_better_than_chance():
    errors = np.array([0.1, 0.35, 0.5, 0.65, 0.95])
    weights, kept, rule = mrma_weights(errors, cutoff=0.2, reversal=False)
    assert rule == "cutoff"
    np.testing.assert_array_equal(kept, [True, False, False, False, False])
    np.testing.assert_allclose(weights, [1, 0, 0, 0, 0])


def test_mrma_weights_fall_back_without_crashing():
    errors = np.array([0.4, 0.45, 0.5, 0.6])
    weights, kept, rule = mrma_weights(errors, cutoff=0.2)
    assert rule == "no-selection"
    np.testing.assert_array_equal(kept, [True, True, False, True])
    np.testing.assert_allclose(weights, np.array([0.1, 0.05, 0, 0.1]) / 0.25)
    weights, kept, rule = mrma_weights(np.full(6, 0.5), cutoff=0.2)
    assert rule == "equal" and kept.all()
    np.testing.assert_allclose(weights, 1 / 6)
    weights, kept, rule = mrma_weights(np.array([0.5, 0.7, 0.9]), reversal=False)
    assert rule == "equal"
    np.testing.assert_allclose(weights, 1 / 3)


def test_mrma_weights_are_always_a_distribution():
    rng = np.random.default_rng(3)
    for _ in range(300):
        m = int(rng.integers(1, 30))
        errors = rng.choice(
            [
                rng.uniform(0, 1, m),
                rng.uniform(0.4, 0.6, m),
                np.full(m, 0.5),
                rng.integers(0, 2, m).astype(float),
            ]
        )
        cutoff = float(rng.uniform(0, 0.5))
        for reversal in (True, False):
            weights, kept, rule = mrma_weights(errors, cutoff=cutoff, reversal=reversal)
            assert weights.shape == (m,) and kept.shape == (m,)
            assert np.all(weights >= 0) and weights.sum() == pytest.approx(1.0)
            assert np.all(weights[~kept] == 0)
            assert rule in ("cutoff", "no-selection", "equal")
            if rule != "equal":
                assert np.all(weights[kept] > 0)


@pytest.mark.parametrize("cutoff", [-0.1, 0.51, math.nan])
def test_mrma_weights_refuse_a_bad_cutoff(cutoff):
    with pytest.raises(ValueError, match="cutoff"):
        mrma_weights(np.array([0.1, 0.9]), cutoff=cutoff)


# --- averaging ------------------------------------------------------------------------


def test_average_models_normalized_and_raw():
    models = LinearModels(
        np.array([[2.0, 0.0], [0.0, 1.0], [3.0, 4.0]]), np.array([0.0, 0.0, 0.0])
    )
    weights = np.array([0.5, 0.5, 0.0])
    normalized = average_models(models, weights)
    np.testing.assert_allclose(normalized.coef, [[0.5, 0.5]])
    np.testing.assert_allclose(normalized.intercept, [0.0])
    raw = average_models(models, weights, normalize=False)
    np.testing.assert_allclose(raw.coef, [[1.0, 0.5]])
    assert len(normalized) == 1 and len(raw) == 1


def test_normalized_average_ignores_each_models_scale():
    models = _models(m=6, p=4, seed=5)
    scales = np.array([1.0, 10.0, 0.1, 3.0, 1e4, 0.5])
    rescaled = LinearModels(models.coef * scales[:, None], models.intercept * scales)
    weights = np.random.default_rng(6).uniform(size=6)
    a, b = average_models(models, weights), average_models(rescaled, weights)
    np.testing.assert_allclose(b.coef, a.coef, rtol=1e-12)
    np.testing.assert_allclose(b.intercept, a.intercept, rtol=1e-12)
    norms = np.sqrt((models.coef**2).sum(axis=1) + models.intercept**2)
    expected = np.average(models.coef / norms[:, None], axis=0, weights=weights)
    np.testing.assert_allclose(a.coef[0], expected)


def test_average_of_a_zero_model_does_not_divide_by_zero():
    models = LinearModels(np.array([[0.0, 0.0], [3.0, 4.0]]), np.array([0.0, 0.0]))
    avg = average_models(models, np.array([0.5, 0.5]))
    np.testing.assert_allclose(avg.coef, [[0.3, 0.4]])


# --- weak models ----------------------------------------------------------------------


def _separable(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, 3))
    y = (x @ np.array([1.0, -1.0, 0.5]) + 0.3 * rng.normal(size=n) > 0).astype(np.int8)
    return x, y


def test_fit_weak_models_shapes_and_reproducibility():
    x, y = _separable(300)
    a = fit_weak_models(x, y, n_models=6, subsample_size=60, rng=4)
    b = fit_weak_models(x, y, n_models=6, subsample_size=60, rng=4)
    c = fit_weak_models(x, y, n_models=6, subsample_size=60, rng=5)
    assert a.coef.shape == (6, 3) and a.intercept.shape == (6,)
    np.testing.assert_array_equal(a.coef, b.coef)
    assert not np.allclose(a.coef, c.coef)
    assert np.all(a.errors(x, y) < 0.5)  # every weak model learned the direction
    svm = fit_weak_models(x, y, n_models=3, subsample_size=60, learner="svm", rng=4)
    assert svm.coef.shape == (3, 3) and np.all(svm.errors(x, y) < 0.5)


def test_fit_weak_models_refuses_a_subsample_larger_than_the_data():
    x, y = _separable(40)
    with pytest.raises(
        ValueError, match=r"subsample_size must be <= .* \(40\), got 41"
    ):
        fit_weak_models(x, y, n_models=2, subsample_size=41, rng=0)
    fit_weak_models(
        x, y, n_models=2, subsample_size=40, rng=0
    )  # the whole sample is fine
    with pytest.raises(ValueError, match="subsample_size"):
        fit_weak_models(x, y, n_models=2, subsample_size=1, rng=0)
    with pytest.raises(ValueError, match="n_models"):
        fit_weak_models(x, y, n_models=0, subsample_size=10, rng=0)
    with pytest.raises(ValueError, match="learner"):
        fit_weak_models(x, y, n_models=2, subsample_size=10, learner="tree", rng=0)
    with pytest.raises(ValueError, match="features"):
        fit_weak_models(
            np.full((40, 3), np.nan), y, n_models=2, subsample_size=10, rng=0
        )


@pytest.mark.parametrize("label", [0, 1])
def test_single_class_subsamples_give_constant_models(label):
    x = np.random.default_rng(0).uniform(-1, 1, (50, 3))
    y = np.full(50, label, dtype=np.int8)
    models = fit_weak_models(x, y, n_models=4, subsample_size=10, rng=0)
    np.testing.assert_array_equal(models.coef, 0.0)
    np.testing.assert_array_equal(models.intercept, 1.0 if label else -1.0)
    np.testing.assert_array_equal(models.predict(x), label)
    single = fit_linear(x[:5], y[:5])
    np.testing.assert_array_equal(single.predict(x), label)


def test_fit_linear_refuses_an_unknown_learner():
    x, y = _separable(50)
    with pytest.raises(ValueError, match="learner"):
        fit_linear(x, y, learner="tree")


# --- groups ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "m"), [(100, 10), (103, 10), (10, 10), (2500, 50), (7, 3)]
)
def test_assign_groups_is_a_balanced_partition(n, m):
    groups = assign_groups(n, m, rng=0)
    assert groups.shape == (n,)
    sizes = np.bincount(groups, minlength=m)
    assert sizes.size == m and sizes.sum() == n  # every evaluator in exactly one group
    assert sizes.min() >= n // m and sizes.max() <= -(-n // m)
    np.testing.assert_array_equal(groups, assign_groups(n, m, rng=0))


def test_assign_groups_is_random_and_validated():
    assert not np.array_equal(
        assign_groups(200, 10, rng=0), assign_groups(200, 10, rng=1)
    )
    with pytest.raises(ValueError, match="at least one client per model"):
        assign_groups(5, 6, rng=0)
    with pytest.raises(ValueError, match="n_models"):
        assign_groups(5, 0, rng=0)
    with pytest.raises(ValueError, match="n_evaluators"):
        assign_groups(0, 1, rng=0)


# --- LinearModels ---------------------------------------------------------------------


def test_linear_models_predict_and_errors():
    models = LinearModels(np.array([[1.0, 0.0], [0.0, -1.0]]), np.array([0.0, 0.5]))
    x = np.array([[0.5, 0.0], [-0.5, 1.0], [0.2, 0.2], [-1.0, -1.0]])
    np.testing.assert_allclose(
        models.decision_function(x), [[0.5, 0.5], [-0.5, -0.5], [0.2, 0.3], [-1.0, 1.5]]
    )
    np.testing.assert_array_equal(models.predict(x), [[1, 1], [0, 0], [1, 1], [0, 1]])
    assert models.predict(x).dtype == np.int8
    y = np.array([1, 0, 0, 1])
    np.testing.assert_allclose(models.errors(x, y), [0.5, 0.25])
    np.testing.assert_array_equal(majority_vote(models, x), [1, 0, 1, 1])  # ties -> 1
    one = LinearModels(models.coef[[1]], models.intercept[[1]])
    assert len(one) == 1 and len(models) == 2
    np.testing.assert_array_equal(one.predict(x)[:, 0], models.predict(x)[:, 1])
    single = LinearModels(np.array([1.0, 2.0]), 0.5)  # one model, promoted to M = 1
    assert single.coef.shape == (1, 2) and single.intercept.shape == (1,)
    with pytest.raises(ValueError, match="intercept"):
        LinearModels(np.zeros((3, 2)), np.zeros(2))
