"""The moment classifier from sums added chunk by chunk: the same fit as from the
releases themselves (bit for bit within one block of ids), and the same sums however
the releases arrive, so a chunked in-process run and a Flower run fit one model."""

from __future__ import annotations

import numpy as np
import pytest

from ldpfda.config import Settings
from ldpfda.datasets import VectorDesign
from ldpfda.engine import run_protocol
from ldpfda.engine.inprocess import ArrayClients
from ldpfda.fda import CoefficientScaler, VectorFeaturizer
from ldpfda.privacy.joint import (
    ClassSignedFeatureMechanism,
    ClassSplitMechanism,
    SignedFeatureMechanism,
)
from ldpfda.server import fitting
from ldpfda.server.fitting import MomentSums, public_gram
from ldpfda.server.learners import (
    MomentLinearClassifier,
    MomentMulticlassClassifier,
    MomentSplitClassifier,
)

PUBLIC = VectorDesign().sample(500, 12)[0]
#: Three classes released apart (label by randomized response, x by Hybrid).
SPLIT = "split"


def _releases(n, k, seed=0):
    x = np.random.default_rng(seed).uniform(-1, 1, size=(n, 4))
    y = np.random.default_rng(seed + 1).integers(0, 3 if k == SPLIT else k, size=n)
    if k == SPLIT:
        mech = ClassSplitMechanism(epsilon=3.0, n_features=4, n_classes=3)
        reported, z = mech.release(x, y, seed + 2)
        return mech, z, reported
    if k == 2:
        mech = SignedFeatureMechanism(epsilon=3.0, n_features=4)
        return mech, mech.release(x, y, seed + 2), None
    mech = ClassSignedFeatureMechanism(epsilon=3.0, n_features=4, n_classes=k)
    classes, z = mech.release(x, y, seed + 2)
    return mech, z, classes


def _learner(mech, k, source=None):
    # The feature second moment from a public gram, pooled with public rows, or
    # from the releases alone (shrunk towards a diagonal).
    kw = {
        "gram": public_gram(PUBLIC[:, :4]) if source == "gram" else None,
        "public": PUBLIC[:, :4] if source == "rows" else None,
        "mechanism": mech.inner,
    }
    if k == SPLIT:
        return MomentSplitClassifier(n_classes=3, **{**kw, "mechanism": mech})
    if k == 2:
        return MomentLinearClassifier(joint=True, **kw)
    return MomentMulticlassClassifier(n_classes=k, **kw)


def _sums(ids, z, classes, k, chunks, mech=None):
    if k == SPLIT:
        sums = MomentSums(ids, z.shape[1], 3, keep=False, class_blocks=mech.blocks)
    else:
        sums = MomentSums(ids, z.shape[1], 1 if k == 2 else k, keep=False)
    for part in chunks:
        sums.add(ids[part], z[part], None if classes is None else classes[part])
    return sums.finish()


@pytest.mark.parametrize("k", [2, 3, SPLIT])
@pytest.mark.parametrize("source", ["gram", "rows", None])
def test_one_block_of_sums_fits_as_the_releases_do_bit_for_bit(k, source):
    mech, z, classes = _releases(3000, k)
    ids = np.arange(3000)
    direct = _learner(mech, k, source).fit(z, classes)
    # Three chunks in shuffled order: one block, taken in id order when complete.
    parts = np.array_split(np.random.default_rng(4).permutation(3000), 3)
    sums = _sums(ids, z, classes, k, parts, mech)
    summed = _learner(mech, k, source).fit_moments(sums)
    for name in ("coef_", "intercept_", "cross_moment_", "gram_", "identified_"):
        np.testing.assert_array_equal(getattr(summed, name), getattr(direct, name))
    for name in ("noise_variance_", "shrinkage_", "gram_source_", "fallback_"):
        assert getattr(summed, name) == getattr(direct, name)


@pytest.mark.parametrize("k", [2, 3, SPLIT])
@pytest.mark.parametrize("source", ["rows", None])
def test_sums_over_blocks_fit_as_the_releases_do(monkeypatch, k, source):
    # Chan's pairwise merge of 16 blocks against one pass over the releases: the
    # moments the fit takes agree to rounding (1e-12).
    monkeypatch.setattr(fitting, "MOMENT_BLOCK", 200)
    mech, z, classes = _releases(3000, k)
    direct = _learner(mech, k, source).fit(z, classes)
    sums = _sums(np.arange(3000), z, classes, k, [slice(None)], mech)
    summed = _learner(mech, k, source).fit_moments(sums)
    for name in ("cross_moment_", "gram_", "noise_variance_"):
        got, want = getattr(summed, name), getattr(direct, name)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    assert (summed.gram_source_, summed.fallback_) == (
        direct.gram_source_,
        direct.fallback_,
    )
    # The prior variances are Nelder-Mead's, which stops once its simplex spans
    # xatol = 1e-4 in log tau^2: rounding in the moments may move where it stops
    # by that much, and the coefficients (about linear in tau^2) by that share.
    theta, got = (
        np.c_[np.atleast_1d(f.intercept_), np.atleast_2d(f.coef_)]
        for f in (direct, summed)
    )
    np.testing.assert_allclose(got, theta, rtol=0, atol=1e-4 * np.abs(theta).max())


@pytest.mark.parametrize("k", [2, 3, SPLIT])
def test_sums_over_blocks_do_not_depend_on_how_the_releases_arrive(monkeypatch, k):
    monkeypatch.setattr(fitting, "MOMENT_BLOCK", 64)
    mech, z, classes = _releases(1000, k)
    ids = np.arange(1000) + 5
    whole = _sums(ids, z, classes, k, [slice(None)], mech)
    order = np.random.default_rng(1).permutation(1000)
    shuffled = _sums(ids, z, classes, k, np.array_split(order, 7), mech)
    for name in ("count", "mean", "scatter", "products", "squares"):
        np.testing.assert_array_equal(getattr(shuffled, name), getattr(whole, name))
    # And they are the moments of the releases, up to rounding.
    direct = _learner(mech, k).fit(z, classes)
    summed = _learner(mech, k).fit_moments(whole)
    np.testing.assert_allclose(summed.cross_moment_, direct.cross_moment_, atol=1e-15)
    if k == SPLIT:
        # Its prior variances stop where Nelder-Mead's simplex spans xatol = 1e-4
        # in log tau^2, which rounding in the moments may move (as in the test above).
        atol = 1e-4 * np.abs(direct.coef_).max()
        np.testing.assert_allclose(summed.coef_, direct.coef_, rtol=0, atol=atol)
    else:
        np.testing.assert_allclose(summed.coef_, direct.coef_, rtol=1e-9, atol=1e-12)


def test_a_chunked_run_without_payload_fits_the_model_of_its_payload(monkeypatch):
    # Many blocks and chunks that straddle them: the run keeps no releases, yet fits
    # the model that the whole payload (a Flower run's one chunk) gives.
    monkeypatch.setattr(fitting, "MOMENT_BLOCK", 50)
    settings = Settings(epsilon=2.0, n_train=300, n_eval=500, seed=3)
    x, y = VectorDesign().sample(800, 11)
    feat = VectorFeaturizer(CoefficientScaler(-1.0, 1.0), 4)
    ids = np.arange(800)
    populations = [ArrayClients(i, x[i], y[i], feat) for i in (ids[:300], ids[300:])]

    def run(keep):
        rng = np.random.default_rng(1)
        return run_protocol(
            *populations, settings, seed=9, server_rng=rng, chunk_size=37,
            keep_payload=keep, public=PUBLIC,
        )  # fmt: skip

    lean, kept = run(False), run(True)
    assert len(lean.payload) == 0 and len(kept.payload) == 800
    whole = fitting.moment_result(kept.payload, settings, privacy={}, public=PUBLIC)
    for result in (lean, kept):
        np.testing.assert_array_equal(result.final.coef, whole.final.coef)
        np.testing.assert_array_equal(result.final.intercept, whole.final.intercept)
