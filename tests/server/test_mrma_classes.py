"""Reference MRMA for K > 2 classes: K-ary labels, K-row weak models, the feedback
bit's accuracy estimate, weights above chance, the baselines, and what each client
spends."""

from __future__ import annotations

import numpy as np
import pytest

from ldpfda.client.protocol import answer_evaluation, privatize
from ldpfda.config import Settings
from ldpfda.engine import run_protocol
from ldpfda.engine.inprocess import ArrayClients
from ldpfda.fda.features import VectorFeaturizer
from ldpfda.fda.scaling import CoefficientScaler
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.randomized_response import rr_keep_probability
from ldpfda.schema.payloads import LinearModels
from ldpfda.server.mrma import (
    average_models,
    ensemble_errors,
    estimate_errors,
    fit_linear,
    fit_weak_models,
    majority_vote,
    mrma_weights,
    reverse_models,
)

K = 3


def _toy(n: int, seed: int, p: int = 4):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n).astype(np.int8)
    means = 0.6 * np.eye(K, p) - 0.2
    return np.clip(means[y] + 0.3 * rng.standard_normal((n, p)), -1, 1), y


def test_the_k_class_feedback_estimates_the_error_without_bias():
    # 2000 evaluators of one fixed 3-class model, 200 independent feedback rounds at
    # epsilon 1: the mean estimate is within 4 standard errors of the true error,
    # whose variance per round is sum_i p_i (1 - p_i) / (n (2q - 1))^2 exactly.
    x, y = _toy(2000, 0)
    model = LinearModels(np.eye(K, 4), np.zeros(K))
    wrong = np.argmax(model.decision_function(x), axis=1) != y
    truth = wrong.mean()
    q = rr_keep_probability(epsilon=1.0)
    ids = np.arange(y.size)
    estimates = []
    for seed in range(200):
        bits = answer_evaluation(
            model.coef,
            model.intercept,
            x,
            y,
            client_ids=ids,
            seed=seed,
            epsilon=1.0,
            n_classes=K,
        )
        groups = np.zeros(y.size, dtype=np.int64)
        estimates.append(estimate_errors(bits, groups, n_models=1, epsilon=1.0).raw[0])
    p = np.where(wrong, q, 1 - q)
    sd = np.sqrt(np.sum(p * (1 - p))) / (y.size * (2 * q - 1))
    assert 0.1 < truth < 0.6
    assert abs(np.mean(estimates) - truth) < 4 * sd / np.sqrt(len(estimates))
    assert abs(np.std(estimates, ddof=1) / sd - 1) < 0.25  # 200 draws: se ~ 0.05


def test_each_client_spends_exactly_epsilon_on_labels_features_or_feedback():
    x, y = _toy(50, 1)
    ids = np.arange(50)
    ledger = PrivacyLedger(budget=2.0, client_ids=ids)
    payload = privatize(
        x, y, client_ids=ids, seed=0, epsilon=2.0, ledger=ledger, n_classes=K
    )
    assert payload.n_classes == K and set(np.unique(payload.labels)) <= {0, 1, 2}
    assert payload.label_epsilon == pytest.approx(2.0 / 5)  # the share 1/(p+1)
    assert payload.feature_epsilon + payload.label_epsilon == pytest.approx(2.0)
    releases = ledger.summary()["releases"]
    assert releases["randomized_response"]["epsilon"] == pytest.approx(0.4)
    np.testing.assert_allclose(ledger.spent_all(), 2.0)
    feedback = PrivacyLedger(budget=2.0, client_ids=ids)
    answer_evaluation(
        np.eye(K, 4), np.zeros(K), x, y, client_ids=ids, seed=0, epsilon=2.0,
        ledger=feedback, n_classes=K,
    )  # fmt: skip
    np.testing.assert_allclose(feedback.spent_all(), 2.0)
    with pytest.raises(ValueError, match=r"labels must be in \{0, ..., 2\}"):
        privatize(x, y + 1, client_ids=ids, seed=0, epsilon=2.0, n_classes=K)


def test_k_row_weak_models_and_absent_classes():
    x, y = _toy(400, 2)
    model = fit_linear(x, y, n_classes=K)
    assert model.coef.shape == (K, 4)
    assert ensemble_errors(model, x, y, K)[0] < 0.2
    # A sample without class 2: its row is never the largest on the feature box.
    two = fit_linear(x[y < 2], y[y < 2], n_classes=K)
    box = np.array(np.meshgrid(*[[-1.0, 1.0]] * 4)).reshape(4, -1).T
    assert not np.any(np.argmax(two.decision_function(box), axis=1) == 2)
    one = fit_linear(x[y == 1], y[y == 1], n_classes=K)
    assert np.all(np.argmax(one.decision_function(box), axis=1) == 1)
    weak = fit_weak_models(x, y, n_models=5, subsample_size=20, rng=0, n_classes=K)
    assert weak.coef.shape == (5 * K, 4)
    again = fit_weak_models(x, y, n_models=5, subsample_size=20, rng=0, n_classes=K)
    np.testing.assert_array_equal(weak.coef, again.coef)


def test_weights_above_chance_and_no_reversal_for_k_classes():
    chance = 1 - 1 / K
    errors = np.array([0.1, 0.5, chance, 0.9])
    weights, kept, rule = mrma_weights(errors, cutoff=0.2, reversal=False, n_classes=K)
    # Kept: error < 2 c (1 - 1/K) = 0.267; weight = accuracy above 1/K.
    assert rule == "cutoff" and kept.tolist() == [True, False, False, False]
    weights, kept, rule = mrma_weights(errors, cutoff=0.05, reversal=False, n_classes=K)
    assert rule == "no-selection"
    np.testing.assert_allclose(
        weights, np.array([chance - 0.1, chance - 0.5, 0, 0]) / (2 * chance - 0.6)
    )
    # The negation ablation: below chance counts by its distance from chance.
    negated, flip = reverse_models(
        LinearModels(np.ones((4 * K, 2)), np.ones(4 * K)), errors, n_classes=K
    )
    assert flip.tolist() == [False, False, False, True]
    assert np.all(negated.coef[3 * K :] == -1) and np.all(negated.coef[: 3 * K] == 1)


def test_k_class_averaging_ignores_shifts_and_scales_and_voting_counts_labels():
    rng = np.random.default_rng(3)
    a = LinearModels(rng.standard_normal((K, 4)), rng.standard_normal(K))
    # The same model shifted by a common row and scaled: one K-row average.
    b = LinearModels(3 * a.coef + 1.0, 3 * a.intercept - 2.0)
    both = LinearModels(
        np.vstack([a.coef, b.coef]), np.concatenate([a.intercept, b.intercept])
    )
    mean = average_models(both, [0.5, 0.5], n_classes=K)
    alone = average_models(a, [1.0], n_classes=K)
    np.testing.assert_allclose(mean.coef, alone.coef, atol=1e-12)
    assert len(mean) == K
    x, _ = _toy(100, 4)
    three = LinearModels(np.vstack([a.coef, a.coef, b.coef * 0]), np.zeros(3 * K))
    vote = majority_vote(three, x, K)
    np.testing.assert_array_equal(vote, np.argmax(x @ a.coef.T, axis=1))


def _run(settings, x, y, n_train):
    ids = np.arange(y.size, dtype=np.int64)
    featurizer = VectorFeaturizer(CoefficientScaler(-1.0, 1.0), x.shape[1])
    train, ev = slice(0, n_train), slice(n_train, None)
    test = _toy(5000, 99)
    return run_protocol(
        ArrayClients(ids[train], x[train], y[train], featurizer),
        ArrayClients(ids[ev], x[ev], y[ev], featurizer),
        settings,
        seed=5,
        server_rng=np.random.default_rng(6),
        test=test,
        clean_train=(x[train], y[train]),
        n_classes=K,
    )


def test_a_three_class_mrma_run_beats_chance_and_spends_epsilon_per_client():
    x, y = _toy(3500, 7)
    settings = Settings.reference(
        epsilon=8.0, n_train=3000, n_eval=500, n_test=1, repeats=1
    )
    result = _run(settings, x, y, 3000)
    assert result.n_classes == K and len(result.final) == K
    assert result.weak.coef.shape == (50 * K, 4) and not result.reversed.any()
    privacy = result.privacy
    assert privacy["max_spent"] == privacy["min_spent"] == 8.0
    assert privacy["releases"]["feedback_bit"]["clients"] == 500
    assert privacy["releases"]["randomized_response"]["clients"] == 3000
    errors = result.test_errors
    # Chance (the majority class) errs on about 2/3 of the test clients.
    assert errors["mrma"] < 0.5 and errors["voting"] < 0.6
    assert errors["non_private"] < errors["mrma"]
    assert set(errors) >= {"mrma", "ma", "weak", "voting", "averaging", "naive"}
    assert len(result.report()["models"]) == 50
