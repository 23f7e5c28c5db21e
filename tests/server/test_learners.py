"""Learners for privatized releases and the MRMA ``learner=`` hook."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression

from ldpfda.datasets.synthetic import VectorDesign
from ldpfda.privacy.joint import (
    SignedFeatureMechanism,
    signed_features,
)
from ldpfda.privacy.laplace import LaplaceMechanism
from ldpfda.privacy.randomized_response import BinaryRandomizedResponse
from ldpfda.privacy.vector_mechanisms import HybridMechanism
from ldpfda.server.learners import (
    FlipCorrectedLogisticRegression,
    MomentLinearClassifier,
    MomentMulticlassClassifier,
    _refit_along,
    as_weak_learner,
    nearest_psd,
)
from ldpfda.server.mrma import LinearModels
from ldpfda.server.mrma import fit_weak_models as fit_weak_models_with


@pytest.fixture(scope="module")
def vector_data():
    x, y = VectorDesign().sample(4000, np.random.default_rng(0))
    return x, y


#: Plain least squares (no regularisation).
RIDGE0 = {"regularization": "ridge", "alpha": 0.0}


def _ols(x, y):
    w = np.hstack([np.ones((x.shape[0], 1)), x])
    return np.linalg.lstsq(w, 2.0 * y - 1.0, rcond=None)[0]


def _cosine(a, b):
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


# ------------------------------------------------------------------------------------
# MomentLinearClassifier
# ------------------------------------------------------------------------------------


def test_moment_classifier_on_clean_data_is_least_squares(vector_data):
    x, y = vector_data
    theta = _ols(x, y)
    clf = MomentLinearClassifier(**RIDGE0).fit(x, y)
    np.testing.assert_allclose(clf.coef_, theta[1:], rtol=1e-8, atol=1e-10)
    assert clf.intercept_ == pytest.approx(theta[0], abs=1e-10)
    joint = MomentLinearClassifier(**RIDGE0, joint=True).fit(signed_features(x, y))
    np.testing.assert_allclose(joint.coef_, theta[1:], rtol=1e-8, atol=1e-10)


def test_moment_classifier_with_a_public_gram(vector_data):
    x, y = vector_data
    w = np.hstack([np.ones((x.shape[0], 1)), x])
    gram = w.T @ w / x.shape[0]
    clf = MomentLinearClassifier(**RIDGE0, gram=gram).fit(x, y)
    np.testing.assert_allclose(clf.coef_, _ols(x, y)[1:], rtol=1e-8, atol=1e-10)
    assert clf.identified_.all()


def test_moment_classifier_removes_additive_noise_from_the_gram():
    rng = np.random.default_rng(1)
    n = 200_000
    x = rng.uniform(-1, 1, size=(n, 3))
    y = (rng.random(n) < 0.5 + 0.45 * x[:, 0] - 0.2 * x[:, 1]).astype(np.int8)
    lap = LaplaceMechanism(epsilon=12.0, dimension=3)
    xr = lap.randomise(x, rng)
    noise = lap.variance(x[:1])[0]
    naive = MomentLinearClassifier(**RIDGE0).fit(xr, y)
    fixed = MomentLinearClassifier(**RIDGE0, mechanism=lap).fit(xr, y)
    truth = np.mean(x**2, axis=0)
    se = np.sqrt(np.var(xr**2, axis=0) / n)
    assert np.all(np.abs(np.diag(fixed.gram_)[1:] - truth) <= 5 * se)
    assert np.all(np.diag(naive.gram_)[1:] - truth > noise / 2)
    clean = _ols(x, y)
    assert _cosine(fixed.coef_, clean[1:]) > 0.99
    # The uncorrected fit is shrunk by the inflated diagonal.
    assert np.linalg.norm(naive.coef_) < 0.5 * np.linalg.norm(fixed.coef_)


def test_moment_classifier_corrects_the_flip_rate():
    rng = np.random.default_rng(2)
    n = 300_000
    x = rng.uniform(-1, 1, size=(n, 2))
    y = (rng.random(n) < 0.5 + 0.4 * x[:, 0]).astype(np.int8)
    rr = BinaryRandomizedResponse(epsilon=1.0)
    yr = rr.randomise(y, rng).astype(np.int8)
    rho = 1.0 - rr.keep_probability
    fit = MomentLinearClassifier(**RIDGE0, label_flip_rate=rho).fit(x, yr)
    clean = _ols(x, y)
    assert fit.coef_[0] == pytest.approx(clean[1], abs=0.03)
    assert abs(fit.coef_[1]) < 0.03


def test_moment_classifier_on_joint_hybrid_releases_beats_chance_by_far():
    x, y = VectorDesign().sample(30_000, np.random.default_rng(3))
    mech = SignedFeatureMechanism(epsilon=2.0, n_features=4)
    z = mech.release(x, y, np.random.default_rng(4))
    gram = np.diag([1.0, 1 / 3, 1 / 3, 1 / 3, 1 / 3])
    clf = MomentLinearClassifier(joint=True, gram=gram).fit(z)
    x_test, y_test = VectorDesign().sample(20_000, np.random.default_rng(5))
    assert np.mean(clf.predict(x_test) != y_test) < 0.17
    # Without public data the releases identify the diagonal only (one sampled
    # coordinate); the box bounds keep the estimate valid.
    private = MomentLinearClassifier(joint=True, mechanism=mech.inner).fit(z)
    assert np.array_equal(private.identified_, np.eye(5, dtype=bool))
    assert np.mean(private.predict(x_test) != y_test) < 0.2


def test_moment_classifier_prediction_interface(vector_data):
    x, y = vector_data
    clf = MomentLinearClassifier().fit(x, y)
    proba = clf.predict_proba(x[:50])
    assert proba.shape == (50, 2) and np.allclose(proba.sum(axis=1), 1.0)
    assert np.all((proba >= 0) & (proba <= 1))
    np.testing.assert_array_equal(
        clf.predict(x[:50]), (clf.decision_function(x[:50]) > 0).astype(np.int8)
    )
    models = clf.to_linear_models()
    assert isinstance(models, LinearModels)
    np.testing.assert_array_equal(models.predict(x[:50])[:, 0], clf.predict(x[:50]))
    np.testing.assert_array_equal(clf.classes_, [0, 1])
    assert clone(clf).get_params()["alpha"] == clf.alpha


def test_moment_classifier_validation(vector_data):
    x, y = vector_data
    with pytest.raises(NotFittedError):
        MomentLinearClassifier().predict(x)
    with pytest.raises(ValueError, match="alpha must be in"):
        MomentLinearClassifier(alpha=-1.0).fit(x, y)
    with pytest.raises(ValueError, match="label_flip_rate must be in"):
        MomentLinearClassifier(label_flip_rate=0.5).fit(x, y)
    with pytest.raises(ValueError, match="y must be None"):
        MomentLinearClassifier(joint=True).fit(x, y)
    with pytest.raises(ValueError, match="y is required"):
        MomentLinearClassifier().fit(x)
    with pytest.raises(ValueError, match="gram must have shape"):
        MomentLinearClassifier(gram=np.eye(4)).fit(x, y)
    with pytest.raises(ValueError, match="vectors of length 3"):
        MomentLinearClassifier(mechanism=HybridMechanism(epsilon=1.0, dimension=3)).fit(
            x, y
        )
    clf = MomentLinearClassifier().fit(x, y)
    with pytest.raises(ValueError, match="X has 3 features"):
        clf.predict(x[:, :3])


def _marginal(gram, c, noise, tau):
    m = gram @ np.diag(tau) @ gram + noise
    return np.linalg.slogdet(m)[1] + c @ np.linalg.solve(m, c)


def test_empirical_bayes_is_the_stated_posterior_mean(vector_data):
    x, y = vector_data
    clf = MomentLinearClassifier(threshold="posterior").fit(x, y)
    rows = (2.0 * y - 1.0)[:, None] * np.hstack([np.ones((y.size, 1)), x])
    c = rows.mean(axis=0)
    noise = np.cov(rows, rowvar=False) / y.size
    g = clf.gram_
    assert clf.noise_variance_ == pytest.approx(np.trace(noise) / 5)
    # One prior variance for the intercept, one for the slopes.
    t0, tx = clf.prior_variances_
    tau = np.array([t0, tx, tx, tx, tx])
    theta = tau * (g @ np.linalg.solve(g @ np.diag(tau) @ g + noise, c))
    np.testing.assert_allclose(clf.coef_, theta[1:], rtol=1e-6)
    assert clf.intercept_ == pytest.approx(theta[0], rel=1e-6, abs=1e-9)
    assert clf.shrinkage_ == pytest.approx(np.trace(noise) / 5 / tx)
    # They maximise the marginal likelihood: no nearby pair does better.
    best = _marginal(g, c, noise, tau)
    for step in ([0.05, 0], [-0.05, 0], [0, 0.05], [0, -0.05]):
        t = np.exp(np.log([t0, tx]) + step)
        assert best <= _marginal(g, c, noise, np.array([t[0], *[t[1]] * 4])) + 1e-9
    # With this little noise it is least squares up to a tiny shrinkage.
    assert _cosine(clf.coef_, _ols(x, y)[1:]) > 0.9999
    assert clf.fallback_ == ""


def test_the_refit_keeps_the_posterior_direction_and_refits_along_it(vector_data):
    x, y = vector_data
    x = x[:300] + 0.2  # few rows: visible shrinkage; uncentred: the mean term counts
    posterior = MomentLinearClassifier(threshold="posterior").fit(x, y[:300])
    refit = MomentLinearClassifier(threshold="refit").fit(x, y[:300])
    u, g, c = posterior.coef_, posterior.gram_, posterior.cross_moment_
    np.testing.assert_array_equal(refit.gram_, g)
    # Least squares of y~ on (1, u.x) from the same moments, solved here directly.
    system = np.array([[1.0, u @ g[1:, 0]], [u @ g[1:, 0], u @ g[1:, 1:] @ u]])
    a, b = np.linalg.solve(system, [c[0], u @ c[1:]])
    np.testing.assert_allclose(refit.coef_, b * u, rtol=1e-10)
    assert refit.intercept_ == pytest.approx(a, rel=1e-10)
    assert refit.slope_scale_ == pytest.approx([b]) and b > 1.0  # it undoes shrinkage
    np.testing.assert_array_equal(posterior.slope_scale_, [1.0])
    # The refit depends on the posterior's direction only: how much the posterior
    # shrank the slopes, and its intercept, do not move the decision boundary.
    for factor, intercept in ((0.05, 3.0), (20.0, -1.0)):
        moved = np.r_[intercept, factor * u][:, None]
        again, _ = _refit_along(g, c[:, None], moved)
        np.testing.assert_allclose(again[:, 0], np.r_[a, b * u], rtol=1e-9)
    # Along the least-squares solution of the same moments the refit changes nothing.
    theta = np.linalg.solve(g, c)[:, None]
    again, scale = _refit_along(g, c[:, None], theta)
    np.testing.assert_allclose(scale, [1.0], rtol=1e-9)
    np.testing.assert_allclose(again[:, 0], theta[:, 0], rtol=1e-9, atol=1e-12)


def test_empirical_bayes_shrinks_pure_noise():
    # Without signal the posterior mean is c tau / (tau + sigma^2) (G = I): never
    # longer than c. The prior variance of the slopes is 0 (at its floor) when
    # ||c||^2 is below what the noise alone gives, which happened in 176 of 300
    # seeds (0.59): in 20 seeds at least 5 (3 standard deviations below 11.7).
    at_floor = 0
    for seed in range(20):
        z = np.random.default_rng(seed).choice([-1.0, 1.0], size=(500, 4))
        clf = MomentLinearClassifier(
            joint=True, gram=np.eye(4), no_signal_fit="fallback"
        ).fit(z)
        assert np.linalg.norm(clf.coef_) < np.linalg.norm(z[:, 1:].mean(axis=0))
        if clf.fallback_.startswith("no signal detected in the features"):
            at_floor += 1
            assert np.linalg.norm(clf.coef_) < 1e-9
            assert clf.shrinkage_ > 1e9 * clf.noise_variance_
            # The refit keeps that (tiny) direction and fits a scale along it.
            refit = MomentLinearClassifier(
                joint=True, gram=np.eye(4), threshold="refit", no_signal_fit="fallback"
            ).fit(z)
            assert "refit along the limit direction" in refit.fallback_
            assert _cosine(refit.coef_, clf.coef_) > 1 - 1e-9
            assert np.linalg.norm(refit.coef_) > 1e6 * np.linalg.norm(clf.coef_)
    assert at_floor >= 5
    with pytest.raises(ValueError, match="regularization must be one of"):
        MomentLinearClassifier(regularization="lasso").fit(z[:, 1:], z[:, 0] > 0)


def test_nearest_psd():
    good = np.array([[2.0, 0.5], [0.5, 1.0]])
    np.testing.assert_allclose(nearest_psd(good), good)
    fixed = nearest_psd(np.array([[1.0, 2.0], [2.0, 1.0]]))
    assert np.linalg.eigvalsh(fixed).min() > 0


# ------------------------------------------------------------------------------------
# FlipCorrectedLogisticRegression
# ------------------------------------------------------------------------------------


def test_without_flips_it_is_l2_logistic_regression(vector_data):
    x, y = vector_data
    alpha = 0.01
    ours = FlipCorrectedLogisticRegression(alpha=alpha, fit_intercept=False).fit(x, y)
    ref = LogisticRegression(
        C=1.0 / (alpha * x.shape[0]), fit_intercept=False, tol=1e-10, max_iter=10_000
    ).fit(x, y)
    np.testing.assert_allclose(ours.coef_, ref.coef_[0], rtol=1e-4, atol=1e-6)


def test_the_corrected_loss_is_unbiased(vector_data):
    # Weighting every sample and its flipped copy by (1 - rho, rho) is the expectation
    # over the flips, so the corrected fit must equal the clean fit exactly.
    x, y = vector_data
    rho = 0.3
    clean = FlipCorrectedLogisticRegression(alpha=0.05).fit(x, y)
    xx = np.vstack([x, x])
    yy = np.concatenate([y, 1 - y])
    w = np.concatenate([np.full(y.size, 1 - rho), np.full(y.size, rho)])
    corrected = FlipCorrectedLogisticRegression(alpha=0.05, flip_rate=rho).fit(
        xx, yy, sample_weight=w
    )
    np.testing.assert_allclose(corrected.coef_, clean.coef_, rtol=1e-5, atol=1e-7)
    assert corrected.intercept_ == pytest.approx(clean.intercept_, abs=1e-6)
    uncorrected = FlipCorrectedLogisticRegression(alpha=0.05).fit(
        xx, yy, sample_weight=w
    )
    assert np.linalg.norm(uncorrected.coef_) < 0.7 * np.linalg.norm(clean.coef_)


def test_per_sample_flip_rates(vector_data):
    x, y = vector_data
    a = FlipCorrectedLogisticRegression(alpha=0.05, flip_rate=0.2).fit(x, y)
    b = FlipCorrectedLogisticRegression(alpha=0.05).fit(
        x, y, flip_rates=np.full(y.size, 0.2)
    )
    np.testing.assert_allclose(a.coef_, b.coef_)


def test_noisy_label_logistic_recovers_the_direction():
    x, y = VectorDesign().sample(100_000, np.random.default_rng(6))
    rr = BinaryRandomizedResponse(epsilon=1.0)
    yr = rr.randomise(y, np.random.default_rng(7)).astype(np.int8)
    fit = FlipCorrectedLogisticRegression(
        alpha=1e-3, flip_rate=1 - rr.keep_probability
    ).fit(x, yr)
    assert _cosine(fit.coef_, VectorDesign().beta) > 0.99
    proba = fit.predict_proba(x[:10])
    assert np.allclose(proba.sum(axis=1), 1.0)


def test_noisy_label_logistic_validation(vector_data):
    x, y = vector_data
    with pytest.raises(NotFittedError):
        FlipCorrectedLogisticRegression().decision_function(x)
    with pytest.raises(ValueError, match="alpha must be in"):
        FlipCorrectedLogisticRegression(alpha=0.0).fit(x, y)
    with pytest.raises(ValueError, match="flip_rate must be in"):
        FlipCorrectedLogisticRegression(flip_rate=0.5).fit(x, y)
    with pytest.raises(ValueError, match="flip_rates"):
        FlipCorrectedLogisticRegression().fit(x, y, flip_rates=np.full(3, 0.1))
    with pytest.raises(ValueError, match="y must be in"):
        FlipCorrectedLogisticRegression().fit(x, y + 1)


# ------------------------------------------------------------------------------------
# The MRMA learner hook
# ------------------------------------------------------------------------------------


def test_fit_weak_models_with_estimators(vector_data):
    x, y = vector_data
    learner = as_weak_learner(FlipCorrectedLogisticRegression(alpha=0.1))
    a = fit_weak_models_with(
        x, y, learner=learner, n_models=7, subsample_size=40, rng=3
    )
    b = fit_weak_models_with(
        x, y, learner=learner, n_models=7, subsample_size=40, rng=3
    )
    assert len(a) == 7
    np.testing.assert_array_equal(a.coef, b.coef)
    z = signed_features(x, y)
    joint = fit_weak_models_with(
        z,
        None,
        learner=as_weak_learner(MomentLinearClassifier(joint=True)),
        n_models=5,
        subsample_size=100,
        rng=0,
    )
    assert joint.coef.shape == (5, 4)


# ------------------------------------------------------------------------------------
# Priors from clusters of public features, used with RR-with-prior
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: MomentLinearClassifier(alpha=0.5, regularization="ridge"),
        lambda: MomentMulticlassClassifier(n_classes=4, alpha=0.5),
        lambda: FlipCorrectedLogisticRegression(alpha=0.5, flip_rate=0.2),
    ],
)
def test_the_learners_keep_scikit_learns_estimator_protocol(make):
    # They do not inherit from scikit-learn (the ServerApp does not import it), so the
    # protocol its tools rely on is checked here, against scikit-learn's own helpers.
    from sklearn.base import is_classifier
    from sklearn.utils import get_tags

    estimator = make()
    params = estimator.get_params()
    assert params["alpha"] == 0.5
    twin = clone(estimator)
    assert type(twin) is type(estimator) and twin is not estimator
    assert twin.get_params() == params
    assert is_classifier(estimator) and get_tags(estimator).target_tags.required
    assert estimator.set_params(alpha=0.25) is estimator and estimator.alpha == 0.25
    with pytest.raises(ValueError, match="invalid parameter 'alphaa'"):
        estimator.set_params(alphaa=1.0)
    # The repr names the parameters that differ from their defaults, and only those.
    assert repr(estimator).startswith(f"{type(estimator).__name__}(alpha=0.25")
    assert "public=" not in repr(estimator)
    with pytest.raises(NotFittedError, match="not fitted yet"):
        estimator.predict(np.zeros((2, 3)))


def test_the_learners_score_is_the_accuracy(vector_data):
    x, y = vector_data
    clf = MomentLinearClassifier().fit(x, y)
    assert clf.score(x, y) == np.mean(clf.predict(x) == y)
    weights = np.linspace(0.0, 1.0, y.size)
    expected = np.average(clf.predict(x) == y, weights=weights)
    assert clf.score(x, y, sample_weight=weights) == pytest.approx(expected, abs=1e-15)


def test_a_learner_goes_through_scikit_learns_model_selection(vector_data):
    from sklearn.model_selection import GridSearchCV

    x, y = vector_data
    search = GridSearchCV(
        MomentLinearClassifier(regularization="ridge"), {"alpha": [0.01, 10.0]}, cv=2
    ).fit(x, y)
    assert search.best_params_["alpha"] in (0.01, 10.0)
    best = search.best_estimator_
    assert isinstance(best, MomentLinearClassifier) and best.alpha in (0.01, 10.0)
    assert search.score(x, y) == best.score(x, y)
