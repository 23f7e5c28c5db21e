"""Artifacts: round trip, and every kind of bad artifact is refused, naming the file."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldpfda.config import Settings
from ldpfda.server.artifacts import (
    ARTIFACT_VERSION,
    ArtifactError,
    ModelEstimates,
    estimates_path,
    featurizer_fingerprint,
    load_directory,
    models_path,
    read_estimates,
    read_models,
    session_fingerprint,
    write_estimates,
    write_models,
)
from ldpfda.server.mrma import LinearModels

FP = featurizer_fingerprint({"basis": "bspline", "n_basis": 3, "bounds": [[-1, 1]]})
MODELS = LinearModels(np.arange(6.0).reshape(2, 3), np.array([0.5, -0.5]))
READ = {"dimension": 3, "fingerprint": FP, "session": "s1"}
ESTIMATES = {
    0: ModelEstimates("abc", np.array([0.2, 0.7]), np.array([10, 11]), 2.0),
    1: ModelEstimates("def", np.array([-0.1]), np.array([0]), math.inf),
}


def _models(tmp_path, server=0):
    return write_models(
        models_path(tmp_path, server),
        MODELS,
        server=server,
        session="s1",
        fingerprint=FP,
    )


def _estimates(tmp_path, server=1):
    return write_estimates(
        estimates_path(tmp_path, server),
        ESTIMATES,
        server=server,
        session="s1",
        dimension=3,
        fingerprint=FP,
    )


def test_models_round_trip(tmp_path):
    path = _models(tmp_path, server=4)
    assert path.name == "models-server4.json"
    artifact = read_models(path, **READ)
    assert (artifact.server, artifact.session, artifact.path) == (4, "s1", path)
    np.testing.assert_array_equal(artifact.models.coef, MODELS.coef)
    np.testing.assert_array_equal(artifact.models.intercept, MODELS.intercept)
    assert json.loads(path.read_text())["version"] == ARTIFACT_VERSION
    # The digest identifies the file's content.
    assert artifact.digest == read_models(path, **READ).digest
    other = write_models(
        tmp_path / "m2.json",
        LinearModels(MODELS.coef + 1, MODELS.intercept),
        server=4,
        session="s1",
        fingerprint=FP,
    )
    assert read_models(other, **READ).digest != artifact.digest


def test_estimates_round_trip(tmp_path):
    artifact = read_estimates(_estimates(tmp_path), **READ)
    assert artifact.server == 1 and set(artifact.estimates) == {0, 1}
    np.testing.assert_array_equal(artifact.estimates[0].errors, [0.2, 0.7])
    np.testing.assert_array_equal(artifact.estimates[0].counts, [10, 11])
    assert artifact.estimates[0].models == "abc"
    assert artifact.estimates[1].epsilon == math.inf


def _mutated(path, mutate):
    data = json.loads(path.read_text())
    mutate(data)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(version=1), "version 1 is not supported"),
        (lambda d: d.update(version="2"), "version '2' is not supported"),
        (lambda d: d.update(dimension=4), "dimension 4 does not match"),
        (lambda d: d.update(featurizer="0" * 16), "another feature space"),
        (lambda d: d.update(session="s2"), "session 's2'"),
        (lambda d: d.update(format="other"), "not an ldpfda-artifact"),
        (lambda d: d.update(kind="estimates"), "expected a 'models' artifact"),
        (lambda d: d.update(server=-1), "server must be an int"),
        (lambda d: d.update(server=True), "server must be an int"),
        (lambda d: d.pop("dimension"), r"missing keys \['dimension'\]"),
        (lambda d: d.update(extra=1), r"unknown keys \['extra'\]"),
        (lambda d: d.update(models=[]), "non-empty list"),
        (lambda d: d.update(models={"coef": []}), "non-empty list"),
        (lambda d: d["models"][0].pop("intercept"), "exactly 'coef' and 'intercept'"),
        (lambda d: d["models"][1].update(coef=[1.0, 2.0]), r"shape \(2, 3\)"),
        (lambda d: d["models"][1].update(coef=[[1.0, 2.0, 3.0]]), "shape"),
        (lambda d: d["models"][0].update(coef=["a", 1, 2]), "numbers"),
        (lambda d: d["models"][0].update(intercept=None), "NaN"),
    ],
)
def test_bad_models_artifacts_are_refused_naming_file_and_problem(
    tmp_path, mutate, message
):
    path = _mutated(_models(tmp_path), mutate)
    with pytest.raises(ArtifactError, match=message) as info:
        read_models(path, **READ)
    assert str(path) in str(info.value)


def test_nan_coefficients_and_truncated_or_missing_files_are_refused(tmp_path):
    path = _models(tmp_path)
    text = path.read_text()
    path.write_text(text.replace("1.0", "NaN", 1))
    with pytest.raises(ArtifactError, match="coef contains NaN"):
        read_models(path, **READ)
    path.write_text(text.replace("0.5", "Infinity", 1))
    with pytest.raises(ArtifactError, match="intercept contains NaN or infinite"):
        read_models(path, **READ)
    path.write_text(text[: len(text) // 2])
    with pytest.raises(ArtifactError, match="truncated"):
        read_models(path, **READ)
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(ArtifactError, match="truncated or corrupt"):
        read_models(path, **READ)
    with pytest.raises(ArtifactError, match="cannot read"):
        read_models(tmp_path / "absent.json", **READ)
    with pytest.raises(ArtifactError, match="NaN"):
        write_models(
            tmp_path / "n.json",
            LinearModels(np.full((1, 3), np.nan), [0.0]),
            server=0,
            session="s1",
            fingerprint=FP,
        )


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda e: e["0"].update(counts=[1.5, 2]), "integers >= 0"),
        (lambda e: e["0"].update(counts=[-1, 2]), "integers >= 0"),
        (lambda e: e["0"].update(errors=[0.1]), r"errors has shape \(1,\)"),
        (lambda e: e["0"].update(errors=[float("nan"), 0.1]), "NaN"),
        (lambda e: e["0"].update(epsilon=0.0), "epsilon must be a number > 0"),
        (lambda e: e["0"].update(epsilon="big"), "epsilon"),
        (lambda e: e["0"].pop("models"), "exactly 'models'"),
        (lambda e: e["0"].update(models=""), "digest"),
        (lambda e: e.update(x={}), "key must be a server id"),
    ],
)
def test_bad_estimates_are_refused_naming_the_entry(tmp_path, mutate, message):
    path = _mutated(_estimates(tmp_path), lambda d: mutate(d["estimates"]))
    with pytest.raises(ArtifactError, match=message) as info:
        read_estimates(path, **READ)
    assert str(path) in str(info.value)


def test_directory_keeps_the_good_artifacts_and_lists_the_bad(tmp_path):
    _models(tmp_path, 0)
    bad = _mutated(_models(tmp_path, 1), lambda d: d.update(version=9))
    _models(tmp_path, 2)
    twin = write_models(
        tmp_path / "models-zz.json", MODELS, server=2, session="s1", fingerprint=FP
    )
    (tmp_path / "models-server3.json").write_text('{"format": "ldpfda-art')
    _estimates(tmp_path, 1)
    found = load_directory(tmp_path, **READ)
    assert sorted(found.models) == [0, 2]
    assert sorted(found.estimates) == [1]
    assert set(found.rejected) == {
        str(bad),
        str(twin),
        str(tmp_path / "models-server3.json"),
    }
    assert "version 9" in found.rejected[str(bad)]
    assert "server 2 already has models" in found.rejected[str(twin)]
    assert "truncated" in found.rejected[str(tmp_path / "models-server3.json")]
    assert load_directory(tmp_path, **READ, estimates=False).estimates == {}


def test_session_fingerprint_follows_the_featurizer_settings():
    base = Settings.reference(dataset="functional")
    assert session_fingerprint(base, 0) == session_fingerprint(
        base.replace(epsilon=1.0, n_train=77, server_id=3, label_shift=0.5), 0
    )
    assert session_fingerprint(base, 0) != session_fingerprint(base, 1)
    assert session_fingerprint(base, 0) != session_fingerprint(
        base.replace(n_basis=6), 0
    )
    assert session_fingerprint(base, 0) != session_fingerprint(base.replace(seed=1), 0)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None)
@given(
    key=st.sampled_from(["0", "1", "x"]),
    field=st.sampled_from(["models", "errors", "counts", "epsilon", None]),
    value=_JSON,
)
def test_any_damaged_estimate_is_refused_cleanly_or_read_validly(
    tmp_path_factory, key, field, value
):
    """Replacing an entry of an estimates artifact (or one of its fields) by any JSON
    value gives a valid artifact or an ArtifactError naming the file, never another
    exception. (Models artifacts: ``tests/test_properties.py``.)"""
    path = _estimates(tmp_path_factory.mktemp("a"))

    def damage(data):
        entries = data["estimates"]
        if field is None or key not in entries:
            entries[key] = value
        else:
            entries[key][field] = value

    _mutated(path, damage)
    try:
        artifact = read_estimates(path, **READ)
    except ArtifactError as exc:
        assert str(path) in str(exc)
        return
    for entry in artifact.estimates.values():
        assert entry.errors.shape == entry.counts.shape
        assert np.all(np.isfinite(entry.errors)) and np.all(entry.counts >= 0)
        assert entry.epsilon > 0
