"""Vector mechanisms, the joint signed release and RR-with-prior.

Monte Carlo tolerances are ``Z`` standard errors computed from the *stated* variance
(for means) or from the sampling distribution of the variance (for variances); they are
never fitted to a sample. The privacy audits use the extreme neighbouring inputs (all
-1 against all +1) and a statistic on which the density ratio reaches
:math:`e^\\varepsilon`, so a correct mechanism is bracketed tightly and a mis-scaled
one is flagged.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from ldpfda.privacy.joint import (
    SignedFeatureMechanism,
    signed_features,
)
from ldpfda.privacy.laplace import LaplaceMechanism
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.random import ClientStreams
from ldpfda.privacy.vector_mechanisms import (
    EPSILON_STAR,
    DuchiMechanism,
    HybridMechanism,
    PiecewiseMechanism,
    duchi_bound,
    duchi_epsilon,
    hybrid_piecewise_probability,
    make_vector_mechanism,
    piecewise_bound,
    piecewise_epsilon,
    product_moments,
    random_subsets,
    sampled_dimensions,
)

try:  # tests/ as a package, or the files on their own
    from tests.privacy.privacy_audit import estimate_epsilon
except ModuleNotFoundError:  # pragma: no cover
    from privacy_audit import estimate_epsilon

#: Standard errors allowed for a Monte Carlo moment of a correct mechanism.
Z = 5.0
#: Releases per neighbouring input in the privacy audits.
N_AUDIT = 200_000

CLASSES = (DuchiMechanism, PiecewiseMechanism, HybridMechanism)


def _mechanism(cls: type, epsilon: float, p: int):
    return cls(epsilon=epsilon, dimension=p)


# ------------------------------------------------------------------------------------
# Parameters and validation
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_invalid_epsilon_is_a_value_error_naming_it(cls, bad):
    with pytest.raises(ValueError, match=r"epsilon must be in \(0, inf\]"):
        cls(epsilon=bad, dimension=3)


@pytest.mark.parametrize("cls", CLASSES)
def test_epsilon_of_the_wrong_type_is_a_type_error(cls):
    with pytest.raises(TypeError, match="epsilon"):
        cls(epsilon="1", dimension=3)


@pytest.mark.parametrize("cls", CLASSES)
def test_invalid_dimension(cls):
    with pytest.raises(ValueError, match="dimension must be >= 1, got 0"):
        cls(epsilon=1.0, dimension=0)
    with pytest.raises(TypeError, match="dimension"):
        cls(epsilon=1.0, dimension=2.0)


@pytest.mark.parametrize("cls", [PiecewiseMechanism, HybridMechanism])
def test_invalid_n_sampled(cls):
    with pytest.raises(ValueError, match="n_sampled must be <= 3, got 4"):
        cls(epsilon=1.0, dimension=3, n_sampled=4)
    with pytest.raises(ValueError, match="n_sampled must be >= 1, got 0"):
        cls(epsilon=1.0, dimension=3, n_sampled=0)


def test_parameters_are_keyword_only():
    with pytest.raises(TypeError):
        DuchiMechanism(1.0, 3)  # type: ignore[misc]


@pytest.mark.parametrize("cls", CLASSES)
def test_values_are_validated_when_used(cls):
    mech = cls(epsilon=1.0, dimension=3)
    with pytest.raises(ValueError, match=r"shape \(n_clients, 3\)"):
        mech.randomise(np.zeros((2, 4)), 0)
    with pytest.raises(ValueError, match="NaN"):
        mech.randomise(np.array([[0.0, np.nan, 0.0]]), 0)


def test_make_vector_mechanism():
    assert isinstance(
        make_vector_mechanism("duchi", epsilon=1.0, dimension=2), DuchiMechanism
    )
    lap = make_vector_mechanism("laplace", epsilon=2.0, dimension=4)
    assert isinstance(lap, LaplaceMechanism)
    assert lap.scale == pytest.approx(4.0, rel=1e-4)
    with pytest.raises(ValueError, match="mechanism must be one of"):
        make_vector_mechanism("gauss", epsilon=1.0, dimension=2)


# ------------------------------------------------------------------------------------
# Epsilon <-> parameter maps
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 6, 11])
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.0, 10.0])
def test_duchi_bound_round_trip(p, epsilon):
    bound = duchi_bound(epsilon=epsilon, dimension=p)
    assert duchi_epsilon(bound=bound, dimension=p) == pytest.approx(epsilon, rel=1e-10)


@pytest.mark.parametrize("p", [1, 3, 5, 7])
def test_duchi_bound_is_duchi_et_al_for_odd_dimension(p):
    e = math.exp(1.3)
    c_p = 2 ** (p - 1) / math.comb(p - 1, (p - 1) // 2)
    expected = (e + 1) / (e - 1) * c_p
    assert duchi_bound(epsilon=1.3, dimension=p) == pytest.approx(expected)


def test_duchi_bound_limits():
    assert (
        duchi_epsilon(bound=duchi_bound(epsilon=math.inf, dimension=4), dimension=4)
        == math.inf
    )
    with pytest.raises(ValueError, match="bound"):
        duchi_epsilon(bound=0.5, dimension=4)


@pytest.mark.parametrize("epsilon", [0.05, 0.5, 1.0, 4.0, 20.0])
def test_piecewise_bound_round_trip(epsilon):
    c = piecewise_bound(epsilon=epsilon)
    assert c == pytest.approx((math.exp(epsilon / 2) + 1) / (math.exp(epsilon / 2) - 1))
    assert piecewise_epsilon(bound=c) == pytest.approx(epsilon, rel=1e-10)
    assert piecewise_epsilon(bound=piecewise_bound(epsilon=math.inf)) == math.inf


def test_hybrid_threshold_and_probability():
    assert EPSILON_STAR == pytest.approx(0.61, abs=0.005)
    assert hybrid_piecewise_probability(epsilon=0.5) == 0.0
    assert hybrid_piecewise_probability(epsilon=2.0) == pytest.approx(1 - math.exp(-1))


@pytest.mark.parametrize(
    ("epsilon", "k"),
    [
        (1.0, 1),
        (2.4, 1),
        (2.5, 1),
        (5.0, 2),
        (7.6, 3),
        (10.0, 4),
        (50.0, 4),
        (math.inf, 4),
    ],
)
def test_sampled_dimensions_follow_wang_et_al(epsilon, k):
    assert sampled_dimensions(epsilon=epsilon, dimension=4) == k


# ------------------------------------------------------------------------------------
# Exact privacy of Duchi et al.'s mechanism by enumeration
# ------------------------------------------------------------------------------------


def _duchi_output_distribution(
    mech: DuchiMechanism, x: np.ndarray, *, naive: bool = False
) -> dict[tuple, float]:
    """P(z = B t | x) for every corner t, by summing over v (exact)."""
    p, e = mech.dimension, math.exp(mech.epsilon)
    corners = list(itertools.product((-1, 1), repeat=p))
    n_plus = sum(1 for t in corners if sum(t) > 0)
    n_rest = len(corners) - n_plus
    norm = sum(e if sum(r) > 0 else 1.0 for r in corners)
    out = dict.fromkeys(corners, 0.0)
    for v in corners:
        pv = math.prod((1 + xi * vi) / 2 for xi, vi in zip(x, v, strict=True))
        for t in corners:
            above = np.dot(t, v) > 0
            if naive:  # half-cubes with probabilities e/(e+1), 1/(e+1), ties below
                w = e / (e + 1) / n_plus if above else 1 / (e + 1) / n_rest
            else:
                w = (e if above else 1.0) / norm
            out[t] += pv * w
    return out


@pytest.mark.parametrize("p", [2, 3, 4, 5])
def test_duchi_is_exactly_epsilon_ldp(p):
    mech = DuchiMechanism(epsilon=0.8, dimension=p)
    rng = np.random.default_rng(1)
    inputs = [np.ones(p), -np.ones(p), *rng.uniform(-1, 1, size=(3, p))]
    dists = [_duchi_output_distribution(mech, x) for x in inputs]
    worst = max(abs(math.log(a[t] / b[t])) for a in dists for b in dists for t in a)
    assert worst == pytest.approx(0.8, abs=1e-9)  # attained at opposite corners


def test_naive_tie_handling_breaks_privacy_for_even_dimension():
    mech = DuchiMechanism(epsilon=0.8, dimension=4)
    a = _duchi_output_distribution(mech, np.ones(4), naive=True)
    b = _duchi_output_distribution(mech, -np.ones(4), naive=True)
    worst = max(abs(math.log(a[t] / b[t])) for t in a)
    assert worst == pytest.approx(0.8 + math.log(11 / 5))


@pytest.mark.parametrize("p", [2, 4, 5])
def test_duchi_enumeration_is_unbiased(p):
    mech = DuchiMechanism(epsilon=1.1, dimension=p)
    x = np.linspace(-0.9, 0.7, p)
    dist = _duchi_output_distribution(mech, x)
    mean = sum(prob * np.array(t) for t, prob in dist.items()) * mech.bound
    np.testing.assert_allclose(mean, x, atol=1e-12)


# ------------------------------------------------------------------------------------
# Monte Carlo moments
# ------------------------------------------------------------------------------------

MOMENT_CASES = [
    (DuchiMechanism, 1.0, 4),
    (DuchiMechanism, 3.0, 5),
    (PiecewiseMechanism, 1.0, 5),
    (PiecewiseMechanism, 6.0, 5),
    (HybridMechanism, 0.5, 4),  # below epsilon*: the Duchi part only
    (HybridMechanism, 1.0, 5),
    (HybridMechanism, 8.0, 5),  # three sampled coordinates
]


@pytest.mark.parametrize(("cls", "epsilon", "p"), MOMENT_CASES)
def test_unbiased_with_the_stated_variance(cls, epsilon, p):
    mech = _mechanism(cls, epsilon, p)
    x0 = np.array([1.0, -1.0, 0.6, -0.2, 0.0])[:p]
    n = 100_000
    z = mech.randomise(np.tile(x0, (n, 1)), np.random.default_rng(3))
    stated = mech.variance(x0[None, :])[0]
    assert np.all(mech.bias(x0[None, :]) == 0)
    assert np.all(np.abs(z.mean(axis=0) - x0) <= Z * np.sqrt(stated / n))
    # mean((z - x)^2) is unbiased for the variance, with sd sqrt((mu4 - sigma^4) / n).
    centred = z - x0
    mu4 = (centred**4).mean(axis=0)
    se_var = np.sqrt(np.maximum(mu4 - stated**2, 0.0) / n) + 1e-9
    assert np.all(np.abs((centred**2).mean(axis=0) - stated) <= Z * se_var)


@pytest.mark.parametrize(("cls", "epsilon", "p"), MOMENT_CASES)
def test_second_moments_are_identified_as_stated(cls, epsilon, p):
    mech = _mechanism(cls, epsilon, p)
    x0 = np.array([0.9, -0.7, 0.5, -0.2, 0.3])[:p]
    n = 100_000
    z = mech.randomise(np.tile(x0, (n, 1)), np.random.default_rng(4))
    estimate, mask = product_moments(mech).second_moment(z)
    truth = np.outer(x0, x0)
    moments = product_moments(mech)
    for i, j in zip(*np.nonzero(mask), strict=True):
        prod = z[:, i] * z[:, j]
        scale = moments.offdiagonal[i, j] if i != j else moments.slope[i]
        se = prod.std() / math.sqrt(n) / abs(scale)
        assert abs(estimate[i, j] - truth[i, j]) <= Z * se
    assert np.all(estimate[~mask] == 0)


def test_identification_pattern():
    duchi5 = product_moments(DuchiMechanism(epsilon=1.0, dimension=5)).identified()
    assert not duchi5.any()
    duchi4 = product_moments(DuchiMechanism(epsilon=1.0, dimension=4)).identified()
    assert duchi4.sum() == 12 and not np.diag(duchi4).any()
    one = product_moments(HybridMechanism(epsilon=1.0, dimension=4)).identified()
    assert np.array_equal(one, np.eye(4, dtype=bool))
    lap = product_moments(LaplaceMechanism(epsilon=1.0, dimension=3))
    mech = LaplaceMechanism(epsilon=1.0, dimension=3)
    assert lap.identified().all()
    np.testing.assert_allclose(lap.offset, mech.variance(np.zeros((1, 3)))[0])
    assert lap.offset[0] == pytest.approx(2 * 6.0**2, rel=1e-4)


@pytest.mark.parametrize(("cls", "epsilon", "p"), MOMENT_CASES)
def test_output_range(cls, epsilon, p):
    mech = _mechanism(cls, epsilon, p)
    x = np.random.default_rng(5).uniform(-1, 1, size=(20_000, p))
    x[:1000] = np.sign(x[:1000])  # corners, where releases reach furthest
    z = mech.randomise(x, 6)
    # The declared range holds every release and is the exact bound up to rounding.
    low, high = mech.output_range()
    assert low == -high and low <= z.min() and z.max() <= high
    assert high == pytest.approx(mech.output_bound(), rel=2e-9)
    assert np.abs(z).max() >= 0.95 * mech.output_bound()
    if cls is DuchiMechanism:
        assert np.allclose(np.abs(z), mech.bound)
        return
    k, scale = mech.n_sampled, mech.scale
    assert np.all((z != 0).sum(axis=1) == k)
    c = piecewise_bound(epsilon=mech.coordinate_epsilon)
    assert np.all(np.abs(z) <= scale * c + 1e-12)
    if cls is HybridMechanism and mech.piecewise_probability == 0.0:
        nonzero = z[z != 0]
        assert np.allclose(np.abs(nonzero), scale * mech.duchi_bound_1d)
        assert mech.output_bound() == pytest.approx(scale * mech.duchi_bound_1d)
    else:
        assert mech.output_bound() == pytest.approx(scale * c)


@pytest.mark.parametrize("cls", CLASSES)
def test_infinite_epsilon_releases_the_input_and_clips(cls):
    mech = cls(epsilon=math.inf, dimension=3)
    x = np.array([[0.2, -2.0, 1.5]])
    np.testing.assert_array_equal(mech.randomise(x, 0), [[0.2, -1.0, 1.0]])
    assert mech.output_range() == (-1.0, 1.0)
    np.testing.assert_array_equal(mech.bias(x), [[0.0, 1.0, -0.5]])
    np.testing.assert_array_equal(mech.variance(x), np.zeros((1, 3)))


# ------------------------------------------------------------------------------------
# Randomness
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", CLASSES)
def test_same_seed_same_release_different_seed_different(cls):
    mech = cls(epsilon=2.0, dimension=4)
    x = np.random.default_rng(0).uniform(-1, 1, size=(50, 4))
    np.testing.assert_array_equal(mech.randomise(x, 11), mech.randomise(x, 11))
    assert not np.array_equal(mech.randomise(x, 11), mech.randomise(x, 12))


@pytest.mark.parametrize("cls", CLASSES)
def test_keyed_streams_do_not_depend_on_batching(cls):
    mech = cls(epsilon=6.0, dimension=4)
    x = np.random.default_rng(0).uniform(-1, 1, size=(10, 4))
    ids = np.arange(100, 110)
    together = mech.randomise(x, ClientStreams(7, ids).stream("t"))
    alone = np.vstack(
        [
            mech.randomise(x[i : i + 1], ClientStreams(7, ids[i : i + 1]).stream("t"))
            for i in range(10)
        ]
    )
    np.testing.assert_array_equal(together, alone)


@pytest.mark.parametrize(("p", "k"), [(5, 2), (4, 3), (6, 1), (3, 3)])
def test_random_subsets_are_uniform_k_subsets(p, k):
    n = 120_000
    picks = random_subsets(np.random.default_rng(3).uniform(size=(n, k)), p)
    assert picks.min() >= 0 and picks.max() < p
    assert np.all(np.sort(picks, axis=1)[:, 1:] != np.sort(picks, axis=1)[:, :-1])
    subsets = list(itertools.combinations(range(p), k))
    index = {s: i for i, s in enumerate(subsets)}
    counts = np.bincount(
        [index[tuple(sorted(row))] for row in picks.tolist()], minlength=len(subsets)
    )
    # Multinomial counts: each within 4.5 standard deviations of n / C(p, k).
    q = 1.0 / len(subsets)
    assert np.all(np.abs(counts - n * q) <= 4.5 * math.sqrt(n * q * (1 - q)))


@pytest.mark.parametrize("cls", [PiecewiseMechanism, HybridMechanism])
def test_sampled_mechanisms_draw_only_the_uniforms_of_k_coordinates(cls):
    mech = cls(epsilon=5.0, dimension=11)
    stream = ClientStreams(1, np.arange(7)).stream("t")
    z = mech.randomise(np.zeros((7, 11)), stream)
    assert stream.drawn == mech.n_sampled * (1 + cls._draws_per_coordinate)
    assert np.all((z != 0).sum(axis=1) <= mech.n_sampled)


# ------------------------------------------------------------------------------------
# Empirical privacy audits
# ------------------------------------------------------------------------------------


def _high_count(scale: float):
    """Number of reported coordinates in the high piece [1, C] (after unscaling)."""
    return lambda z: (np.asarray(z) / scale >= 1.0).sum(axis=1)


def _audit(mech, p: int, statistic, n_bins: int, rng: int):
    return estimate_epsilon(
        mech.randomise,
        -np.ones(p),
        np.ones(p),
        n=N_AUDIT,
        bins=np.arange(n_bins) + 0.5,
        statistic=statistic,
        rng=rng,
    )


@pytest.mark.parametrize(("p", "epsilon"), [(4, 1.0), (5, 2.0)])
def test_duchi_passes_the_privacy_audit_tightly(p, epsilon):
    mech = DuchiMechanism(epsilon=epsilon, dimension=p)
    audit = _audit(mech, p, lambda z: (np.asarray(z) > 0).sum(axis=1), p, 21)
    assert not audit.violates(epsilon)
    assert audit.brackets(epsilon)


@pytest.mark.parametrize("cls", [PiecewiseMechanism, HybridMechanism])
@pytest.mark.parametrize(("p", "epsilon"), [(4, 1.0), (4, 5.0)])
def test_sampled_mechanisms_pass_the_privacy_audit_tightly(cls, p, epsilon):
    mech = cls(epsilon=epsilon, dimension=p)
    audit = _audit(mech, p, _high_count(mech.scale), mech.n_sampled, 22)
    assert not audit.violates(epsilon)
    assert audit.brackets(epsilon)


class _NaiveTiesDuchi(DuchiMechanism):
    """Half-cubes chosen with e/(e+1) and 1/(e+1) whatever their sizes (ties below)."""

    def flip_count_probabilities(self) -> np.ndarray:
        p, e = self.dimension, math.exp(self.epsilon)
        k = np.arange(p + 1)
        sizes = np.array([math.comb(p, int(j)) for j in k], dtype=float)
        above = p - 2 * k > 0
        n_plus, n_rest = sizes[above].sum(), sizes[~above].sum()
        return np.where(above, sizes * e / (e + 1) / n_plus, sizes / (e + 1) / n_rest)


class _MisScaledPiecewise(PiecewiseMechanism):
    """Claims epsilon but perturbs each coordinate with twice its share."""

    @property
    def coordinate_epsilon(self) -> float:
        return 2.0 * self.epsilon / self.n_sampled


class _MisScaledHybrid(HybridMechanism):
    @property
    def coordinate_epsilon(self) -> float:
        return 2.0 * self.epsilon / self.n_sampled


def test_the_audit_flags_duchi_with_naive_ties():
    mech = _NaiveTiesDuchi(epsilon=1.0, dimension=4)
    audit = _audit(mech, 4, lambda z: (np.asarray(z) > 0).sum(axis=1), 4, 23)
    assert audit.violates(1.0)
    assert audit.brackets(1.0 + math.log(11 / 5))


@pytest.mark.parametrize("cls", [_MisScaledPiecewise, _MisScaledHybrid])
def test_the_audit_flags_a_mis_scaled_sampled_mechanism(cls):
    mech = cls(epsilon=1.0, dimension=4)
    audit = _audit(mech, 4, _high_count(mech.scale), 1, 24)
    assert audit.violates(1.0)
    assert audit.brackets(2.0)


# ------------------------------------------------------------------------------------
# The joint signed release
# ------------------------------------------------------------------------------------


def test_signed_features_encoding():
    u = signed_features([[0.5, -1.0], [0.2, 0.3]], [1, 0])
    np.testing.assert_array_equal(u, [[1.0, 0.5, -1.0], [-1.0, -0.2, -0.3]])
    u = signed_features([[0.5, -1.0]], [0], fit_intercept=False)
    np.testing.assert_array_equal(u, [[-0.5, 1.0]])
    with pytest.raises(ValueError, match="rescaled"):
        signed_features([[1.5, 0.0]], [1])
    with pytest.raises(ValueError, match="labels"):
        signed_features([[0.5, 0.0]], [2])


def test_signed_release_is_one_event_of_the_whole_epsilon():
    mech = SignedFeatureMechanism(epsilon=2.0, n_features=4)
    assert mech.dimension == 5 and mech.inner.dimension == 5
    event = mech.event()
    assert event.epsilon == 2.0 and event.as_dict()["inner"] == "hybrid"
    ledger = PrivacyLedger(budget=2.0, client_ids=np.arange(3))
    ledger.charge(event, np.arange(3))
    assert not ledger.can_spend(1e-6, np.arange(3)).any()
    assert mech.output_range() == mech.inner.output_range()
    laplace = SignedFeatureMechanism(epsilon=2.0, n_features=4, mechanism="laplace")
    assert laplace.output_range() == laplace.inner.output_range()
    with pytest.raises(ValueError, match="mechanism must be one of"):
        SignedFeatureMechanism(epsilon=1.0, n_features=2, mechanism="x")
    with pytest.raises(ValueError, match="epsilon"):
        SignedFeatureMechanism(epsilon=-1.0, n_features=2)


@pytest.mark.parametrize("inner", ["hybrid", "piecewise", "duchi", "laplace"])
def test_signed_release_estimates_the_cross_moment(inner):
    rng = np.random.default_rng(8)
    n = 60_000
    x = rng.uniform(-1, 1, size=(n, 3))
    y = (rng.random(n) < 0.5 + 0.4 * x[:, 0]).astype(np.int8)
    mech = SignedFeatureMechanism(epsilon=2.0, n_features=3, mechanism=inner)
    z = mech.release(x, y, rng)
    u = signed_features(x, y)
    se = np.sqrt(
        (mech.variance(np.column_stack([y, x])).mean(axis=0) + u.var(axis=0)) / n
    )
    assert np.all(np.abs(z.mean(axis=0) - u.mean(axis=0)) <= Z * se)
    # randomise() on (label, features) rows is the same release.
    z2 = mech.randomise(np.column_stack([y, x]), np.random.default_rng(1))
    np.testing.assert_array_equal(z2, mech.release(x, y, np.random.default_rng(1)))


def test_signed_release_passes_the_privacy_audit():
    # (y=0, x=-1) encodes to (-1, +1, +1, +1) and (y=1, x=-1) to its opposite corner.
    mech = SignedFeatureMechanism(epsilon=1.0, n_features=3)
    inner = mech.inner
    audit = estimate_epsilon(
        mech.randomise,
        [0.0, -1, -1, -1],
        [1.0, -1, -1, -1],
        n=N_AUDIT,
        bins=[0.5],
        statistic=lambda z: _flip_first(z, inner.scale),
        rng=25,
    )
    assert not audit.violates(1.0)
    assert audit.brackets(1.0)


def _flip_first(z: np.ndarray, scale: float) -> np.ndarray:
    """High-piece count of (-z_0, z_1, ...), which maps (-1, 1, 1, 1) to all ones."""
    w = np.asarray(z).copy()
    w[:, 0] *= -1
    return (w / scale >= 1.0).sum(axis=1)


# ------------------------------------------------------------------------------------
# Randomized response with a prior
# ------------------------------------------------------------------------------------
