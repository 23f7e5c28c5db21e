"""Curves as hosts record them: per subject, on its own timestamps, with gaps.

:class:`LongCurves` is the long form every reader and generator of own data produces:
one row per observation (subject, curve, time, one value per channel). A subject is one
client; it may hold several curves (e.g. one per day), each sampled on its own
timestamps; a NaN value is a missing observation of that channel. Only numpy is needed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["LongCurves"]


@dataclass(frozen=True)
class LongCurves:
    """Observations in long form, grouped by subject.

    Attributes
    ----------
    subjects : ndarray of shape (m,)
        Index of each observation's subject, in ``0 .. n_subjects - 1``.
    curves : ndarray of shape (m,)
        Index of each observation's curve within its subject (e.g. the day).
    times : ndarray of shape (m,)
        Time of each observation, in the domain's unit.
    values : ndarray of shape (m, n_channels)
        One value per channel; NaN where that channel was not observed.
    labels : ndarray of shape (n_subjects,)
        Each subject's label, an index into ``label_names``.
    subject_ids : tuple of str
        Each subject's name in its source (a CSV's subject column, say).
    channels : tuple of str
        Channel names.
    label_names : tuple of str
        The label set, in index order.
    """

    subjects: NDArray[np.int64]
    curves: NDArray[np.int64]
    times: NDArray[np.float64]
    values: NDArray[np.float64]
    labels: NDArray[np.int64]
    subject_ids: tuple[str, ...]
    channels: tuple[str, ...]
    label_names: tuple[str, ...]

    def __post_init__(self) -> None:
        m = self.times.shape[0]
        for name in ("subjects", "curves", "times"):
            if getattr(self, name).shape != (m,):
                raise ValueError(
                    f"{name} must have shape ({m},), got {getattr(self, name).shape}"
                )
        if self.values.shape != (m, len(self.channels)):
            raise ValueError(
                f"values must have shape ({m}, {len(self.channels)}) (observations x "
                f"channels), got {self.values.shape}"
            )
        n = len(self.subject_ids)
        if self.labels.shape != (n,):
            raise ValueError(f"labels must have shape ({n},), got {self.labels.shape}")
        if m and (self.subjects.min() < 0 or self.subjects.max() >= n):
            raise ValueError(f"subjects must lie in 0 .. {n - 1}")
        if n and (self.labels.min() < 0 or self.labels.max() >= len(self.label_names)):
            raise ValueError(
                f"labels must index label_names {self.label_names}, got values "
                f"{sorted(set(self.labels.tolist()))}"
            )
        if not np.all(np.isfinite(self.times)):
            raise ValueError("times must be finite")

    @property
    def n_subjects(self) -> int:
        return len(self.subject_ids)

    @property
    def n_channels(self) -> int:
        return len(self.channels)

    def subject(self, i: int) -> LongCurves:
        """Subject ``i`` alone (as subject 0), as its own host holds it."""
        rows = np.flatnonzero(self.subjects == i)
        return LongCurves(
            np.zeros(rows.size, dtype=np.int64),
            self.curves[rows],
            self.times[rows],
            self.values[rows],
            self.labels[i : i + 1],
            (self.subject_ids[i],),
            self.channels,
            self.label_names,
        )
