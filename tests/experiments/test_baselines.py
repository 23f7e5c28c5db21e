"""The LDP baselines: noise parameters, validation, reproducibility, and behaviour."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.server.baselines import (
    GaussianRelease,
    HistogramPartition,
    LabelledHistogramRelease,
    gaussian_classifier,
    gaussian_sigma,
    histogram_bins_per_axis,
    histogram_classifier,
    histogram_laplace_scale,
)


def _data(n=2000, p=2, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, p))
    y = (x[:, 0] > 0).astype(np.int8)
    return x, y


# -- noise parameters ------------------------------------------------------------------


def test_gaussian_sigma_is_flowers_formula():
    sigma = gaussian_sigma(epsilon=2.0, delta=1e-5, sensitivity=3.0)
    assert sigma == pytest.approx(3.0 * math.sqrt(2 * math.log(1.25 / 1e-5)) / 2.0)
    assert gaussian_sigma(epsilon=math.inf, delta=1e-5, sensitivity=1.0) == 0.0


def test_gaussian_release_default_sensitivity_is_twice_the_clip():
    mech = GaussianRelease(epsilon=1.0, delta=1e-5, clipping_norm=1.5)
    assert mech.sensitivity == 3.0
    assert mech.sigma == pytest.approx(
        gaussian_sigma(epsilon=1.0, delta=1e-5, sensitivity=3.0)
    )
    assert dict(mech.event().parameters)["sigma"] == mech.sigma
    clipped = mech.clip(np.array([[3.0, 4.0], [0.3, 0.4]]))
    assert np.allclose(np.linalg.norm(clipped, axis=1), [1.5, 0.5])


@pytest.mark.parametrize("eps", [0.5, 2.0, 20.0])
def test_histogram_scale_round_trip(eps):
    b = histogram_laplace_scale(epsilon=eps)
    assert b == pytest.approx(2.0 / eps)
    assert histogram_laplace_scale(epsilon=math.inf) == 0.0


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: gaussian_sigma(epsilon=0.0, delta=1e-5, sensitivity=1.0), "epsilon"),
        (lambda: gaussian_sigma(epsilon=1.0, delta=0.0, sensitivity=1.0), "delta"),
        (lambda: gaussian_sigma(epsilon=1.0, delta=1.0, sensitivity=1.0), "delta"),
        (
            lambda: gaussian_sigma(epsilon=1.0, delta=1e-5, sensitivity=0.0),
            "sensitivity",
        ),
        (lambda: GaussianRelease(epsilon=1.0, clipping_norm=0.0), "clipping_norm"),
        (lambda: GaussianRelease(epsilon=-1.0, clipping_norm=1.0), "epsilon"),
        (lambda: histogram_laplace_scale(epsilon=-1.0), "epsilon"),
        (lambda: LabelledHistogramRelease(epsilon=1.0, n_cells=0), "n_cells"),
        (lambda: HistogramPartition.regular(2, 2, max_cells=1), "max_cells"),
        (
            lambda: histogram_bins_per_axis(
                n_clients=10, epsilon=1.0, dimension=2, smoothness=0.0
            ),
            "smoothness",
        ),
    ],
)
def test_invalid_parameters_name_themselves(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_bad_label_mode_and_epsilon_type():
    x, y = _data(50)
    with pytest.raises(ValueError, match="label_mode"):
        gaussian_classifier(
            x, y, epsilon=1.0, client_ids=np.arange(50), seed=0, label_mode="round"
        )
    with pytest.raises(TypeError, match="epsilon"):
        histogram_classifier(x, y, epsilon="1", client_ids=np.arange(50), seed=0)


# -- partition -----------------------------------------------------------------------


def test_partition_lowers_bins_then_averages_blocks():
    part = HistogramPartition.regular(4, 9, max_cells=1024)
    assert (part.bins_per_axis, part.n_axes, part.n_cells) == (5, 4, 625)
    part = HistogramPartition.regular(20, 2, max_cells=1024)
    assert part.n_axes == 10 and part.n_cells == 1024
    assert sorted(i for b in part.blocks for i in b) == list(range(20))
    cells = part.cells(np.array([[-1.0] * 20, [1.0] * 20]))
    assert cells.tolist() == [0, 1023]


def test_bins_follow_the_rate_and_grow_with_epsilon():
    small = histogram_bins_per_axis(n_clients=3000, epsilon=0.5, dimension=4)
    large = histogram_bins_per_axis(n_clients=3000, epsilon=20.0, dimension=4)
    assert small == 2 and large == round((3000 * 400) ** 0.1)


# -- releases ------------------------------------------------------------------------


def test_histogram_noise_has_laplace_scale():
    mech = LabelledHistogramRelease(epsilon=2.0, n_cells=50)
    clean = np.zeros((4000, 50))
    noise = mech.randomise(clean, np.random.default_rng(1))
    # Var of Laplace(b) is 2 b^2 with b = 2 / eps = 1.
    assert noise.var() == pytest.approx(2.0, rel=0.03)
    assert np.mean(np.abs(noise)) == pytest.approx(1.0, rel=0.03)


def test_gaussian_noise_has_sigma():
    mech = GaussianRelease(epsilon=5.0, delta=1e-5, clipping_norm=1.0)
    noise = mech.randomise(np.zeros((50_000, 2)), np.random.default_rng(2))
    assert noise.std() == pytest.approx(mech.sigma, rel=0.02)


def test_histogram_vectors_have_l1_sensitivity_two():
    mech = LabelledHistogramRelease(epsilon=1.0, n_cells=6)
    v = mech.indicators(np.arange(6), np.array([0, 1, 0, 1, 0, 1]))
    dist = np.abs(v[:, None, :] - v[None, :, :]).sum(axis=2)
    assert dist.max() == 2.0


# -- classifiers ---------------------------------------------------------------------


def test_non_private_baselines_learn_a_separable_rule():
    x, y = _data()
    ids = np.arange(y.size)
    hist = histogram_classifier(x, y, epsilon=math.inf, client_ids=ids, seed=0)
    gauss = gaussian_classifier(x, y, epsilon=math.inf, client_ids=ids, seed=0)
    assert hist.error(x, y) < 0.05
    assert gauss.error(x, y) < 0.02


def test_same_seed_same_result_and_chunking_does_not_matter():
    x, y = _data(500)
    ids = np.arange(500)
    a = histogram_classifier(x, y, epsilon=1.0, client_ids=ids, seed=3, chunk_size=7)
    b = histogram_classifier(x, y, epsilon=1.0, client_ids=ids, seed=3)
    c = histogram_classifier(x, y, epsilon=1.0, client_ids=ids, seed=4)
    assert np.allclose(a.cell_sums, b.cell_sums)
    assert not np.allclose(a.cell_sums, c.cell_sums)
    g1 = gaussian_classifier(x, y, epsilon=1.0, client_ids=ids, seed=3)
    g2 = gaussian_classifier(x, y, epsilon=1.0, client_ids=ids, seed=3)
    assert np.array_equal(g1.model.coef, g2.model.coef)


def test_ledger_is_charged_the_whole_budget():
    x, y = _data(40)
    ids = np.arange(40)
    ledger = PrivacyLedger(budget=2.0, client_ids=ids)
    histogram_classifier(x, y, epsilon=2.0, client_ids=ids, seed=0, ledger=ledger)
    assert ledger.spent(0) == pytest.approx(2.0)
    ledger = PrivacyLedger(budget=2.0, client_ids=ids)
    gaussian_classifier(
        x, y, epsilon=2.0, client_ids=ids, seed=0, ledger=ledger, label_mode="regress"
    )
    assert ledger.spent(39) == pytest.approx(2.0)
