"""MRMAClassifier follows scikit-learn conventions and classifies new curves."""

from __future__ import annotations

import numpy as np
import pytest
import skfda
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from ldpfda.datasets import FunctionalDesign, VectorDesign
from ldpfda.engine.estimator import MRMAClassifier

#: Rows of a plain array are feature vectors in [-1, 1] only when the estimator is told.
VECTORS = {"input_type": "vectors"}


def test_unfitted_model_refuses_to_predict():
    with pytest.raises(NotFittedError):
        MRMAClassifier().predict(np.zeros((2, 4)))


def test_params_round_trip_and_clone():
    model = MRMAClassifier(epsilon=2.0, n_estimators=7, random_state=4)
    assert clone(model).get_params() == model.get_params()


def test_vector_fit_predict_with_string_classes():
    x, y = VectorDesign().sample(1200, 0)
    labels = np.where(y == 1, "sick", "healthy")
    model = MRMAClassifier(
        epsilon=float("inf"), n_estimators=10, random_state=0, input_type="vectors"
    )
    model.fit(x, labels)
    assert list(model.classes_) == ["healthy", "sick"]
    xt, yt = VectorDesign().sample(5000, 1)
    predicted = model.predict(xt)
    assert set(np.unique(predicted)) <= {"healthy", "sick"}
    proba = model.predict_proba(xt)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(proba[:, 1] > 0.5, predicted == "sick")
    assert model.score(xt, np.where(yt == 1, "sick", "healthy")) > 0.8
    assert model.result_.privacy["max_spent"] == float("inf")


def test_fit_is_reproducible_for_a_random_state():
    x, y = VectorDesign().sample(900, 0)
    a = MRMAClassifier(**VECTORS, epsilon=3.0, n_estimators=10, random_state=5).fit(
        x, y
    )
    b = MRMAClassifier(**VECTORS, epsilon=3.0, n_estimators=10, random_state=5).fit(
        x, y
    )
    np.testing.assert_array_equal(a.coef_, b.coef_)


def test_without_a_random_state_the_noise_is_fresh_and_cannot_be_replayed():
    # A curious server that knows the old default (seed 0) and the data pipeline tries
    # to replay the clients' noise. With random_state=None every fit draws fresh OS
    # entropy: the replay and a second fit both end elsewhere.
    x, y = VectorDesign().sample(900, 0)
    replay = MRMAClassifier(
        **VECTORS, epsilon=3.0, n_estimators=10, random_state=0
    ).fit(x, y)
    fits = [
        MRMAClassifier(**VECTORS, epsilon=3.0, n_estimators=10, random_state=None).fit(
            x, y
        )
        for _ in range(2)
    ]
    for fit in fits:
        assert not np.array_equal(fit.coef_, replay.coef_)
    assert not np.array_equal(fits[0].coef_, fits[1].coef_)
    # A Generator is a random_state too: the same Generator state, the same noise.
    a = MRMAClassifier(
        **VECTORS, epsilon=3.0, n_estimators=10, random_state=np.random.default_rng(7)
    )
    b = MRMAClassifier(
        **VECTORS, epsilon=3.0, n_estimators=10, random_state=np.random.default_rng(7)
    )
    np.testing.assert_array_equal(a.fit(x, y).coef_, b.fit(x, y).coef_)
    with pytest.raises(ValueError, match="random_state"):
        MRMAClassifier(**VECTORS, random_state=-1).fit(x, y)


def test_the_estimator_runs_the_reference_mrma():
    x, y = VectorDesign().sample(900, 0)
    model = MRMAClassifier(**VECTORS, epsilon=3.0, n_estimators=10, random_state=5).fit(
        x, y
    )
    assert model.result_.method == "mrma"
    releases = model.result_.privacy["releases"]
    assert set(releases) == {"laplace", "binary_randomized_response", "feedback_bit"}
    assert len(model.result_.weak) == 10


def test_curves_as_fdatagrid_and_as_array_give_the_same_model():
    design = FunctionalDesign()
    x, y = design.sample(900, 0)
    public, _ = design.sample(200, 1)
    grid = design.grid_points
    a = MRMAClassifier(epsilon=5.0, n_estimators=10, random_state=1).fit(
        x, y, grid_points=grid, public_curves=public
    )
    b = MRMAClassifier(epsilon=5.0, n_estimators=10, random_state=1).fit(
        skfda.FDataGrid(x, grid), y, public_curves=skfda.FDataGrid(public, grid)
    )
    np.testing.assert_allclose(a.coef_, b.coef_)
    np.testing.assert_array_equal(
        a.predict(x[:50]), b.predict(skfda.FDataGrid(x[:50], grid))
    )


def test_bad_inputs_name_the_problem():
    x, y = VectorDesign().sample(300, 0)
    # Three classes are a K-class run now; one class is still refused.
    with pytest.raises(ValueError, match="at least 2 classes, got 1"):
        MRMAClassifier(**VECTORS).fit(x, np.zeros(300))
    with pytest.raises(ValueError, match="epsilon"):
        MRMAClassifier(**VECTORS, epsilon=0.0, n_estimators=5).fit(x, y)
    with pytest.raises(ValueError, match="subsample_size"):
        MRMAClassifier(
            **VECTORS, n_estimators=5, subsample_size=100, eval_fraction=0.9
        ).fit(x, y)
    design = FunctionalDesign()
    curves, labels = design.sample(100, 0)
    curves[3, 7] = np.nan
    with pytest.raises(ValueError, match="curves"):
        MRMAClassifier(n_estimators=5).fit(
            curves,
            labels,
            grid_points=design.grid_points,
            public_curves=design.sample(50, 1)[0],
        )
    with pytest.raises(ValueError, match="public_curves"):
        MRMAClassifier(n_estimators=5).fit(
            curves, labels, grid_points=design.grid_points
        )
