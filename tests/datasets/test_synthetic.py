"""The embedded functional design draws its public curves without their labels exactly
as it draws them with."""

from __future__ import annotations

import numpy as np
import pytest

from ldpfda.datasets.synthetic import make_design


@pytest.mark.parametrize("shift", [0.0, 0.3])
def test_curves_alone_are_samples_curves_and_leave_the_stream_where_sample_does(shift):
    design = make_design("functional", feature_shift=shift, label_shift=shift)
    with_labels, alone = np.random.default_rng(5), np.random.default_rng(5)
    curves, labels = design.sample(300, with_labels)
    assert np.array_equal(design.sample_curves(300, alone), curves)
    assert 0 < labels.sum() < 300
    # the next draws (a featurizer's calibration curves come first in a data stream)
    assert np.array_equal(with_labels.random(8), alone.random(8))
