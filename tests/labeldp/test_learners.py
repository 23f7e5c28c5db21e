"""Noisy-label logistic regressions: gradients, fitting, scikit-learn conventions."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import approx_fprime
from sklearn.exceptions import NotFittedError

from ldpfda.labeldp import (
    BackwardCorrectedLogisticRegression,
    ForwardCorrectedLogisticRegression,
    NoisyLabelLogisticRegression,
    UniformRR,
)
from ldpfda.labeldp.transition import corrected_targets, transition_matrices


def blobs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Three well-separated Gaussian classes in 2-D."""
    gen = np.random.default_rng(seed)
    y = gen.integers(0, 3, size=n)
    centres = np.array([[0.0, 3.0], [3.0, -2.0], [-3.0, -2.0]])
    return centres[y] + gen.normal(size=(n, 2)), y


X, Y = blobs(1500, 0)
X_TEST, Y_TEST = blobs(1000, 1)


def _check_gradient(loss_grad, k: int) -> None:
    z0 = np.random.default_rng(3).normal(size=(6, k))

    def total(z_flat):
        return loss_grad(z_flat.reshape(6, k))[0].sum()

    numeric = approx_fprime(z0.ravel(), total, 1e-7)
    np.testing.assert_allclose(loss_grad(z0)[1].ravel(), numeric, atol=1e-5)


def test_backward_gradient_is_exact():
    q = np.array([[0.6, 0.3, 0.1]])
    labels = np.array([0, 1, 2, 2, 1, 0])
    arrays = {"targets": corrected_targets(labels, np.zeros(6, int), q, 0.7)}
    loss_grad = BackwardCorrectedLogisticRegression._loss_grad(arrays, np.arange(6))
    _check_gradient(loss_grad, 3)


def test_forward_gradient_is_exact():
    q = np.array([[0.6, 0.3, 0.1]])
    labels = np.array([0, 1, 2, 2, 1, 0])
    t = transition_matrices(q, 0.7)
    arrays = {"log_t": np.log(t[np.zeros(6, int), :, labels])}
    loss_grad = ForwardCorrectedLogisticRegression._loss_grad(arrays, np.arange(6))
    _check_gradient(loss_grad, 3)


def test_plain_learner_on_clean_labels():
    model = NoisyLabelLogisticRegression().fit(X, Y)
    assert model.score(X_TEST, Y_TEST) > 0.95
    assert model.coef_.shape == (3, 2) and model.intercept_.shape == (3,)
    np.testing.assert_allclose(model.predict_proba(X_TEST).sum(axis=1), 1.0)
    np.testing.assert_array_equal(model.classes_, [0, 1, 2])


@pytest.mark.parametrize(
    "cls", [BackwardCorrectedLogisticRegression, ForwardCorrectedLogisticRegression]
)
def test_corrected_learners_on_uniform_rr(cls):
    release = UniformRR(epsilon=1.0, n_classes=3).release(Y, rng=5)
    model = cls().fit_release(X, release)
    assert model.score(X_TEST, Y_TEST) > 0.9


def test_backward_objective_is_well_posed_at_small_epsilon():
    # Corrected targets of size 1/(1 - lambda) ~ 30: the penalty on all weights keeps
    # the minimiser finite.
    release = UniformRR(epsilon=0.1, n_classes=3).release(Y, rng=5)
    model = BackwardCorrectedLogisticRegression(C=1.0).fit_release(X, release)
    assert np.all(np.isfinite(model.coef_)) and np.all(np.isfinite(model.intercept_))


def test_beta_must_be_below_one_for_backward():
    with pytest.raises(ValueError, match="beta"):
        BackwardCorrectedLogisticRegression().fit(
            X, Y, distributions=np.full((1, 3), 1 / 3), beta=1.0
        )


def test_beta_above_lambda_refused_from_release():
    release = UniformRR(epsilon=1.0, n_classes=3).release(Y, rng=5)
    with pytest.raises(ValueError, match="beta"):
        ForwardCorrectedLogisticRegression().fit_release(X, release, beta=0.99)


def test_C_chosen_from_held_out_noisy_likelihood():
    release = UniformRR(epsilon=1.0, n_classes=3).release(Y, rng=5)
    cs = (0.001, 0.1, 1.0)
    a = ForwardCorrectedLogisticRegression(Cs=cs, random_state=0).fit_release(
        X, release
    )
    b = ForwardCorrectedLogisticRegression(Cs=cs, random_state=0).fit_release(
        X, release
    )
    assert a.C_ in cs and set(a.validation_scores_) == set(cs)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert a.score(X_TEST, Y_TEST) > 0.9


def test_not_fitted():
    with pytest.raises(NotFittedError):
        NoisyLabelLogisticRegression().predict(X_TEST)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("C", 0.0),
        ("C", -1.0),
        ("max_iter", 0),
        ("tol", 0.0),
        ("validation_fraction", 1.0),
    ],
)
def test_learner_parameters(name, value):
    with pytest.raises(ValueError, match=name):
        NoisyLabelLogisticRegression(**{name: value}).fit(X, Y)


def test_clusters_required_with_several_distributions():
    with pytest.raises(ValueError, match="clusters"):
        ForwardCorrectedLogisticRegression().fit(
            X, Y, distributions=np.full((2, 3), 1 / 3), beta=0.5
        )


def test_feature_count_checked_at_predict():
    model = NoisyLabelLogisticRegression().fit(X, Y)
    with pytest.raises(ValueError, match="features"):
        model.predict(np.zeros((2, 3)))
