"""The wearable check script: its gap filling, its features and what it prints."""

from __future__ import annotations

import numpy as np

from ldpfda.datasets.wearable import make_wearable
from ldpfda.experiments.wearable_check import (
    N_BASIS,
    fill_around_the_clock,
    main,
    mean_features,
    shape_features,
)


def test_gaps_are_filled_around_the_clock():
    nan = np.nan
    values = np.array(
        [
            [
                nan,
                2.0,
                nan,
                4.0,
                nan,
            ],  # the ends are joined: slot 4 sits between 4 and 2
            [1.0, 1.0, 1.0, 1.0, 1.0],
            [nan, nan, nan, nan, nan],
        ]
    )
    filled = fill_around_the_clock(values)
    assert np.allclose(filled[0], [8 / 3, 2.0, 3.0, 4.0, 10 / 3])
    assert np.array_equal(filled[1], values[1])
    assert np.isnan(filled[2]).all()  # nothing to interpolate from
    assert np.isnan(values[0, 0])  # the input is left alone


def test_features_have_one_row_per_subject(no_network):
    data = make_wearable(40, n_days=2, seed=1)
    shape = shape_features(data)
    assert shape.shape == (40, N_BASIS) and np.isfinite(shape).all()
    mean = mean_features(data)
    assert mean.shape == (40, 1)
    hr, who = data.values[:, 0], data.subjects
    assert np.isclose(mean[7, 0], hr[who == 7].mean())


def test_the_script_prints_times_and_errors(no_network, capsys):
    assert main(["--n-subjects", "400", "--n-classes", "3"]) == 0
    out = capsys.readouterr().out
    assert "400 subjects" in out and "generation:" in out
    for name in ("shape", "mean", "majority"):
        assert f"  {name}" in out
    assert "3 classes" in out
