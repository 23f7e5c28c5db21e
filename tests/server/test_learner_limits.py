"""The moment classifier at the limits: no release noise with an ill-conditioned
public Gram, an unbalanced design's intercept, and no public features at small
epsilon."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit
from scipy.stats import ortho_group

from ldpfda.client.protocol import privatize_joint
from ldpfda.config import Settings
from ldpfda.engine import run_repeat
from ldpfda.privacy.joint import SignedFeatureMechanism
from ldpfda.server.fitting import public_gram
from ldpfda.server.learners import MomentLinearClassifier, MomentMulticlassClassifier


def _thin(n, rng, p=6):
    """Features whose label lives in a direction of variance 1e-4 of the rest."""
    turn = ortho_group.rvs(p, random_state=12)
    u = rng.uniform(-1, 1, size=(n, p)) * np.r_[np.ones(p - 2), 0.02, 0.02]
    y = (u[:, -1] + 0.005 * rng.standard_normal(n) > 0).astype(np.int8)
    return u @ turn / np.sqrt(p), y


def _least_squares(x, y):
    w = np.hstack([np.ones((len(x), 1)), x])
    return np.linalg.lstsq(w, 2.0 * y - 1.0, rcond=None)[0]


@pytest.mark.parametrize("seed", [0, 2])
def test_noiseless_releases_reach_least_squares_despite_few_public_rows(seed):
    rng = np.random.default_rng(seed)
    x, y = _thin(3000, rng)
    public, _ = _thin(20, rng)  # condition number of its Gram ~ 1e5
    x_test, y_test = _thin(20_000, rng)
    mech = SignedFeatureMechanism(epsilon=np.inf, n_features=6)
    z = mech.release(x, y, rng)
    theta = _least_squares(x, y)
    clean = (x_test @ theta[1:] + theta[0]) > 0
    fit = MomentLinearClassifier(joint=True, public=public, mechanism=mech.inner)
    fit.fit(z)
    assert fit.gram_source_ == "public features and releases"
    # 3000 release rows against 20 public ones: the releases carry the moment.
    assert fit.gram_weight_ > 0.95
    assert np.mean(fit.predict(x_test) != y_test) <= np.mean(clean != y_test) + 0.01
    assert np.mean(fit.predict(x_test) == clean) > 0.98
    # The public Gram alone loses the thin direction (what the pooling repairs).
    alone = MomentLinearClassifier(joint=True, gram=public_gram(public)).fit(z)
    assert np.mean(alone.predict(x_test) != y_test) > 0.15


def _unbalanced(n, rng, intercept):
    x = rng.uniform(-1, 1, size=(n, 4))
    y = rng.random(n) < expit(intercept + 3.0 * x @ np.array([1.0, -1.0, 0.5, 0.0]))
    return x, y.astype(np.int8)


def test_the_intercept_of_an_unbalanced_design_is_kept_within_its_noise():
    # About 25 % positives; the intercept has its own prior variance, so its
    # shrinkage follows its own noise level, not the slopes'.
    rng = np.random.default_rng(7)
    x, y = _unbalanced(20_000, rng, intercept=-2.0)
    assert 0.2 < y.mean() < 0.3
    mech = SignedFeatureMechanism(epsilon=1.0, n_features=4)
    z = mech.release(x, y, rng)
    public = rng.uniform(-1, 1, size=(1000, 4))
    fit = MomentLinearClassifier(joint=True, public=public, mechanism=mech.inner)
    fit.fit(z)
    big_x, big_y = _unbalanced(1_000_000, np.random.default_rng(8), intercept=-2.0)
    truth = _least_squares(big_x, big_y)[0]
    # The estimate is c_0 - G_0x theta_x; c_0's noise dominates (G_0x ~ 0 here).
    sd = np.sqrt(np.var(z[:, 0], ddof=1) / z.shape[0] + 4.0 / 20_000)
    assert abs(fit.intercept_ - truth) < 4 * sd
    t0, tx = fit.prior_variances_
    assert t0 > 10 * np.var(z[:, 0]) / z.shape[0]
    assert fit.fallback_ == ""


def test_a_balanced_design_never_inflates_its_intercept():
    # With its own prior the intercept is c_0 t0 / (t0 + S_00) up to the small
    # G_0x theta_x term: never above |c_0|, whatever the slopes' shrinkage.
    public = np.random.default_rng(9).uniform(-1, 1, size=(1000, 4))
    mech = SignedFeatureMechanism(epsilon=0.5, n_features=4)
    for seed in range(10):
        rng = np.random.default_rng(seed)
        x, y = _unbalanced(3000, rng, intercept=0.0)
        z = mech.release(x, y, rng)
        fit = MomentLinearClassifier(joint=True, public=public, mechanism=mech.inner)
        fit.fit(z)
        drift = abs(fit.gram_[0, 1:] @ fit.coef_)
        assert abs(fit.intercept_) <= abs(z[:, 0].mean()) + drift + 1e-12


def test_without_public_features_small_epsilon_falls_back_and_says_so():
    # At epsilon 0.5 the releases' own second moment is too noisy: it is shrunk
    # towards a diagonal, the report says so, and the fit beats the majority class.
    settings = Settings(epsilon=0.5, public_features=False, n_test=20_000, seed=0)
    result = run_repeat(settings, 0)
    signal = result.report()["signal"]
    assert signal["gram_source"] == "releases, shrunk towards a diagonal"
    # Below epsilon 0.61 the hybrid release is Duchi's: its squares are constant and
    # identify no feature entry, so the diagonal is all there is.
    assert signal["fallback"] == "a diagonal second moment (the releases' weight 0.00)"
    assert result.test_errors["moment"] < 0.45


def test_a_release_that_identifies_no_feature_moment_takes_the_uniform_law():
    rng = np.random.default_rng(5)
    x, y = _unbalanced(3000, rng, intercept=0.0)
    mech = SignedFeatureMechanism(epsilon=0.5, n_features=4)
    z = mech.release(x, y, rng)
    fit = MomentLinearClassifier(joint=True, mechanism=mech.inner).fit(z)
    assert not fit.identified_[1:, 1:].any()
    np.testing.assert_allclose(fit.gram_, np.diag([1.0, *[1 / 3] * 4]), atol=1e-9)
    assert fit.fallback_.startswith("a diagonal second moment")


def test_k_class_intercept_rows_carry_the_class_shares_without_feature_signal():
    # Features independent of the label, classes drawn 0.6 / 0.25 / 0.15: the
    # intercept rows, shrunk towards their common part with their own prior, keep
    # the shares, and the argmax is the most frequent class.
    rng = np.random.default_rng(4)
    n = 30_000
    x = rng.uniform(-1, 1, size=(n, 4))
    y = rng.choice(3, size=n, p=[0.6, 0.25, 0.15]).astype(np.int8)
    payload = privatize_joint(
        x, y, client_ids=np.arange(n), seed=1, epsilon=2.0, n_classes=3
    )
    public = rng.uniform(-1, 1, size=(1000, 4))
    fit = MomentMulticlassClassifier(
        n_classes=3, public=public, mechanism=payload.release_mechanism().inner
    ).fit(payload.releases, payload.classes)
    assert fit.prior_variances_.shape == (2,)
    assert np.mean(fit.predict(rng.uniform(-1, 1, size=(5000, 4))) == 0) > 0.95
    # Intercepts ordered like the shares 2 p_k - 1 = 0.2, -0.5, -0.7.
    assert fit.intercept_[0] > fit.intercept_[1] > fit.intercept_[2]


# -- where no signal is detected: the fallback, or the posterior averaged over tau ----


def test_the_averaged_posterior_is_the_integral_over_the_prior_variance():
    # One coefficient: c ~ N(g theta, s), theta ~ N(0, tau^2), tau ~ half-Cauchy(0, 1).
    # The grid's average equals the integral over u = log tau^2 done by quadrature.
    from scipy.integrate import quad

    from ldpfda.server.learners import _averaged_posterior_mean

    g, s = 0.4, 0.09
    for c in (0.05, 0.3, -1.2):

        def density(u, c=c):
            t = np.exp(u)
            v = g * t * g + s
            prior = np.sqrt(t) / (1.0 + t)
            return prior * np.exp(-0.5 * (np.log(v) + c * c / v))

        def numerator(u, c=c):
            t = np.exp(u)
            return density(u) * t * g * c / (g * t * g + s)

        mass = quad(density, -40, 40, limit=200)[0]
        expected = quad(numerator, -40, 40, limit=200)[0] / mass
        got = _averaged_posterior_mean(
            np.array([[g]]), np.array([[c]]), np.array([[[s]]]), np.zeros(1, int)
        )
        assert got.shape == (1, 1)
        assert got[0, 0] == pytest.approx(expected, rel=2e-3)


def test_where_the_slopes_prior_is_at_its_floor_averaging_keeps_the_signal():
    # Study 1's design at epsilon 0.5: the marginal likelihood's maximum puts the
    # slopes' prior variance at 0 in 16 of these 200 samples, though the labels
    # depend on the features. The fallback then predicts one class (expected error
    # 0.448 on average); the averaged posterior keeps slopes along the truth (every
    # one of the 16 at a positive cosine) and errs 0.339: 0.109 less, 5.7 standard
    # errors of the paired difference.
    beta = np.array([1.0, -0.5, 1 / 3, -0.25])
    gram = np.diag([1.0, *[1 / 3] * 4])
    x_test = np.random.default_rng(99).uniform(-1, 1, size=(50_000, 4))
    p_test = expit(5.0 * x_test @ beta)

    def expected_error(fit):
        return np.mean(np.where(fit.predict(x_test) == 1, 1.0 - p_test, p_test))

    gains = []
    for seed in range(200):
        rng = np.random.default_rng(seed)
        x = rng.uniform(-1, 1, size=(3000, 4))
        y = (rng.random(3000) < expit(5.0 * x @ beta)).astype(np.int8)
        z = SignedFeatureMechanism(epsilon=0.5, n_features=4).release(x, y, rng)
        fallback = MomentLinearClassifier(
            joint=True, gram=gram, no_signal_fit="fallback"
        ).fit(z)
        if not fallback.fallback_.startswith("no signal detected"):
            continue
        average = MomentLinearClassifier(
            joint=True, gram=gram, no_signal_fit="average"
        ).fit(z)
        assert average.fallback_ == (
            "no signal detected in the features: the posterior mean averaged over "
            "the prior variances"
        )
        assert average.coef_.ravel() @ beta > 0
        gains.append(expected_error(fallback) - expected_error(average))
    assert len(gains) >= 8  # 16 of 200 here; fewer would test little
    se = np.std(gains, ddof=1) / np.sqrt(len(gains))
    assert np.mean(gains) > 3 * se


def test_on_features_without_signal_the_average_mostly_keeps_the_majority():
    # Labels independent of the features, 30 % positives, epsilon 0.5: where the fit
    # detects no signal, the fallback predicts the majority class (0.989 of the test
    # points on average over these 100 samples); the averaged posterior keeps some
    # noise slopes and predicts it for 0.962 (its cost where there is truly nothing
    # to learn, against its gain above). Mean share of 54 samples: standard error
    # about 0.012, so 0.9 is 5 standard errors below what was measured.
    gram = np.diag([1.0, *[1 / 3] * 4])
    x_test = np.random.default_rng(98).uniform(-1, 1, size=(20_000, 4))
    shares = []
    for seed in range(100):
        rng = np.random.default_rng(1000 + seed)
        x = rng.uniform(-1, 1, size=(3000, 4))
        y = (rng.random(3000) < 0.3).astype(np.int8)
        z = SignedFeatureMechanism(epsilon=0.5, n_features=4).release(x, y, rng)
        fit = MomentLinearClassifier(joint=True, gram=gram, no_signal_fit="average")
        fit.fit(z)
        if fit.fallback_.startswith("no signal detected"):
            shares.append(np.mean(fit.predict(x_test) == 0))
    assert len(shares) >= 30
    assert np.mean(shares) > 0.9


def test_k_classes_average_where_no_signal_is_detected_and_the_setting_reaches_it():
    # Features independent of 3 classes, epsilon 0.5: the K-class fit detects no
    # signal in about half of the release seeds (10 of the first 20).
    from ldpfda.server.fitting import make_learner

    rng = np.random.default_rng(6)
    n = 3000
    x = rng.uniform(-1, 1, size=(n, 4))
    y = rng.choice(3, size=n, p=[0.5, 0.3, 0.2]).astype(np.int8)
    public = rng.uniform(-1, 1, size=(500, 4))
    settings = Settings(epsilon=0.5, no_signal_fit="average")
    floored = 0
    for seed in range(6):
        payload = privatize_joint(
            x, y, client_ids=np.arange(n), seed=seed, epsilon=0.5, n_classes=3
        )
        fit = make_learner(payload, settings, public, learner="moment")
        assert isinstance(fit, MomentMulticlassClassifier)
        assert fit.no_signal_fit == "average"
        fit.fit(payload.releases, payload.classes)
        fallback = make_learner(
            payload, settings.replace(no_signal_fit="fallback"), public
        ).fit(payload.releases, payload.classes)
        if not fallback.fallback_:
            # Without a floor the setting changes nothing.
            np.testing.assert_array_equal(fit.coef_, fallback.coef_)
            continue
        floored += 1
        assert fit.fallback_ == (
            "no signal detected in the features: the posterior mean averaged over "
            "the prior variances"
        )
        assert "averaged" not in fallback.fallback_
        assert fit.coef_.shape == (3, 4) and np.all(np.isfinite(fit.coef_))
        assert np.any(fit.coef_ != fallback.coef_)
    assert floored >= 2
    # The average is the default everywhere the setting is read.
    assert Settings().no_signal_fit == "average"
    assert MomentLinearClassifier().no_signal_fit == "average"
    assert MomentMulticlassClassifier().no_signal_fit == "average"
    with pytest.raises(ValueError, match="no_signal_fit must be one of"):
        MomentLinearClassifier(no_signal_fit="zero").fit(x, y > 0)


def test_the_average_stays_finite_when_the_noise_covariance_is_singular():
    # A noiseless release of a constant feature has S = 0 in that coordinate; at
    # small prior variances G T G + S is then nearly singular.
    from ldpfda.server.learners import _averaged_posterior_mean

    gram = np.diag([1.0, 1 / 3, 0.0])
    cross = np.array([[0.2], [0.1], [0.0]])
    noise = np.zeros((1, 3, 3))
    theta = _averaged_posterior_mean(gram, cross, noise, np.array([0, 1, 1]))
    assert theta.shape == (3, 1) and np.all(np.isfinite(theta))
