"""Model artifacts: round trip, and every kind of bad artifact is refused clearly."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ldpfda.server.artifacts import (
    ArtifactError,
    featurizer_fingerprint,
    read_estimates,
    read_models,
    write_estimates,
    write_models,
)
from ldpfda.server.mrma import LinearModels

FP = featurizer_fingerprint({"basis": "bspline", "n_basis": 3, "bounds": [[-1, 1]]})
MODELS = LinearModels(np.arange(6.0).reshape(2, 3), np.array([0.5, -0.5]))


def test_models_round_trip(tmp_path):
    path = write_models(tmp_path / "a.json", MODELS, server="A", fingerprint=FP)
    server, models = read_models(path, dimension=3, fingerprint=FP)
    assert server == "A"
    np.testing.assert_array_equal(models.coef, MODELS.coef)
    np.testing.assert_array_equal(models.intercept, MODELS.intercept)


def test_estimates_round_trip(tmp_path):
    est = {"A": {"errors": [0.2, 0.7], "counts": [10, 11], "epsilon": 2.0}}
    path = write_estimates(
        tmp_path / "e.json", est, server="B", dimension=3, fingerprint=FP
    )
    server, back = read_estimates(path, dimension=3, fingerprint=FP)
    assert server == "B"
    np.testing.assert_array_equal(back["A"]["errors"], [0.2, 0.7])


def _corrupt(tmp_path, mutate):
    path = write_models(tmp_path / "m.json", MODELS, server="A", fingerprint=FP)
    data = json.loads(path.read_text())
    mutate(data)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(version=2), "version"),
        (lambda d: d.update(dimension=4), "dimension"),
        (lambda d: d.update(featurizer="0" * 16), "fingerprint"),
        (lambda d: d["models"][1].update(coef=[1.0, 2.0]), "shape"),
        (lambda d: d.update(format="other"), "ldpfda-artifact"),
        (lambda d: d.update(kind="estimates"), "models"),
    ],
)
def test_bad_artifacts_are_refused_with_a_clear_error(tmp_path, mutate, message):
    path = _corrupt(tmp_path, mutate)
    with pytest.raises(ArtifactError, match=message):
        read_models(path, dimension=3, fingerprint=FP)


def test_nan_coefficients_and_truncated_files_are_refused(tmp_path):
    path = write_models(tmp_path / "m.json", MODELS, server="A", fingerprint=FP)
    text = path.read_text()
    path.write_text(text.replace("0.0", "NaN", 1))
    with pytest.raises(ArtifactError, match="NaN"):
        read_models(path, dimension=3, fingerprint=FP)
    path.write_text(text[: len(text) // 2])
    with pytest.raises(ArtifactError, match="truncated"):
        read_models(path, dimension=3, fingerprint=FP)
    with pytest.raises(ArtifactError, match="NaN"):
        write_models(
            tmp_path / "n.json",
            LinearModels(np.full((1, 3), np.nan), [0.0]),
            server="A",
            fingerprint=FP,
        )
