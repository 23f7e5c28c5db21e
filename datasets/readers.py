"""Read a host's own curve files into :class:`~ldpfda.datasets.curves.LongCurves`.

Hosts keep their data as they recorded it; these readers take three layouts, with any
number of channels and several curves (e.g. days) per subject, using the csv module
and numpy only (no pandas on a host). Errors name the file, the row as a spreadsheet
shows it (the header is row 1) and the column, e.g.
``hr.csv row 17, column 'time': 'abc' is not a number``.

Wide CSV (:func:`read_wide_csv`)
    One row per curve. A ``label`` column, optional ``subject``, ``curve`` and
    ``channel`` columns, and one column per time point whose header is the time
    (``subject,label,0.0,0.5,1.0,...``). An empty cell (or ``nan``, ``NA``) is a gap.
    Without a ``subject`` column every row is its own subject (named ``row <n>``).
    Rows of one subject are its curves, in file order, unless a ``curve`` column
    names them; with a ``channel`` column, the rows of a subject's curve hold one
    channel each (without a ``curve`` column, the k-th row of every channel is
    curve k). Without a ``channel`` column the file holds one channel, named by
    ``channel``.

Long CSV (:func:`read_long_csv`)
    One row per observation. Columns ``subject``, ``time``, ``label``, optional
    ``curve``, and either one value column per channel (the header is the channel's
    name) or a ``channel`` column with a ``value`` column. Rows of a subject may come
    in any order; a label must be the same on every row of its subject.

NPZ (:func:`read_npz`, ``numpy.savez``; no pickled objects)
    *Long*, the fields of :class:`LongCurves`: ``times`` (m,) floats, ``values``
    (m,) or (m, C) floats with NaN for missing, ``subjects`` (m,) ints in
    ``0 .. n - 1``, ``labels`` (n,) label names (strings or integers; with
    ``label_names`` (K,), indices into it), optional ``curves`` (m,) ints,
    ``subject_ids`` (n,) and ``channels`` (C,) strings.
    *Wide*, one row per curve on one grid (today's node data files are of this
    kind): ``curves`` (n, T), (T,) or (n, C, T) floats with NaN for gaps, ``grid``
    (T,), ``labels`` (n,) or a scalar, optional ``subject_ids`` (n,) (rows with one
    id are that subject's curves) and ``channels`` (C,).

Labels are text: ``1``, ``1.0`` and ``1.00`` are the label ``"1"``. Given the spec's
labels (``spec_labels``), every label must be one of them, and the result's
``label_names`` are the spec's; otherwise they are the labels found, in numeric order
if all are integers, else sorted.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda.datasets.curves import LongCurves

__all__ = [
    "MISSING",
    "read_curves",
    "read_long_csv",
    "read_npz",
    "read_wide_csv",
    "write_long_csv",
    "write_npz",
    "write_wide_csv",
]

#: Cell texts (compared in lower case) that mean "not observed".
MISSING = frozenset({"", "nan", "na", "n/a", "null"})


# -- labels ----------------------------------------------------------------------------


def _label_text(value: Any) -> str:
    """A label as text; integral numbers in any spelling become ``"<int>"``."""
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return text
    if math.isfinite(number) and number == int(number):
        return str(int(number))
    return text


def _label_names(found: Sequence[str], spec_labels: Sequence[str] | None) -> tuple:
    if spec_labels is not None:
        return tuple(spec_labels)
    distinct = sorted(set(found))
    try:
        return tuple(sorted(distinct, key=int))
    except ValueError:
        return tuple(distinct)


def _check_label(label: str, spec_labels: Sequence[str] | None, where: str) -> str:
    if spec_labels is not None and label not in spec_labels:
        raise ValueError(
            f"{where}: label {label!r} is not in the spec's labels {tuple(spec_labels)}"
        )
    return label


# -- assembling ------------------------------------------------------------------------


@dataclass
class _Builder:
    """Observations as they are read, assembled into LongCurves at the end."""

    name: str
    channels: tuple[str, ...]
    spec_labels: Sequence[str] | None
    subjects: dict[str, int] = field(default_factory=dict)
    labels: list[str] = field(default_factory=list)
    label_rows: list[str] = field(default_factory=list)
    curve_ids: list[dict[str, int]] = field(default_factory=list)
    rows_subject: list[int] = field(default_factory=list)
    rows_curve: list[int] = field(default_factory=list)
    rows_time: list[float] = field(default_factory=list)
    rows_values: list[list[float]] = field(default_factory=list)

    def subject(self, sid: str, label: str, where: str) -> int:
        """Index of subject ``sid``, checking that its label never changes."""
        label = _check_label(label, self.spec_labels, where)
        if sid not in self.subjects:
            self.subjects[sid] = len(self.labels)
            self.labels.append(label)
            self.label_rows.append(where)
            self.curve_ids.append({})
        i = self.subjects[sid]
        if self.labels[i] != label:
            raise ValueError(
                f"{where}: subject {sid!r} has labels {self.labels[i]!r} and "
                f"{label!r} ({self.label_rows[i]} has {self.labels[i]!r}); a subject "
                "has one label"
            )
        return i

    def curve(self, subject: int, cid: str) -> int:
        ids = self.curve_ids[subject]
        return ids.setdefault(cid, len(ids))

    def add(self, subject: int, curve: int, time: float, values: list[float]) -> None:
        self.rows_subject.append(subject)
        self.rows_curve.append(curve)
        self.rows_time.append(time)
        self.rows_values.append(values)

    def build(self) -> LongCurves:
        label_names = _label_names(self.labels, self.spec_labels)
        index = {name: k for k, name in enumerate(label_names)}
        values = np.array(self.rows_values, dtype=float).reshape(
            len(self.rows_values), len(self.channels)
        )
        observed = ~np.all(np.isnan(values), axis=1)
        return LongCurves(
            np.array(self.rows_subject, dtype=np.int64)[observed],
            np.array(self.rows_curve, dtype=np.int64)[observed],
            np.array(self.rows_time, dtype=float)[observed],
            values[observed],
            np.array([index[label] for label in self.labels], dtype=np.int64),
            tuple(self.subjects),
            self.channels,
            label_names,
        )


# -- CSV -------------------------------------------------------------------------------


def _rows(path: Path, delimiter: str) -> Generator[tuple[int, list[str]], None, None]:
    """(spreadsheet row, stripped cells) of every non-blank record; the header is
    row 1. A UTF-8 byte order mark (as spreadsheets write) is skipped."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        for row, cells in enumerate(csv.reader(handle, delimiter=delimiter), start=1):
            stripped = [c.strip() for c in cells]
            if any(stripped):
                yield row, stripped


def _header(
    path: Path, rows: Generator[tuple[int, list[str]], None, None]
) -> list[str]:
    first = next(rows, None)
    if first is None:
        raise ValueError(f"{path.name} is empty: it needs a header row")
    row, header = first
    seen: dict[str, int] = {}
    for j, name in enumerate(header):
        if not name:
            raise ValueError(f"{path.name} row {row}: column {j + 1} has no header")
        if name in seen:
            raise ValueError(
                f"{path.name} row {row}: column {name!r} appears twice (columns "
                f"{seen[name] + 1} and {j + 1})"
            )
        seen[name] = j
    return header


def _number(text: str, where: str, *, missing_ok: bool) -> float:
    if text.lower() in MISSING:
        if missing_ok:
            return math.nan
        raise ValueError(f"{where}: the cell is empty; a number is needed")
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{where}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{where}: {text!r} is not a finite number")
    return value


def _header_time(path: Path, name: str) -> float:
    try:
        value = float(name)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(
            f"{path.name} row 1, column {name!r}: {name!r} is not a number; every "
            "column other than label, subject, curve and channel is a time point, "
            "and its header is the time"
        )
    return value


def _cells(path: Path, row: int, cells: list[str], header: list[str]) -> list[str]:
    if len(cells) != len(header):
        raise ValueError(
            f"{path.name} row {row}: {len(cells)} cells, but the header has "
            f"{len(header)} columns"
        )
    return cells


def _required(path: Path, header: list[str], column: str, layout: str) -> int:
    if column not in header:
        raise ValueError(
            f"{path.name} row 1: no column {column!r}; a {layout} file needs one "
            f"(its columns are {', '.join(map(repr, header[:8]))}"
            f"{', ...' if len(header) > 8 else ''})"
        )
    return header.index(column)


def read_wide_csv(
    path: str | Path,
    *,
    spec_labels: Sequence[str] | None = None,
    channel: str = "value",
    label_column: str = "label",
    subject_column: str = "subject",
    curve_column: str = "curve",
    channel_column: str = "channel",
    delimiter: str = ",",
) -> LongCurves:
    """Curves of a wide CSV file: one row per curve, one column per time point.

    See the module docstring for the layout. ``spec_labels`` (the spec's label set)
    makes every label be checked against it.
    """
    path = Path(path)
    rows = _rows(path, delimiter)
    header = _header(path, rows)
    lab = _required(path, header, label_column, "wide")
    named = {label_column, subject_column, curve_column, channel_column}
    sub, cur, cha = (
        header.index(c) if c in header else None
        for c in (subject_column, curve_column, channel_column)
    )
    if sub is None and (cur is not None or cha is not None):
        which = curve_column if cur is not None else channel_column
        raise ValueError(
            f"{path.name} row 1: a {which!r} column needs a {subject_column!r} column "
            "to tell which rows belong to one subject"
        )
    time_columns = [j for j, name in enumerate(header) if name not in named]
    if not time_columns:
        raise ValueError(f"{path.name} row 1: no time columns (headers that are times)")
    times = [_header_time(path, header[j]) for j in time_columns]
    body = [(row, _cells(path, row, cells, header)) for row, cells in rows]
    if cha is None:
        channels: tuple[str, ...] = (channel,)
    else:
        channels = tuple(dict.fromkeys(cells[cha] for _, cells in body))
        for row, cells in body:
            if not cells[cha]:
                raise ValueError(
                    f"{path.name} row {row}, column {channel_column!r}: the channel "
                    "is empty"
                )
    builder = _Builder(path.name, channels, spec_labels)
    # (subject, curve) -> the spreadsheet row of each channel already read
    seen: dict[tuple[int, int], dict[int, int]] = {}
    counts: dict[tuple[int, int], int] = {}
    for row, cells in body:
        where = f"{path.name} row {row}"
        label = cells[lab]
        if not label:
            raise ValueError(f"{where}, column {label_column!r}: the label is empty")
        sid = f"row {row}" if sub is None else cells[sub]
        if not sid:
            raise ValueError(
                f"{where}, column {subject_column!r}: the subject is empty"
            )
        s = builder.subject(sid, _label_text(label), where)
        c = 0 if cha is None else channels.index(cells[cha])
        if cur is not None:
            curve = builder.curve(s, cells[cur])
        else:  # the k-th row of a subject's channel is its curve k
            curve = counts.get((s, c), 0)
            counts[(s, c)] = curve + 1
        previous = seen.setdefault((s, curve), {})
        if c in previous:
            raise ValueError(
                f"{where}: subject {sid!r} curve "
                f"{cells[cur] if cur is not None else curve!r} channel "
                f"{channels[c]!r} is already given in row {previous[c]}"
            )
        previous[c] = row
        for j, t in zip(time_columns, times, strict=True):
            value = _number(cells[j], f"{where}, column {header[j]!r}", missing_ok=True)
            if not math.isnan(value):
                values = [math.nan] * len(channels)
                values[c] = value
                builder.add(s, curve, t, values)
    return _merge_channels(builder.build())


def _merge_channels(curves: LongCurves) -> LongCurves:
    """One observation per (subject, curve, time) where channels were read apart."""
    if curves.n_channels == 1 or curves.times.size == 0:
        return curves
    keys = np.rec.fromarrays([curves.subjects, curves.curves, curves.times])
    unique, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    values = np.full((unique.size, curves.n_channels), np.nan)
    for c in range(curves.n_channels):
        has = ~np.isnan(curves.values[:, c])
        values[inverse[has], c] = curves.values[has, c]
    order = np.argsort(first, kind="stable")  # keep the file's order
    return LongCurves(
        curves.subjects[first][order],
        curves.curves[first][order],
        curves.times[first][order],
        values[order],
        curves.labels,
        curves.subject_ids,
        curves.channels,
        curves.label_names,
    )


def read_long_csv(
    path: str | Path,
    *,
    spec_labels: Sequence[str] | None = None,
    channels: Sequence[str] | None = None,
    subject_column: str = "subject",
    time_column: str = "time",
    label_column: str = "label",
    curve_column: str = "curve",
    channel_column: str = "channel",
    value_column: str = "value",
    delimiter: str = ",",
) -> LongCurves:
    """Curves of a long CSV file: one row per observation.

    See the module docstring for the layout. Without a ``channel`` column every
    column other than subject, time, label and curve is a channel (or only
    ``channels``, if given). With one, its rows are merged into one observation per
    (subject, curve, time) holding every channel given there.
    """
    path = Path(path)
    rows = _rows(path, delimiter)
    header = _header(path, rows)
    sub = _required(path, header, subject_column, "long")
    tim = _required(path, header, time_column, "long")
    lab = _required(path, header, label_column, "long")
    cur = header.index(curve_column) if curve_column in header else None
    cha = header.index(channel_column) if channel_column in header else None
    named = {subject_column, time_column, label_column, curve_column}
    if cha is not None:
        val = _required(path, header, value_column, "long file with a channel column")
        body = [(row, _cells(path, row, cells, header)) for row, cells in rows]
        found = tuple(dict.fromkeys(cells[cha] for _, cells in body if cells[cha]))
        names = tuple(channels) if channels is not None else found
        value_columns = [val]
    else:
        body = [(row, _cells(path, row, cells, header)) for row, cells in rows]
        candidates = [h for h in header if h not in named]
        names = tuple(channels) if channels is not None else tuple(candidates)
        for name in names:
            _required(path, header, name, "long")
        if not names:
            raise ValueError(f"{path.name} row 1: no value column (one per channel)")
        value_columns = [header.index(name) for name in names]
    builder = _Builder(path.name, names, spec_labels)
    given: dict[tuple[int, int, float, str], int] = {}
    for row, cells in body:
        where = f"{path.name} row {row}"
        if not cells[sub]:
            raise ValueError(
                f"{where}, column {subject_column!r}: the subject is empty"
            )
        if not cells[lab]:
            raise ValueError(f"{where}, column {label_column!r}: the label is empty")
        s = builder.subject(cells[sub], _label_text(cells[lab]), where)
        curve = builder.curve(s, cells[cur]) if cur is not None else 0
        t = _number(cells[tim], f"{where}, column {time_column!r}", missing_ok=False)
        values = [
            _number(cells[j], f"{where}, column {header[j]!r}", missing_ok=True)
            for j in value_columns
        ]
        if cha is not None:
            if not cells[cha]:
                raise ValueError(
                    f"{where}, column {channel_column!r}: the channel is empty"
                )
            if cells[cha] not in names:
                continue  # a channel that was not asked for
            key = (s, curve, t, cells[cha])
            if key in given:
                raise ValueError(
                    f"{where}: subject {cells[sub]!r}"
                    + (f" curve {cells[cur]!r}" if cur is not None else "")
                    + f" channel {cells[cha]!r} at time {t!r} is already given in "
                    f"row {given[key]}"
                )
            given[key] = row
            row_values = [math.nan] * len(names)
            row_values[names.index(cells[cha])] = values[0]
            values = row_values
        builder.add(s, curve, t, values)
    curves = builder.build()
    return _merge_channels(curves) if cha is not None else curves


# -- NPZ -------------------------------------------------------------------------------


def _npz_array(
    archive: Any, path: Path, key: str, kinds: str, ndim: tuple[int, ...]
) -> NDArray[Any]:
    array = archive[key]
    if array.dtype.kind not in kinds:
        raise ValueError(
            f"{path.name}, key {key!r}: dtype {array.dtype} is not allowed (expected "
            f"{_KINDS[kinds]})"
        )
    if array.ndim not in ndim:
        raise ValueError(
            f"{path.name}, key {key!r}: shape {array.shape} must have "
            f"{' or '.join(map(str, ndim))} axes"
        )
    return np.asarray(array)


_KINDS = {
    "fiu": "numbers",
    "iu": "integers",
    "U": "strings",
    "Uiuf": "strings or integers",
}


def _npz_finite(array: NDArray[Any], path: Path, key: str) -> None:
    bad = ~np.isfinite(array)
    if np.any(bad):
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{path.name}, key {key!r}, index {index if len(index) > 1 else index[0]}: "
            f"{float(array[index])!r} is not a finite number"
        )


def _npz_length(array: NDArray[Any], n: int, path: Path, key: str, what: str) -> None:
    if array.shape[0] != n:
        raise ValueError(
            f"{path.name}, key {key!r}: {array.shape[0]} entries, but there are {n} "
            f"{what}"
        )


def read_npz(
    path: str | Path,
    *,
    spec_labels: Sequence[str] | None = None,
    channel: str = "value",
) -> LongCurves:
    """Curves of a ``.npz`` archive, long or wide (see the module docstring)."""
    path = Path(path)
    with np.load(path, allow_pickle=False) as archive:
        keys = set(archive.files)
        try:
            if "times" in keys:
                return _npz_long(archive, keys, path, spec_labels, channel)
            if "curves" in keys and "grid" in keys:
                return _npz_wide(archive, keys, path, spec_labels, channel)
        except ValueError as exc:
            if "Object arrays cannot be loaded" not in str(exc):
                raise
            raise ValueError(
                f"{path.name}: holds pickled objects; save strings as numpy string "
                "arrays"
            ) from None
    raise ValueError(
        f"{path.name}: keys {sorted(keys)} are neither the long layout ('times', "
        "'values', 'subjects', 'labels') nor the wide one ('curves', 'grid', "
        "'labels')"
    )


def _npz_labels(
    archive: Any, keys: set[str], path: Path, n: int, spec_labels: Sequence[str] | None
) -> list[str]:
    if "labels" not in keys:
        raise ValueError(f"{path.name}: no key 'labels'")
    labels = np.atleast_1d(_npz_array(archive, path, "labels", "Uiuf", (0, 1)))
    _npz_length(labels, n, path, "labels", "subjects")
    if "label_names" in keys:
        names = _npz_array(archive, path, "label_names", "U", (1,)).tolist()
        if labels.dtype.kind not in "iu":
            raise ValueError(
                f"{path.name}, key 'labels': with 'label_names', labels must be "
                f"integer indices, got dtype {labels.dtype}"
            )
        bad = (labels < 0) | (labels >= len(names))
        if np.any(bad):
            i = int(np.argmax(bad))
            raise ValueError(
                f"{path.name}, key 'labels', index {i}: {int(labels[i])} is not an "
                f"index into 'label_names' (0 .. {len(names) - 1})"
            )
        texts = [_label_text(names[k]) for k in labels.tolist()]
    else:
        if labels.dtype.kind == "f":
            _npz_finite(labels, path, "labels")
        texts = [_label_text(v) for v in labels.tolist()]
    return [
        _check_label(t, spec_labels, f"{path.name}, key 'labels', index {i}")
        for i, t in enumerate(texts)
    ]


def _npz_strings(
    archive: Any, keys: set[str], path: Path, key: str, n: int, what: str
) -> list[str] | None:
    if key not in keys:
        return None
    names = _npz_array(archive, path, key, "U", (1,))
    _npz_length(names, n, path, key, what)
    return [str(s) for s in names.tolist()]


def _npz_long(
    archive: Any,
    keys: set[str],
    path: Path,
    spec_labels: Sequence[str] | None,
    channel: str,
) -> LongCurves:
    for key in ("values", "subjects", "labels"):
        if key not in keys:
            raise ValueError(f"{path.name}: the long layout needs key {key!r}")
    times = _npz_array(archive, path, "times", "fiu", (1,)).astype(float)
    _npz_finite(times, path, "times")
    m = times.size
    values = _npz_array(archive, path, "values", "fiu", (1, 2)).astype(float)
    _npz_length(values, m, path, "values", "times")
    values = values.reshape(m, -1) if values.ndim == 1 else values
    if np.any(np.isinf(values)):
        index = tuple(int(i) for i in np.argwhere(np.isinf(values))[0])
        raise ValueError(
            f"{path.name}, key 'values', index {index}: {float(values[index])!r} is "
            "not finite (NaN marks a missing value)"
        )
    subjects = _npz_array(archive, path, "subjects", "iu", (1,)).astype(np.int64)
    _npz_length(subjects, m, path, "subjects", "times")
    n = int(subjects.max()) + 1 if m else 0
    labels_given = np.atleast_1d(archive["labels"]).shape[0]
    n = max(n, labels_given)
    if subjects.size and subjects.min() < 0:
        i = int(np.argmin(subjects))
        raise ValueError(
            f"{path.name}, key 'subjects', index {i}: {int(subjects[i])} is negative"
        )
    labels = _npz_labels(archive, keys, path, n, spec_labels)
    curves = np.zeros(m, dtype=np.int64)
    if "curves" in keys:
        curves = _npz_array(archive, path, "curves", "iu", (1,)).astype(np.int64)
        _npz_length(curves, m, path, "curves", "times")
    ids = _npz_strings(archive, keys, path, "subject_ids", n, "subjects")
    names = _npz_strings(archive, keys, path, "channels", values.shape[1], "channels")
    if names is None and values.shape[1] != 1:
        raise ValueError(
            f"{path.name}: 'values' holds {values.shape[1]} channels; name them with "
            "a 'channels' key"
        )
    label_names = _label_names(labels, spec_labels)
    position = {name: k for k, name in enumerate(label_names)}
    return LongCurves(
        subjects,
        curves,
        times,
        values,
        np.array([position[t] for t in labels], dtype=np.int64),
        tuple(ids) if ids is not None else tuple(str(i) for i in range(n)),
        tuple(names) if names is not None else (channel,),
        label_names,
    )


def _npz_wide(
    archive: Any,
    keys: set[str],
    path: Path,
    spec_labels: Sequence[str] | None,
    channel: str,
) -> LongCurves:
    grid = _npz_array(archive, path, "grid", "fiu", (1,)).astype(float)
    _npz_finite(grid, path, "grid")
    data = _npz_array(archive, path, "curves", "fiu", (1, 2, 3)).astype(float)
    if data.ndim == 1:
        data = data[None, None, :]
    elif data.ndim == 2:
        data = data[:, None, :]
    rows, n_channels, n_times = data.shape
    if n_times != grid.size:
        raise ValueError(
            f"{path.name}, key 'curves': {n_times} values per curve, but 'grid' has "
            f"{grid.size} points"
        )
    if np.any(np.isinf(data)):
        index = tuple(int(i) for i in np.argwhere(np.isinf(data))[0])
        raise ValueError(
            f"{path.name}, key 'curves', index {index}: not finite (NaN marks a gap)"
        )
    labels = _npz_labels(archive, keys, path, rows, spec_labels)
    names = _npz_strings(archive, keys, path, "channels", n_channels, "channels")
    if names is None and n_channels != 1:
        raise ValueError(
            f"{path.name}: 'curves' holds {n_channels} channels; name them with a "
            "'channels' key"
        )
    ids = _npz_strings(archive, keys, path, "subject_ids", rows, "rows of 'curves'")
    builder = _Builder(path.name, tuple(names) if names else (channel,), spec_labels)
    subject = np.empty(rows, dtype=np.int64)
    curve = np.empty(rows, dtype=np.int64)
    for r in range(rows):  # one step per curve, not per value
        where = f"{path.name}, key 'labels', index {r}"
        subject[r] = builder.subject(
            str(r) if ids is None else ids[r], labels[r], where
        )
        curve[r] = builder.curve(int(subject[r]), str(r))
    values = data.transpose(0, 2, 1).reshape(rows * n_times, n_channels)
    observed = ~np.all(np.isnan(values), axis=1)
    label_names = _label_names(builder.labels, spec_labels)
    position = {name: k for k, name in enumerate(label_names)}
    return LongCurves(
        np.repeat(subject, n_times)[observed],
        np.repeat(curve, n_times)[observed],
        np.tile(grid, rows)[observed],
        values[observed],
        np.array([position[label] for label in builder.labels], dtype=np.int64),
        tuple(builder.subjects),
        builder.channels,
        label_names,
    )


# -- dispatch and writing --------------------------------------------------------------


def read_curves(
    path: str | Path,
    *,
    layout: str | None = None,
    spec_labels: Sequence[str] | None = None,
    channel: str = "value",
    **options: Any,
) -> LongCurves:
    """Read ``.npz`` or ``.csv`` curves; a CSV file is long if it has a ``time``
    column (``options['time_column']``), else wide, unless ``layout`` says."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return read_npz(path, spec_labels=spec_labels, channel=channel)
    if suffix != ".csv":
        raise ValueError(f"curve files must be .csv or .npz, got {path.name!r}")
    if layout is None:
        rows = _rows(path, options.get("delimiter", ","))
        header = _header(path, rows)
        rows.close()
        layout = "long" if options.get("time_column", "time") in header else "wide"
    if layout == "long":
        return read_long_csv(path, spec_labels=spec_labels, **options)
    if layout == "wide":
        options.pop("time_column", None)  # a wide file's times are its headers
        return read_wide_csv(path, spec_labels=spec_labels, channel=channel, **options)
    raise ValueError(f"layout must be 'wide' or 'long', got {layout!r}")


def _cell(value: float) -> str:
    return "" if math.isnan(value) else repr(float(value))


def write_wide_csv(
    path: str | Path, curves: LongCurves, *, channel_column: bool | None = None
) -> Path:
    """Write ``curves`` as a wide CSV (columns subject, curve, [channel], label,
    then the sorted distinct times); one row per subject, curve and channel.

    ``channel_column`` defaults to True for several channels. A subject without any
    observation is not written; two values of one channel at one time of a curve
    cannot be, and are a ``ValueError``.
    """
    path = Path(path)
    with_channel = curves.n_channels > 1 if channel_column is None else channel_column
    if curves.n_channels > 1 and not with_channel:
        raise ValueError("several channels need a channel column")
    times = np.unique(curves.times)
    column = np.searchsorted(times, curves.times)
    order = np.lexsort((curves.curves, curves.subjects))
    pairs = zip(
        curves.subjects[order].tolist(), curves.curves[order].tolist(), strict=True
    )
    keys = list(dict.fromkeys(pairs))
    header = ["subject", "curve"] + (["channel"] if with_channel else []) + ["label"]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header + [repr(float(t)) for t in times])
        for s, k in keys:
            rows = np.flatnonzero((curves.subjects == s) & (curves.curves == k))
            for c, name in enumerate(curves.channels):
                line = np.full(times.size, np.nan)
                for r in rows:
                    value = curves.values[r, c]
                    if math.isnan(value):
                        continue
                    if not math.isnan(line[column[r]]):
                        at = float(curves.times[r])
                        raise ValueError(
                            f"subject {curves.subject_ids[s]!r} curve {k} has two "
                            f"values of channel {name!r} at time {at!r}; the wide "
                            "form holds one per time"
                        )
                    line[column[r]] = value
                if np.all(np.isnan(line)):
                    continue
                writer.writerow(
                    [curves.subject_ids[s], int(k)]
                    + ([name] if with_channel else [])
                    + [curves.label_names[curves.labels[s]]]
                    + [_cell(v) for v in line]
                )
    return path


def write_long_csv(
    path: str | Path, curves: LongCurves, *, channel_column: bool = False
) -> Path:
    """Write ``curves`` as a long CSV: columns subject, curve, time, label and one
    column per channel, or (``channel_column``) channel and value with one row per
    observed value."""
    path = Path(path)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        head = ["subject", "curve", "time", "label"]
        writer.writerow(
            head + (["channel", "value"] if channel_column else list(curves.channels))
        )
        for r in range(curves.times.size):
            s = int(curves.subjects[r])
            start = [
                curves.subject_ids[s],
                int(curves.curves[r]),
                repr(float(curves.times[r])),
                curves.label_names[curves.labels[s]],
            ]
            if not channel_column:
                writer.writerow(start + [_cell(v) for v in curves.values[r]])
                continue
            for c, name in enumerate(curves.channels):
                if not math.isnan(curves.values[r, c]):
                    writer.writerow(start + [name, _cell(curves.values[r, c])])
    return path


def write_npz(path: str | Path, curves: LongCurves) -> Path:
    """Write ``curves`` in the long ``.npz`` layout (the fields of LongCurves)."""
    path = Path(path)
    np.savez(
        path,
        times=curves.times,
        values=curves.values,
        subjects=curves.subjects,
        curves=curves.curves,
        labels=curves.labels,
        label_names=np.array(curves.label_names, dtype=str),
        subject_ids=np.array(curves.subject_ids, dtype=str),
        channels=np.array(curves.channels, dtype=str),
    )
    return path
