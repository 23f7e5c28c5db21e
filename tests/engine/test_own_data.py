"""A protocol fitted on own curves: the split, the fit, the model record."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ldpfda.datasets.wearable import make_wearable
from ldpfda.datasets.wearable_spec import PUBLIC_SEED_BASE, wearable_spec
from ldpfda.engine.own_data import (
    OwnDataError,
    OwnModel,
    featurize_own,
    fit_own,
    options_spec,
    stratified_split,
)


@pytest.fixture(scope="module")
def spec():
    return wearable_spec()


@pytest.fixture(scope="module")
def features(spec):
    return spec.featurizer().featurize(make_wearable(1200, seed=100))


@pytest.fixture(scope="module")
def public(spec):
    return spec.featurizer().transform(make_wearable(300, seed=PUBLIC_SEED_BASE + 5))


def test_the_split_is_stratified_seeded_and_disjoint():
    labels = np.array([0] * 80 + [1] * 20)
    train, test = stratified_split(labels, 0.25, seed=3)
    assert np.intersect1d(train, test).size == 0
    assert np.union1d(train, test).tolist() == list(range(100))
    assert (labels[test] == 0).sum() == 20 and (labels[test] == 1).sum() == 5
    again, _ = stratified_split(labels, 0.25, seed=3)
    other, _ = stratified_split(labels, 0.25, seed=4)
    np.testing.assert_array_equal(train, again)
    assert not np.array_equal(train, other)


def test_the_split_keeps_a_subject_of_every_label_on_both_sides():
    labels = np.array([0] * 50 + [1] * 2)
    train, test = stratified_split(labels, 0.1, seed=0)
    assert (labels[test] == 1).sum() == 1 and (labels[train] == 1).sum() == 1
    with pytest.raises(ValueError, match="label 'b' has 1 subject"):
        stratified_split(np.array([0, 0, 0, 1]), 0.25, seed=0, names=("a", "b"))
    with pytest.raises(ValueError, match="test_fraction"):
        stratified_split(labels, 1.0, seed=0)


def test_the_default_protocol_learns_the_shape(spec, features, public):
    fit = fit_own(
        features, spec, epsilon=5.0, protocol="default", seed=0, public=public
    )
    errors = fit.test_errors
    assert set(errors) == {"moment", "non_private", "majority"}
    # Over seeds 0-9 (1200 subjects, 300 held out): moment 0.18 +- 0.024, non-private
    # 0.12 +- 0.012, majority 0.49 +- 0.006 (mean +- sd); bounds about 4 sd away.
    assert errors["moment"] < 0.28
    assert errors["non_private"] < 0.18
    assert 0.4 < errors["majority"] < 0.6
    assert fit.n_test == 300 and fit.train_idx.size == 900
    assert fit.settings.public_features and fit.n_public == 300
    assert fit.result.privacy["max_spent"] == pytest.approx(5.0)


def test_without_public_features_the_moment_comes_from_the_releases(spec, features):
    fit = fit_own(features, spec, epsilon=5.0, protocol="default", seed=0)
    assert not fit.settings.public_features and fit.n_public is None


def test_the_reference_reports_its_baselines(spec, features):
    fit = fit_own(
        features,
        spec,
        epsilon=5.0,
        protocol="reference",
        seed=0,
        num_weak_models=10,
        subsample_size=40,
    )
    assert {"mrma", "mr", "ma", "weak", "voting", "naive", "majority"} <= set(
        fit.test_errors
    )
    assert fit.settings.n_train == 150 and fit.settings.n_eval == 750


def test_the_same_seed_gives_the_same_model_and_another_seed_another(spec, features):
    def coef(seed):
        fit = fit_own(features, spec, epsilon=2.0, protocol="default", seed=seed)
        return fit.model.coef

    np.testing.assert_array_equal(coef(7), coef(7))
    assert not np.array_equal(coef(7), coef(8))


def test_too_few_subjects_for_the_reference_name_the_setting(spec, features):
    from ldpfda.config import SettingError

    with pytest.raises(SettingError, match="subsample_size") as info:
        fit_own(
            features,
            spec,
            epsilon=5.0,
            protocol="reference",
            seed=0,
            subsample_size=500,
        )
    assert info.value.name == "subsample_size"


def test_the_model_record_round_trips_and_predicts_as_the_fit(spec, features, public):
    fit = fit_own(
        features, spec, epsilon=5.0, protocol="default", seed=1, public=public
    )
    record = json.loads(json.dumps(fit.model_record(spec_source="s", data="d")))
    model = OwnModel.from_record(record)
    assert model.spec == spec and model.method == "moment"
    new = spec.featurizer().featurize(make_wearable(200, seed=999))
    predicted = model.predict_features(new)
    np.testing.assert_array_equal(
        predicted.labels, fit.model.predict(new.features)[:, 0]
    )
    assert np.all((0.5 <= predicted.probability) & (predicted.probability <= 1.0))
    assert record["measured"]["test_subjects"] == 300
    assert record["measured"]["split"]["seed"] == 1
    assert record["spec"]["hash"] == spec.hash and record["labels"] == list(spec.labels)


def test_a_changed_model_file_is_refused(spec, features):
    fit = fit_own(features, spec, epsilon=5.0, protocol="default", seed=1)
    record = fit.model_record(spec_source="s", data="d")
    changed = {
        **record,
        "spec": {
            **record["spec"],
            "text": record["spec"]["text"].replace(
                "min-points = 24", "min-points = 25"
            ),
        },
    }
    with pytest.raises(OwnDataError, match="hashes to"):
        OwnModel.from_record(changed)
    with pytest.raises(OwnDataError, match="'coef'"):
        OwnModel.from_record({**record, "coef": [1.0, 2.0]})
    with pytest.raises(OwnDataError, match="format-version"):
        OwnModel.from_record({**record, "format-version": 7})


def test_unusable_subjects_are_named_or_left_out(spec):
    curves = make_wearable(5, seed=4)
    rows = curves.subjects != 2
    keep = rows | (np.cumsum(~rows) <= 5)  # subject 2 keeps 5 points
    from ldpfda.datasets.curves import LongCurves

    sparse = LongCurves(
        curves.subjects[keep],
        curves.curves[keep],
        curves.times[keep],
        curves.values[keep],
        curves.labels,
        curves.subject_ids,
        curves.channels,
        curves.label_names,
    )
    with pytest.raises(
        OwnDataError,
        match=r"f\.csv: 1 subject.*'2', channel "
        r"'heart_rate'.*fewer than min_points \(24\)",
    ):
        featurize_own(spec, sparse, source="f.csv")
    features, dropped = featurize_own(spec, sparse, source="f.csv", drop_unusable=True)
    assert features.subject_ids == ("0", "1", "3", "4") and len(dropped) == 1


def test_a_spec_from_options_has_value_bounds():
    spec = options_spec(
        ("hr",),
        domain=(0, 24),
        value_range=(30, 220),
        labels=("a", "b"),
        epsilon=2.0,
        n_basis=8,
    )
    assert spec.channels[0].bounds.kind == "values" and spec.min_points == 8
    assert spec.release.epsilon == 2.0 and spec.n_features == 8


def test_three_labels_fit_the_k_class_default_and_the_model_file_keeps_k_rows():
    spec = wearable_spec(n_classes=3)
    featurizer = spec.featurizer()
    three = featurizer.featurize(make_wearable(1500, n_classes=3, seed=100))
    public = featurizer.transform(
        make_wearable(300, n_classes=3, seed=PUBLIC_SEED_BASE + 5)
    )
    fit = fit_own(three, spec, epsilon=5.0, protocol="default", seed=0, public=public)
    assert fit.model.coef.shape == (3, spec.n_features)
    assert fit.result.privacy["max_spent"] == pytest.approx(5.0)
    # Better than the majority class: the gap exceeds 3 standard errors of the
    # difference of the two test errors (each ~0.024 on these test subjects).
    errors = fit.test_errors
    se = np.hypot(
        fit.standard_error(errors["moment"]), fit.standard_error(errors["majority"])
    )
    assert errors["moment"] < errors["majority"] - 3 * se
    record = json.loads(json.dumps(fit.model_record(spec_source="s", data="d")))
    model = OwnModel.from_record(record)
    assert model.coef.shape == (3, spec.n_features) and model.intercept.shape == (3,)
    predictions = model.predict_features(three)
    scores = three.features @ fit.model.coef.T + fit.model.intercept
    np.testing.assert_array_equal(predictions.labels, scores.argmax(axis=1))
    assert np.all((predictions.probability > 1 / 3) & (predictions.probability <= 1))
    record["intercept"] = record["intercept"][:2]
    with pytest.raises(OwnDataError, match="key 'intercept'"):
        OwnModel.from_record(record)
