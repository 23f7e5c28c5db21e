"""Laplace and randomized-response mechanisms: parameters, moments, debiasing, privacy.

Every Monte Carlo tolerance is a number of standard errors computed from the stated
variance (never fitted to the sample). The privacy tests run the audit of
:mod:`tests.privacy.privacy_audit` at the extreme neighbouring inputs, where the density
ratio reaches :math:`e^\\varepsilon`, so the audit is tight for a correct mechanism and
flags a mis-scaled one.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from ldpfda.privacy import (
    BinaryRandomizedResponse,
    FeedbackBit,
    KaryRandomizedResponse,
    LaplaceMechanism,
    ReleaseEvent,
    laplace_epsilon,
    laplace_scale,
    rr_epsilon,
    rr_keep_probability,
)

try:  # tests/ as a package (tests/privacy/__init__.py present) or as rootdir-less files
    from tests.privacy.privacy_audit import estimate_epsilon
except ModuleNotFoundError:  # pragma: no cover
    from privacy_audit import estimate_epsilon

#: Standard errors allowed for a Monte Carlo mean or variance of a correct mechanism.
Z = 5.0
#: Releases per neighbouring input in the privacy audits.
N_AUDIT = 200_000

MECHANISMS = {
    "laplace": lambda **kw: LaplaceMechanism(dimension=3, **kw),
    "binary_rr": lambda **kw: BinaryRandomizedResponse(**kw),
    "kary_rr": lambda **kw: KaryRandomizedResponse(n_categories=4, **kw),
    "feedback_bit": lambda **kw: FeedbackBit(**kw),
}


# --- parameters -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "args"),
    [
        (LaplaceMechanism, (1.0, 3)),
        (BinaryRandomizedResponse, (1.0,)),
        (KaryRandomizedResponse, (1.0, 3)),
        (FeedbackBit, (1.0,)),
    ],
)
def test_privacy_parameters_are_keyword_only(cls, args):
    with pytest.raises(TypeError):
        cls(*args)


@pytest.mark.parametrize(
    ("fn", "args"),
    [
        (laplace_scale, (1.0, 2.0)),
        (laplace_epsilon, (2.0, 2.0)),
        (rr_keep_probability, (1.0,)),
        (rr_epsilon, (0.7,)),
    ],
)
def test_epsilon_maps_are_keyword_only(fn, args):
    with pytest.raises(TypeError):
        fn(*args)


@pytest.mark.parametrize("name", list(MECHANISMS))
@pytest.mark.parametrize(
    ("epsilon", "shown"),
    [(0.0, "0.0"), (-1.0, "-1.0"), (-math.inf, "-inf"), (math.nan, "nan")],
)
def test_bad_epsilon_is_a_value_error_naming_it(name, epsilon, shown):
    with pytest.raises(
        ValueError, match=rf"epsilon must be in \(0, inf\], got {shown}"
    ):
        MECHANISMS[name](epsilon=epsilon)


@pytest.mark.parametrize("name", list(MECHANISMS))
@pytest.mark.parametrize("epsilon", ["1.0", None, True, [1.0], 1 + 0j])
def test_epsilon_of_the_wrong_type_is_a_type_error(name, epsilon):
    with pytest.raises(TypeError, match="epsilon"):
        MECHANISMS[name](epsilon=epsilon)


def test_other_mechanism_parameters_are_validated_and_named():
    with pytest.raises(ValueError, match="dimension"):
        LaplaceMechanism(epsilon=1.0, dimension=0)
    with pytest.raises(TypeError, match="dimension"):
        LaplaceMechanism(epsilon=1.0, dimension=2.0)
    with pytest.raises(ValueError, match="upper"):
        LaplaceMechanism(epsilon=1.0, dimension=2, lower=1.0, upper=1.0)
    with pytest.raises(ValueError, match="lower"):
        LaplaceMechanism(epsilon=1.0, dimension=2, lower=math.nan)
    with pytest.raises(ValueError, match="n_categories"):
        KaryRandomizedResponse(epsilon=1.0, n_categories=1)
    with pytest.raises(TypeError, match="n_categories"):
        KaryRandomizedResponse(epsilon=1.0, n_categories=2.5)
    with pytest.raises(ValueError, match="sensitivity"):
        laplace_scale(epsilon=1.0, sensitivity=0.0)
    with pytest.raises(ValueError, match="scale"):
        laplace_epsilon(scale=-1.0, sensitivity=1.0)
    with pytest.raises(ValueError, match="keep_probability"):
        rr_epsilon(keep_probability=0.5)  # 1/K: no information, epsilon 0
    with pytest.raises(ValueError, match="keep_probability"):
        rr_epsilon(keep_probability=1.01)
    with pytest.raises(ValueError, match="epsilon"):
        rr_keep_probability(epsilon=0.0)


def test_inputs_are_validated_when_the_mechanism_is_used():
    laplace = LaplaceMechanism(epsilon=1.0, dimension=3)
    with pytest.raises(ValueError, match="values"):
        laplace.randomise(np.zeros((4, 2)), 0)
    with pytest.raises(ValueError, match="values"):
        laplace.randomise(np.zeros(3), 0)
    with pytest.raises(ValueError, match="NaN"):
        laplace.randomise(np.array([[0.0, np.nan, 0.0]]), 0)
    rr = KaryRandomizedResponse(epsilon=1.0, n_categories=3)
    with pytest.raises(ValueError, match="values"):
        rr.randomise(np.array([0, 3]), 0)
    with pytest.raises(ValueError, match="values"):
        rr.randomise(np.array([0.0, 0.5]), 0)
    with pytest.raises(TypeError, match="values"):
        rr.randomise(np.array(["0", "1"]), 0)
    with pytest.raises(ValueError, match="values"):
        BinaryRandomizedResponse(epsilon=1.0).randomise(np.array([0, 1, 2]), 0)


# --- epsilon = inf --------------------------------------------------------------------


def test_infinite_epsilon_releases_the_input_unchanged():
    x = np.random.default_rng(0).uniform(-1, 1, size=(50, 3))
    laplace = LaplaceMechanism(epsilon=math.inf, dimension=3)
    assert not laplace.is_private and laplace.scale == 0.0
    np.testing.assert_array_equal(laplace.randomise(x, 1), x)
    np.testing.assert_array_equal(laplace.variance(x), 0.0)
    np.testing.assert_array_equal(laplace.bias(x), 0.0)
    y = np.random.default_rng(1).integers(0, 4, size=50)
    for rr in (
        KaryRandomizedResponse(epsilon=math.inf, n_categories=4),
        BinaryRandomizedResponse(epsilon=math.inf),
        FeedbackBit(epsilon=math.inf),
    ):
        values = y if rr.n_categories == 4 else y % 2
        assert not rr.is_private and rr.keep_probability == 1.0
        np.testing.assert_array_equal(rr.randomise(values, 1), values)
        np.testing.assert_array_equal(rr.variance(values), 0.0)
        np.testing.assert_array_equal(rr.bias(values), 0.0)


# --- epsilon <-> noise parameter ------------------------------------------------------


@pytest.mark.parametrize("epsilon", [1e-3, 0.1, 1.0, 7.5, 300.0])
@pytest.mark.parametrize("sensitivity", [0.5, 2.0, 22.0])
def test_laplace_scale_round_trip(epsilon, sensitivity):
    scale = laplace_scale(epsilon=epsilon, sensitivity=sensitivity)
    assert scale == pytest.approx(sensitivity / epsilon, rel=1e-15)
    assert laplace_epsilon(scale=scale, sensitivity=sensitivity) == pytest.approx(
        epsilon, rel=1e-14
    )
    assert laplace_scale(
        epsilon=laplace_epsilon(scale=scale, sensitivity=sensitivity),
        sensitivity=sensitivity,
    ) == pytest.approx(scale, rel=1e-14)


def test_laplace_round_trip_at_infinity():
    assert laplace_scale(epsilon=math.inf, sensitivity=2.0) == 0.0
    assert laplace_epsilon(scale=0.0, sensitivity=2.0) == math.inf


@pytest.mark.parametrize("epsilon", [1e-3, 0.1, 1.0, 5.0, 20.0, 30.0])
@pytest.mark.parametrize("k", [2, 3, 10, 100])
def test_rr_keep_probability_round_trip(epsilon, k):
    q = rr_keep_probability(epsilon=epsilon, n_categories=k)
    assert q == pytest.approx(
        math.exp(epsilon) / (math.exp(epsilon) + k - 1), rel=1e-14
    )
    # d epsilon / d q = 1 / (q (1 - q)): a few ulps of q become this much epsilon.
    tolerance = 4 * np.finfo(float).eps / (q * (1.0 - q))
    assert abs(rr_epsilon(keep_probability=q, n_categories=k) - epsilon) <= tolerance


def test_rr_round_trip_at_infinity_and_mechanism_consistency():
    assert rr_keep_probability(epsilon=math.inf, n_categories=5) == 1.0
    assert rr_epsilon(keep_probability=1.0, n_categories=5) == math.inf
    for k in (2, 4):
        rr = KaryRandomizedResponse(epsilon=0.8, n_categories=k)
        assert rr_epsilon(keep_probability=rr.keep_probability, n_categories=k) == (
            pytest.approx(0.8, rel=1e-14)
        )
        np.testing.assert_allclose(rr.transition_matrix().sum(axis=1), 1.0, rtol=1e-15)


def test_laplace_mechanism_uses_the_box_sensitivity():
    mech = LaplaceMechanism(
        epsilon=2.0, dimension=5, lower=-1.0, upper=3.0, sampler="continuous"
    )
    assert mech.sensitivity == 5 * 4.0
    assert mech.scale == pytest.approx(20.0 / 2.0, rel=1e-15)


def test_discrete_laplace_takes_its_accounting_slack_out_of_epsilon():
    mech = LaplaceMechanism(epsilon=2.0, dimension=5, lower=-1.0, upper=3.0)
    assert mech.sampler == "discrete"
    slack = 5 * LaplaceMechanism.SLACK_PER_COORDINATE
    assert mech.scale == pytest.approx(20.0 / (2.0 - slack), rel=1e-15)
    assert mech.grid_step == 4.0 / LaplaceMechanism.GRID_STEPS
    with pytest.raises(ValueError, match="epsilon must exceed"):
        LaplaceMechanism(epsilon=slack, dimension=5)
    with pytest.raises(ValueError, match="sampler"):
        LaplaceMechanism(epsilon=1.0, dimension=5, sampler="gaussian")


def test_release_events_describe_the_mechanism_and_are_immutable():
    mech = LaplaceMechanism(epsilon=2.0, dimension=4)
    event = mech.event()
    assert isinstance(event, ReleaseEvent)
    assert event.mechanism == "laplace" and event.epsilon == 2.0
    assert event.as_dict()["scale"] == mech.scale
    assert event.as_dict()["sampler"] == "discrete"
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.epsilon = 1.0  # type: ignore[misc]
    assert FeedbackBit(epsilon=1.0).event().mechanism == "feedback_bit"
    assert BinaryRandomizedResponse(epsilon=1.0).event().as_dict()[
        "keep_probability"
    ] == (pytest.approx(math.e / (1 + math.e)))


# --- stated bias and variance vs Monte Carlo ------------------------------------------


@pytest.mark.parametrize("sampler", ["discrete", "continuous"])
def test_laplace_bias_and_variance_match_monte_carlo(sampler):
    n = 200_000
    mech = LaplaceMechanism(epsilon=2.0, dimension=3, sampler=sampler)  # b ~ 3 * 2 / 2
    b = mech.scale
    x = np.tile([1.7, -0.3, -2.5], (n, 1))  # two coordinates outside the box: clipped
    z = mech.randomise(x, 10)
    bias, var = mech.bias(x[:1])[0], mech.variance(x[:1])[0]
    # The discrete sampler releases on a grid: rounding is its only bias in the box.
    rounding = mech.grid_step / 2 if sampler == "discrete" else 0.0
    np.testing.assert_allclose(bias, [-0.7, 0.0, 1.5], rtol=0, atol=rounding + 1e-15)
    # Discrete Laplace variance 2 a g^2 / (1 - a)^2 = 2 b^2 - g^2 / 6 + O(g^4 / b^2).
    np.testing.assert_allclose(var, 2 * b**2, rtol=1e-9)
    # Laplace: Var = 2 b^2, fourth central moment 24 b^4 -> SE of the sample variance.
    assert np.all(np.abs(z.mean(axis=0) - (x[0] + bias)) < Z * np.sqrt(var / n))
    assert np.all(np.abs(z.var(axis=0) - var) < Z * np.sqrt((24 * b**4 - var**2) / n))


def _bernoulli_var_se(p: np.ndarray, n: int) -> np.ndarray:
    mu4 = p * (1 - p) * (1 - 3 * p + 3 * p**2)
    return np.sqrt((mu4 - (p * (1 - p)) ** 2) / n)


@pytest.mark.parametrize("cls", [BinaryRandomizedResponse, FeedbackBit])
@pytest.mark.parametrize("truth", [0, 1])
def test_binary_rr_bias_and_variance_match_monte_carlo(cls, truth):
    n = 200_000
    mech = cls(epsilon=0.7)
    q = mech.keep_probability
    y = np.full(n, truth)
    out = mech.randomise(y, 20 + truth)
    bias, var = mech.bias(y[:1])[0], mech.variance(y[:1])[0]
    assert bias == pytest.approx((1 - q) * (1 - 2 * truth))
    assert var == pytest.approx(q * (1 - q))
    p_one = truth + bias
    assert abs(out.mean() - p_one) < Z * np.sqrt(var / n)
    assert abs(out.var() - var) < Z * _bernoulli_var_se(np.array(p_one), n)


def test_kary_rr_bias_and_variance_match_monte_carlo():
    n, k = 200_000, 5
    mech = KaryRandomizedResponse(epsilon=1.5, n_categories=k)
    y = np.full(n, 2)
    out = mech.randomise(y, 30)
    onehot = np.eye(k)[out]
    expected = np.eye(k)[2] + mech.bias(y[:1])[0]
    np.testing.assert_allclose(expected, mech.transition_matrix()[2])
    var = mech.variance(y[:1])[0]
    np.testing.assert_allclose(var, expected * (1 - expected))
    assert np.all(np.abs(onehot.mean(axis=0) - expected) < Z * np.sqrt(var / n))
    assert np.all(np.abs(onehot.var(axis=0) - var) < Z * _bernoulli_var_se(expected, n))
    # The other K-1 categories are equally likely.
    others = np.delete(onehot.mean(axis=0), 2)
    assert np.ptp(others) < 2 * Z * np.sqrt(var[0] / n)


# --- debiasing ------------------------------------------------------------------------


def test_binary_debias_mean_is_unbiased_with_the_stated_variance():
    reps, n, mu = 4000, 250, 0.3
    mech = BinaryRandomizedResponse(epsilon=1.0)
    y = (np.arange(reps * n) % 10 < 3).astype(int)  # exactly 30% ones in every block
    reported = mech.randomise(y, 40).reshape(reps, n).mean(axis=1)
    est = mech.debias_mean(reported)
    assert mech.debias_mean(
        mu * (2 * mech.keep_probability - 1) + 1 - mech.keep_probability
    ) == pytest.approx(mu)
    # Fixed true bits: Var(mean of reports) = q (1 - q) / n.
    q = mech.keep_probability
    var = q * (1 - q) / (n * (2 * q - 1) ** 2)
    assert abs(est.mean() - mu) < Z * np.sqrt(var / reps)
    # The estimates are close to normal: SE of the sample variance ~ var sqrt(2/(R-1)).
    assert abs(est.var(ddof=1) - var) < Z * var * np.sqrt(2 / (reps - 1))


def test_kary_debias_frequencies_is_unbiased():
    k, n, reps = 4, 1000, 400
    mech = KaryRandomizedResponse(epsilon=1.0, n_categories=k)
    pi = np.array([0.4, 0.3, 0.2, 0.1])
    t = mech.transition_matrix()
    np.testing.assert_allclose(mech.debias_frequencies(t.T @ pi), pi, atol=1e-14)
    y = np.repeat(np.arange(k), np.round(pi * n).astype(int))  # exactly pi
    out = mech.randomise(np.tile(y, reps), 50).reshape(reps, n)
    reported = np.stack([np.bincount(row, minlength=k) / n for row in out])
    est = np.array([mech.debias_frequencies(f) for f in reported])
    # Exact covariance of the reported frequencies for fixed true categories, mapped
    # through the (linear) debiasing.
    rows = t[y]
    cov_f = (np.diag(rows.sum(axis=0)) - rows.T @ rows) / n**2
    a = np.linalg.inv(t.T)
    sd = np.sqrt(np.diag(a @ cov_f @ a.T))
    assert np.all(np.abs(est.mean(axis=0) - pi) < Z * sd / np.sqrt(reps))
    np.testing.assert_allclose(est.sum(axis=1), 1.0, atol=1e-12)


# --- extreme uniforms -----------------------------------------------------------------


class _LargestBitsGenerator(np.random.Generator):
    """A Generator whose ``integers`` returns the largest value in range."""

    def __init__(self) -> None:
        super().__init__(np.random.PCG64(0))

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False):  # noqa: D102
        return np.full(size, high if endpoint else high - 1, dtype=dtype)


@pytest.mark.parametrize("sampler", ["discrete", "continuous"])
def test_laplace_noise_is_finite_at_the_largest_generator_output(sampler):
    # A legitimate Generator output (the top 53-bit pattern) must not become u = 1,
    # which
    # the inverse CDF turns into log(0): infinite noise (continuous) or a divide-by-zero
    # warning before the clamp (discrete).
    mech = LaplaceMechanism(epsilon=1.0, dimension=2, sampler=sampler)
    z = mech.randomise(np.zeros((3, 2)), _LargestBitsGenerator())
    assert np.all(np.isfinite(z)), z


# --- discrete Laplace: the support must not depend on the input -----------------------


class _SmallestBitsGenerator(np.random.Generator):
    """A Generator whose ``integers`` returns 0: the smallest uniform, 2^-54."""

    def __init__(self) -> None:
        super().__init__(np.random.PCG64(0))

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False):  # noqa: D102
        return np.full(size, low, dtype=dtype)


class _Uniforms:
    """A uniform source replaying given values (each a possible ``uniform`` output)."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = values

    def uniform(self, shape):  # noqa: D102
        return self.values.reshape(shape)


def test_discrete_laplace_clamps_the_output_range_not_the_noise():
    # The documented clamp is the fixed range [lower - R, upper + R]. Clamping the noise
    # k instead makes the support x-dependent: the extreme draw puts -1 at -1 - R, an
    # output that +1 can never produce (unbounded privacy loss with probability ~2^-31).
    mech = LaplaceMechanism(epsilon=1.0, dimension=4)
    x = np.array([[-1.0] * 4, [1.0] * 4, [0.3] * 4])
    z = mech.randomise(x, _SmallestBitsGenerator())
    np.testing.assert_array_equal(z[1], z[0])
    np.testing.assert_array_equal(z[2], z[0])


class _Stages:
    """Replays one array of uniforms per call: stage 0 (zero/sign), 1 (Q), 2 (R)."""

    def __init__(self, *stages: np.ndarray) -> None:
        self.stages = list(stages)

    def uniform(self, shape):  # noqa: D102
        return self.stages.pop(0).reshape(shape)


def test_discrete_laplace_noise_support_has_no_holes_inside_the_clamp():
    # Every |k| up to the clamp must be reachable with its own cells of uniforms;
    # otherwise x and x + grid_step (neighbouring inputs) have different supports. The
    # sampler draws |k| - 1 = q Q + R in two stages; check each stage's inversion.
    mech = LaplaceMechanism(epsilon=0.25, dimension=1)  # b = 8
    t, q, big_k = mech.steps_per_scale, mech.block, mech.clamp_steps
    n_blocks = (big_k + mech.GRID_STEPS) // q + 1
    # Stage 1: Q = j on u1 in (b^(j+1), b^j], b = a^q. Every j up to the clamp must own
    # at least 2^18 of the 2^52 uniform cells (probability >= 2^-34, as documented).
    j = np.arange(n_blocks)
    low, high = np.exp(-(j + 1) * q / t), np.exp(-j * q / t)
    assert np.all((high - low) * 2**52 >= 2**18)
    mid = (low + high) / 2
    top = np.full(j.size, 1.0 - 2.0**-53)  # stage 0: positive sign; stage 2: R = 0
    k = mech.randomise(np.full((j.size, 1), -1.0), _Stages(top, mid, top))[:, 0]
    steps = np.round((k + 1.0) / mech.grid_step).astype(np.int64)
    expected = np.minimum(1 + q * j, mech.GRID_STEPS + big_k)
    np.testing.assert_array_equal(steps, expected)
    # Stage 2: R = r on u2 with P(R >= r) = (a^r - a^q) / (1 - a^q); midpoints of the
    # analytic cells of every r in {0..q-1} must map back to r.
    r = np.arange(q)
    a = np.exp(-1.0 / t)
    survival = (a**r - a**q) / (1 - a**q)
    upper = np.append(survival[1:], 0.0)
    # R >= r exactly when 1 - u2 >= 1 - P(R >= r), i.e. u2 <= P(R >= r).
    u2 = (survival + upper) / 2
    u1 = np.full(q, 0.999)  # Q = 0
    z = mech.randomise(np.full((q, 1), -1.0), _Stages(np.full(q, 0.99), u1, u2))[:, 0]
    np.testing.assert_array_equal(np.round((z + 1.0) / mech.grid_step) - 1, r)


# --- empirical privacy ----------------------------------------------------------------


def _laplace_loss_statistic(z: np.ndarray) -> np.ndarray:
    r"""Sum of the coordinates clipped to [-1, 1].

    Between the inputs :math:`-\mathbf 1` and :math:`+\mathbf 1` the log density ratio
    of a Laplace release is :math:`-(2/b)\sum_k \mathrm{clip}(z_k, -1, 1)`, a function
    of this statistic, so binning it loses nothing: at its atoms :math:`\pm p` the ratio
    is exactly :math:`e^{\pm\varepsilon}`.
    """
    return np.clip(z, -1.0, 1.0).sum(axis=1)


def _laplace_bins(p: int) -> np.ndarray:
    # Separate bins for the atoms at -p and +p, equal-width bins in between.
    return np.concatenate([[-p + 1e-9], np.linspace(-p, p, 17)[1:-1], [p - 1e-9]])


class _HalfScaleLaplace(LaplaceMechanism):
    """Broken: half the calibrated scale, so its true epsilon is twice the claim."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.scale /= 2.0


class _PerCoordinateLaplace(LaplaceMechanism):
    """Broken: calibrated to one coordinate's sensitivity; true epsilon p times it."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.scale = (self.upper - self.lower) / self.epsilon


def _leaky_rr(cls, *, epsilon, leak_epsilon, **kwargs):
    """Broken RR: claims ``epsilon``, keeps the truth as often as ``leak_epsilon``."""
    mech = cls(epsilon=epsilon, **kwargs)
    mech.keep_probability = rr_keep_probability(
        epsilon=leak_epsilon, n_categories=mech.n_categories
    )
    return mech


def _audit_laplace(mech, seed):
    p = mech.dimension
    return estimate_epsilon(
        mech.randomise,
        -np.ones(p),
        np.ones(p),
        n=N_AUDIT,
        bins=_laplace_bins(p),
        statistic=_laplace_loss_statistic,
        rng=seed,
    )


def _audit_rr(mech, seed):
    k = mech.n_categories
    return estimate_epsilon(
        mech.randomise, 0, 1, n=N_AUDIT, bins=np.arange(k - 1) + 0.5, rng=seed
    )


@pytest.mark.parametrize("sampler", ["discrete", "continuous"])
@pytest.mark.parametrize(("epsilon", "dimension"), [(1.0, 4), (2.0, 2), (0.5, 1)])
def test_laplace_passes_the_privacy_audit_tightly(epsilon, dimension, sampler):
    mech = LaplaceMechanism(epsilon=epsilon, dimension=dimension, sampler=sampler)
    audit = _audit_laplace(mech, seed=100 + dimension)
    assert not audit.violates(epsilon), audit
    assert audit.brackets(epsilon), audit  # tight: the estimate is close to epsilon
    assert abs(audit.estimate - epsilon) <= audit.margin, audit


def test_laplace_audit_on_a_single_coordinate_without_a_statistic():
    # p = 1: the raw output is the statistic; below -1 every bin has ratio e^epsilon.
    mech = LaplaceMechanism(epsilon=1.0, dimension=1, sampler="continuous")
    audit = estimate_epsilon(
        lambda v, rng: mech.randomise(v, rng)[:, 0],
        [-1.0],
        [1.0],
        n=N_AUDIT,
        bins=np.linspace(-6, 6, 25),
        rng=7,
    )
    assert not audit.violates(1.0) and audit.brackets(1.0), audit


@pytest.mark.parametrize("sampler", ["discrete", "continuous"])
@pytest.mark.parametrize(
    ("broken", "true_epsilon"),
    [(_HalfScaleLaplace, 2.0), (_PerCoordinateLaplace, 4.0)],
    ids=["half-scale", "per-coordinate-sensitivity"],
)
def test_the_privacy_audit_catches_a_mis_scaled_laplace(broken, true_epsilon, sampler):
    mech = broken(epsilon=1.0, dimension=4, sampler=sampler)
    audit = _audit_laplace(mech, seed=200)
    assert audit.violates(1.0), audit
    assert audit.brackets(true_epsilon), audit


@pytest.mark.parametrize(
    "factory",
    [
        lambda e: BinaryRandomizedResponse(epsilon=e),
        lambda e: FeedbackBit(epsilon=e),
        lambda e: KaryRandomizedResponse(epsilon=e, n_categories=4),
        lambda e: KaryRandomizedResponse(epsilon=e, n_categories=10),
    ],
    ids=["binary", "feedback", "kary4", "kary10"],
)
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_randomized_response_passes_the_privacy_audit_tightly(factory, epsilon):
    mech = factory(epsilon)
    audit = _audit_rr(mech, seed=int(10 * epsilon) + mech.n_categories)
    assert not audit.violates(epsilon), audit
    assert audit.brackets(epsilon), audit
    assert abs(audit.estimate - epsilon) <= audit.margin, audit


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        (BinaryRandomizedResponse, {}),
        (FeedbackBit, {}),
        (KaryRandomizedResponse, {"n_categories": 4}),
    ],
)
@pytest.mark.parametrize("leak_epsilon", [1.15, 1.5, 3.0])
def test_the_privacy_audit_catches_rr_with_too_high_a_keep_probability(
    cls, kwargs, leak_epsilon
):
    mech = _leaky_rr(cls, epsilon=1.0, leak_epsilon=leak_epsilon, **kwargs)
    audit = _audit_rr(mech, seed=300)
    assert audit.violates(1.0), audit
    assert audit.brackets(leak_epsilon), audit


def test_the_privacy_audit_catches_kary_rr_calibrated_as_binary():
    # The classic slip: q = e^eps / (1 + e^eps) for K = 4 categories. The ratio
    # q/((1-q)/3) is 3 e^eps, so the true epsilon is eps + log 3.
    mech = KaryRandomizedResponse(epsilon=1.0, n_categories=4)
    mech.keep_probability = rr_keep_probability(epsilon=1.0, n_categories=2)
    audit = _audit_rr(mech, seed=301)
    assert audit.violates(1.0), audit
    assert audit.brackets(1.0 + math.log(3.0)), audit


def test_the_privacy_audit_catches_a_mechanism_without_noise():
    # Disjoint supports: the ratio is unbounded, whatever epsilon is claimed.
    audit = estimate_epsilon(
        lambda v, rng: v.astype(float), 0, 1, n=10_000, bins=[0.5], rng=0
    )
    assert audit.violates(5.0) and audit.estimate == math.inf


def test_the_privacy_audit_finds_nothing_between_identical_inputs():
    mech = LaplaceMechanism(epsilon=1.0, dimension=4)
    audit = estimate_epsilon(
        mech.randomise,
        np.ones(4),
        np.ones(4),
        n=N_AUDIT,
        bins=_laplace_bins(4),
        statistic=_laplace_loss_statistic,
        rng=5,
    )
    assert audit.lower_bound <= 0.0 and audit.estimate <= audit.margin, audit
