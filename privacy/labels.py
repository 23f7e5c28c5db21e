"""Validation of class labels and label distributions, shared by the clients of the
label-only modes and by :mod:`ldpfda.labeldp`; numpy only."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import check_finite_array

__all__ = ["check_distributions", "check_labels"]

#: Tolerance on a distribution's row sum.
_SUM_TOL = 1e-8


def check_labels(labels: ArrayLike, n_classes: int, name: str = "labels") -> NDArray:
    """Return ``labels`` as int64 values in ``{0, ..., n_classes - 1}``."""
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {y.shape}")
    if y.dtype.kind not in "iu":
        if y.dtype.kind == "f" and np.all(np.isfinite(y)) and np.all(y == np.round(y)):
            y = y.astype(np.int64)
        else:
            raise TypeError(
                f"{name} must be integer class indices, got dtype {y.dtype}"
            )
    bad = (y < 0) | (y >= n_classes)
    if np.any(bad):
        raise ValueError(
            f"{name} must be in {{0, ..., {n_classes - 1}}}, got {y[bad][0]!r}"
        )
    return y.astype(np.int64)


def check_distributions(
    distributions: ArrayLike, name: str = "distributions"
) -> NDArray:
    """Return ``distributions`` as a (C, K) float array of probability rows."""
    q = check_finite_array(distributions, name, ndim=2)
    if q.shape[1] < 2:
        raise ValueError(
            f"{name} must have at least 2 columns (classes), got {q.shape}"
        )
    if np.any(q < 0):
        raise ValueError(f"{name} must be non-negative, got minimum {q.min()!r}")
    sums = q.sum(axis=1)
    if np.any(np.abs(sums - 1.0) > _SUM_TOL):
        bad = int(np.argmax(np.abs(sums - 1.0)))
        raise ValueError(f"{name} rows must sum to 1, got {sums[bad]!r} in row {bad}")
    return q
