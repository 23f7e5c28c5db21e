"""Multi-server MRMA in-process: one query per client, estimate combination, errors."""

from __future__ import annotations

import numpy as np
import pytest

from ldpfda.config import Settings
from ldpfda.engine.multiserver import run_multiserver_repeat
from ldpfda.schema.payloads import LinearModels
from ldpfda.server.multiserver import ServerSpec, combine_estimates

SETTINGS = Settings.reference(num_weak_models=5, subsample_size=30, n_test=2000, seed=1)
SERVERS = (ServerSpec(200, 300, 5.0), ServerSpec(100, 200, 2.0, 0.2, 0.5))


def test_every_client_spends_at_most_its_budget_and_all_servers_are_scored():
    result = run_multiserver_repeat(SERVERS, SETTINGS, 0)
    assert result.privacy["max_spent_over_budget"] == pytest.approx(1.0)
    assert result.estimates.shape == (2, 10)
    assert set(result.test_errors) == {"server0", "server1"}
    for row in result.test_errors.values():
        assert set(row) == {"multi_server", "global", "single_server", "voting_all"}
        assert all(0.0 <= v <= 1.0 for v in row.values())


def test_same_seed_reproduces():
    a = run_multiserver_repeat(SERVERS, SETTINGS, 0)
    b = run_multiserver_repeat(SERVERS, SETTINGS, 0)
    np.testing.assert_array_equal(a.estimates, b.estimates)
    assert a.test_errors == b.test_errors


def test_combination_leans_towards_the_own_population():
    estimates = np.array([[0.2, 0.8], [0.6, 0.4]])
    variances = np.full((2, 2), 0.01)
    pooled = combine_estimates(estimates, variances, own=None, heterogeneity=0.0)
    np.testing.assert_allclose(pooled, [0.4, 0.6])
    own = combine_estimates(estimates, variances, own=0, heterogeneity=0.2)
    # weights 1/0.01 = 100 (own) and 1/0.05 = 20 (other)
    np.testing.assert_allclose(
        own, [(100 * 0.2 + 20 * 0.6) / 120, (100 * 0.8 + 20 * 0.4) / 120]
    )
    infinite = combine_estimates(
        estimates, np.full((2, 2), np.inf), own=0, heterogeneity=0.0
    )
    np.testing.assert_allclose(infinite, [0.5, 0.5])


def test_too_few_evaluation_clients_for_all_models_is_refused():
    with pytest.raises(ValueError, match="n_eval"):
        run_multiserver_repeat(
            (ServerSpec(200, 8, 5.0), ServerSpec(200, 300, 5.0)), SETTINGS, 0
        )
    with pytest.raises(ValueError, match="epsilon"):
        ServerSpec(epsilon=-1.0)


@pytest.mark.parametrize(
    "settings",
    [
        Settings(num_weak_models=5, subsample_size=30),
        Settings(num_weak_models=5, subsample_size=30, method="mrma"),
        Settings.reference(num_weak_models=5, subsample_size=30, method="moment"),
    ],
    ids=["default", "joint-mrma", "reference-moment"],
)
def test_only_the_reference_mrma_is_accepted(settings):
    with pytest.raises(ValueError, match=r"Settings\.reference"):
        run_multiserver_repeat(SERVERS, settings, 0)


def test_three_class_servers_cross_evaluate_k_row_models():
    # Two servers of 3-class clients (the toy of the K-class MRMA tests): each trains
    # M = 3 three-row weak models, every evaluator of both answers one feedback bit on
    # one of all six, and each server's final model has three rows. The final models
    # beat chance (2/3) on 3000 test points by more than 6 standard errors (< 0.01).
    from ldpfda.engine.inprocess import ArrayClients, InProcessClients
    from ldpfda.fda.features import VectorFeaturizer
    from ldpfda.fda.scaling import CoefficientScaler
    from ldpfda.privacy.ledger import PrivacyLedger
    from ldpfda.server.multiserver import (
        evaluate_phase,
        final_models,
        train_phase,
        worst_case_variance,
    )
    from ldpfda.server.session import Session
    from tests.server.test_mrma_classes import K, _toy

    base = Settings.reference(num_weak_models=3, subsample_size=50, n_test=1, seed=3)
    featurizer = VectorFeaturizer(CoefficientScaler(-1.0, 1.0), 4)
    configs = [ServerSpec(150, 150, 5.0).settings(base, s) for s in (0, 1)]
    sessions, weak = [], []
    for s, cfg in enumerate(configs):
        x, y = _toy(300, 20 + s)
        ids = np.arange(300, dtype=np.int64)
        parts = [ArrayClients(ids[r], x[r], y[r], featurizer) for r in np.split(ids, 2)]
        ledger = PrivacyLedger(budget=5.0, client_ids=ids)
        clients = InProcessClients(parts, cfg, seed=7 + s, ledger=ledger)
        sessions.append(Session(clients, PrivacyLedger(budget=5.0, client_ids=ids)))
        weak.append(train_phase(sessions[-1], cfg, ids[:150], 4, 0, n_classes=K)[1])
    every = LinearModels(
        np.concatenate([w.coef for w in weak]),
        np.concatenate([w.intercept for w in weak]),
    )
    assert every.coef.shape == (2 * 3 * K, 4)
    rows = []
    for session, cfg in zip(sessions, configs, strict=True):
        eval_ids = np.arange(150, 300, dtype=np.int64)
        _, est = evaluate_phase(session, cfg, eval_ids, every, 4, 0, n_classes=K)
        rows.append((est.raw, worst_case_variance(est.counts, cfg.epsilon)))
    estimates, variances = (np.array(r) for r in zip(*rows, strict=True))
    assert estimates.shape == (2, 6)
    models = final_models(
        every, estimates, variances, settings=base, heterogeneity=0.05, n_classes=K
    )
    x_test, y_test = _toy(3000, 99)
    for name in ("global", "server0", "server1"):
        assert models[name].coef.shape == (K, 4)
        predicted = models[name].decision_function(x_test).argmax(axis=1)
        assert (predicted != y_test).mean() < 0.6
    for session in sessions:
        assert session.ledger.spent_all().max() == pytest.approx(5.0)


def test_a_three_class_wearable_session_runs_in_process():
    # Every server draws its own wearable subjects (3 conditions) and trains 3-row
    # weak models; every client releases once, and each server's models have K rows.
    base = Settings.reference(
        dataset="wearable",
        n_classes=3,
        num_weak_models=5,
        subsample_size=50,
        n_test=300,
        seed=1,
        calibration_size=200,
    )
    servers = (ServerSpec(200, 200, 5.0), ServerSpec(150, 150, 2.0))
    result = run_multiserver_repeat(servers, base, 0)
    assert result.privacy["max_spent_over_budget"] == pytest.approx(1.0)
    assert result.estimates.shape == (2, 10)
    assert {name: m.coef.shape for name, m in result.models.items()} == {
        "global": (3, 10),
        "server0": (3, 10),
        "server1": (3, 10),
    }
    for row in result.test_errors.values():
        assert set(row) == {"multi_server", "global", "single_server", "voting_all"}
        assert all(0.0 <= v <= 1.0 for v in row.values())
    again = run_multiserver_repeat(servers, base, 0)
    assert again.test_errors == result.test_errors
