"""The label-only modes in process: client releases, server steps, whole runs.

Privacy of the client-side release is audited empirically (10^5 releases per input,
:func:`tests.privacy.privacy_audit.estimate_epsilon`, variance-derived bounds), and the
same audit must flag a release whose lambda is deliberately mis-scaled.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import ldpfda.schema.releases as protocol
from ldpfda.cli import main
from ldpfda.client.labeldp_protocol import (
    check_public_features,
    p2p_forward,
    p2p_randomize,
    release_labels,
)
from ldpfda.config import Settings
from ldpfda.engine import run_repeat
from ldpfda.exceptions import BudgetExceededError
from ldpfda.labeldp import (
    BackwardCorrectedLogisticRegression,
    ForwardCorrectedLogisticRegression,
    peer_to_peer_rr,
    resampling_epsilon,
    uniform_rr_probability,
)
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.peer_to_peer import pick_peers
from ldpfda.privacy.randomized_response import BinaryRandomizedResponse
from ldpfda.schema.releases import (
    PRIOR_RR,
    UNIFORM_RR,
    label_events,
    p2p_event,
    prior_probabilities,
)
from ldpfda.server.labels import (
    merge_small_clusters,
    p2p_blocks,
    pilot_histograms,
    select_pilots,
)
from tests.privacy.privacy_audit import estimate_epsilon

N_AUDIT = 100_000
PRIOR = np.array([0.2, 0.8])  # q_min = 0.2 on label 0: the tight output


def _release_fn(prior, epsilon):
    def release(values: np.ndarray, gen: np.random.Generator) -> np.ndarray:
        ids = np.arange(values.shape[0])
        seed = int(gen.integers(2**62))
        return release_labels(values, prior, client_ids=ids, seed=seed, epsilon=epsilon)

    return release


@pytest.mark.parametrize(
    ("prior", "epsilon"),
    [(PRIOR, 1.0), (np.full(2, 0.5), 1.0), (np.array([0.1, 0.3, 0.6]), 2.0)],
    ids=["cluster-prior", "uniform", "three-classes"],
)
def test_release_keeps_its_epsilon_and_is_tight(prior, epsilon):
    # Neighbouring labels: the least likely label under the prior and another one.
    order = np.argsort(prior, kind="stable")
    y, y_prime = int(order[0]), int(order[-1])
    audit = estimate_epsilon(
        _release_fn(prior, epsilon),
        y,
        y_prime,
        n=N_AUDIT,
        bins=np.arange(prior.size - 1) + 0.5,
        rng=11,
    )
    assert not audit.violates(epsilon)
    assert audit.brackets(epsilon)  # the output y itself attains e^eps


def test_the_audit_catches_a_mis_scaled_lambda(monkeypatch):
    # Half the resampling probability keeps too many true labels: eps grows to
    # ln(1 + (1 - lam/2) / (lam/2 * q_min)).
    lam = protocol.resampling_probability(epsilon=1.0, q_min=0.2)
    true_eps = resampling_epsilon(resample_probability=lam / 2, q_min=0.2)
    monkeypatch.setattr(
        protocol,
        "resampling_probability",
        lambda *, epsilon, q_min: 0.5 / (1.0 + q_min * math.expm1(epsilon)),
    )
    audit = estimate_epsilon(
        _release_fn(PRIOR, 1.0), 0, 1, n=N_AUDIT, bins=[0.5], rng=12
    )
    assert audit.violates(1.0)
    assert audit.lower_bound <= true_eps <= audit.upper_bound


def test_uniform_prior_is_k_ary_randomized_response():
    lam = prior_probabilities(np.full((1, 4), 0.25), epsilon=1.5)[0]
    assert lam == pytest.approx(uniform_rr_probability(epsilon=1.5, n_classes=4))
    (event,) = label_events(np.full((1, 4), 0.25), epsilon=1.5)
    assert event.mechanism == UNIFORM_RR and event.epsilon == 1.5
    (event,) = label_events(PRIOR[None], epsilon=1.5)
    assert event.mechanism == PRIOR_RR and dict(event.parameters)["q_min"] == 0.2


def test_release_does_not_depend_on_batching_and_reproduces():
    gen = np.random.default_rng(3)
    y = gen.integers(0, 2, 200)
    priors = np.where(gen.random((200, 1)) < 0.5, PRIOR, PRIOR[::-1])
    ids = np.arange(1000, 1200)
    whole = release_labels(y, priors, client_ids=ids, seed=9, epsilon=1.0)
    one_by_one = [
        release_labels(
            y[i : i + 1], priors[i], client_ids=ids[i : i + 1], seed=9, epsilon=1.0
        )[0]
        for i in range(200)
    ]
    np.testing.assert_array_equal(whole, one_by_one)
    other = release_labels(y, priors, client_ids=ids, seed=10, epsilon=1.0)
    assert np.any(other != whole)


def test_ledger_is_charged_exactly_epsilon_once_and_refuses_a_second_release():
    ids = np.arange(6)
    ledger = PrivacyLedger(budget=1.0, client_ids=ids)
    priors = np.vstack([np.full((3, 2), 0.5), np.tile(PRIOR, (3, 1))])
    release_labels(
        np.zeros(6, int), priors, client_ids=ids, seed=0, epsilon=1.0, ledger=ledger
    )
    np.testing.assert_allclose(ledger.spent_all(), 1.0)
    assert {e.event.mechanism for e in ledger.entries} == {UNIFORM_RR, PRIOR_RR}
    with pytest.raises(BudgetExceededError, match="exceed the budget"):
        release_labels(
            np.zeros(6, int),
            priors,
            client_ids=ids,
            seed=0,
            epsilon=1.0,
            ledger=ledger,
            release=1,
        )
    np.testing.assert_allclose(ledger.spent_all(), 1.0)  # nothing charged


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"labels": [2]}, ValueError, r"labels must be in \{0, \.\.\., 1\}"),
        ({"epsilon": 0.0}, ValueError, "epsilon must be in"),
        ({"epsilon": -1.0}, ValueError, "epsilon must be in"),
        ({"epsilon": math.inf}, ValueError, "epsilon must be in"),
        ({"priors": [[0.0, 1.0]]}, ValueError, "priors must be > 0"),
        ({"priors": [[0.3, 0.3]]}, ValueError, "rows must sum to 1"),
        ({"priors": [[np.nan, 0.5]]}, ValueError, "NaN"),
        ({"client_ids": [0.5]}, TypeError, "client_ids must be integers"),
    ],
)
def test_bad_release_inputs_fail_clearly(kwargs, error, match):
    args = {"labels": [1], "priors": [[0.5, 0.5]], "client_ids": [0], "epsilon": 1.0}
    args.update(kwargs)
    labels, priors = args.pop("labels"), args.pop("priors")
    with pytest.raises(error, match=match):
        release_labels(labels, priors, seed=0, **args)


def test_nan_or_unscaled_features_are_refused():
    with pytest.raises(ValueError, match="features contains 1 NaN"):
        check_public_features([[0.1, np.nan]])
    with pytest.raises(ValueError, match=r"rescaled into \[-1, 1\]"):
        check_public_features([[0.1, 3.0]])


# -- the server's steps ----------------------------------------------------------------


def test_pilot_histograms_are_unbiased():
    # 4 clusters with known label-1 shares; 20000 pilots each at eps = 1.
    gen = np.random.default_rng(5)
    shares = np.array([0.1, 0.5, 0.8, 1.0])
    clusters = np.repeat(np.arange(4), 20_000)
    y = (gen.random(clusters.size) < shares[clusters]).astype(int)
    released = release_labels(
        y, [0.5, 0.5], client_ids=np.arange(y.size), seed=1, epsilon=1.0
    )
    hist = pilot_histograms(released, clusters, n_clusters=5, n_classes=2, epsilon=1.0)
    truth = np.bincount(clusters, weights=y, minlength=4) / 20_000
    keep = math.e / (1 + math.e)
    sd = math.sqrt(0.25 / 20_000) / (2 * keep - 1)
    np.testing.assert_allclose(hist[:4, 1], truth, atol=5 * sd)
    np.testing.assert_allclose(hist.sum(axis=1), 1.0)
    np.testing.assert_allclose(hist[4], 0.5)  # a cluster without pilots


def test_pilots_are_a_share_of_every_cluster():
    clusters = np.repeat(np.arange(4), [1, 10, 25, 64])
    pilots = select_pilots(clusters, share=0.2, rng=np.random.default_rng(0))
    np.testing.assert_array_equal(np.bincount(clusters[pilots]), [1, 2, 5, 13])
    again = select_pilots(clusters, share=0.2, rng=np.random.default_rng(0))
    np.testing.assert_array_equal(pilots, again)


def test_small_clusters_are_merged_into_the_nearest():
    x = np.concatenate([np.zeros(20), [0.1, 0.2], np.full(15, 5.0), [4.9]])[:, None]
    c = np.concatenate([np.zeros(20), [1, 1], np.full(15, 2), [3]]).astype(int)
    merged = merge_small_clusters(x, c, min_size=10)
    np.testing.assert_array_equal(np.bincount(merged), [22, 16])
    assert merged[20] == merged[0] and merged[-1] == merged[-2]
    with pytest.raises(ValueError, match="min_cluster_size must be <="):
        merge_small_clusters(x, c, min_size=100)


@pytest.mark.parametrize(
    "learner",
    [ForwardCorrectedLogisticRegression, BackwardCorrectedLogisticRegression],
)
def test_channel_fit_equals_the_release_fit_on_one_channel(learner):
    gen = np.random.default_rng(2)
    x = gen.uniform(-1, 1, (400, 3))
    y = (x @ [1.0, -2.0, 0.5] + 0.3 * gen.standard_normal(400) > 0).astype(int)
    lam = uniform_rr_probability(epsilon=1.0, n_classes=2)
    noisy = release_labels(
        y, [0.5, 0.5], client_ids=np.arange(400), seed=0, epsilon=1.0
    )
    ours = learner(C=1.0).fit_channels(
        x,
        noisy,
        priors=np.full((400, 2), 0.5),
        resample_probabilities=np.full(400, lam),
    )
    library = learner(C=1.0).fit(x, noisy, distributions=[[0.5, 0.5]], beta=lam)
    np.testing.assert_allclose(ours.coef_, library.coef_, atol=1e-8)
    np.testing.assert_allclose(ours.intercept_, library.intercept_, atol=1e-8)


# -- peer to peer ----------------------------------------------------------------------


def test_p2p_steps_reproduce_peer_to_peer_rr_draw_for_draw():
    # Fed the same Generator in the same order, randomize + relay + forward are the
    # library's Algorithm 2.
    gen = np.random.default_rng(8)
    y = gen.integers(0, 2, 300)
    clusters = gen.integers(0, 7, 300)
    eps0 = 2.0
    library = peer_to_peer_rr(y, clusters, local_epsilon=eps0, rng=21)
    ours_gen = np.random.default_rng(21)
    noisy = (
        BinaryRandomizedResponse(epsilon=eps0).randomise(y, ours_gen).astype(np.int8)
    )
    peers, offsets, counts = p2p_blocks(noisy, clusters)
    forwarded = peers[offsets + pick_peers(ours_gen.random(300), counts)]
    np.testing.assert_array_equal(forwarded, library.labels)
    sizes = np.bincount(clusters)
    assert p2p_event(local_epsilon=eps0, cluster_sizes=sizes) == library.event


def test_p2p_client_functions_are_keyed_per_client():
    y = np.array([0, 1, 1, 0, 1, 0])
    ids = np.arange(6)
    ledger = PrivacyLedger(budget=2.0, client_ids=ids)
    noisy = p2p_randomize(
        y, client_ids=ids, seed=4, local_epsilon=1.5, cluster_sizes=[6], ledger=ledger
    )
    event = p2p_event(local_epsilon=1.5, cluster_sizes=[6])
    # Charged what the relay sees (eps0 = 1.5), not the amplified guarantee.
    np.testing.assert_allclose(ledger.spent_all(), 1.5)
    assert event.epsilon < 1.5 and dict(event.parameters)["delta"] == 1 / 36
    alone = p2p_randomize(
        y[2:3], client_ids=ids[2:3], seed=4, local_epsilon=1.5, cluster_sizes=[6]
    )
    assert alone[0] == noisy[2]
    everyone = p2p_forward(
        noisy, np.zeros(6, int), np.full(6, 6), client_ids=ids, seed=4
    )
    single = p2p_forward(noisy, [0], [6], client_ids=[3], seed=4)
    assert single[0] == everyone[3] and set(everyone) <= set(noisy)
    with pytest.raises(ValueError, match="non-empty block"):
        p2p_forward(noisy, [4], [6], client_ids=[3], seed=4)
    with pytest.raises(ValueError, match=r"labels must be in \{0, 1\}"):
        p2p_randomize([2], client_ids=[0], seed=0, local_epsilon=1.0, cluster_sizes=[6])
    with pytest.raises(ValueError, match="local_epsilon must be in"):
        p2p_randomize([1], client_ids=[0], seed=0, local_epsilon=0.0, cluster_sizes=[6])


# -- whole runs ------------------------------------------------------------------------

SMALL = {"n_train": 150, "n_eval": 150, "n_test": 5000, "n_clusters": 5, "epsilon": 1.0}


@pytest.mark.parametrize("mechanism", ["label-uniform", "label-cluster", "label-p2p"])
def test_every_client_spends_its_epsilon_once(mechanism):
    settings = Settings(mechanism=mechanism, **SMALL)
    result = run_repeat(settings, 0)
    privacy = result.privacy
    assert result.method == "label" and len(result.payload) == 300
    assert sum(r["clients"] for r in privacy["releases"].values()) == 300
    eps = 1.0
    if mechanism == "label-p2p":
        # Every client's bit goes to the relay (the server) at its whole epsilon; the
        # forwarded bits are (eps', 1/s^2)-label-DP with eps' < eps toward an analyst.
        assert privacy["labeldp"]["local_epsilon"] == eps
        assert privacy["labeldp"]["epsilon"] < eps
        assert (
            privacy["labeldp"]["delta"]
            == 1 / privacy["labeldp"]["min_cluster_size"] ** 2
        )
    assert privacy["max_spent"] == pytest.approx(eps, rel=1e-12)
    assert privacy["min_spent"] == pytest.approx(eps, rel=1e-12)
    again = run_repeat(settings, 0)
    np.testing.assert_array_equal(again.payload.labels, result.payload.labels)
    other = run_repeat(settings.replace(seed=1), 0)
    assert np.any(other.payload.labels != result.payload.labels)


def test_label_cluster_priors_come_from_the_pilots():
    result = run_repeat(Settings(mechanism="label-cluster", **SMALL), 0)
    info = result.privacy["labeldp"]
    payload = result.payload
    uniform = np.all(payload.priors == 0.5, axis=1)
    # Pilots use the uniform prior; the others their cluster's (uniform at floor 1).
    if info["choice"]["floor"] < 1:
        assert int(uniform.sum()) == info["pilots"]
    assert info["pilots"] >= 5 and np.all(payload.priors > 0)
    # Every channel spends exactly eps = 1.
    for q, lam in zip(payload.priors, payload.resample_probabilities, strict=True):
        eps = resampling_epsilon(resample_probability=lam, q_min=q.min())
        assert eps == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("dataset", ["vector", "functional"])
def test_label_only_beats_chance_and_the_ldp_feature_protocol_at_eps_1(dataset):
    # Features are public here, so at eps = 1 the label-only model is close to the
    # non-private one; the default protocol (joint release of y~(1, x)) pays for the
    # features too. Three repeats of 1000 clients, 20000 test points (test-error
    # standard error about 0.003).
    common = {
        "epsilon": 1.0,
        "dataset": dataset,
        "n_train": 500,
        "n_eval": 500,
        "n_test": 20_000,
    }
    label = [
        run_repeat(Settings(mechanism="label-cluster", **common), r) for r in range(3)
    ]
    joint = [run_repeat(Settings(**common), r) for r in range(3)]
    label_error = np.mean([r.test_errors["label"] for r in label])
    joint_error = np.mean([r.test_errors["moment"] for r in joint])
    reference = np.mean([r.test_errors["non_private"] for r in label])
    assert label_error < 0.25  # chance is 0.5
    assert label_error < joint_error - 0.01
    assert label_error < reference + 0.03


def test_label_settings_are_validated():
    assert Settings(mechanism="label-p2p").protocol == "label"
    assert not Settings(mechanism="label-p2p").joint_release
    with pytest.raises(ValueError, match="method must be 'auto'"):
        Settings(mechanism="label-cluster", method="moment")
    with pytest.raises(ValueError, match="n_clusters must be <="):
        Settings(
            mechanism="label-cluster",
            n_train=5,
            n_eval=5,
            n_clusters=11,
            num_weak_models=1,
            subsample_size=2,
        )
    with pytest.raises(ValueError, match="correction must be one of"):
        Settings(correction="sideways")
    with pytest.raises(ValueError, match="pilot_share must be in"):
        Settings(pilot_share=1.0)
    with pytest.raises(ValueError, match="finite epsilon"):
        Settings(mechanism="label-uniform", epsilon=math.inf)
    with pytest.raises(ValueError, match="label_share applies"):
        Settings(mechanism="label-uniform", label_share=0.5)


def test_simulate_runs_a_label_only_mode(tmp_path, capsys):
    out = tmp_path / "sim.json"
    args = [
        "simulate",
        "--mechanism",
        "label-cluster",
        "--epsilon",
        "1",
        "--n-train",
        "100",
        "--n-eval",
        "100",
        "--n-test",
        "2000",
        "--n-clusters",
        "4",
        "--repeats",
        "2",
        "--no-progress",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("Label-only label-cluster on the vector design")
    assert "label-only" in printed
    (summary,) = json.loads(out.read_text())["summaries"]
    assert set(summary["test_error"]) == {"label", "non_private"}
    assert summary["epsilon_spent_per_client"]["max"] == pytest.approx(1.0)
