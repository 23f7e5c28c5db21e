"""The embedded wearable data at a glance: generation time and how learnable it is.

``python -m ldpfda.experiments.wearable_check [--n-subjects N] [--seed S]
[--n-classes K] [--separation L]`` times :func:`~ldpfda.datasets.wearable.make_wearable`
and its grid view, and reports the non-private test error of a logistic regression
(train on the first half of the subjects, test on the second) on the *shape* (each
subject's 5-minute profile, gaps filled around the clock, on 16 cubic B-splines), on
the *mean* heart rate alone, and of the *majority* class. The signal lives in the
curve's shape, so shape << mean ~ majority.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda.datasets.curves import LongCurves
from ldpfda.datasets.wearable import DAY_MINUTES, SLOT_MINUTES, bin_means

__all__ = [
    "N_BASIS",
    "Learnability",
    "fill_around_the_clock",
    "learnability",
    "main",
    "mean_features",
    "shape_features",
]

#: B-splines of the shape features (a knot about every 1.8 h).
N_BASIS = 16


@dataclass(frozen=True)
class Learnability:
    """Test errors on the second half of the subjects, and its size."""

    shape: float
    mean: float
    majority: float
    n_test: int

    def standard_error(self, error: float) -> float:
        """Binomial standard error of a test error of ``error`` on ``n_test``."""
        return float(np.sqrt(error * (1.0 - error) / self.n_test))


def fill_around_the_clock(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """Fill NaN slots of each row by linear interpolation, periodic over the day
    (rows with no value at all stay NaN)."""
    out = np.array(values, dtype=np.float64)
    n = out.shape[1]
    x = np.arange(n, dtype=np.float64)
    for i in np.flatnonzero(np.isnan(out).any(axis=1)):
        seen = ~np.isnan(out[i])
        if seen.any():
            out[i, ~seen] = np.interp(x[~seen], x[seen], out[i, seen], period=n)
    return out


def shape_features(data: LongCurves, n_basis: int = N_BASIS) -> NDArray[np.float64]:
    """B-spline coefficients of each subject's 5-minute heart-rate profile,
    shape (n_subjects, n_basis)."""
    from ldpfda.fda.bspline import BSplineProjection

    bins = bin_means(data)[..., 0]  # (subjects, days, slots)
    with np.errstate(invalid="ignore"):
        seen = ~np.isnan(bins)
        profile = np.where(seen, bins, 0.0).sum(axis=1) / seen.sum(axis=1)
    profile = fill_around_the_clock(profile)
    centres = (np.arange(profile.shape[1]) + 0.5) * SLOT_MINUTES
    projection = BSplineProjection.fit(
        grid_points=centres, n_basis=n_basis, domain_range=(0.0, DAY_MINUTES)
    )
    return projection.transform(profile)


def mean_features(data: LongCurves) -> NDArray[np.float64]:
    """Each subject's mean heart rate over all its samples, shape (n_subjects, 1)."""
    hr = data.values[:, 0]
    seen = ~np.isnan(hr)
    total = np.bincount(
        data.subjects[seen], weights=hr[seen], minlength=data.n_subjects
    )
    count = np.bincount(data.subjects[seen], minlength=data.n_subjects)
    return (total / count)[:, None]


def _test_error(features: NDArray[np.float64], labels: NDArray[np.int64]) -> float:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    half = labels.size // 2
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    model.fit(features[:half], labels[:half])
    return float(np.mean(model.predict(features[half:]) != labels[half:]))


def learnability(data: LongCurves) -> Learnability:
    """Shape, mean-only and majority test errors (train on the first half of the
    subjects, test on the second)."""
    labels = data.labels
    half = labels.size // 2
    majority = int(np.argmax(np.bincount(labels[:half])))
    return Learnability(
        shape=_test_error(shape_features(data), labels),
        mean=_test_error(mean_features(data), labels),
        majority=float(np.mean(labels[half:] != majority)),
        n_test=int(labels.size - half),
    )


def _timed(make: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = make(*args, **kwargs)
    return out, time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    """Print generation times and the three test errors."""
    parser = argparse.ArgumentParser(
        prog="python -m ldpfda.experiments.wearable_check",
        description="Generation time and learnability of the embedded wearable data.",
    )
    parser.add_argument("--n-subjects", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-classes", type=int, default=2)
    parser.add_argument("--separation", type=float, default=1.0)
    args = parser.parse_args(argv)

    from ldpfda.datasets.wearable import make_wearable, wearable_grid

    options = dict(seed=args.seed, n_classes=args.n_classes, separation=args.separation)
    data, long_s = _timed(make_wearable, args.n_subjects, **options)
    grid, grid_s = _timed(wearable_grid, args.n_subjects, **options)
    _, acc_s = _timed(make_wearable, args.n_subjects, accelerometer=True, **options)

    missing = float(np.isnan(grid.heart_rate).mean())
    print(
        f"wearable: {data.n_subjects} subjects x 1 day, {data.times.size} samples "
        f"({data.times.size / data.n_subjects:.0f} per subject), "
        f"{missing:.1%} of grid slots missing"
    )
    print(
        f"generation: {long_s:.2f} s long form, {grid_s:.2f} s grid view, "
        f"{acc_s:.2f} s long form with the activity channel"
    )
    result = learnability(data)
    print(
        f"test error on {result.n_test} subjects (binomial s.e. in brackets), "
        f"{args.n_classes} classes, separation {args.separation:g}:"
    )
    for name in ("shape", "mean", "majority"):
        error = getattr(result, name)
        print(f"  {name:9s} {error:.4f} ({result.standard_error(error):.4f})")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
