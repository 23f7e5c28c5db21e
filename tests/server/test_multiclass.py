"""The server's K-class fit from class-sampled joint releases, and where K > 2 is
refused."""

from __future__ import annotations

import numpy as np
import pytest

from ldpfda.client.protocol import privatize_joint
from ldpfda.config import Settings
from ldpfda.engine import run_protocol
from ldpfda.engine.inprocess import ArrayClients
from ldpfda.fda.features import VectorFeaturizer
from ldpfda.fda.scaling import CoefficientScaler
from ldpfda.server.fitting import model_error
from ldpfda.server.learners import MomentMulticlassClassifier, discriminant_rule


def _toy(n: int, seed: int, p: int = 4):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n).astype(np.int8)
    means = 0.5 * np.eye(3, p) - 0.2
    return np.clip(means[y] + 0.3 * rng.standard_normal((n, p)), -1, 1), y


def test_without_noise_the_fit_is_the_least_squares_indicator_regression():
    x, y = _toy(20_000, 0)
    payload = privatize_joint(
        x, y, client_ids=np.arange(y.size), seed=0, epsilon=np.inf, n_classes=3
    )
    w = np.hstack([np.ones((y.size, 1)), x])
    gram = w.T @ w / y.size
    model = MomentMulticlassClassifier(n_classes=3, gram=gram).fit(
        payload.releases, payload.classes
    )
    # Every client's y~_j w is exact: theta_k regresses y~_k on w (on the clients
    # that drew k), up to the empirical-Bayes shrinkage, which is small here.
    signs = np.where(y[:, None] == np.arange(3), 1.0, -1.0)
    exact = np.linalg.solve(gram, w.T @ signs / y.size)
    theta = np.vstack([model.intercept_, model.coef_.T])
    assert model.shrinkage_ < 1e-3
    np.testing.assert_allclose(theta, exact, atol=0.05)
    assert model.coef_.shape == (3, 4) and model.intercept_.shape == (3,)
    proba = model.predict_proba(x[:5])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(model.predict(x), np.argmax(w @ theta, axis=1))
    linear = model.to_linear_models()
    assert len(linear) == 3 and model_error(linear, x, y) < 0.2


def test_the_fit_refuses_what_it_cannot_use():
    z = np.zeros((6, 3))
    with pytest.raises(ValueError, match=r"drawn by at least 2 clients.*\[1, 1, 1\]"):
        MomentMulticlassClassifier(n_classes=3).fit(z[:3], [0, 1, 2])
    with pytest.raises(ValueError, match="n_classes must be >= 3"):
        MomentMulticlassClassifier(n_classes=2).fit(z, [0, 1, 0, 1, 0, 1])
    with pytest.raises(ValueError, match=r"y must be in \{0, ..., 2\}"):
        MomentMulticlassClassifier(n_classes=3).fit(z, [0, 1, 2, 3, 0, 1])
    with pytest.raises(ValueError, match="regularization must be one of"):
        MomentMulticlassClassifier(regularization="lasso").fit(z, [0, 1, 2] * 2)
    with pytest.raises(ValueError, match="gram must have shape"):
        MomentMulticlassClassifier(gram=np.eye(2)).fit(z, [0, 1, 2] * 2)


def _run(settings, x, y, n_classes, public=None):
    ids = np.arange(y.size, dtype=np.int64)
    featurizer = VectorFeaturizer(CoefficientScaler(-1.0, 1.0), x.shape[1])
    return run_protocol(
        ArrayClients(ids, x, y, featurizer),
        ArrayClients(ids[:0], x[:0], y[:0], featurizer),
        settings,
        seed=1,
        server_rng=np.random.default_rng(2),
        public=public,
        n_classes=n_classes,
    )


def test_the_in_process_run_spends_one_release_per_client_and_reports_k_rows():
    x, y = _toy(4000, 1)
    public, _ = _toy(1000, 2)
    settings = Settings(epsilon=4.0, n_train=4000, n_eval=1, n_test=1, repeats=1)
    result = _run(settings, x, y, 3, public)
    assert result.privacy["max_spent"] == 4.0
    assert len(result.final) == 3 and result.method == "moment"
    report = result.report()["final_model"]
    assert len(report["coef"]) == 3 and len(report["intercept"]) == 3
    assert model_error(result.final, x, y) < 0.45  # chance is about 0.66
    # Without public features G comes from the releases, as in the binary release.
    private = _run(settings.replace(public_features=False), x, y, 3)
    assert len(private.final) == 3


@pytest.mark.parametrize("changes", [{"method": "mrma", "n_eval": 10}])
def test_k_classes_are_refused_outside_the_moment_protocol_of_a_joint_release(changes):
    # MRMA on the reference release and the label-only modes take K classes
    # (test_mrma_classes.py, test_label_classes.py); MRMA on joint releases does not.
    x, y = _toy(50, 3)
    settings = Settings(n_train=50, n_eval=1, n_test=1, repeats=1, subsample_size=2)
    settings = settings.replace(**changes, num_weak_models=1)
    with pytest.raises(ValueError, match="K > 2 classes need the moment protocol"):
        _run(settings, x, y, 3)


def test_a_class_drawn_by_one_client_takes_the_common_score():
    # Class 2 drawn by one client: no moment, no noise level. Its score is the common
    # prior score, the other classes are fitted as without it, and the fit says so.
    rng = np.random.default_rng(4)
    n, p = 400, 3
    x = rng.uniform(-1, 1, size=(n, p))
    drawn = np.where(rng.random(n) < 0.5, 0, 1)
    drawn[0] = 2
    truth = np.where(x[:, 0] > 0, 0, 1)
    sign = np.where(truth == drawn, 1.0, -1.0)
    z = sign[:, None] * np.column_stack([np.ones(n), x])
    public = rng.uniform(-1, 1, size=(500, p))
    model = MomentMulticlassClassifier(n_classes=3, public=public).fit(z, drawn)
    assert "classes [2] drawn by fewer than 2 clients" in model.fallback_
    np.testing.assert_allclose(model.coef_[2], 0.0)
    assert model.intercept_[2] == pytest.approx(2.0 / 3 - 1.0)
    # classes 0 and 1 split on the sign of the first feature, as the data say
    w = np.column_stack([np.ones(n), x])
    scores = w @ np.vstack([model.intercept_, model.coef_.T])
    assert np.mean(np.argmax(scores[:, :2], axis=1) == truth) > 0.9


def test_the_refit_solves_each_class_along_its_posterior_direction():
    # Noisy releases (eps 1): with threshold="refit" every class k keeps the direction
    # u_k of its posterior slopes, and (a_k, b_k) is the least-squares fit of y~_k on
    # (1, u_k.x) from the class's whole cross moment c_k, the part common to every
    # class included (taken out before the posterior, it only moves a_k).
    x, y = _toy(3000, 1)
    payload = privatize_joint(
        x, y, client_ids=np.arange(y.size), seed=3, epsilon=1.0, n_classes=3
    )
    public = _toy(500, 2)[0]
    fits = {
        t: MomentMulticlassClassifier(n_classes=3, public=public, threshold=t).fit(
            payload.releases, payload.classes
        )
        for t in ("posterior", "refit")
    }
    posterior, refit = fits["posterior"], fits["refit"]
    g, c = refit.gram_, refit.cross_moment_
    for k in range(3):
        u = posterior.coef_[k]
        mean = u @ g[1:, 0]
        system = np.array([[1.0, mean], [mean, u @ g[1:, 1:] @ u]])
        a, b = np.linalg.solve(system, [c[0, k], u @ c[1:, k]])
        np.testing.assert_allclose(refit.coef_[k], b * u, rtol=1e-9)
        assert refit.intercept_[k] == pytest.approx(a, rel=1e-9, abs=1e-12)
        assert refit.slope_scale_[k] == pytest.approx(b)
    np.testing.assert_array_equal(posterior.slope_scale_, np.ones(3))


# -- the LDA rule ---------------------------------------------------------------------


def _ordered(n: int, seed: int, p: int = 3):
    """Three classes along one line (class 1 between 0 and 2), the others' noise in
    the remaining coordinates: the case in which least squares masks class 1."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n).astype(np.int8)
    x = 0.15 * rng.standard_normal((n, p))
    x[:, 0] += 0.5 * (y.astype(float) - 1.0)
    return np.clip(x, -1, 1), y


def _plug_in_lda(x, y, k):
    """LDA by hand: class shares, class means, within-class covariance over n."""
    shares = np.bincount(y, minlength=k) / y.size
    means = np.stack([x[y == c].mean(axis=0) for c in range(k)])
    centred = x - means[y]
    within = centred.T @ centred / y.size
    solved = np.linalg.solve(within, means.T)
    return solved.T, -0.5 * np.sum(means.T * solved, axis=0) + np.log(shares)


def test_discriminant_rule_of_exact_moments_is_the_plug_in_lda():
    x, y = _ordered(5000, 1)
    w = np.hstack([np.ones((y.size, 1)), x])
    gram = w.T @ w / y.size
    signs = np.where(y[:, None] == np.arange(3), 1.0, -1.0)
    theta = np.linalg.solve(gram, w.T @ signs / y.size)
    coef, intercept, why = discriminant_rule(theta, gram)
    expected_coef, expected_intercept = _plug_in_lda(x, y, 3)
    assert why == ""
    np.testing.assert_allclose(coef, expected_coef, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(intercept, expected_intercept, rtol=1e-9, atol=1e-9)


def test_lda_does_not_mask_the_middle_class_where_least_squares_does():
    x, y = _ordered(20_000, 2)
    xt, yt = _ordered(20_000, 3)
    payload = privatize_joint(
        x, y, client_ids=np.arange(y.size), seed=0, epsilon=np.inf, n_classes=3
    )
    w = np.hstack([np.ones((y.size, 1)), x])
    fits = {
        rule: MomentMulticlassClassifier(
            n_classes=3, gram=w.T @ w / y.size, rule=rule
        ).fit(payload.releases, payload.classes)
        for rule in ("least-squares", "lda")
    }
    errors = {rule: float(np.mean(m.predict(xt) != yt)) for rule, m in fits.items()}
    # Bayes error of this design: boundaries at -0.25 and 0.25 on the line, noise sd
    # 0.15, so Phi(-0.25 / 0.15) = 0.048 for the outer classes and twice that for the
    # middle one: 0.064 on average; 20,000 test points give it a standard error of
    # 0.0017. Least squares predicts the middle class almost never: about 1/3 wrong.
    assert np.mean(fits["least-squares"].predict(xt) == 1) < 0.1
    assert errors["least-squares"] > 0.25
    assert errors["lda"] < 0.075
    assert fits["lda"].rule_ == "lda" and fits["lda"].fallback_ == ""
    proba = fits["lda"].predict_proba(xt[:100])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(proba.argmax(axis=1), fits["lda"].predict(xt[:100]))


def test_lda_keeps_least_squares_where_a_class_share_is_not_positive():
    gram = np.eye(3)
    gram[1:, 1:] = np.eye(2) / 3.0
    # Class 2's share (G (theta_2 + e0) / 2)[0] = (theta_2[0] + 1) / 2 is -0.25.
    theta = np.array([[0.0, 0.5, -1.5], [0.2, -0.1, 0.0], [0.0, 0.3, -0.3]])
    coef, intercept, why = discriminant_rule(theta, gram)
    assert "classes [2] have no positive estimated share" in why
    np.testing.assert_array_equal(coef, theta[1:].T)
    np.testing.assert_array_equal(intercept, theta[0])


def test_an_unknown_rule_is_refused_by_name():
    with pytest.raises(
        ValueError, match=r"rule must be one of \('least-squares', 'lda'\)"
    ):
        MomentMulticlassClassifier(n_classes=3, rule="qda").fit(
            np.zeros((6, 3)), [0, 1, 2] * 2
        )
