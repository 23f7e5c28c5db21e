"""The in-process engine: reproducibility, batch/order independence, privacy totals."""

from __future__ import annotations

import numpy as np
import pytest

from ldpfda.config import Settings
from ldpfda.datasets import FunctionalDesign, VectorDesign
from ldpfda.fda import CoefficientScaler, VectorFeaturizer
from ldpfda.privacy.random import derive_seed
from ldpfda.server.engine import (
    METHODS,
    ArrayClients,
    make_featurizer,
    run_protocol,
    run_repeat,
)

SMALL = Settings(
    epsilon=5.0,
    n_train=200,
    n_eval=600,
    n_test=2000,
    num_weak_models=10,
    subsample_size=40,
    repeats=1,
    seed=3,
)


def _populations(settings, order=None):
    design = VectorDesign()
    x, y = design.sample(settings.n_train + settings.n_eval, 11)
    feat = VectorFeaturizer(CoefficientScaler(-1.0, 1.0), 4)
    ids = np.arange(x.shape[0])
    tr, ev = ids[: settings.n_train], ids[settings.n_train :]
    if order is not None:
        tr = tr[order(tr.size)]
    return (
        ArrayClients(tr, x[tr], y[tr], feat),
        ArrayClients(ev, x[ev], y[ev], feat),
        (x, y),
    )


def _run(settings, chunk_size=100_000, order=None):
    train, evaluation, _ = _populations(settings, order)
    return run_protocol(
        train,
        evaluation,
        settings,
        seed=99,
        server_rng=np.random.default_rng(1),
        chunk_size=chunk_size,
    )


def test_same_seed_reproduces_and_other_seed_differs():
    a = run_repeat(SMALL, 0)
    b = run_repeat(SMALL, 0)
    c = run_repeat(SMALL.replace(seed=4), 0)
    np.testing.assert_array_equal(a.payload.features, b.payload.features)
    np.testing.assert_array_equal(a.final.coef, b.final.coef)
    assert a.test_errors == b.test_errors
    assert not np.allclose(a.payload.features, c.payload.features)


def test_result_does_not_depend_on_chunk_size():
    whole = _run(SMALL)
    chunked = _run(SMALL, chunk_size=7)
    np.testing.assert_array_equal(whole.payload.features, chunked.payload.features)
    np.testing.assert_array_equal(whole.payload.labels, chunked.payload.labels)
    np.testing.assert_allclose(whole.final.coef, chunked.final.coef)
    np.testing.assert_allclose(whole.estimated_errors, chunked.estimated_errors)


def test_client_noise_does_not_depend_on_client_order():
    forward = _run(SMALL)
    shuffled = _run(SMALL, order=lambda n: np.random.default_rng(5).permutation(n))
    by_id = np.argsort(shuffled.payload.client_ids)
    np.testing.assert_array_equal(
        forward.payload.client_ids, shuffled.payload.client_ids[by_id]
    )
    np.testing.assert_array_equal(
        forward.payload.features, shuffled.payload.features[by_id]
    )
    np.testing.assert_array_equal(
        forward.payload.labels, shuffled.payload.labels[by_id]
    )


def test_every_client_spends_exactly_its_budget():
    result = run_repeat(SMALL, 0)
    privacy = result.privacy
    assert privacy["n_clients"] == SMALL.n_train + SMALL.n_eval
    assert privacy["max_spent"] == pytest.approx(SMALL.epsilon)
    assert privacy["min_spent"] == pytest.approx(SMALL.epsilon)
    releases = privacy["releases"]
    assert releases["laplace"]["clients"] == SMALL.n_train
    assert releases["binary_randomized_response"]["clients"] == SMALL.n_train
    assert releases["feedback_bit"]["clients"] == SMALL.n_eval
    # Reference split: p coordinates and the label get eps/(p+1) each (p = 4).
    assert releases["laplace"]["epsilon"] == pytest.approx(SMALL.epsilon * 4 / 5)


def test_every_method_is_scored_and_the_report_is_complete():
    result = run_repeat(SMALL, 0)
    assert set(result.test_errors) == set(METHODS)
    assert all(0.0 <= e <= 1.0 for e in result.test_errors.values())
    report = result.report()
    assert len(report["models"]) == SMALL.num_weak_models
    assert sum(m["weight"] for m in report["models"]) == pytest.approx(1.0)
    assert all(m["reversed"] == (m["estimated_error"] > 0.5) for m in report["models"])


def test_non_private_protocol_reaches_the_bayes_error_region():
    # With eps = inf nothing is perturbed: the evaluation bits are exact, so the
    # reversed, averaged model must be close to the clean logistic fit.
    settings = SMALL.replace(epsilon=float("inf"), n_test=50_000)
    result = run_repeat(settings, 0)
    bayes = VectorDesign().bayes_error(n=200_000)
    assert result.test_errors["non_private"] < bayes + 0.03
    assert result.test_errors["mrma"] < bayes + 0.05


def test_functional_design_uses_public_calibration_and_runs():
    settings = SMALL.replace(dataset="functional", n_basis=8, calibration_size=300)
    featurizer = make_featurizer(
        FunctionalDesign(), settings, np.random.default_rng(derive_seed(0, "public"))
    )
    assert featurizer.n_features_out == 8
    result = run_repeat(settings, 0)
    assert result.payload.features.shape == (settings.n_train, 8)
    assert set(result.test_errors) == set(METHODS)
