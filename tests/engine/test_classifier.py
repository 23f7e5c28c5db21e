"""LDPClassifier: the platform's default protocol as a scikit-learn classifier."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from ldpfda.config import Settings
from ldpfda.datasets import FunctionalDesign, VectorDesign
from ldpfda.datasets.population import public_features, repeat_data
from ldpfda.engine.classifier import LDPClassifier
from ldpfda.engine.estimator import MRMAClassifier
from ldpfda.engine.inprocess import split_clients
from ldpfda.engine.runner import run_protocol
from ldpfda.privacy.random import derive_seed

VECTORS = {"input_type": "vectors"}

#: `ldpfda simulate --epsilon 5` on the vector design (README): the default
#: protocol's test error over 20 repeats, mean and standard deviation.
SIMULATE_ERROR, SIMULATE_SD, REPEATS = 0.141, 0.006, 20


def _repeat(settings: Settings, repeat: int):
    """The clients of a simulated repeat as one array, and its public vectors."""
    data = repeat_data(settings, repeat)
    x = np.vstack([data.train[0], data.evaluation[0]])
    y = np.concatenate([data.train[1], data.evaluation[1]])
    return data, x, y, public_features(settings, repeat, featurizer=data.featurizer)


def test_it_is_the_in_process_run_of_the_same_clients_and_seed_bit_for_bit():
    settings = Settings(epsilon=5.0, n_test=20_000)
    data, x, y, public = _repeat(settings, 0)
    model = LDPClassifier(epsilon=5.0, random_state=7, **VECTORS).fit(
        x, y, public_curves=public
    )
    # The engine's own populations of the repeat (training ids, then evaluation ids),
    # with the run seed and server stream the estimator derives from random_state=7.
    train, evaluation, test = split_clients(settings, data)
    result = run_protocol(
        train,
        evaluation,
        settings,
        seed=derive_seed(7, "clients"),
        server_rng=np.random.default_rng(derive_seed(7, "server")),
        test=test,
        public=public,
    )
    np.testing.assert_array_equal(model.coef_, result.final.coef)
    np.testing.assert_array_equal(model.intercept_, result.final.intercept)
    x_test, y_test = data.test
    assert np.mean(model.predict(x_test) != y_test) == result.test_errors["moment"]
    assert model.result_.method == "moment"
    assert model.result_.privacy["releases"] == {
        "signed_features": {"epsilon": 5.0, "clients": 3000, "epsilon_total": 15000.0}
    }
    assert model.result_.privacy["max_spent"] == model.epsilon_ == 5.0


def test_it_reaches_the_engines_test_error_on_the_vector_design():
    settings = Settings(epsilon=5.0)
    errors = []
    for repeat in range(REPEATS):
        data, x, y, public = _repeat(settings, repeat)
        model = LDPClassifier(epsilon=5.0, random_state=1000 + repeat, **VECTORS)
        model.fit(x, y, public_curves=public)
        errors.append(1.0 - model.score(*data.test))
    # Two means of 20 repeats with independent noise: their difference has standard
    # error sqrt(sd1^2 + sd2^2) / sqrt(20); three of them is the tolerance.
    sd = float(np.std(errors, ddof=1))
    tolerance = 3.0 * math.sqrt(sd**2 + SIMULATE_SD**2) / math.sqrt(REPEATS)
    assert abs(float(np.mean(errors)) - SIMULATE_ERROR) < tolerance


def test_without_public_vectors_the_moment_comes_from_the_releases():
    x, y = VectorDesign().sample(3000, 0)
    xt, yt = VectorDesign().sample(20_000, 1)
    model = LDPClassifier(epsilon=5.0, random_state=0, **VECTORS).fit(x, y)
    assert model.result_.privacy["max_spent"] == 5.0
    # Still near the Bayes error 0.132 (sd of one repeat at 3000 clients ~ 0.01).
    assert 1.0 - model.score(xt, yt) < 0.132 + 0.05


def test_curves_on_a_grid_with_public_calibration_curves():
    design = FunctionalDesign()
    curves, labels = design.sample(3000, 0)
    public, _ = design.sample(1000, 1)
    test, test_labels = design.sample(20_000, 2)
    model = LDPClassifier(epsilon=5.0, random_state=0).fit(
        curves, labels, grid_points=design.grid_points, public_curves=public
    )
    assert model.coef_.shape == (1, 10) and model.n_features_in_ == 100
    # README: 0.118 +- 0.008 at eps 5; one repeat within four sd.
    assert 1.0 - model.score(test, test_labels) < 0.118 + 4 * 0.008


def test_classes_probabilities_scores_and_predictions_agree():
    x, y = VectorDesign().sample(1500, 0)
    names = np.where(y == 1, "sick", "healthy")
    model = LDPClassifier(epsilon=4.0, random_state=3, **VECTORS).fit(x, names)
    assert list(model.classes_) == ["healthy", "sick"]
    xt, _ = VectorDesign().sample(500, 1)
    proba = model.predict_proba(xt)
    scores = model.decision_function(xt)
    assert proba.shape == (500, 2) and scores.shape == (500,)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(proba[:, 1] > 0.5, scores > 0)
    np.testing.assert_array_equal(
        model.predict(xt), np.where(scores > 0, "sick", "healthy")
    )
    assert 0.0 <= model.score(xt, model.predict(xt)) == 1.0


def test_random_state_int_generator_and_fresh_entropy():
    x, y = VectorDesign().sample(800, 0)

    def coef(random_state):
        model = LDPClassifier(epsilon=3.0, random_state=random_state, **VECTORS)
        return model.fit(x, y).coef_

    np.testing.assert_array_equal(coef(5), coef(5))
    assert not np.array_equal(coef(5), coef(6))
    np.testing.assert_array_equal(
        coef(np.random.default_rng(9)), coef(np.random.default_rng(9))
    )
    # None: fresh OS entropy at every fit, never a fixed seed anyone could replay.
    assert not np.array_equal(coef(None), coef(None))
    assert not np.array_equal(coef(None), coef(0))
    with pytest.raises(ValueError, match="random_state"):
        coef(-1)
    with pytest.raises(TypeError, match="random_state"):
        coef(1.5)


def test_init_only_stores_and_clone_keeps_the_parameters():
    model = LDPClassifier(epsilon=-3.0, mechanism="nonsense", random_state=2)
    assert model.get_params()["epsilon"] == -3.0
    assert clone(model).get_params() == model.get_params()
    with pytest.raises(NotFittedError):
        LDPClassifier(**VECTORS).predict(np.zeros((2, 4)))


@pytest.mark.parametrize("mechanism", ["piecewise", "duchi", "laplace"])
def test_every_joint_mechanism_can_be_chosen(mechanism):
    x, y = VectorDesign().sample(2000, 0)
    model = LDPClassifier(mechanism=mechanism, random_state=0, **VECTORS).fit(x, y)
    assert model.result_.privacy["max_spent"] == 5.0  # the default epsilon


def test_the_refit_threshold_keeps_the_posteriors_direction_on_the_same_releases():
    x, y = VectorDesign().sample(3000, 3)
    fits = {
        t: LDPClassifier(epsilon=1.0, threshold=t, random_state=5, **VECTORS).fit(x, y)
        for t in ("posterior", "refit")
    }
    posterior, refit = fits["posterior"].coef_[0], fits["refit"].coef_[0]
    cosine = posterior @ refit / np.linalg.norm(posterior) / np.linalg.norm(refit)
    assert cosine == pytest.approx(1.0, abs=1e-12)
    # Same releases (one keyed stream per client), another intercept and scale.
    assert fits["refit"].result_.privacy == fits["posterior"].result_.privacy
    assert fits["refit"].intercept_[0] != fits["posterior"].intercept_[0]


def test_bad_parameters_and_data_are_refused_by_name():
    x, y = VectorDesign().sample(300, 0)
    for epsilon in (0.0, -1.0):
        with pytest.raises(ValueError, match=r"epsilon must be in \(0, inf\]"):
            LDPClassifier(epsilon=epsilon, **VECTORS).fit(x, y)
    with pytest.raises(TypeError, match="epsilon"):
        LDPClassifier(epsilon="5", **VECTORS).fit(x, y)
    with pytest.raises(ValueError, match="mechanism must be one of"):
        LDPClassifier(mechanism="gauss", **VECTORS).fit(x, y)
    with pytest.raises(ValueError, match="threshold must be one of"):
        LDPClassifier(threshold="mean", **VECTORS).fit(x, y)
    with pytest.raises(ValueError, match="input_type must be one of"):
        LDPClassifier(input_type="matrix").fit(x, y)
    # Three classes are MRMA's K-class run now (tests/server/test_mrma_classes.py).
    three = MRMAClassifier(**VECTORS, n_estimators=5, subsample_size=20).fit(
        x, np.arange(300) % 3
    )
    assert three.classes_.tolist() == [0, 1, 2]
    assert three.predict_proba(x[:7]).shape == (7, 3)
    with pytest.raises(ValueError, match=r"at least 2 classes, got 1: \['a'\]"):
        LDPClassifier(**VECTORS).fit(x, np.full(300, "a"))
    with pytest.raises(ValueError, match="Unknown label type"):
        LDPClassifier(**VECTORS).fit(x, np.linspace(0, 1, 300))
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        LDPClassifier(**VECTORS).fit(x, y[:-1])
    nan = x.copy()
    nan[4, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        LDPClassifier(**VECTORS).fit(nan, y)
    with pytest.raises(ValueError, match="requires y"):
        LDPClassifier(**VECTORS).fit(x, None)
    with pytest.raises(ValueError, match="client_ids must be unique"):
        LDPClassifier(**VECTORS).fit(x, y, client_ids=np.zeros(300, dtype=int))
    with pytest.raises(ValueError, match=r"client_ids must have shape \(300,\)"):
        LDPClassifier(**VECTORS).fit(x, y, client_ids=np.arange(10))
    model = LDPClassifier(**VECTORS, random_state=0).fit(x, y)
    with pytest.raises(ValueError, match="X has 3 features"):
        model.predict(x[:, :3])


def test_client_ids_key_the_noise_of_each_client():
    x, y = VectorDesign().sample(400, 0)
    ids = np.arange(400) * 7 + 3
    a = LDPClassifier(random_state=1, **VECTORS).fit(x, y, client_ids=ids)
    b = LDPClassifier(random_state=1, **VECTORS).fit(x, y, client_ids=ids)
    c = LDPClassifier(random_state=1, **VECTORS).fit(x, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert not np.array_equal(a.coef_, c.coef_)
    # The order of the rows does not matter, only who the clients are.
    order = np.random.default_rng(0).permutation(400)
    d = LDPClassifier(random_state=1, **VECTORS).fit(
        x[order], y[order], client_ids=ids[order]
    )
    np.testing.assert_allclose(a.coef_, d.coef_, rtol=1e-12)


def _three_classes(n: int, seed: int):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    x = np.clip(0.6 * np.eye(3, 4)[y] - 0.2 + 0.3 * rng.standard_normal((n, 4)), -1, 1)
    return x, y


def test_k_classes_of_any_label_type_are_fitted_by_one_release_per_client():
    from ldpfda.engine.accountant import BudgetAccountant

    x, y = _three_classes(3000, 0)
    names = np.array(["walk", "run", "sit"])[y]
    accountant = BudgetAccountant(10.0)
    model = LDPClassifier(
        epsilon=4.0, accountant=accountant, random_state=0, **VECTORS
    ).fit(x, names)
    assert model.classes_.tolist() == ["run", "sit", "walk"]
    assert model.coef_.shape == (3, 4) and model.intercept_.shape == (3,)
    assert accountant.spent == 4.0
    privacy = model.result_.privacy
    assert privacy["max_spent"] == 4.0
    proba = model.predict_proba(x[:7])
    assert proba.shape == (7, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    predicted = model.predict(x)
    np.testing.assert_array_equal(predicted[:7], model.classes_[proba.argmax(axis=1)])
    assert model.decision_function(x[:7]).shape == (7, 3)
    # Chance is about 0.67; the noiseless fit about 0.1.
    assert np.mean(predicted != names) < 0.35
    again = LDPClassifier(epsilon=4.0, random_state=0, **VECTORS).fit(x, names)
    np.testing.assert_array_equal(again.coef_, model.coef_)


def test_k_classes_with_public_curves_and_integer_labels():
    x, y = _three_classes(2000, 1)
    public, _ = _three_classes(500, 2)
    model = LDPClassifier(epsilon=np.inf, random_state=0, **VECTORS).fit(
        x, y + 5, public_curves=public
    )
    assert model.classes_.tolist() == [5, 6, 7]
    assert np.mean(model.predict(x) != y + 5) < 0.2


def test_the_lda_rule_reaches_the_fit_and_an_unknown_rule_is_refused():
    from ldpfda.experiments.kclass import ordered_toy

    x, y = ordered_toy(3000, 0)
    public, _ = ordered_toy(1000, 1)
    x_test, y_test = ordered_toy(20_000, 2)
    fits = {
        rule: LDPClassifier(
            epsilon=np.inf, multiclass_rule=rule, random_state=0, **VECTORS
        ).fit(x, y, public_curves=public)
        for rule in ("least-squares", "lda")
    }
    errors = {r: float(np.mean(m.predict(x_test) != y_test)) for r, m in fits.items()}
    # The middle class is masked by least squares and not by LDA: each error has a
    # standard error below 0.0035 on 20,000 test points; they differ by 0.135.
    assert errors["lda"] < errors["least-squares"] - 0.05
    assert fits["lda"].result_.signal["fallback"] == ""
    # With two classes the setting changes nothing.
    binary = {
        rule: LDPClassifier(
            epsilon=5.0, multiclass_rule=rule, random_state=0, **VECTORS
        ).fit(x, y == 1)
        for rule in ("least-squares", "lda")
    }
    np.testing.assert_array_equal(binary["lda"].coef_, binary["least-squares"].coef_)
    with pytest.raises(ValueError, match="multiclass_rule must be one of"):
        LDPClassifier(multiclass_rule="qda", **VECTORS).fit(x, y)


def test_the_split_release_reaches_the_fit_and_informs_every_class():
    from ldpfda.engine.accountant import BudgetAccountant
    from ldpfda.privacy.joint import ClassSplitMechanism
    from ldpfda.server.learners import MomentSplitClassifier, ReleaseMoments

    x, y = _three_classes(3000, 0)
    accountant = BudgetAccountant(10.0)
    model = LDPClassifier(
        epsilon=6.0,
        multiclass_release="split",
        accountant=accountant,
        random_state=0,
        **VECTORS,
    ).fit(x, y)
    assert accountant.spent == 6.0
    releases = model.result_.privacy["releases"]
    assert list(releases) == ["class_split_features"]
    assert releases["class_split_features"]["epsilon"] == 6.0
    assert model.coef_.shape == (3, 4)
    assert np.mean(model.predict(x) != y) < 0.35  # chance about 0.67
    # Without noise every client gives every class its exact row y~_k (1, x): the
    # protocol's fit is the learner's on those rows, to the last bit.
    exact = LDPClassifier(
        epsilon=np.inf, multiclass_release="split", random_state=0, **VECTORS
    ).fit(x, y)
    mech = ClassSplitMechanism(epsilon=np.inf, n_features=4, n_classes=3)
    # The features each client releases: its row as the fitted featurizer scales it.
    w = np.hstack([np.ones((3000, 1)), exact.featurizer_.transform(x)])
    blocks = np.where(y[:, None] == np.arange(3), 1.0, -1.0)[:, :, None] * w[:, None]
    direct = MomentSplitClassifier(n_classes=3, mechanism=mech).fit_moments(
        ReleaseMoments.of_blocks(blocks, w)
    )
    np.testing.assert_array_equal(exact.coef_, direct.coef_)
    np.testing.assert_array_equal(exact.intercept_, direct.intercept_)
    with pytest.raises(ValueError, match="multiclass_release must be one of"):
        LDPClassifier(multiclass_release="sample", **VECTORS).fit(x, y)


def test_no_signal_fit_reaches_the_fit_only_where_no_signal_is_detected():
    # Study 1's design, 1000 clients at epsilon 0.5: the fit detects no signal for
    # some noise seeds (3 of these 8). There "average" replaces the fallback on the
    # same releases; elsewhere it changes nothing.
    from scipy.special import expit

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(1000, 4))
    y = (rng.random(1000) < expit(5.0 * x @ np.array([1, -0.5, 1 / 3, -0.25]))).astype(
        int
    )
    public = rng.uniform(-1, 1, size=(500, 4))
    floored = 0
    for seed in range(8):
        fits = {
            rule: LDPClassifier(
                epsilon=0.5, no_signal_fit=rule, random_state=seed, **VECTORS
            ).fit(x, y, public_curves=public)
            for rule in ("fallback", "average")
        }
        said = {rule: m.result_.signal["fallback"] for rule, m in fits.items()}
        if not said["fallback"]:
            np.testing.assert_array_equal(fits["average"].coef_, fits["fallback"].coef_)
            assert said["average"] == ""
            continue
        floored += 1
        assert said["fallback"].startswith("no signal detected in the features")
        assert said["average"] == (
            "no signal detected in the features: the posterior mean averaged over "
            "the prior variances"
        )
        assert np.any(fits["average"].coef_ != fits["fallback"].coef_)
    assert floored >= 1
    with pytest.raises(ValueError, match="no_signal_fit must be one of"):
        LDPClassifier(no_signal_fit="zero", **VECTORS).fit(x, y)
    # The estimator's and fit_own's defaults are the setting's.
    import inspect

    from ldpfda.config import Settings
    from ldpfda.engine.own_data import fit_own

    default = Settings().no_signal_fit
    assert LDPClassifier().get_params()["no_signal_fit"] == default
    assert inspect.signature(fit_own).parameters["no_signal_fit"].default == default
