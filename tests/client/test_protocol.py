"""What a client releases: privatized training payloads and evaluation feedback bits."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldpfda import BudgetExceededError
from ldpfda.client.protocol import (
    answer_evaluation,
    privatize,
    privatize_curves,
    privatize_joint,
)
from ldpfda.fda import CurveFeaturizer
from ldpfda.privacy import PrivacyLedger, ReleaseEvent
from ldpfda.privacy.laplace import LaplaceMechanism
from ldpfda.schema.payloads import JointPayload, TrainingPayload
from ldpfda.schema.releases import joint_mechanism

try:  # tests/ as a package (tests/privacy/__init__.py present) or as rootdir-less files
    from tests.privacy.privacy_audit import estimate_epsilon
except ModuleNotFoundError:  # pragma: no cover
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "privacy"))
    from privacy_audit import estimate_epsilon

#: Standard errors allowed for a Monte Carlo mean or variance.
Z = 5.0
P = 4


def _data(n: int, p: int = P, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n, p)), rng.integers(0, 2, n).astype(np.int8)


# --- privatize ------------------------------------------------------------------------


def test_privatize_output_shapes_and_types():
    x, y = _data(40)
    ids = np.arange(100, 140)
    payload = privatize(x, y, client_ids=ids, seed=1, epsilon=3.0)
    assert isinstance(payload, TrainingPayload) and len(payload) == 40
    assert payload.features.shape == (40, P) and payload.features.dtype == np.float64
    assert payload.labels.shape == (40,) and payload.labels.dtype == np.int8
    assert set(np.unique(payload.labels)) <= {0, 1}
    np.testing.assert_array_equal(payload.client_ids, ids)
    assert payload.feature_epsilon == pytest.approx(3.0 * P / (P + 1))
    assert payload.label_epsilon == pytest.approx(3.0 / (P + 1))


def test_infinite_epsilon_releases_the_data_unchanged():
    x, y = _data(30)
    payload = privatize(x, y, client_ids=np.arange(30), seed=0, epsilon=math.inf)
    np.testing.assert_array_equal(payload.features, x)
    np.testing.assert_array_equal(payload.labels, y)


def test_features_are_unbiased_with_the_reference_laplace_scale():
    n, epsilon = 20_000, 2.0
    x0 = np.array([0.5, -0.3, 1.0, -1.0])
    payload = privatize(
        np.tile(x0, (n, 1)),
        np.zeros(n, np.int8),
        client_ids=np.arange(n),
        seed=3,
        epsilon=epsilon,
    )
    b = 2 * (P + 1) / epsilon
    var = 2 * b**2
    assert np.all(np.abs(payload.features.mean(axis=0) - x0) < Z * np.sqrt(var / n))
    # Laplace fourth central moment 24 b^4 gives the SE of the sample variance.
    se_var = np.sqrt((24 * b**4 - var**2) / n)
    assert np.all(np.abs(payload.features.var(axis=0) - var) < Z * se_var)


@pytest.mark.parametrize(
    ("epsilon", "label_share"), [(2.0, None), (1.0, None), (3.0, 0.5)]
)
def test_label_flip_rate_matches_randomized_response(epsilon, label_share):
    n = 20_000
    x, y = _data(n, seed=4)
    payload = privatize(
        x, y, client_ids=np.arange(n), seed=5, epsilon=epsilon, label_share=label_share
    )
    label_epsilon = epsilon / (P + 1) if label_share is None else epsilon * label_share
    assert payload.label_epsilon == pytest.approx(label_epsilon)
    flip = 1.0 / (1.0 + math.exp(label_epsilon))
    observed = np.mean(payload.labels != y)
    assert abs(observed - flip) < Z * math.sqrt(flip * (1 - flip) / n)
    # Flips do not depend on the true label.
    for label in (0, 1):
        sub = y == label
        rate = np.mean(payload.labels[sub] != label)
        assert abs(rate - flip) < Z * math.sqrt(flip * (1 - flip) / sub.sum())


def test_same_seed_same_output_different_seed_different():
    x, y = _data(200)
    ids = np.arange(200)
    a = privatize(x, y, client_ids=ids, seed=7, epsilon=2.0)
    again = privatize(x, y, client_ids=ids, seed=7, epsilon=2.0)
    other = privatize(x, y, client_ids=ids, seed=8, epsilon=2.0)
    np.testing.assert_array_equal(a.features, again.features)
    np.testing.assert_array_equal(a.labels, again.labels)
    assert not np.any(a.features == other.features)
    assert np.any(a.labels != other.labels)


def test_a_client_gets_the_same_release_alone_chunked_or_reordered():
    x, y = _data(60, seed=9)
    ids = np.arange(5000, 5060) * 7
    whole = privatize(x, y, client_ids=ids, seed=11, epsilon=2.0)
    for i in range(0, 60, 7):
        alone = privatize(
            x[i : i + 1], y[i : i + 1], client_ids=ids[i : i + 1], seed=11, epsilon=2.0
        )
        np.testing.assert_array_equal(alone.features[0], whole.features[i])
        assert alone.labels[0] == whole.labels[i]
    chunks = [
        privatize(x[a:b], y[a:b], client_ids=ids[a:b], seed=11, epsilon=2.0)
        for a, b in [(0, 13), (13, 14), (14, 60)]
    ]
    features = np.concatenate([c.features for c in chunks])
    np.testing.assert_array_equal(features, whole.features)
    np.testing.assert_array_equal(
        np.concatenate([c.labels for c in chunks]), whole.labels
    )
    rev = privatize(x[::-1], y[::-1], client_ids=ids[::-1], seed=11, epsilon=2.0)
    np.testing.assert_array_equal(rev.features, whole.features[::-1])
    np.testing.assert_array_equal(rev.labels, whole.labels[::-1])


def test_privatize_curves_projects_rescales_then_privatizes():
    grid = np.linspace(0, 1, 25)
    rng = np.random.default_rng(12)
    public, private = rng.normal(size=(100, 25)), rng.normal(size=(20, 25))
    y = rng.integers(0, 2, 20)
    featurizer = CurveFeaturizer.calibrated(public, grid, n_basis=5)
    kwargs = {"client_ids": np.arange(20), "seed": 3, "epsilon": 2.0}
    via_curves = privatize_curves(private, y, featurizer, **kwargs)
    direct = privatize(featurizer.transform(private), y, **kwargs)
    np.testing.assert_array_equal(via_curves.features, direct.features)
    np.testing.assert_array_equal(via_curves.labels, direct.labels)


# --- ledger ---------------------------------------------------------------------------


def test_privatize_charges_epsilon_per_client_and_refuses_a_second_release():
    epsilon, n = 2.0, 50
    x, y = _data(n)
    ids = np.arange(n)
    ledger = PrivacyLedger(budget=epsilon, client_ids=ids)
    privatize(x, y, client_ids=ids, seed=0, epsilon=epsilon, ledger=ledger)
    np.testing.assert_allclose(ledger.spent_all(), epsilon, rtol=1e-12)
    events = {entry.event.mechanism: entry.event for entry in ledger.entries}
    assert set(events) == {"laplace", "binary_randomized_response"}
    # Reference scale 2(p+1)/eps; the discrete sampler spends p * SLACK of the feature
    # epsilon eps p/(p+1) on its accounting slack, scaling b up by about that ratio.
    feature_epsilon = epsilon * P / (P + 1)
    slack = 2 * P * LaplaceMechanism.SLACK_PER_COORDINATE / feature_epsilon
    assert dict(events["laplace"].parameters)["scale"] == pytest.approx(
        2 * (P + 1) / epsilon, rel=slack
    )
    before, n_entries = ledger.spent_all(), len(ledger.entries)
    with pytest.raises(BudgetExceededError):
        privatize(x, y, client_ids=ids, seed=1, epsilon=epsilon, ledger=ledger)
    np.testing.assert_array_equal(ledger.spent_all(), before)
    assert len(ledger.entries) == n_entries
    with pytest.raises(BudgetExceededError):  # nor may a training client also evaluate
        answer_evaluation(
            np.ones(P),
            0.0,
            x,
            y,
            client_ids=ids,
            seed=2,
            epsilon=epsilon,
            ledger=ledger,
        )


def test_a_refused_privatize_charges_nothing():
    # The client can afford the feature release but not the label release after it: the
    # call is refused, so the ledger must not keep a charge for a release that never
    # happened.
    epsilon, n = 2.0, 10
    x, y = _data(n)
    ids = np.arange(n)
    ledger = PrivacyLedger(budget=epsilon, client_ids=ids)
    ledger.charge(ReleaseEvent.of("earlier", epsilon / (2 * (P + 1))), ids[:1])
    before, n_entries = ledger.spent_all(), len(ledger.entries)
    with pytest.raises(BudgetExceededError):
        privatize(x, y, client_ids=ids, seed=0, epsilon=epsilon, ledger=ledger)
    np.testing.assert_array_equal(ledger.spent_all(), before)
    assert len(ledger.entries) == n_entries


def test_answer_evaluation_charges_its_whole_epsilon():
    x, y = _data(30)
    ids = np.arange(30)
    ledger = PrivacyLedger(budget=1.5, client_ids=ids)
    answer_evaluation(
        np.ones(P), 0.0, x, y, client_ids=ids, seed=0, epsilon=1.5, ledger=ledger
    )
    np.testing.assert_allclose(ledger.spent_all(), 1.5)
    assert ledger.entries[-1].event.mechanism == "feedback_bit"
    with pytest.raises(BudgetExceededError):
        answer_evaluation(
            np.ones(P), 0.0, x, y, client_ids=ids, seed=0, epsilon=1.5, ledger=ledger
        )


# --- answer_evaluation ----------------------------------------------------------------


def _wrong(coef, intercept, x, y):
    coef = np.broadcast_to(coef, x.shape)
    score = np.sum(x * coef, axis=1) + intercept
    return ((score > 0).astype(int) != y).astype(np.int8)


def test_feedback_with_infinite_epsilon_is_the_true_wrongness():
    n = 500
    x, y = _data(n, seed=13)
    ids = np.arange(n)
    coef, intercept = np.array([1.0, -0.5, 0.25, 2.0]), -0.1
    bits = answer_evaluation(
        coef, intercept, x, y, client_ids=ids, seed=0, epsilon=math.inf
    )
    assert bits.dtype == np.int8
    np.testing.assert_array_equal(bits, _wrong(coef, intercept, x, y))
    # One model per client (row i of coef and intercept).
    rng = np.random.default_rng(14)
    coefs, intercepts = rng.normal(size=(n, P)), rng.normal(size=n)
    bits = answer_evaluation(
        coefs, intercepts, x, y, client_ids=ids, seed=0, epsilon=math.inf
    )
    np.testing.assert_array_equal(bits, _wrong(coefs, intercepts, x, y))
    # A perfect model and its reversal.
    perfect = answer_evaluation(
        np.zeros(P), 1.0, x, np.ones(n, int), client_ids=ids, seed=0, epsilon=math.inf
    )
    assert not perfect.any()
    reversed_ = answer_evaluation(
        np.zeros(P), -1.0, x, np.ones(n, int), client_ids=ids, seed=0, epsilon=math.inf
    )
    assert reversed_.all()


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 3.0])
def test_feedback_flip_rate_matches_randomized_response(epsilon):
    n = 20_000
    x, y = _data(n, seed=15)
    coef = np.array([1.0, 1.0, -1.0, 0.0])
    truth = _wrong(coef, 0.0, x, y)
    bits = answer_evaluation(
        coef, 0.0, x, y, client_ids=np.arange(n), seed=16, epsilon=epsilon
    )
    flip = 1.0 / (1.0 + math.exp(epsilon))
    assert abs(np.mean(bits != truth) - flip) < Z * math.sqrt(flip * (1 - flip) / n)
    again = answer_evaluation(
        coef, 0.0, x, y, client_ids=np.arange(n), seed=16, epsilon=epsilon
    )
    np.testing.assert_array_equal(bits, again)
    # Per-client: the same as answering alone.
    alone = answer_evaluation(
        coef, 0.0, x[7:8], y[7:8], client_ids=[7], seed=16, epsilon=epsilon
    )
    assert alone[0] == bits[7]


# --- input errors ---------------------------------------------------------------------


def _privatize_kwargs(n=5):
    return {"client_ids": np.arange(n), "seed": 0, "epsilon": 1.0}


def test_features_outside_the_unit_box_are_refused():
    x, y = _data(5)
    x[2, 1] = 1.5
    with pytest.raises(ValueError, match="features must be rescaled"):
        privatize(x, y, **_privatize_kwargs())
    with pytest.raises(ValueError, match="features"):
        answer_evaluation(np.ones(P), 0.0, x, y, **_privatize_kwargs())


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_features_are_refused(bad):
    x, y = _data(5)
    x[0, 0] = bad
    with pytest.raises(ValueError, match="features contains"):
        privatize(x, y, **_privatize_kwargs())
    with pytest.raises(ValueError, match="features contains"):
        answer_evaluation(np.ones(P), 0.0, x, y, **_privatize_kwargs())


@pytest.mark.parametrize(
    "labels", [[0, 1, 2, 0, 1], [0, 1, -1, 0, 1], [0.0, 0.5, 1, 1, 0]]
)
def test_labels_outside_zero_one_are_refused(labels):
    x, _ = _data(5)
    with pytest.raises(ValueError, match=r"labels must be in \{0, 1\}"):
        privatize(x, np.array(labels), **_privatize_kwargs())
    with pytest.raises(ValueError, match="labels"):
        answer_evaluation(np.ones(P), 0.0, x, np.array(labels), **_privatize_kwargs())


def test_mismatched_lengths_are_refused():
    x, y = _data(5)
    with pytest.raises(ValueError, match="labels has 4 entries for 5"):
        privatize(x, y[:4], **_privatize_kwargs())
    with pytest.raises(ValueError, match="client_ids has 4 entries for 5"):
        privatize(x, y, **_privatize_kwargs(4))
    with pytest.raises(ValueError, match="labels"):
        answer_evaluation(np.ones(P), 0.0, x, y[:4], **_privatize_kwargs())
    with pytest.raises(ValueError, match="coef"):
        answer_evaluation(np.ones((4, P)), np.zeros(4), x, y, **_privatize_kwargs())
    with pytest.raises(ValueError, match="intercept"):
        answer_evaluation(np.ones((5, P)), np.zeros(4), x, y, **_privatize_kwargs())


@pytest.mark.parametrize("length", [P - 1, P + 1])
def test_a_single_model_of_the_wrong_length_is_named(length):
    x, y = _data(5)
    with pytest.raises(ValueError, match="coef"):
        answer_evaluation(np.ones(length), 0.0, x, y, **_privatize_kwargs())


@pytest.mark.parametrize("epsilon", [0.0, -1.0, math.nan])
def test_bad_epsilon_is_refused_and_named(epsilon):
    x, y = _data(5)
    kwargs = {**_privatize_kwargs(), "epsilon": epsilon}
    with pytest.raises(ValueError, match="epsilon"):
        privatize(x, y, **kwargs)
    with pytest.raises(ValueError, match="epsilon"):
        answer_evaluation(np.ones(P), 0.0, x, y, **kwargs)


def test_other_argument_errors():
    x, y = _data(5)
    with pytest.raises(TypeError, match="client_ids"):
        privatize(x, y, client_ids=np.arange(5.0), seed=0, epsilon=1.0)
    with pytest.raises(ValueError, match="label_share"):
        privatize(x, y, label_share=1.0, **_privatize_kwargs())
    with pytest.raises(TypeError):
        privatize(x, y, np.arange(5), 0, 1.0)  # keyword-only


# --- the whole training release is epsilon-LDP ----------------------------------------


def _release(label_share):
    """(n, p+1) inputs [features | label] -> (n, p+1) outputs, fresh seed per batch."""

    def release(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        payload = privatize(
            values[:, :P],
            values[:, P].astype(np.int8),
            client_ids=np.arange(values.shape[0]),
            seed=int(rng.integers(2**62)),
            epsilon=2.0,
            label_share=label_share,
        )
        return np.column_stack([payload.features, payload.labels])

    return release


def _joint_statistic(out: np.ndarray) -> np.ndarray:
    # The log density ratio between (-1, 0) and (+1, 1) is a function of the clipped
    # feature sum and the label: encode both in one number (label 1 shifted by 4p).
    return np.clip(out[:, :P], -1, 1).sum(axis=1) + 4 * P * out[:, P]


@pytest.mark.parametrize("label_share", [None, 0.5])
def test_the_training_release_is_epsilon_ldp_and_tight(label_share):
    side = np.concatenate([[-P + 1e-9], np.linspace(-P, P, 9)[1:-1], [P - 1e-9]])
    bins = np.concatenate([side, [2 * P], side + 4 * P])
    x = np.r_[-np.ones(P), 0.0]
    x_prime = np.r_[np.ones(P), 1.0]
    audit = estimate_epsilon(
        _release(label_share),
        x,
        x_prime,
        n=200_000,
        bins=bins,
        statistic=_joint_statistic,
        rng=17,
    )
    assert not audit.violates(2.0), audit
    assert audit.brackets(2.0), audit


def test_release_events_and_output_range_match_what_privatize_releases():
    from ldpfda.schema.releases import evaluation_events, training_mechanisms

    x, y = _data(2000)
    ids = np.arange(x.shape[0])
    ledger = PrivacyLedger(budget=2.0, client_ids=ids)
    payload = privatize(x, y, client_ids=ids, seed=3, epsilon=2.0, ledger=ledger)
    mechanisms = training_mechanisms(2.0, x.shape[1], None)
    assert [e.event for e in ledger.entries] == [m.event() for m in mechanisms]
    low, high = mechanisms[0].output_range()
    assert low <= payload.features.min() and payload.features.max() <= high
    assert [e.mechanism for e in evaluation_events(epsilon=1.0)] == ["feedback_bit"]


# --- the joint release (the default) --------------------------------------------------


def test_privatize_joint_releases_one_signed_vector_per_client():
    x, y = _data(40)
    ids = np.arange(100, 140)
    payload = privatize_joint(x, y, client_ids=ids, seed=1, epsilon=3.0)
    assert isinstance(payload, JointPayload) and len(payload) == 40
    assert payload.releases.shape == (40, P + 1)
    assert payload.releases.dtype == np.float64
    assert payload.n_features == P
    assert payload.epsilon == 3.0 and payload.mechanism == "hybrid"
    np.testing.assert_array_equal(payload.client_ids, ids)
    mech = payload.release_mechanism()
    assert mech.epsilon == 3.0 and mech.inner.name == "hybrid"
    assert mech.inner.dimension == P + 1


@pytest.mark.parametrize("mechanism", ["hybrid", "piecewise", "duchi", "laplace"])
def test_privatize_joint_is_unbiased_for_the_signed_features(mechanism):
    n = 40_000
    x, y = _data(n, seed=4)
    payload = privatize_joint(
        x, y, client_ids=np.arange(n), seed=5, epsilon=2.0, mechanism=mechanism
    )
    u = (2.0 * y - 1.0)[:, None] * np.column_stack([np.ones(n), x])
    mech = payload.release_mechanism()
    se = np.sqrt(
        (mech.variance(np.column_stack([y, x])).mean(axis=0) + u.var(axis=0)) / n
    )
    assert np.all(np.abs(payload.releases.mean(axis=0) - u.mean(axis=0)) <= Z * se)


def test_infinite_epsilon_releases_the_signed_features_unchanged():
    x, y = _data(30)
    payload = privatize_joint(x, y, client_ids=np.arange(30), seed=0, epsilon=math.inf)
    u = (2.0 * y - 1.0)[:, None] * np.column_stack([np.ones(30), x])
    np.testing.assert_array_equal(payload.releases, u)


def test_a_joint_release_is_the_same_alone_chunked_or_reordered():
    x, y = _data(60, seed=9)
    ids = np.arange(5000, 5060) * 7
    whole = privatize_joint(x, y, client_ids=ids, seed=11, epsilon=2.0)
    for i in range(0, 60, 7):
        alone = privatize_joint(
            x[i : i + 1], y[i : i + 1], client_ids=ids[i : i + 1], seed=11, epsilon=2.0
        )
        np.testing.assert_array_equal(alone.releases[0], whole.releases[i])
    chunks = [
        privatize_joint(x[a:b], y[a:b], client_ids=ids[a:b], seed=11, epsilon=2.0)
        for a, b in [(0, 13), (13, 14), (14, 60)]
    ]
    releases = np.concatenate([c.releases for c in chunks])
    np.testing.assert_array_equal(releases, whole.releases)
    rev = privatize_joint(x[::-1], y[::-1], client_ids=ids[::-1], seed=11, epsilon=2.0)
    np.testing.assert_array_equal(rev.releases, whole.releases[::-1])
    other = privatize_joint(x, y, client_ids=ids, seed=12, epsilon=2.0)
    assert not np.array_equal(other.releases, whole.releases)
    # Each release index has its own noise.
    second = privatize_joint(x, y, client_ids=ids, seed=11, epsilon=2.0, release=1)
    assert not np.array_equal(second.releases, whole.releases)


def test_privatize_joint_charges_the_whole_epsilon_once():
    epsilon, n = 2.0, 50
    x, y = _data(n)
    ids = np.arange(n)
    ledger = PrivacyLedger(budget=epsilon, client_ids=ids)
    privatize_joint(x, y, client_ids=ids, seed=0, epsilon=epsilon, ledger=ledger)
    np.testing.assert_allclose(ledger.spent_all(), epsilon, rtol=1e-12)
    assert [e.event for e in ledger.entries] == [joint_mechanism(epsilon, P).event()]
    before, n_entries = ledger.spent_all(), len(ledger.entries)
    with pytest.raises(BudgetExceededError):
        privatize_joint(x, y, client_ids=ids, seed=1, epsilon=epsilon, ledger=ledger)
    np.testing.assert_array_equal(ledger.spent_all(), before)
    assert len(ledger.entries) == n_entries


@pytest.mark.parametrize("mechanism", ["hybrid", "piecewise", "duchi", "laplace"])
@pytest.mark.parametrize("epsilon", [0.5, 2.0, 10.0, math.inf])
def test_joint_output_range_holds_every_release(mechanism, epsilon):
    x, y = _data(5000, seed=2)
    x[:100] = np.sign(x[:100])  # corners, where the releases reach furthest
    payload = privatize_joint(
        x, y, client_ids=np.arange(5000), seed=3, epsilon=epsilon, mechanism=mechanism
    )
    low, high = joint_mechanism(epsilon, P, mechanism).output_range()
    assert low <= payload.releases.min() and payload.releases.max() <= high
    if math.isinf(epsilon):
        assert (low, high) == (-1.0, 1.0)


def test_privatize_joint_refuses_bad_input():
    x, y = _data(5)
    kwargs = {"client_ids": np.arange(5), "seed": 0}
    with pytest.raises(ValueError, match="rescaled"):
        privatize_joint(x * 3, y, epsilon=1.0, **kwargs)
    with pytest.raises(ValueError, match="labels"):
        privatize_joint(x, y + 2, epsilon=1.0, **kwargs)
    with pytest.raises(ValueError, match="labels has 4 entries"):
        privatize_joint(x, y[:4], epsilon=1.0, **kwargs)
    with pytest.raises(ValueError, match="epsilon"):
        privatize_joint(x, y, epsilon=0.0, **kwargs)
    with pytest.raises(ValueError, match="mechanism must be one of"):
        privatize_joint(x, y, epsilon=1.0, mechanism="gauss", **kwargs)
    with pytest.raises(TypeError, match="client_ids"):
        privatize_joint(x, y, epsilon=1.0, client_ids=np.arange(5.0), seed=0)


def _joint_release(epsilon: float):
    """(n, p+1) inputs [label | features] -> releases, fresh run seed per batch."""

    def release(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return privatize_joint(
            values[:, 1:],
            values[:, 0].astype(np.int8),
            client_ids=np.arange(values.shape[0]),
            seed=int(rng.integers(2**62)),
            epsilon=epsilon,
        ).releases

    return release


def _joint_audit(released_at: float):
    scale = P + 1  # p/k with k = 1 sampled coordinate of p + 1 (epsilon < 5)

    def statistic(z: np.ndarray) -> np.ndarray:
        w = np.asarray(z).copy()
        w[:, 0] *= -1
        return (w / scale >= 1.0).sum(axis=1)

    return estimate_epsilon(
        _joint_release(released_at),
        np.r_[0.0, -np.ones(P)],
        np.r_[1.0, -np.ones(P)],
        n=200_000,
        bins=[0.5],
        statistic=statistic,
        rng=19,
    )


def test_the_joint_release_is_epsilon_ldp_and_tight():
    # (y=0, x=-1) encodes to (-1, 1, ..., 1) and (y=1, x=-1) to the opposite corner. At
    # epsilon 2 the hybrid mechanism reports one of the p+1 coordinates at epsilon 2;
    # with the first coordinate negated, "the reported coordinate lies in the high
    # piece [1, C] (or is the Duchi atom +B_1)" has probability ratio exactly e^2.
    audit = _joint_audit(2.0)
    assert not audit.violates(2.0), audit
    assert audit.brackets(2.0), audit


def test_the_joint_audit_flags_a_release_that_spends_more_than_it_claims():
    audit = _joint_audit(3.0)
    assert audit.violates(2.0), audit
    assert audit.brackets(3.0), audit
