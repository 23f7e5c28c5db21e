"""The forms of clients' data both estimators accept, read the same way by each."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import skfda
from skfda.representation.basis import BSplineBasis, FourierBasis

from ldpfda.datasets import FunctionalDesign, VectorDesign
from ldpfda.datasets.wearable import make_wearable
from ldpfda.engine.classifier import LDPClassifier
from ldpfda.engine.estimator import MRMAClassifier
from ldpfda.engine.inputs import to_long_curves
from ldpfda.exceptions import PrivacyLeakWarning
from ldpfda.fda.features import CurveFeaturizer
from ldpfda.fda.irregular import IrregularProjection
from ldpfda.fda.scaling import CoefficientScaler
from ldpfda.schema.spec import FederationSpec, init_spec

DESIGN = FunctionalDesign()
GRID = DESIGN.grid_points


def _small(cls, **params):
    """Either estimator with settings small enough for a few hundred clients."""
    if cls is MRMAClassifier:
        params = {"n_estimators": 5, "subsample_size": 20, **params}
    return cls(random_state=0, **params)


ESTIMATORS = pytest.mark.parametrize("cls", [LDPClassifier, MRMAClassifier])


@pytest.fixture(scope="module")
def data():
    curves, labels = DESIGN.sample(400, 0)
    public, _ = DESIGN.sample(200, 1)
    return curves, labels, public


@ESTIMATORS
def test_a_plain_array_is_curves_only_with_its_grid(cls, data):
    # It used to become a 100-dimensional vector model with every value clipped.
    curves, labels, public = data
    for kwargs in ({"public_curves": public}, {}):
        with pytest.raises(ValueError, match="grid_points.*input_type='vectors'"):
            _small(cls).fit(curves, labels, **kwargs)
    with pytest.raises(ValueError, match="public_curves are needed"):
        _small(cls).fit(curves, labels, grid_points=GRID)


@ESTIMATORS
def test_array_fdatagrid_and_dataframe_give_the_same_model(cls, data):
    curves, labels, public = data
    a = _small(cls).fit(curves, labels, grid_points=GRID, public_curves=public)
    b = _small(cls).fit(
        skfda.FDataGrid(curves, GRID),
        labels,
        public_curves=skfda.FDataGrid(public, GRID),
    )
    frame = pd.DataFrame(curves, columns=GRID)
    c = _small(cls).fit(frame, labels, public_curves=pd.DataFrame(public, columns=GRID))
    np.testing.assert_array_equal(a.coef_, b.coef_)
    np.testing.assert_array_equal(a.coef_, c.coef_)
    assert a.n_features_in_ == c.n_features_in_ == GRID.size
    np.testing.assert_array_equal(
        a.predict(curves[:20]), b.predict(skfda.FDataGrid(curves[:20], GRID))
    )
    np.testing.assert_array_equal(a.predict(curves[:20]), c.predict(frame[:20]))
    # Column names read from a file are strings of the times.
    d = _small(cls).fit(
        pd.DataFrame(curves, columns=[str(t) for t in GRID]),
        labels,
        public_curves=pd.DataFrame(public, columns=GRID),
    )
    np.testing.assert_array_equal(a.coef_, d.coef_)


def test_a_dataframe_of_curves_needs_the_grid_as_column_names(data):
    curves, labels, public = data
    names = [f"t{i}" for i in range(GRID.size)]
    with pytest.raises(ValueError, match=r"numeric column names.*'t0'"):
        LDPClassifier().fit(
            pd.DataFrame(curves, columns=names),
            labels,
            public_curves=pd.DataFrame(public, columns=names),
        )
    # A table of feature vectors is what input_type="vectors" is for.
    x, y = VectorDesign().sample(300, 0)
    table = pd.DataFrame(x, columns=["a", "b", "c", "d"])
    model = LDPClassifier(input_type="vectors", random_state=0).fit(table, y)
    assert list(model.feature_names_in_) == ["a", "b", "c", "d"]
    with pytest.warns(UserWarning, match="fitted with feature names"):
        np.testing.assert_array_equal(model.predict(table), model.predict(x))


@ESTIMATORS
def test_several_channels_are_projected_each_and_concatenated(cls, data):
    curves, labels, public = data
    second = np.cumsum(curves, axis=1) / GRID.size
    both = skfda.FDataGrid(np.stack([curves, second], axis=2), GRID)
    public_both = skfda.FDataGrid(
        np.stack([public, np.cumsum(public, axis=1) / GRID.size], axis=2), GRID
    )
    model = _small(cls).fit(both, labels, public_curves=public_both)
    assert model.coef_.shape == (1, 20)
    expected = np.hstack(
        [
            CurveFeaturizer.calibrated(p, GRID).transform(c)
            for c, p in ((curves, public), (second, np.cumsum(public, 1) / GRID.size))
        ]
    )
    np.testing.assert_array_equal(model.featurizer_.transform(both), expected)
    with pytest.raises(ValueError, match="1 channel"):
        model.predict(skfda.FDataGrid(curves, GRID))


def _irregular(curves: np.ndarray, points: int, seed: int) -> skfda.FDataIrregular:
    """Every curve on its own ``points`` timestamps of the grid, one drawn at random
    from each of ``points`` equal stretches (so no gap leaves a coefficient free)."""
    rng = np.random.default_rng(seed)
    strata = np.array_split(np.arange(GRID.size), points)
    keep = [np.array([rng.choice(s) for s in strata]) for _ in curves]
    starts = np.arange(len(curves)) * points
    return skfda.FDataIrregular(
        starts,
        np.concatenate([GRID[k] for k in keep]),
        np.concatenate([c[k] for c, k in zip(curves, keep, strict=True)])[:, None],
        domain_range=(0.0, 1.0),
    )


@ESTIMATORS
def test_irregular_curves_are_projected_on_their_own_timestamps(cls, data):
    curves, labels, public = data
    own, public_own = _irregular(curves, 30, 0), _irregular(public, 30, 1)
    model = _small(cls).fit(own, labels, public_curves=public_own)
    projection = IrregularProjection.equispaced((0.0, 1.0), 10, 4)

    def coefficients(fdata):
        rows = [
            projection.project_curve(
                fdata.points[s : s + 30, 0], fdata.values[s : s + 30, 0]
            )
            for s in fdata.start_indices
        ]
        return np.array(rows)

    scaler = CoefficientScaler.from_public(coefficients(public_own))
    np.testing.assert_allclose(
        model.featurizer_.transform(own),
        scaler.transform(coefficients(own)),
        rtol=0,
        atol=1e-12,
    )
    assert model.predict(own).shape == (400,)


def test_irregular_curves_sampled_everywhere_are_the_curves_on_the_grid(data):
    curves, labels, public = data
    full, public_full = _irregular(curves, 100, 0), _irregular(public, 100, 1)
    a = LDPClassifier(random_state=0).fit(full, labels, public_curves=public_full)
    b = LDPClassifier(random_state=0).fit(
        curves, labels, grid_points=GRID, public_curves=public
    )
    np.testing.assert_allclose(
        a.featurizer_.transform(full), b.featurizer_.transform(curves), atol=1e-9
    )


def test_irregular_curves_that_cannot_be_projected_are_named(data):
    curves, labels, public = data
    sparse = _irregular(curves[:10], 5, 0)
    with pytest.raises(ValueError, match="curve 0, channel 0: no usable curve"):
        LDPClassifier().fit(
            sparse, labels[:10], public_curves=_irregular(public, 30, 1)
        )
    own = _irregular(curves[:10], 30, 0)
    values = own.values.copy()
    values[3] = np.nan
    holes = skfda.FDataIrregular(own.start_indices, own.points, values)
    with pytest.raises(ValueError, match="NaN"):
        LDPClassifier().fit(holes, labels[:10], public_curves=own)


@ESTIMATORS
def test_curves_in_a_bspline_basis_are_their_coefficients(cls, data):
    curves, labels, public = data
    basis = BSplineBasis(domain_range=(0.0, 1.0), n_basis=10, order=4)
    own = skfda.FDataGrid(curves, GRID).to_basis(basis)
    public_own = skfda.FDataGrid(public, GRID).to_basis(basis)
    model = _small(cls).fit(own, labels, public_curves=public_own)
    scaler = CoefficientScaler.from_public(public_own.coefficients)
    np.testing.assert_array_equal(
        model.featurizer_.transform(own), scaler.transform(own.coefficients)
    )
    # The same least-squares coefficients as the projection of the sampled curves.
    grid_model = _small(cls).fit(curves, labels, grid_points=GRID, public_curves=public)
    np.testing.assert_allclose(
        model.featurizer_.transform(own),
        grid_model.featurizer_.transform(curves),
        atol=1e-9,
    )
    with pytest.raises(ValueError, match="n_basis=8 but the curves"):
        _small(cls, n_basis=8).fit(own, labels, public_curves=public_own)
    other = skfda.FDataGrid(public, GRID).to_basis(
        BSplineBasis(domain_range=(0.0, 1.0), n_basis=8)
    )
    with pytest.raises(ValueError, match="order 4 with knots"):
        _small(cls).fit(own, labels, public_curves=other)
    fourier = skfda.FDataGrid(curves, GRID).to_basis(FourierBasis(n_basis=5))
    with pytest.raises(TypeError, match="BSplineBasis"):
        _small(cls).fit(fourier, labels, public_curves=public_own)


# -- a federation spec ---------------------------------------------------------------


def _spec(protocol: str = "default", epsilon: float = 4.0, **changes) -> FederationSpec:
    """A spec for the functional design, bounds from public calibration curves."""
    calibration = to_long_curves(
        DESIGN.sample(300, 5)[0], grid_points=GRID, channels=("x",)
    )
    return init_spec(
        calibration,
        domain=(0.0, 1.0),
        unit="s",
        channel_units="u",
        epsilon=epsilon,
        protocol=protocol,
        labels=["0", "1"],
        grid=tuple(GRID.tolist()),
        margin=0.1,
        **changes,
    )


@ESTIMATORS
def test_a_spec_fixes_the_basis_the_bounds_the_labels_and_epsilon(cls, data, tmp_path):
    curves, labels, _ = data
    spec = _spec("default" if cls is LDPClassifier else "reference")
    model = _small(cls, spec=spec).fit(curves, labels)  # the spec's common grid
    assert model.epsilon_ == 4.0 and model.result_.privacy["max_spent"] == 4.0
    assert list(model.classes_) == ["0", "1"]
    expected = spec.featurizer().transform(
        to_long_curves(curves, grid_points=GRID, channels=("x",))
    )
    np.testing.assert_array_equal(model.featurizer_.transform(curves), expected)
    assert set(model.predict(curves[:30])) <= {"0", "1"}
    # The same spec from its file, and curves as an FDataGrid or a DataFrame.
    path = spec.save(tmp_path / "federation.toml")
    for X in (skfda.FDataGrid(curves, GRID), pd.DataFrame(curves, columns=GRID)):
        again = _small(cls, spec=str(path)).fit(X, labels)
        np.testing.assert_array_equal(again.coef_, model.coef_)


def test_with_a_one_channel_spec_an_fdatabasis_in_its_basis_is_its_coefficients(data):
    curves, labels, _ = data
    spec = _spec()
    own = skfda.FDataGrid(curves, GRID).to_basis(
        BSplineBasis(domain_range=(0.0, 1.0), n_basis=10, order=4)
    )
    model = LDPClassifier(spec=spec, random_state=0).fit(own, labels)
    np.testing.assert_array_equal(
        model.featurizer_.transform(own),
        spec.featurizer().scaler.transform(own.coefficients),
    )
    other = skfda.FDataGrid(curves, GRID).to_basis(
        BSplineBasis(domain_range=(0.0, 1.0), n_basis=12, order=4)
    )
    with pytest.raises(ValueError, match="the model's basis has order 4"):
        model.predict(other)


def test_with_a_spec_missing_values_are_missing_observations(data):
    curves, labels, _ = data
    gappy = curves.copy()
    gappy[:, 40:50] = np.nan  # every curve misses ten points
    spec = _spec()
    model = LDPClassifier(spec=spec, random_state=0).fit(gappy, labels)
    assert np.all(np.isfinite(model.featurizer_.transform(gappy)))
    with pytest.raises(ValueError, match="NaN"):  # no spec: NaN is an error
        LDPClassifier().fit(gappy, labels, grid_points=GRID, public_curves=curves)


def test_long_curves_with_a_spec_carry_their_own_labels():
    calibration = make_wearable(60, seed=1, first_subject=10_000)
    curves = make_wearable(200, seed=0)
    spec = init_spec(
        calibration,
        domain=(0.0, 1440.0),
        unit="min",
        channel_units="bpm",
        epsilon=5.0,
        n_basis=8,
        penalty=1e-6,
        margin=0.1,
    )
    model = LDPClassifier(spec=spec, random_state=0).fit(curves)
    assert tuple(model.classes_) == spec.labels == curves.label_names
    names = np.asarray(curves.label_names)[curves.labels]
    again = LDPClassifier(spec=spec, random_state=0).fit(curves, names)
    np.testing.assert_array_equal(model.coef_, again.coef_)
    assert model.predict(curves).shape == (200,)
    with pytest.raises(ValueError, match=r"label\(s\) \['sick'\] that are not"):
        LDPClassifier(spec=spec).fit(
            curves, np.where(names == "healthy", names, "sick")
        )
    with pytest.raises(ValueError, match="LongCurves carry no basis.*spec="):
        LDPClassifier().fit(curves, public_curves=calibration)


def test_a_spec_is_refused_when_the_estimator_disagrees_with_it(data):
    curves, labels, _ = data
    with pytest.raises(ValueError, match="'reference', which MRMAClassifier runs"):
        LDPClassifier(spec=_spec("reference")).fit(curves, labels)
    with pytest.raises(ValueError, match="'default', which LDPClassifier runs"):
        MRMAClassifier(spec=_spec("default")).fit(curves, labels)
    with pytest.raises(ValueError, match=r"epsilon=5.0 but the spec fixes.*4.0"):
        LDPClassifier(epsilon=5.0, spec=_spec()).fit(curves, labels)
    with pytest.raises(ValueError, match="n_basis must be None with a spec"):
        LDPClassifier(n_basis=10, spec=_spec()).fit(curves, labels)
    with pytest.raises(ValueError, match="input_type='curves' with a spec"):
        LDPClassifier(input_type="vectors", spec=_spec()).fit(curves, labels)
    with pytest.raises(TypeError, match="spec must be a FederationSpec"):
        LDPClassifier(spec=3).fit(curves, labels)
    three = FederationSpec.from_mapping(
        {**_spec("reference").to_mapping(), "labels": ["a", "b", "c"]}
    )
    # MRMA takes K classes: a three-label spec is used, not refused.
    names = np.array(["a", "b", "c"])[np.arange(labels.size) % 3]
    model = _small(MRMAClassifier, spec=three).fit(curves, names)
    assert tuple(model.classes_) == ("a", "b", "c")
    assert model.predict_proba(curves[:4]).shape == (4, 3)


# -- what is refused whatever the form -----------------------------------------------


@ESTIMATORS
def test_public_curves_that_are_the_training_data_warn(cls, data):
    curves, labels, _ = data
    for public in (curves, curves.copy()):
        with pytest.warns(PrivacyLeakWarning, match="public_curves are the training"):
            _small(cls).fit(curves, labels, grid_points=GRID, public_curves=public)


@ESTIMATORS
def test_vectors_and_curves_do_not_mix(cls, data):
    curves, labels, public = data
    vectors = _small(cls, input_type="vectors")
    with pytest.raises(ValueError, match="got an FDataGrid"):
        vectors.fit(skfda.FDataGrid(curves, GRID), labels)
    with pytest.raises(ValueError, match="grid_points are for curves"):
        vectors.fit(curves, labels, grid_points=GRID)
    from scipy.sparse import csr_matrix

    with pytest.raises(TypeError, match="sparse"):
        _small(cls).fit(csr_matrix(curves), labels, grid_points=GRID)
    bad = curves.copy()
    bad[2, 3] = np.inf
    with pytest.raises(ValueError, match="curves contains 1 NaN or infinite"):
        _small(cls).fit(bad, labels, grid_points=GRID, public_curves=public)
    with pytest.raises(ValueError, match="sampled on a grid of 50 points"):
        model = _small(cls).fit(curves, labels, grid_points=GRID, public_curves=public)
        model.predict(skfda.FDataGrid(curves[:, ::2], GRID[::2]))


def test_an_error_in_the_public_curves_names_them_and_not_the_clients(data):
    curves, labels, public = data
    bad = public.copy()
    bad[4, 2] = np.nan
    fit = LDPClassifier(random_state=0).fit
    for given, match in (
        (bad, r"^public_curves contains 1 NaN or infinite value\(s\), first at index"),
        (public[:, :10], r"^public_curves have 10 samples per curve but grid_points"),
        (skfda.FDataGrid(bad, GRID), r"^public_curves contains 1 NaN"),
    ):
        with pytest.raises(ValueError, match=match):
            fit(curves, labels, grid_points=GRID, public_curves=given)
    # The clients' own curves are still "curves".
    own = curves.copy()
    own[0, 0] = np.inf
    with pytest.raises(ValueError, match=r"^curves contains 1 NaN or infinite"):
        fit(own, labels, grid_points=GRID, public_curves=public)
    # Curves on their own timestamps, and in a B-spline basis.
    sparse = _irregular(curves[:10], 30, 0)
    holes = _irregular(public, 30, 1)
    values = holes.values.copy()
    values[3] = np.nan
    holes = skfda.FDataIrregular(holes.start_indices, holes.points, values)
    with pytest.raises(ValueError, match=r"^public_curves: curves contain NaN"):
        fit(sparse, labels[:10], public_curves=holes)
    basis = BSplineBasis(domain_range=(0.0, 1.0), n_basis=10, order=4)
    other = skfda.FDataGrid(public, GRID).to_basis(
        BSplineBasis(domain_range=(0.0, 1.0), n_basis=8)
    )
    with pytest.raises(ValueError, match=r"^public_curves: curves are in a B-spline"):
        fit(skfda.FDataGrid(curves, GRID).to_basis(basis), labels, public_curves=other)
