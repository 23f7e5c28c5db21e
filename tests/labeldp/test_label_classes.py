"""The label-only modes with K = 3 classes in process: K-ary randomized response with
the uniform or a cluster's prior (or relayed between peers), the forward-corrected fit
through each example's K x K channel, a K-row model, and what each client spends."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from ldpfda.config import Settings
from ldpfda.engine import run_protocol
from ldpfda.engine.inprocess import ArrayClients
from ldpfda.fda.features import VectorFeaturizer
from ldpfda.fda.scaling import CoefficientScaler
from ldpfda.labeldp import resampling_epsilon
from tests.server.test_mrma_classes import K, _toy

# 300 clients with 12 public features: few examples per learner parameter, so the
# cluster rule picks a non-uniform prior (floor 0.5) for the clients besides the pilots.
N, P = 300, 12


@cache  # one run per mode for the whole module
def _label_run(mechanism: str):
    x, y = _toy(N, 7, p=P)
    test = _toy(5000, 99, p=P)
    featurizer = VectorFeaturizer(CoefficientScaler(-1.0, 1.0), P)
    ids, half = np.arange(N, dtype=np.int64), N // 2
    settings = Settings(
        mechanism=mechanism,
        epsilon=1.0,
        n_train=half,
        n_eval=N - half,
        n_test=1,
        repeats=1,
        n_clusters=6,
    )
    result = run_protocol(
        ArrayClients(ids[:half], x[:half], y[:half], featurizer),
        ArrayClients(ids[half:], x[half:], y[half:], featurizer),
        settings,
        seed=5,
        server_rng=np.random.default_rng(6),
        test=test,
        n_classes=K,
    )
    return result, test


@pytest.mark.parametrize("mechanism", ["label-uniform", "label-cluster", "label-p2p"])
def test_a_three_class_label_run_beats_chance_and_spends_epsilon_once(mechanism):
    result, (x_test, y_test) = _label_run(mechanism)
    assert result.method == "label" and result.n_classes == K
    assert result.final.coef.shape == (K, P) and result.final.intercept.shape == (K,)
    assert result.final.decision_function(x_test).shape == (x_test.shape[0], K)
    payload = result.payload
    assert len(payload) == N and payload.priors.shape == (N, K)
    assert set(np.unique(payload.labels)) <= set(range(K))
    privacy = result.privacy
    assert privacy["max_spent"] == pytest.approx(1.0, rel=1e-12)
    assert privacy["min_spent"] == pytest.approx(1.0, rel=1e-12)
    assert sum(r["clients"] for r in privacy["releases"].values()) == N
    # Every channel T_i = (1 - lam_i) I + lam_i 1 q_i^T spends exactly eps = 1.
    for q, lam in zip(payload.priors, payload.resample_probabilities, strict=True):
        eps = resampling_epsilon(resample_probability=lam, q_min=q.min())
        assert eps == pytest.approx(1.0, rel=1e-12)
    # Chance (the majority class) errs on about 2/3 of the 5000 test points, with a
    # standard error of the test error below 0.007: 0.4 is far below chance.
    chance = 1.0 - np.bincount(y_test).max() / y_test.size
    assert chance > 0.6 and result.test_errors["label"] < 0.4


def test_three_class_cluster_priors_come_from_the_pilots_k_ary_labels():
    result, _ = _label_run("label-cluster")
    info = result.privacy["labeldp"]
    priors = result.payload.priors
    uniform = np.all(np.abs(priors - 1.0 / K) < 1e-12, axis=1)
    # The rule picked a positive floor below 1: pilots keep the uniform prior, every
    # other client its cluster's K-entry prior, positive and summing to 1.
    assert 0 < info["choice"]["floor"] < 1
    assert int(uniform.sum()) == info["pilots"] >= info["n_clusters"]
    np.testing.assert_allclose(priors.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert np.all(priors > 0) and len(np.unique(priors[~uniform], axis=0)) > 1


def test_three_class_peer_to_peer_relays_k_ary_labels_at_the_clone_bound():
    # Every client is charged eps0 = eps (what the relay sees); the forwarded labels
    # carry the clone bound toward the analyst, below eps0 and above the exact binary
    # profile of the same clusters.
    from ldpfda.privacy.peer_to_peer import p2p_guarantee

    result, _ = _label_run("label-p2p")
    info = result.privacy["labeldp"]
    (event,) = result.privacy["releases"]
    assert event == "peer_to_peer_rr" and info["forwarded_clients"] == N
    sizes = [info["min_cluster_size"]]
    clone, delta = p2p_guarantee(local_epsilon=1.0, cluster_sizes=sizes, n_classes=K)
    binary, _ = p2p_guarantee(local_epsilon=1.0, cluster_sizes=sizes)
    assert info["delta"] == delta and binary < clone <= info["epsilon"] < 1.0


def test_k_label_settings_run_in_process_and_on_flower():
    for mechanism in ("label-uniform", "label-cluster", "label-p2p"):
        settings = Settings(dataset="wearable", n_classes=3, mechanism=mechanism)
        assert settings.n_classes == 3
        settings.check_n_classes(3)
