"""Multi-server MRMA in-process: one query per client, estimate combination, errors."""

from __future__ import annotations

import numpy as np
import pytest

from ldpfda.config import Settings
from ldpfda.engine.multiserver import run_multiserver_repeat
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
