r"""Embedded wearable data: a day of heart rate per subject, labelled by a condition.

:func:`make_wearable` draws what a wearable host records: heart rate (bpm) over
24 h on the device's own irregular timestamps, with device-off stretches and dropped
samples, optionally an activity channel and several days per subject, and one label
per subject, a *condition* that changes the curve's shape but not its daily mean.
:func:`wearable_grid` gives the same subjects on the regular 5-minute grid (288 slots
a day), NaN at the gaps. Time is in minutes on :math:`[0, 1440)`; each day is a 24-h
window of its own, and the night's sleep wraps around its midnight. Only numpy is
needed.

The model
---------
Subject :math:`i`, day :math:`d`; every :math:`z` is its own :math:`N(0,1)` draw
truncated to :math:`\pm 2.5`, every :math:`u` its own :math:`U(0,1)`, and a term with
subscript :math:`d` is drawn afresh each day, the others once per subject:

* label :math:`c_i \in \{0, \dots, K-1\}` from ``class_prior``;
* mesor :math:`M = 68 + 6 z + 2 z_d` bpm, its *reserve* :math:`R = M - 35`;
  circadian amplitude :math:`A = 0.2 R e^{0.25 z}` and nocturnal dip
  :math:`\delta = 0.25 R e^{0.25 z}` (sleeping HR stays above about 40 bpm);
* sleep onset :math:`S = 23{:}00 + 60 z + 30 z_d` min, duration
  :math:`D = 450 + 50 z + 30 z_d` min (clipped to [300, 660]), acrophase
  :math:`\phi = S + D/2 + 720 + 45 z + 20 z_d`;
* daytime activity bursts: :math:`\mathrm{Poisson}(5 e^{0.3 z})` (at most 24), each
  at a triangular time over the waking hours, lasting :math:`20 e^{0.6 z}` min
  (clipped to [5, 120]) with intensity :math:`I e^{0.4 z}` bpm,
  :math:`I = 20 e^{0.3 z}` (at most 80); nocturnal awakenings
  :math:`\mathrm{Poisson}(0.5)` per night (at most 12), :math:`10 e^{0.3 z}` min,
  :math:`0.6 I e^{0.3 z}` bpm; the HR response to their summed drive :math:`b(t)` is
  its circular convolution with :math:`h(\tau) \propto e^{-\tau / 4\,\mathrm{min}}`;
* ultradian wander :math:`w(t)`: 4 sinusoids, amplitude :math:`e^{0.3 z}` bpm, period
  :math:`60 \cdot 4^{u}` min, random phase.

With :math:`s(t) \in [0,1]` the sleep indicator (logistic edges of 8 min) the latent
curve and the observation at time :math:`t_j` are

.. math::
    \mu(t) = M + A\cos\frac{2\pi(t-\phi)}{1440} - \delta s(t) + (h * b)(t)
    + w(t)\,(1 - s(t)/2), \qquad
    y_j = \mathrm{clip}\bigl(\mathrm{round}(\mu(t_j) + \sigma (1-(1-\nu) s(t_j))
    \varepsilon_j),\ 40,\ 200\bigr),

with :math:`\sigma = ` ``noise_sd`` :math:`\cdot e^{0.2 z}` and :math:`\nu = 1/2`
(lower HR *and* variability asleep); clipping touches well under 0.1 % of the
samples. The activity channel (counts per minute) is
:math:`a_j = \min\bigl(\mathrm{round}\bigl((150 e^{0.5 z}(1-s) + 5 s + 100 e^{0.3 z}
b)(t_j)\, e^{0.5\varepsilon'_j - 1/8}\bigr), 15000\bigr)`, missing exactly where the
heart rate is.

A device samples every :math:`p` min, :math:`p` = 5 (70 % of devices), 2.5 (15 %) or
10 (15 %) times a clock drift :math:`1 + 0.02 z`, from a random offset with a jitter
of :math:`\pm 0.3 p` per sample, never on the 5-minute grid (``irregular=False``
samples at 0, 5, ..., 1435). Each day has :math:`\mathrm{Poisson}(` ``gap_rate``
:math:`)` device-off stretches (at most 8) starting uniformly in the day and lasting
:math:`60 e^{0.6 z}` min (clipped to [10, 180], cut at the day's end); outside them
a sample is dropped with the subject's probability :math:`q \sim U(0, 2\,`
``drop_rate`` :math:`)`. At the defaults a subject-day misses 9.3 % of its samples
on average (4.5 % of the day is in device-off stretches, which 63 % of days have),
and 95 % of subject-days miss less than 21 %.

Conditions
----------
Label :math:`c` changes the parameters in proportion to ``separation``
:math:`\lambda \in [0, 2]` (0: the classes are identical):

=========== ==============================================================
healthy     nothing
blunted     :math:`A` and :math:`\delta` times :math:`1 - 0.45\lambda`
delayed     sleep onset :math:`+60\lambda` min, acrophase :math:`+120\lambda` min
advanced    sleep onset :math:`-60\lambda` min, acrophase :math:`-120\lambda` min
fragmented  :math:`\delta` times :math:`1 - 0.25\lambda`, :math:`+2\lambda` nocturnal
            awakenings, :math:`\nu` times :math:`1 + 0.5\lambda`
=========== ==============================================================

``n_classes`` :math:`K` takes the first :math:`K` rows. Every condition lowers the
mesor by the expected rise of the daily mean it causes, so the daily mean HR has the
same distribution in every class and the label lives in the curve's shape: at the
defaults a logistic regression on 16 B-spline coefficients of the 5-minute profile
errs on about 11 % of held-out subjects (10.5 % to 12.3 % over seeds 0-9 at 10^4
subjects), one on the mean HR alone on 50 %, the majority rate
(``python -m ldpfda.experiments.wearable_check``).

Reproducibility
---------------
Subject :math:`i` (label, parameters) is drawn from ``SeedSequence(seed,
spawn_key=(i,))`` and its day :math:`d` from ``SeedSequence(seed, spawn_key=(i,
d))``, each through a fixed number of draws: a subject depends only on ``(seed, i)``
and the parameters (``make_wearable(1, first_subject=i, seed=seed)`` regenerates it
alone), a day not on ``n_days``; the activity channel changes no heart rate, and
regular sampling leaves the label, :math:`\mu` and the device-off stretches as they
were.

References
----------
G. Cornelissen, "Cosinor-based rhythmometry", *Theoretical Biology and Medical
Modelling* 11, 16 (2014): the mesor, amplitude and acrophase of a 24-h rhythm.
P. S. Freedson, E. Melanson, J. Sirard, "Calibration of the Computer Science and
Applications, Inc. accelerometer", *Medicine & Science in Sports & Exercise* 30(5),
777-781 (1998): activity counts per minute.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda.datasets.curves import LongCurves

__all__ = [
    "CHANNELS",
    "CONDITIONS",
    "DAY_MINUTES",
    "N_SLOTS",
    "SLOT_MINUTES",
    "WearableGrid",
    "WearableParams",
    "bin_means",
    "make_wearable",
    "wearable_grid",
]

#: Length of a day, in minutes: every timestamp lies in [0, DAY_MINUTES).
DAY_MINUTES = 1440.0
#: Width of a slot of the regular grid, in minutes (288 slots a day).
SLOT_MINUTES = 5.0
#: Slots of the regular grid in a day.
N_SLOTS = 288
#: The condition names, in label order; ``n_classes`` takes the first ones.
CONDITIONS = ("healthy", "blunted", "delayed", "advanced", "fragmented")
#: Channel names: heart rate (bpm) and, with ``accelerometer``, activity (counts/min).
CHANNELS = ("heart_rate", "activity")

# Per unit of separation, the change each condition makes (rows in CONDITIONS order):
# relative amplitude, relative dip, onset (min), acrophase (min), extra awakenings,
# relative sleep variability.
_EFFECTS = np.array(
    [
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        [-0.45, -0.45, 0.0, 0.0, 0.0, 0.0],
        [0.0, 0.0, 60.0, 120.0, 0.0, 0.0],
        [0.0, 0.0, -60.0, -120.0, 0.0, 0.0],
        [0.0, -0.25, 0.0, 0.0, 2.0, 0.5],
    ]
)

_TRUNCATE = 2.5  # latent normals are clipped to +-2.5 sd
_MAX_BURSTS = 24
_MAX_AWAKENINGS = 12
_MAX_GAPS = 8
_N_WAVES = 4
_HR_TAU = 4.0  # minutes: time constant of the HR response to activity
_EDGE = 8.0  # minutes: width of the logistic edges of the sleep period
_MAX_COUNTS = 15_000.0  # activity counts per minute at which the sensor saturates
_PERIODS = np.array([2.5, 5.0, 10.0])  # device sampling periods (min)
_PERIOD_CDF = np.array([0.15, 0.85])  # 15 % at 2.5 min, 70 % at 5, 15 % at 10
# The most samples a device can take in a day: the shortest period, slowed by the
# most negative drift, from offset 0.
_MAX_SAMPLES = int(math.ceil(DAY_MINUTES / (2.5 * (1.0 - 0.02 * _TRUNCATE)))) + 1
_MINUTES = np.arange(int(DAY_MINUTES), dtype=np.float64)

# Fixed layout of each stream's draws: a column never moves, so adding a draw in a
# spare column changes nobody's data.
_SUBJECT_U = 8  # label, device, drop
_SUBJECT_Z = 16
_DAY_U = 96
_DAY_Z = 96


def _columns(ones: str, **wide: int) -> dict[str, slice]:
    """Consecutive columns: one for each name in ``ones``, then the ``wide`` ones."""
    out, start = {}, 0
    for name, size in [(name, 1) for name in ones.split()] + list(wide.items()):
        out[name] = slice(start, start + size)
        start += size
    return out


_SU = _columns("label device drop")
_SZ = _columns(
    "mesor amplitude onset duration acrophase dip activity intensity noise drift "
    "acc_base acc_gain"
)
_DU = _columns(
    "n_bursts n_awake n_gaps offset",
    wave_period=_N_WAVES,
    wave_phase=_N_WAVES,
    burst_time=2 * _MAX_BURSTS,
    awake_time=_MAX_AWAKENINGS,
    gap_start=_MAX_GAPS,
)
_DZ = _columns(
    "mesor onset duration acrophase",
    wave_amp=_N_WAVES,
    burst_len=_MAX_BURSTS,
    burst_int=_MAX_BURSTS,
    awake_len=_MAX_AWAKENINGS,
    awake_int=_MAX_AWAKENINGS,
    gap_len=_MAX_GAPS,
)
assert max(s.stop for s in _DU.values()) <= _DAY_U
assert max(s.stop for s in _DZ.values()) <= _DAY_Z
assert max(s.stop for s in _SZ.values()) <= _SUBJECT_Z


# -- parameters ------------------------------------------------------------------------


def _integer(value: Any, name: str, low: int, high: int | None = None) -> int:
    limit = f">= {low}" if high is None else f"in [{low}, {high}]"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} must be an integer {limit}, got {value!r} ({type(value).__name__})"
        )
    value = int(value)
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name} must be an integer {limit}, got {value}")
    return value


def _real(value: Any, name: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be a real number in [{low}, {high}], got {value!r} "
            f"({type(value).__name__})"
        )
    value = float(value)
    if not low <= value <= high:  # NaN fails too
        raise ValueError(
            f"{name} must be a real number in [{low}, {high}], got {value}"
        )
    return value


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


@dataclass(frozen=True)
class WearableParams:
    """The generator's parameters (the model is in the module docstring), validated
    when built.

    Subjects ``first_subject .. first_subject + n_subjects - 1`` are drawn
    (``n_subjects >= 1``, ``first_subject >= 0``), ``n_days`` curves each (1 to
    366), labelled by the first ``n_classes`` (2 to 5) of :data:`CONDITIONS` with
    probabilities ``class_prior`` (balanced if None). ``separation`` (0 to 2) sets
    how far the conditions are from healthy, ``accelerometer`` adds the activity
    channel, ``irregular`` samples on each device's own timestamps rather than the
    5-minute grid, ``gap_rate`` (0 to 3) is the mean number of device-off stretches
    a day, ``drop_rate`` (0 to 0.25) the mean probability that a sample is dropped
    and ``noise_sd`` (0 to 10 bpm) the awake measurement noise; ``seed >= 0``.
    """

    n_subjects: int = 10_000
    n_days: int = 1
    n_classes: int = 2
    class_prior: tuple[float, ...] | None = None
    separation: float = 1.0
    accelerometer: bool = False
    irregular: bool = True
    gap_rate: float = 1.0
    drop_rate: float = 0.05
    noise_sd: float = 3.0
    seed: int = 0
    first_subject: int = 0

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "n_subjects", _integer(self.n_subjects, "n_subjects", 1))
        set_(self, "n_days", _integer(self.n_days, "n_days", 1, 366))
        n_classes = _integer(self.n_classes, "n_classes", 2, len(CONDITIONS))
        set_(self, "n_classes", n_classes)
        set_(self, "class_prior", self._check_prior(self.class_prior))
        set_(self, "separation", _real(self.separation, "separation", 0.0, 2.0))
        set_(self, "accelerometer", _flag(self.accelerometer, "accelerometer"))
        set_(self, "irregular", _flag(self.irregular, "irregular"))
        set_(self, "gap_rate", _real(self.gap_rate, "gap_rate", 0.0, 3.0))
        set_(self, "drop_rate", _real(self.drop_rate, "drop_rate", 0.0, 0.25))
        set_(self, "noise_sd", _real(self.noise_sd, "noise_sd", 0.0, 10.0))
        set_(self, "seed", _integer(self.seed, "seed", 0))
        set_(self, "first_subject", _integer(self.first_subject, "first_subject", 0))

    def _check_prior(self, prior: Any) -> tuple[float, ...] | None:
        if prior is None:
            return None
        if isinstance(prior, (str, bytes)) or not isinstance(
            prior, (Sequence, np.ndarray)
        ):
            raise TypeError(
                f"class_prior must be a sequence of {self.n_classes} probabilities or "
                f"None, got {type(prior).__name__}"
            )
        values = tuple(
            _real(p, f"class_prior[{k}]", 0.0, 1.0) for k, p in enumerate(prior)
        )
        if len(values) != self.n_classes:
            raise ValueError(
                f"class_prior must have n_classes = {self.n_classes} entries, got "
                f"{len(values)}"
            )
        if abs(sum(values) - 1.0) > 1e-9:
            raise ValueError(f"class_prior must sum to 1, got {sum(values)!r}")
        return values

    @property
    def prior(self) -> NDArray[np.float64]:
        """The class prior as an array (balanced when ``class_prior`` is None)."""
        if self.class_prior is None:
            return np.full(self.n_classes, 1.0 / self.n_classes)
        return np.array(self.class_prior, dtype=np.float64)

    @property
    def label_names(self) -> tuple[str, ...]:
        return CONDITIONS[: self.n_classes]

    @property
    def channels(self) -> tuple[str, ...]:
        return CHANNELS if self.accelerometer else CHANNELS[:1]

    def generate(self) -> LongCurves:
        """The subjects in long form (see :func:`make_wearable`)."""
        block = _simulate_all(self, self.irregular)
        return LongCurves(
            subjects=(block.row // self.n_days).astype(np.int64),
            curves=(block.row % self.n_days).astype(np.int64),
            times=block.times,
            values=block.values,
            labels=block.labels,
            subject_ids=_subject_ids(self),
            channels=self.channels,
            label_names=self.label_names,
        )

    def grid(self) -> WearableGrid:
        """The subjects on the regular 5-minute grid (see :func:`wearable_grid`)."""
        block = _simulate_all(self, irregular=False)
        values = np.full((block.onset.size, N_SLOTS, len(self.channels)), np.nan)
        values[block.row, block.slot] = block.values
        times = np.arange(N_SLOTS, dtype=np.float64) * SLOT_MINUTES
        sleep = _sleep(times[None, :], block.onset[:, None], block.duration[:, None])
        shape = (self.n_subjects, self.n_days, N_SLOTS)
        return WearableGrid(
            values=values.reshape(*shape, len(self.channels)),
            times=times,
            labels=block.labels,
            asleep=(sleep > 0.5).reshape(shape),
            subject_ids=_subject_ids(self),
            channels=self.channels,
            label_names=self.label_names,
        )


@dataclass(frozen=True)
class WearableGrid:
    """Subjects on the regular 5-minute grid: dense arrays, NaN where nothing was
    recorded.

    Attributes
    ----------
    values : ndarray of shape (n_subjects, n_days, 288, n_channels)
        The value of each channel at each slot (``values[:, 0, :, 0]`` is day 0's
        heart rate, shape (n_subjects, 288)); NaN in device-off stretches and at
        dropped samples, for every channel at once.
    times : ndarray of shape (288,)
        The slots' times: 0, 5, ..., 1435 minutes.
    labels : ndarray of shape (n_subjects,)
        Each subject's condition, an index into ``label_names``.
    asleep : ndarray of shape (n_subjects, n_days, 288), bool
        The generator's own sleep indicator at each slot (ground truth).
    subject_ids, channels, label_names : tuple of str
        As in :class:`~ldpfda.datasets.curves.LongCurves`.
    """

    values: NDArray[np.float64]
    times: NDArray[np.float64]
    labels: NDArray[np.int64]
    asleep: NDArray[np.bool_]
    subject_ids: tuple[str, ...]
    channels: tuple[str, ...]
    label_names: tuple[str, ...]

    @property
    def heart_rate(self) -> NDArray[np.float64]:
        """The heart-rate channel, shape (n_subjects, n_days, 288)."""
        return self.values[..., 0]


def make_wearable(
    n_subjects: int = 10_000,
    *,
    n_days: int = 1,
    n_classes: int = 2,
    accelerometer: bool = False,
    irregular: bool = True,
    seed: int = 0,
    class_prior: Sequence[float] | None = None,
    separation: float = 1.0,
    gap_rate: float = 1.0,
    drop_rate: float = 0.05,
    noise_sd: float = 3.0,
    first_subject: int = 0,
) -> LongCurves:
    """Wearable heart-rate curves of ``n_subjects`` subjects, in long form.

    One row per recorded sample, ordered by subject, day and time; ``curves`` is the
    day, ``times`` the minute of the day in [0, 1440), ``values[:, 0]`` the heart rate
    in bpm (and ``values[:, 1]`` the activity counts per minute if
    ``accelerometer``), ``labels`` the condition (``label_names`` are
    :data:`CONDITIONS`), ``subject_ids`` the subjects' global indices as strings. There
    are no rows in device-off stretches nor for dropped samples. The parameters are
    those of :class:`WearableParams`; the model is in the module's docstring.

    10^4 subjects x 1 day take about 2 s on one core.
    """
    return WearableParams(**locals()).generate()


def wearable_grid(
    n_subjects: int = 10_000,
    *,
    n_days: int = 1,
    n_classes: int = 2,
    accelerometer: bool = False,
    seed: int = 0,
    class_prior: Sequence[float] | None = None,
    separation: float = 1.0,
    gap_rate: float = 1.0,
    drop_rate: float = 0.05,
    noise_sd: float = 3.0,
    first_subject: int = 0,
) -> WearableGrid:
    """The subjects of :func:`make_wearable` on the regular 5-minute grid.

    The same subjects (labels, latent curves, sleep, bursts, device-off stretches) as
    ``make_wearable`` with the same arguments, each sampled at 0, 5, ..., 1435 min:
    exactly ``make_wearable(..., irregular=False)`` laid out densely, NaN where no
    sample was recorded.
    """
    return WearableParams(**locals()).grid()


def bin_means(
    data: LongCurves, *, width: float = SLOT_MINUTES, length: float = DAY_MINUTES
) -> NDArray[np.float64]:
    """Average each subject's samples in bins of ``width`` over ``[0, length)``.

    Returns an array of shape ``(n_subjects, n_curves, n_bins, n_channels)``, with
    ``n_curves`` one more than the largest curve index and ``n_bins =
    ceil(length / width)``; bin ``k`` holds the mean of the observed (non-NaN) values in
    ``[k width, (k + 1) width)`` and is NaN where there are none. Samples outside
    ``[0, length)`` are ignored.
    """
    width = _real(width, "width", 1e-9, math.inf)
    length = _real(length, "length", width, math.inf)
    n_bins = int(math.ceil(length / width - 1e-12))
    n_curves = int(data.curves.max()) + 1 if data.curves.size else 1
    shape = (data.n_subjects, n_curves, n_bins, data.n_channels)
    inside = (data.times >= 0.0) & (data.times < length)
    slot = np.minimum((data.times[inside] // width).astype(np.int64), n_bins - 1)
    flat = (data.subjects[inside] * n_curves + data.curves[inside]) * n_bins + slot
    size = shape[0] * shape[1] * shape[2]
    out = np.full(shape, np.nan)
    for channel in range(data.n_channels):
        x = data.values[inside, channel]
        seen = ~np.isnan(x)
        total = np.bincount(flat[seen], weights=x[seen], minlength=size)
        count = np.bincount(flat[seen], minlength=size)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[..., channel] = (total / count).reshape(shape[:3])
    return out


# -- drawing ---------------------------------------------------------------------------


def _poisson(u: NDArray[np.float64], rate: NDArray[np.float64], cap: int) -> NDArray:
    """Poisson(rate) counts by inversion of the uniforms ``u``, at most ``cap``."""
    k = np.arange(cap + 1, dtype=np.float64)
    log_factorial = np.concatenate([[0.0], np.cumsum(np.log(k[1:]))])
    lam = np.maximum(rate, 1e-300)[:, None]
    cdf = np.cumsum(np.exp(k * np.log(lam) - lam - log_factorial), axis=1)
    return np.minimum((u[:, None] > cdf).sum(axis=1), cap)


def _sleep(t: NDArray[np.float64], onset: NDArray, duration: NDArray) -> NDArray:
    """Smooth sleep indicator at times ``t`` (broadcast with onset, duration)."""
    tau = np.mod(t - onset + DAY_MINUTES / 2, DAY_MINUTES) - DAY_MINUTES / 2
    return 1.0 / (1.0 + np.exp(-tau / _EDGE)) - 1.0 / (
        1.0 + np.exp(-(tau - duration) / _EDGE)
    )


def _drive(
    start: NDArray[np.float64], length: NDArray[np.float64], level: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Sum of boxes ``level`` on ``[start, start + length)`` on the minute grid, wrapped
    around the day; inputs are (rows, boxes), the result (rows, 1440)."""
    rows, _ = start.shape
    day = int(DAY_MINUTES)
    a = np.mod(np.rint(start), DAY_MINUTES).astype(np.int64)
    b = a + np.maximum(np.rint(length), 1.0).astype(np.int64)  # < 2 * day
    offset = (np.arange(rows, dtype=np.int64) * day)[:, None]
    index = np.concatenate([(a + offset).ravel(), (np.mod(b, day) + offset).ravel()])
    weight = np.concatenate([level.ravel(), -level.ravel()])
    steps = np.bincount(index, weights=weight, minlength=rows * day)
    # A box that runs past midnight covers the day's start: its level is carried in.
    carried = (level * (b >= day)).sum(axis=1)
    return np.cumsum(steps.reshape(rows, day), axis=1) + carried[:, None]


def _respond(drive: NDArray[np.float64]) -> NDArray[np.float64]:
    """Circular convolution of ``drive`` with the exponential HR-response kernel."""
    kernel = np.exp(-_MINUTES / _HR_TAU)
    kernel /= kernel.sum()
    spectrum = np.fft.rfft(drive, axis=1) * np.fft.rfft(kernel)
    return np.fft.irfft(spectrum, n=int(DAY_MINUTES), axis=1)


def _at(
    curve: NDArray[np.float64], row: NDArray[np.int64], t: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Linear interpolation of the minute-grid rows ``curve[row]`` at ``t``
    (periodic)."""
    day = int(DAY_MINUTES)
    base = np.floor(t)
    frac = t - base
    i0 = np.mod(base.astype(np.int64), day)
    return curve[row, i0] * (1.0 - frac) + curve[row, np.mod(i0 + 1, day)] * frac


@dataclass(frozen=True)
class _Block:
    """One block of subject-days, simulated; rows are (subject, day), subject-major,
    and the recorded samples are listed row by row in time order."""

    labels: NDArray[np.int64]  # (n,)
    row: NDArray[np.int64]  # (m,) each recorded sample's row
    slot: NDArray[np.int64]  # (m,) its position in the row's sampling sequence
    times: NDArray[np.float64]  # (m,)
    values: NDArray[np.float64]  # (m, channels)
    onset: NDArray[np.float64]  # (rows,)
    duration: NDArray[np.float64]  # (rows,)


class _Rows:
    """Every random number of subjects ``first .. first + n - 1``, by name, one row
    per subject-day (subject terms repeated).

    Subject :math:`i` and its day :math:`d` each have their own SeedSequence child;
    a stream fills its row in order, so leaving out the activity noise at the end of
    a day's normals changes none of the numbers before it.
    """

    def __init__(self, params: WearableParams, first: int, n: int) -> None:
        days = self.days = params.n_days
        self.n = n * days
        self.su = np.empty((n, _SUBJECT_U))
        sz = np.empty((n, _SUBJECT_Z))
        self.du = np.empty((n * days, _DAY_U + 2 * _MAX_SAMPLES))
        width = _DAY_Z + (2 if params.accelerometer else 1) * _MAX_SAMPLES
        self.dz = np.empty((n * days, width))
        for k in range(n):
            i = first + k
            gen = np.random.Generator(
                np.random.PCG64(np.random.SeedSequence(params.seed, spawn_key=(i,)))
            )
            gen.random(out=self.su[k])
            gen.standard_normal(out=sz[k])
            for d in range(days):
                gen = np.random.Generator(
                    np.random.PCG64(
                        np.random.SeedSequence(params.seed, spawn_key=(i, d))
                    )
                )
                gen.random(out=self.du[k * days + d])
                gen.standard_normal(out=self.dz[k * days + d])
        np.clip(sz, -_TRUNCATE, _TRUNCATE, out=sz)
        np.clip(self.dz[:, :_DAY_Z], -_TRUNCATE, _TRUNCATE, out=self.dz[:, :_DAY_Z])
        self.sz = np.repeat(sz, days, axis=0)

    def subject_u(self, name: str) -> NDArray[np.float64]:
        """A subject uniform, one value per subject (not per row)."""
        return self.su[:, _SU[name].start]

    def subject_z(self, name: str) -> NDArray[np.float64]:
        return self.sz[:, _SZ[name].start]

    def day_u(self, name: str) -> NDArray[np.float64]:
        return self.du[:, _DU[name]]

    def day_z(self, name: str) -> NDArray[np.float64]:
        return self.dz[:, _DZ[name]]


def _activity(
    r: _Rows,
    onset: NDArray[np.float64],
    duration: NDArray[np.float64],
    scale: NDArray[np.float64],
    awake_rate: NDArray[np.float64],
) -> NDArray[np.float64]:
    """The activity drive b(t) of the day's bursts and nocturnal awakenings."""
    # daytime bursts: triangular start over the waking hours, ending before sleep
    rate = 5.0 * np.exp(0.3 * r.subject_z("activity"))
    count = _poisson(r.day_u("n_bursts")[:, 0], rate, _MAX_BURSTS)
    active = np.arange(_MAX_BURSTS)[None, :] < count[:, None]
    length = np.clip(20.0 * np.exp(0.6 * r.day_z("burst_len")), 5.0, 120.0)
    level = np.minimum(scale[:, None] * np.exp(0.4 * r.day_z("burst_int")), 80.0)
    tri = r.day_u("burst_time").reshape(r.n, _MAX_BURSTS, 2).mean(axis=2)
    waking = DAY_MINUTES - duration
    start = (onset + duration + 15.0)[:, None] + tri * (waking[:, None] - 30.0 - length)
    # nocturnal awakenings, uniform within the sleep period
    n_awake = _poisson(r.day_u("n_awake")[:, 0], awake_rate, _MAX_AWAKENINGS)
    awake_on = np.arange(_MAX_AWAKENINGS)[None, :] < n_awake[:, None]
    awake_len = np.clip(10.0 * np.exp(0.3 * r.day_z("awake_len")), 5.0, 20.0)
    awake_level = 0.6 * scale[:, None] * np.exp(0.3 * r.day_z("awake_int"))
    awake_start = (onset + 30.0)[:, None] + r.day_u("awake_time") * (duration - 60.0)[
        :, None
    ]
    return _drive(
        np.concatenate([start, awake_start], axis=1),
        np.concatenate([length, awake_len], axis=1),
        np.concatenate([level * active, awake_level * awake_on], axis=1),
    )


def _sampling(
    params: WearableParams, r: _Rows, irregular: bool
) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Every row's candidate sample times and which of them were recorded."""
    du = r.du
    if irregular:
        choice = np.searchsorted(_PERIOD_CDF, r.subject_u("device"), side="right")
        drift = 1.0 + 0.02 * r.subject_z("drift")
        period = (np.repeat(_PERIODS[choice], r.days) * drift)[:, None]
        j = np.arange(_MAX_SAMPLES, dtype=np.float64)[None, :]
        jitter = du[:, _DAY_U : _DAY_U + _MAX_SAMPLES]
        t = period * (r.day_u("offset") + j + 0.6 * (jitter - 0.5))
        kept = (t >= 0.0) & (t < DAY_MINUTES)
    else:
        t = np.broadcast_to(np.arange(N_SLOTS) * SLOT_MINUTES, (r.n, N_SLOTS))
        kept = np.ones(t.shape, dtype=bool)
    # dropped samples, then device-off stretches (cut at the day's end)
    n = t.shape[1]
    drop = np.repeat(2.0 * params.drop_rate * r.subject_u("drop"), r.days)
    kept &= du[:, _DAY_U + _MAX_SAMPLES : _DAY_U + _MAX_SAMPLES + n] >= drop[:, None]
    rate = np.full(r.n, params.gap_rate)
    n_gaps = _poisson(r.day_u("n_gaps")[:, 0], rate, _MAX_GAPS)
    gap_on = np.arange(_MAX_GAPS)[None, :] < n_gaps[:, None]
    gap_start = np.where(gap_on, r.day_u("gap_start") * DAY_MINUTES, np.inf)
    gap_end = gap_start + np.clip(60.0 * np.exp(0.6 * r.day_z("gap_len")), 10.0, 180.0)
    for g in range(_MAX_GAPS):
        kept &= (t < gap_start[:, g : g + 1]) | (t >= gap_end[:, g : g + 1])
    return t, kept


def _simulate(params: WearableParams, r: _Rows, irregular: bool) -> _Block:
    """A block's conditions, latent curves (rhythm, sleep, activity, with the mean
    correction), sampling, and the recorded samples."""
    labels = np.minimum(
        np.searchsorted(np.cumsum(params.prior), r.subject_u("label"), side="right"),
        params.n_classes - 1,
    ).astype(np.int64)
    effect = _EFFECTS[np.repeat(labels, r.days)] * params.separation  # (rows, 6)
    d_amp, d_dip, d_onset, d_acro, d_awake, d_night = effect.T

    mesor = 68.0 + 6.0 * r.subject_z("mesor") + 2.0 * r.day_z("mesor")[:, 0]
    reserve = mesor - 35.0
    amplitude = 0.2 * reserve * np.exp(0.25 * r.subject_z("amplitude")) * (1.0 + d_amp)
    dip0 = 0.25 * reserve * np.exp(0.25 * r.subject_z("dip"))
    duration = np.clip(
        450.0 + 50.0 * r.subject_z("duration") + 30.0 * r.day_z("duration")[:, 0],
        300.0,
        660.0,
    )
    onset = (
        1380.0 + 60.0 * r.subject_z("onset") + 30.0 * r.day_z("onset")[:, 0] + d_onset
    )
    acrophase = (
        onset
        + duration / 2.0
        + 720.0
        + 45.0 * r.subject_z("acrophase")
        + 20.0 * r.day_z("acrophase")[:, 0]
        + d_acro
    )
    scale = 20.0 * np.exp(0.3 * r.subject_z("intensity"))
    drive = _activity(r, onset, duration, scale, 0.5 + d_awake)
    # The daily mean must not tell the conditions apart: remove the expected rise that
    # a weaker dip and extra awakenings bring (the response keeps each box's area;
    # E[e^{0.3 z}] = e^{0.045}).
    extra_awake = d_awake * (0.6 * scale * np.exp(0.045)) * (10.0 * np.exp(0.045))
    mesor = mesor - (-d_dip * dip0 * duration + extra_awake) / DAY_MINUTES
    dip = dip0 * (1.0 + d_dip)
    sigma = params.noise_sd * np.exp(0.2 * r.subject_z("noise"))
    night = 0.5 * (1.0 + d_night)
    t, kept = _sampling(params, r, irregular)
    row, slot = np.nonzero(kept)
    tt = t[row, slot]
    sleep = _sleep(tt, onset[row], duration[row])
    wave = np.zeros(tt.shape)
    periods = 60.0 * 4.0 ** r.day_u("wave_period")[row]
    phases = 2.0 * np.pi * r.day_u("wave_phase")[row]
    amps = np.exp(0.3 * r.day_z("wave_amp"))[row]
    for w in range(_N_WAVES):
        wave += amps[:, w] * np.sin(2.0 * np.pi * tt / periods[:, w] + phases[:, w])
    cycle = np.cos(2.0 * np.pi * (tt - acrophase[row]) / DAY_MINUTES)
    mu = (
        mesor[row]
        + amplitude[row] * cycle
        - dip[row] * sleep
        + _at(_respond(drive), row, tt)
        + wave * (1.0 - 0.5 * sleep)
    )
    sd = sigma[row] * (1.0 - (1.0 - night[row]) * sleep)
    dz = r.dz
    hr = np.clip(np.rint(mu + sd * dz[row, _DAY_Z + slot]), 40.0, 200.0)
    channels = [hr]
    if params.accelerometer:
        base = 150.0 * np.exp(0.5 * r.subject_z("acc_base"))[row]
        gain = 100.0 * np.exp(0.3 * r.subject_z("acc_gain"))[row]
        latent = base * (1.0 - sleep) + 5.0 * sleep + gain * _at(drive, row, tt)
        noise = dz[row, _DAY_Z + _MAX_SAMPLES + slot]
        counts = np.maximum(latent, 0.0) * np.exp(0.5 * noise - 0.125)
        channels.append(np.rint(np.minimum(counts, _MAX_COUNTS)))
    return _Block(labels, row, slot, tt, np.stack(channels, axis=-1), onset, duration)


def _simulate_all(params: WearableParams, irregular: bool) -> _Block:
    """Every subject-day, simulated in blocks, joined: rows count from the first."""
    # About 1000 subject-days at a time keep the minute-grid arrays near 10 MB each.
    size = max(1, 1024 // params.n_days)
    blocks: list[_Block] = []
    done = 0
    for first in range(0, params.n_subjects, size):
        n = min(size, params.n_subjects - first)
        rows = _Rows(params, params.first_subject + first, n)
        block = _simulate(params, rows, irregular)
        blocks.append(replace(block, row=block.row + done))
        done += block.onset.size
    return _Block(
        *(np.concatenate([getattr(b, f.name) for b in blocks]) for f in fields(_Block))
    )


def _subject_ids(params: WearableParams) -> tuple[str, ...]:
    first = params.first_subject
    return tuple(str(first + k) for k in range(params.n_subjects))
