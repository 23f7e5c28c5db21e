"""The embedded wearable generator: reproducible per subject, realistic, and labelled in
the curve's shape.

Every statistical check has a fixed seed and a tolerance of a few binomial (or sample)
standard errors around the value the module's docstring documents.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldpfda.datasets.curves import LongCurves
from ldpfda.datasets.wearable import (
    CONDITIONS,
    WearableParams,
    bin_means,
    make_wearable,
    wearable_grid,
)
from ldpfda.experiments.wearable_check import learnability, mean_features

N = 10_000
#: Documented at the defaults (module docstring): share of a subject-day's slots
#: missing, share of the day in device-off stretches, share of days with one
#: (1 - e^-1 for gap_rate = 1), and the held-out error of the shape model (mean over
#: seeds 0-9 at n = 10^4).
MISSING_SHARE = 0.093
OFF_SHARE = 0.045
DAYS_WITH_A_STRETCH = 1.0 - math.exp(-1.0)
SHAPE_ERROR = 0.112


def _se(p: float, n: int) -> float:
    return math.sqrt(p * (1.0 - p) / n)


@pytest.fixture(scope="module")
def default() -> LongCurves:
    return make_wearable()


@pytest.fixture(scope="module")
def grid():
    return wearable_grid(N, accelerometer=True)


def _same(a: LongCurves, b: LongCurves) -> bool:
    return (
        all(
            np.array_equal(getattr(a, f), getattr(b, f), equal_nan=f == "values")
            for f in ("subjects", "curves", "times", "values", "labels")
        )
        and a.subject_ids == b.subject_ids
        and a.channels == b.channels
        and a.label_names == b.label_names
    )


# -- reproducibility -------------------------------------------------------------------


def test_same_seed_same_data_and_another_seed_other_data():
    a = make_wearable(60, seed=5, accelerometer=True, n_days=2)
    b = make_wearable(60, seed=5, accelerometer=True, n_days=2)
    c = make_wearable(60, seed=6, accelerometer=True, n_days=2)
    assert _same(a, b)
    assert not np.array_equal(a.labels, c.labels)
    assert a.times.size != c.times.size or not np.array_equal(a.times, c.times)


def test_a_subject_depends_only_on_the_seed_and_its_index():
    many = make_wearable(40, seed=3)
    few = make_wearable(7, seed=3, first_subject=30)
    alone = make_wearable(1, seed=3, first_subject=33)
    assert _same(many.subject(33), few.subject(3))
    assert _same(many.subject(33), alone)
    assert alone.subject_ids == ("33",)
    assert np.array_equal(many.labels[30:37], few.labels)
    # the same for the grid view
    grid_many = wearable_grid(40, seed=3)
    grid_few = wearable_grid(7, seed=3, first_subject=30)
    assert np.array_equal(grid_many.values[30:37], grid_few.values, equal_nan=True)


def test_day_d_does_not_depend_on_the_number_of_days():
    two = make_wearable(20, n_days=2, seed=1)
    three = make_wearable(20, n_days=3, seed=1)
    first_two = three.curves < 2
    assert np.array_equal(two.times, three.times[first_two])
    assert np.array_equal(two.values, three.values[first_two])
    assert np.array_equal(two.labels, three.labels)


def test_the_activity_channel_changes_no_heart_rate():
    off = make_wearable(50, seed=2, n_days=2)
    on = make_wearable(50, seed=2, n_days=2, accelerometer=True)
    assert np.array_equal(off.times, on.times)
    assert np.array_equal(off.values[:, 0], on.values[:, 0])


def test_the_grid_view_is_the_regular_long_form():
    long = make_wearable(80, irregular=False, accelerometer=True, n_days=2, seed=4)
    dense = wearable_grid(80, accelerometer=True, n_days=2, seed=4)
    slots = (long.times / 5.0).astype(np.int64)
    assert np.array_equal(
        dense.values[long.subjects, long.curves, slots], long.values, equal_nan=True
    )
    assert np.count_nonzero(~np.isnan(dense.heart_rate)) == long.times.size
    assert np.array_equal(dense.labels, long.labels)
    assert np.array_equal(dense.labels, make_wearable(80, n_days=2, seed=4).labels)


# -- shapes and types ------------------------------------------------------------------


@pytest.mark.parametrize("accelerometer", [False, True])
def test_long_form_shapes_and_dtypes(accelerometer):
    data = make_wearable(30, n_days=3, n_classes=3, accelerometer=accelerometer)
    channels = ("heart_rate", "activity") if accelerometer else ("heart_rate",)
    m = data.times.size
    assert data.channels == channels
    assert data.values.shape == (m, len(channels))
    assert data.label_names == CONDITIONS[:3]
    assert data.subject_ids == tuple(str(i) for i in range(30))
    for name in ("subjects", "curves", "labels"):
        assert getattr(data, name).dtype == np.int64, name
    assert data.times.dtype == data.values.dtype == np.float64
    assert data.labels.shape == (30,)
    assert set(np.unique(data.curves)) == {0, 1, 2}
    assert set(np.unique(data.subjects)) == set(range(30))
    assert np.all(np.isfinite(data.values))  # no rows for what was not recorded
    # rows are grouped by subject, then day, then time
    order = np.lexsort((data.times, data.curves, data.subjects))
    assert np.array_equal(order, np.arange(m))


def test_grid_shapes_and_dtypes():
    dense = wearable_grid(12, n_days=2, accelerometer=True)
    assert dense.values.shape == (12, 2, 288, 2)
    assert dense.heart_rate.shape == (12, 2, 288)
    assert dense.asleep.shape == (12, 2, 288) and dense.asleep.dtype == np.bool_
    assert np.array_equal(dense.times, np.arange(288) * 5.0)
    assert dense.labels.dtype == np.int64 and dense.labels.shape == (12,)
    assert wearable_grid(3).values.shape == (3, 1, 288, 1)


# -- timestamps, gaps ------------------------------------------------------------------


def test_timestamps_are_irregular_and_within_the_day(default):
    t = default.times
    assert t.min() >= 0.0 and t.max() < 1440.0
    # strictly increasing within every subject-day
    same_day = np.diff(default.subjects) == 0
    assert np.all(np.diff(t)[same_day] > 0.0)
    # off the 5-minute grid (no timestamp on it)
    assert np.count_nonzero(np.mod(t, 5.0) == 0.0) == 0
    # jittered: a device's intervals vary; each device has its own rate
    dt = np.diff(t)
    first = np.r_[True, ~same_day]
    starts = np.flatnonzero(first)
    median = np.array(
        [
            np.median(dt[a : b - 1])
            for a, b in zip(starts, np.r_[starts[1:], t.size], strict=True)
        ]
    )
    rate = np.select([median < 3.5, median < 7.5], [0, 1], 2)
    for k, share in enumerate((0.15, 0.70, 0.15)):
        assert abs(np.mean(rate == k) - share) <= 4 * _se(share, N), k
    assert np.std(dt[same_day & (dt < 4.0)]) > 0.3  # +-0.3 p jitter at p = 2.5 .. 5


def test_regular_sampling_is_the_5_minute_grid():
    data = make_wearable(50, irregular=False)
    assert np.all(np.mod(data.times, 5.0) == 0.0)
    assert data.times.max() <= 1435.0


def test_without_gaps_a_device_records_its_whole_day():
    data = make_wearable(300, gap_rate=0.0, drop_rate=0.0, seed=7)
    same_day = np.diff(data.subjects) == 0
    dt = np.diff(data.times)[same_day]
    # jitter of +-0.3 p: successive samples are 0.4 p .. 1.6 p apart, p <= 10.2 min
    assert dt.max() <= 1.6 * 10.0 * 1.05
    dense = wearable_grid(300, gap_rate=0.0, drop_rate=0.0, seed=7)
    assert not np.isnan(dense.values).any()


def test_gap_fraction_is_in_the_documented_range(grid):
    missing = np.isnan(grid.heart_rate[:, 0])  # (N, 288)
    share = missing.mean(axis=1)
    assert abs(share.mean() - MISSING_SHARE) <= 4 * share.std() / math.sqrt(N)
    # 95 % of subject-days miss less than 21 %
    assert np.mean(share >= 0.21) <= 0.05 + 4 * _se(0.05, N)


def test_device_off_stretches_come_as_documented():
    dense = wearable_grid(N, drop_rate=0.0, seed=1)
    missing = np.isnan(dense.heart_rate[:, 0])
    # without dropped samples, every missing slot is in a stretch of >= 10 minutes
    runs = np.diff(np.pad(missing.astype(np.int8), ((0, 0), (1, 1))), axis=1)
    lengths = np.flatnonzero(runs.ravel() == -1) - np.flatnonzero(runs.ravel() == 1)
    assert lengths.min() >= 1
    assert np.mean(lengths >= 2) > 0.99  # one slot only when cut at the day's end
    has = missing.any(axis=1).mean()
    assert abs(has - DAYS_WITH_A_STRETCH) <= 4 * _se(DAYS_WITH_A_STRETCH, N)
    share = missing.mean(axis=1)
    assert abs(share.mean() - OFF_SHARE) <= 4 * share.std() / math.sqrt(N)


# -- physiology ------------------------------------------------------------------------


def test_heart_rate_is_physiological(default):
    hr = default.values[:, 0]
    assert hr.min() >= 40.0 and hr.max() <= 200.0
    assert np.all(hr == np.rint(hr))  # devices report whole beats per minute
    # the model itself stays within the range: clipping touches under 0.1 %
    assert np.mean((hr == 40.0) | (hr == 200.0)) < 1e-3
    lo, mid, hi = np.percentile(hr, [1, 50, 99])
    assert 42.0 <= lo and 55.0 <= mid <= 80.0 and hi <= 140.0


def test_sleep_is_lower_and_calmer_than_the_day(grid):
    hr = grid.heart_rate[:, 0]
    asleep = grid.asleep[:, 0]
    night = np.nanmean(np.where(asleep, hr, np.nan), axis=1)
    day = np.nanmean(np.where(~asleep, hr, np.nan), axis=1)
    assert np.mean(night < day) > 0.99
    step = np.diff(hr, axis=1) ** 2
    both_asleep = asleep[:, 1:] & asleep[:, :-1]
    both_awake = ~asleep[:, 1:] & ~asleep[:, :-1]
    calm = np.nanmean(np.where(both_asleep, step, np.nan), axis=1)
    busy = np.nanmean(np.where(both_awake, step, np.nan), axis=1)
    assert np.mean(calm < busy) > 0.99
    share = asleep.mean()
    assert 0.25 < share < 0.38  # 7.5 h of 24 on average


def test_activity_is_missing_with_the_heart_rate_and_moves_with_it(grid):
    hr, activity = grid.values[:, 0, :, 0], grid.values[:, 0, :, 1]
    assert np.array_equal(np.isnan(activity), np.isnan(hr))
    seen = ~np.isnan(activity)
    assert activity[seen].min() >= 0.0 and activity[seen].max() <= 15_000.0
    assert np.all(activity[seen] == np.rint(activity[seen]))
    awake = seen & ~grid.asleep[:, 0]
    assert np.corrcoef(activity[awake], hr[awake])[0, 1] > 0.4
    asleep = grid.asleep[:, 0]
    night = np.nanmean(np.where(asleep, activity, np.nan), axis=1)
    day = np.nanmean(np.where(~asleep, activity, np.nan), axis=1)
    assert np.mean(night < day) > 0.99


# -- labels ----------------------------------------------------------------------------


def test_default_prior_is_balanced(default):
    share = np.mean(default.labels == 1)
    assert abs(share - 0.5) <= 4 * _se(0.5, N)
    assert default.label_names == ("healthy", "blunted")


def test_class_prior_can_be_set():
    prior = (0.6, 0.3, 0.1)
    labels = make_wearable(N, n_classes=3, class_prior=prior, seed=2).labels
    for k, p in enumerate(prior):
        assert abs(np.mean(labels == k) - p) <= 4 * _se(p, N), k


def test_the_daily_mean_does_not_tell_the_conditions_apart():
    data = make_wearable(N, n_classes=5, seed=3)
    mean = mean_features(data)[:, 0]
    spread = mean.std()
    for k in range(1, 5):
        a, b = mean[data.labels == 0], mean[data.labels == k]
        se = spread * math.sqrt(1.0 / a.size + 1.0 / b.size)
        assert abs(a.mean() - b.mean()) <= 4 * se, CONDITIONS[k]


def test_the_label_is_learnable_from_the_shape_not_the_mean(default):
    result = learnability(default)
    n = result.n_test
    se_majority = _se(result.majority, n)
    # the shape model: clearly below the majority rate, at the documented error
    assert result.shape < result.majority - 10 * se_majority
    assert abs(result.shape - SHAPE_ERROR) <= 3 * _se(SHAPE_ERROR, n)
    # the mean alone: no better than the majority rate, far worse than the shape
    assert result.mean >= result.majority - 3 * se_majority
    assert result.mean - result.shape >= 10 * (se_majority + _se(result.shape, n))


def test_three_conditions_are_learnable_from_the_shape():
    result = learnability(make_wearable(6000, n_classes=3, seed=1))
    se_majority = _se(result.majority, result.n_test)
    assert abs(result.majority - 2 / 3) <= 4 * se_majority
    assert result.shape < result.majority - 10 * se_majority
    assert result.mean >= result.majority - 3 * se_majority


def test_separation_sets_how_hard_the_task_is():
    errors = {}
    for separation in (0.0, 0.5, 1.0, 2.0):
        result = learnability(make_wearable(4000, separation=separation, seed=4))
        errors[separation] = result
    n = errors[0.0].n_test
    # no separation, no signal
    assert errors[0.0].shape >= errors[0.0].majority - 3 * _se(0.5, n)
    # then strictly easier as the conditions move apart
    for easier, harder in ((0.5, 0.0), (1.0, 0.5), (2.0, 1.0)):
        a, b = errors[easier].shape, errors[harder].shape
        assert a < b - 3 * math.hypot(_se(a, n), _se(b, n)), (easier, harder)


# -- parameters ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_subjects": 0}, "n_subjects must be an integer >= 1, got 0"),
        ({"n_days": 0}, r"n_days must be an integer in \[1, 366\], got 0"),
        ({"n_days": 367}, r"n_days must be an integer in \[1, 366\], got 367"),
        ({"n_classes": 1}, r"n_classes must be an integer in \[2, 5\], got 1"),
        ({"n_classes": 6}, r"n_classes must be an integer in \[2, 5\], got 6"),
        ({"separation": -0.1}, r"separation must be a real number in \[0.0, 2.0\]"),
        ({"separation": 2.5}, r"separation must .* got 2.5"),
        ({"separation": math.nan}, "separation must"),
        ({"gap_rate": 3.5}, r"gap_rate must be a real number in \[0.0, 3.0\]"),
        ({"drop_rate": 0.3}, r"drop_rate must be a real number in \[0.0, 0.25\]"),
        ({"noise_sd": -1.0}, r"noise_sd must be a real number in \[0.0, 10.0\]"),
        ({"seed": -1}, "seed must be an integer >= 0, got -1"),
        ({"first_subject": -2}, "first_subject must be an integer >= 0, got -2"),
        ({"class_prior": (0.5, 0.4)}, "class_prior must sum to 1, got 0.9"),
        ({"class_prior": (0.5, 0.3, 0.2)}, "class_prior must have n_classes = 2"),
        ({"class_prior": (1.5, -0.5)}, r"class_prior\[0\] must be a real number"),
    ],
)
def test_bad_values_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WearableParams(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_subjects": 2.0}, "n_subjects must be an integer >= 1, got 2.0"),
        ({"n_subjects": True}, "n_subjects must be an integer"),
        ({"n_days": "2"}, "n_days must be an integer"),
        ({"seed": None}, "seed must be an integer >= 0"),
        ({"separation": "1"}, "separation must be a real number"),
        ({"accelerometer": 1}, "accelerometer must be True or False"),
        ({"irregular": "yes"}, "irregular must be True or False"),
        ({"class_prior": 0.5}, "class_prior must be a sequence"),
        ({"class_prior": "ab"}, "class_prior must be a sequence"),
    ],
)
def test_bad_types_are_refused_by_name(kwargs, message):
    with pytest.raises(TypeError, match=message):
        WearableParams(**kwargs)


def test_the_functions_validate_like_the_parameters():
    with pytest.raises(ValueError, match="n_subjects must be an integer >= 1, got 0"):
        make_wearable(0)
    with pytest.raises(ValueError, match="n_classes"):
        wearable_grid(5, n_classes=7)


def test_parameters_are_frozen_and_normalised():
    params = WearableParams(n_subjects=np.int64(3), class_prior=[0.25, 0.75])
    assert params.n_subjects == 3 and type(params.n_subjects) is int
    assert params.class_prior == (0.25, 0.75)
    assert np.array_equal(params.prior, [0.25, 0.75])
    assert np.array_equal(WearableParams(n_classes=4).prior, np.full(4, 0.25))
    with pytest.raises(AttributeError):
        params.seed = 1  # type: ignore[misc]
    assert _same(params.generate(), make_wearable(3, class_prior=(0.25, 0.75)))


# -- bin_means -------------------------------------------------------------------------


def test_bin_means_averages_each_bin_and_leaves_empty_ones_nan():
    data = LongCurves(
        subjects=np.array([0, 0, 0, 1, 1], dtype=np.int64),
        curves=np.array([0, 0, 1, 0, 0], dtype=np.int64),
        times=np.array([0.0, 4.9, 7.0, 1439.5, 1500.0]),
        values=np.array(
            [[60.0, 1.0], [70.0, np.nan], [80.0, 3.0], [50.0, 5.0], [1, 1]]
        ),
        labels=np.array([0, 1], dtype=np.int64),
        subject_ids=("a", "b"),
        channels=("heart_rate", "activity"),
        label_names=("healthy", "blunted"),
    )
    bins = bin_means(data)
    assert bins.shape == (2, 2, 288, 2)
    assert bins[0, 0, 0].tolist() == [65.0, 1.0]  # NaN values are skipped
    assert bins[0, 1, 1].tolist() == [80.0, 3.0]
    assert bins[1, 0, 287].tolist() == [50.0, 5.0]  # 1500 is outside the day
    assert np.count_nonzero(~np.isnan(bins[..., 0])) == 3
    assert bin_means(data, width=60.0).shape == (2, 2, 24, 2)
    with pytest.raises(ValueError, match="width"):
        bin_means(data, width=0.0)
