"""Read a host's own curve files into :class:`~ldpfda.datasets.curves.LongCurves`.

Hosts keep their data as they recorded it: wide CSV (one row per curve, one column
per time point), long CSV (one row per observation) or ``.npz`` (long, or wide on one
grid as today's node data files), with any number of channels and several curves
(e.g. days) per subject; the layouts are in docs/spec.md. Only the csv module and
numpy are needed. Errors name the file, the row as a spreadsheet shows it (the header
is row 1) and the column, e.g. ``hr.csv row 17, column 'time': 'abc' is not a
number``.

Labels are text: ``1``, ``1.0`` and ``1.00`` are the label ``"1"``. Given the spec's
labels (``spec_labels``), every label must be one of them, and the result's
``label_names`` are the spec's; otherwise they are the labels found, in numeric order
if all are integers, else sorted.
"""

from __future__ import annotations

import csv
import functools
import gc
import math
import operator
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda.datasets.curves import LongCurves

__all__ = [
    "MISSING",
    "csv_delimiter",
    "csv_header",
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


# -- labels and assembling -------------------------------------------------------------


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


def _check_label(label: str, spec_labels: Sequence[str] | None, where: str) -> str:
    if spec_labels is not None and label not in spec_labels:
        raise ValueError(
            f"{where}: label {label!r} is not in the spec's labels {tuple(spec_labels)}"
        )
    return label


def _assemble(
    subjects: ArrayLike,
    curves: ArrayLike,
    times: ArrayLike,
    values: NDArray[np.float64],
    labels: Sequence[str],
    subject_ids: Sequence[str],
    channels: Sequence[str],
    spec_labels: Sequence[str] | None,
    keep: Any = slice(None),
) -> LongCurves:
    """LongCurves of the observations ``keep`` and the subjects' label texts."""
    if spec_labels is not None:
        label_names = tuple(spec_labels)
    else:
        label_names = tuple(sorted(set(labels)))
        try:
            label_names = tuple(sorted(label_names, key=int))
        except ValueError:
            pass
    index = {name: k for k, name in enumerate(label_names)}
    return LongCurves(
        np.asarray(subjects, dtype=np.int64)[keep],
        np.asarray(curves, dtype=np.int64)[keep],
        np.asarray(times, dtype=float)[keep],
        values[keep],
        np.array([index[label] for label in labels], dtype=np.int64),
        tuple(subject_ids),
        tuple(channels),
        label_names,
    )


class _Builder:
    """Observations as they are read, assembled into LongCurves at the end."""

    def __init__(
        self, channels: tuple[str, ...], spec_labels: Sequence[str] | None
    ) -> None:
        self.channels, self.spec_labels = channels, spec_labels
        self.subjects: dict[str, int] = {}
        self.labels: list[str] = []
        self.label_rows: list[str] = []
        self.curve_ids: list[dict[str, int]] = []
        self.rows: list[tuple[int, int, float, list[float]]] = []
        #: Observations read a record at a time (a wide row): (subject, curve, times,
        #: values of shape (len(times), n_channels)). A reader fills either these or
        #: ``rows``.
        self.blocks: list[tuple[int, int, NDArray[np.float64], NDArray[np.float64]]]
        self.blocks = []

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

    def build(self) -> LongCurves:
        """The observations read, without those where every channel is missing."""
        if self.blocks:
            sizes = [times.size for _, _, times, _ in self.blocks]
            subjects: Any = np.repeat([b[0] for b in self.blocks], sizes)
            curves: Any = np.repeat([b[1] for b in self.blocks], sizes)
            times: Any = np.concatenate([b[2] for b in self.blocks])
            values = np.concatenate([b[3] for b in self.blocks])
        else:
            subjects = [r[0] for r in self.rows]
            curves = [r[1] for r in self.rows]
            times = [r[2] for r in self.rows]
            values = np.array([r[3] for r in self.rows], dtype=float).reshape(
                len(self.rows), len(self.channels)
            )
        return _assemble(
            subjects,
            curves,
            times,
            values,
            self.labels,
            tuple(self.subjects),
            self.channels,
            self.spec_labels,
            ~np.all(np.isnan(values), axis=1),
        )


# -- CSV -------------------------------------------------------------------------------


_Reader = TypeVar("_Reader", bound=Callable[..., LongCurves])


def _paused_gc(reader: _Reader) -> _Reader:
    """``reader`` run with the cyclic garbage collector paused: a file read makes
    millions of small lists and tuples and no cycles, and every collection would scan
    them all again (half the time of a long file's read)."""

    @functools.wraps(reader)
    def read(*args: Any, **kwargs: Any) -> LongCurves:
        enabled = gc.isenabled()
        gc.disable()
        try:
            return reader(*args, **kwargs)
        finally:
            if enabled:
                gc.enable()

    return cast(_Reader, read)


def _rows(path: Path, delimiter: str) -> Generator[tuple[int, list[str]], None, None]:
    """(spreadsheet row, stripped cells) of every non-blank record; the header is
    row 1. A UTF-8 byte order mark (as spreadsheets write) is skipped."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        for row, cells in enumerate(csv.reader(handle, delimiter=delimiter), start=1):
            stripped = [c.strip() for c in cells]
            if any(stripped):
                yield row, stripped


def _header(path: Path, rows: Iterator[tuple[int, list[str]]]) -> list[str]:
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


def _body(
    path: Path, rows: Iterator[tuple[int, list[str]]], header: list[str]
) -> list[tuple[int, list[str]]]:
    """The records after the header, each with one cell per column."""
    body = list(rows)
    for row, cells in body:
        if len(cells) != len(header):
            raise ValueError(
                f"{path.name} row {row}: {len(cells)} cells, but the header has "
                f"{len(header)} columns"
            )
    return body


def _float(text: str, comma: bool) -> float:
    """``float(text)``; with ``comma``, also a decimal comma (:func:`_decimal_comma`).
    NaN for text that is neither."""
    try:
        return float(text)
    except ValueError:
        return _decimal_comma(text) if comma else math.nan


def _decimal_comma(text: str) -> float:
    """A number written with a decimal comma (``65,5``: one comma, no point), as
    spreadsheets write in files whose cells ';' or tabs divide; NaN for other text."""
    if text.count(",") == 1 and "." not in text:
        try:
            return float(text.replace(",", "."))
        except ValueError:
            pass
    return math.nan


def _read_number(
    text: str, where: str, column: str, *, missing_ok: bool, comma: bool = False
) -> float:
    """:func:`_number` of the cell of ``column`` at ``where``; a finite number is
    taken without building the message that any other cell may need."""
    try:
        value = float(text)
    except ValueError:
        value = _decimal_comma(text) if comma else math.nan
    if math.isfinite(value):
        return value
    return _number(text, f"{where}, column {column!r}", missing_ok=missing_ok)


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


def _header_time(path: Path, name: str, comma: bool = False) -> float:
    value = _float(name, comma)
    if not math.isfinite(value):
        raise ValueError(
            f"{path.name} row 1, column {name!r}: {name!r} is not a number; every "
            "column other than label, subject, curve and channel is a time point, "
            "and its header is the time"
        )
    return value


def _required(path: Path, header: list[str], column: str, layout: str) -> int:
    if column not in header:
        raise ValueError(
            f"{path.name} row 1: no column {column!r}; a {layout} file needs one "
            f"(its columns are {', '.join(map(repr, header[:8]))}"
            f"{', ...' if len(header) > 8 else ''})"
        )
    return header.index(column)


def _given(cells: list[str], j: int, where: str, column: str, what: str) -> str:
    """The cell of column ``j``, which must not be empty."""
    if not cells[j]:
        raise ValueError(f"{where}, column {column!r}: the {what} is empty")
    return cells[j]


def _label_reader(
    path: Path, header: list[str], column: str, layout: str, unlabelled: str | None
) -> Callable[[list[str], str], str]:
    """The label text of a record (at ``where``); ``unlabelled`` for every record of
    a file without a label column, when it is given."""
    if unlabelled is not None and column not in header:
        text = _label_text(unlabelled)
        return lambda cells, where: text
    j = _required(path, header, column, layout)
    return lambda cells, where: _label_text(_given(cells, j, where, column, "label"))


@_paused_gc
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
    unlabelled: str | None = None,
) -> LongCurves:
    """Curves of a wide CSV file: one row per curve, one column per time point.

    Without a subject column every row is its own subject (``row <n>``); rows of one
    subject are its curves, in file order, unless a curve column names them. With a
    channel column a row holds one channel of its curve (the k-th row of a channel
    is curve k without a curve column); without one the file holds the channel
    ``channel``.
    """
    path = Path(path)
    rows = _rows(path, delimiter)
    header = _header(path, rows)
    label_of = _label_reader(path, header, label_column, "wide", unlabelled)
    named = (label_column, subject_column, curve_column, channel_column)
    sub, cur, cha = (header.index(c) if c in header else None for c in named[1:])
    if sub is None and (cur is not None or cha is not None):
        which = curve_column if cur is not None else channel_column
        raise ValueError(
            f"{path.name} row 1: a {which!r} column needs a {subject_column!r} column "
            "to tell which rows belong to one subject"
        )
    time_columns = [j for j, name in enumerate(header) if name not in named]
    if not time_columns:
        raise ValueError(f"{path.name} row 1: no time columns (headers that are times)")
    comma = delimiter != ","
    time_points = np.array([_header_time(path, header[j], comma) for j in time_columns])
    pick = operator.itemgetter(*time_columns)
    body = _body(path, rows, header)
    channels: tuple[str, ...] = (channel,)
    if cha is not None:
        channels = tuple(dict.fromkeys(cells[cha] for _, cells in body))
        for row, cells in body:
            _given(cells, cha, f"{path.name} row {row}", channel_column, "channel")
    builder = _Builder(channels, spec_labels)
    # (subject, curve) -> the spreadsheet row of each channel already read
    seen: dict[tuple[int, int], dict[int, int]] = {}
    counts: dict[tuple[int, int], int] = {}
    for row, cells in body:
        where = f"{path.name} row {row}"
        label = label_of(cells, where)
        sid = (
            f"row {row}"
            if sub is None
            else _given(cells, sub, where, subject_column, "subject")
        )
        s = builder.subject(sid, label, where)
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
        numbers = _row_numbers(cells, time_columns, pick, header, where, comma)
        seen_at = ~np.isnan(numbers)
        values = np.full((int(seen_at.sum()), len(channels)), math.nan)
        values[:, c] = numbers[seen_at]
        builder.blocks.append((s, curve, time_points[seen_at], values))
    return _merge_channels(builder.build())


def _row_numbers(
    cells: list[str],
    columns: list[int],
    pick: Callable[[list[str]], Any],
    header: list[str],
    where: str,
    comma: bool,
) -> NDArray[np.float64]:
    """The numbers of ``columns`` of one record, NaN where a cell is missing; the
    errors of :func:`_read_number`. In one step (:func:`_finite_numbers`) where it
    can, else cell by cell."""
    raw = pick(cells)
    numbers = _finite_numbers((raw,) if isinstance(raw, str) else raw, missing_ok=True)
    if numbers is not None:
        return numbers
    return np.array(
        [
            _read_number(cells[j], where, header[j], missing_ok=True, comma=comma)
            for j in columns
        ],
        dtype=float,
    )


def _finite_numbers(
    cells: Sequence[str], *, missing_ok: bool
) -> NDArray[np.float64] | None:
    """The numbers of ``cells`` parsed in one numpy step (the values ``float`` gives),
    NaN for a missing cell (:data:`MISSING`) where ``missing_ok``; None if any other
    cell is not a finite number (a cell-by-cell reader then reads it or names it)."""
    missing = [missing_ok and c.strip().lower() in MISSING for c in cells]
    try:
        numbers = np.array(
            ["nan" if gap else c for c, gap in zip(cells, missing, strict=True)],
            dtype=float,
        )
    except ValueError:
        return None
    return numbers if np.array_equal(~np.isfinite(numbers), missing) else None


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


@_paused_gc
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
    unlabelled: str | None = None,
) -> LongCurves:
    """Curves of a long CSV file: one row per observation, in any order.

    Without a channel column every column other than subject, time, label and curve
    is a channel (or only ``channels``, if given). With one, a value column holds
    the values, and rows are merged into one observation per (subject, curve, time)
    holding every channel given there.
    """
    path = Path(path)
    rows = _rows(path, delimiter)
    header = _header(path, rows)
    sub = _required(path, header, subject_column, "long")
    tim = _required(path, header, time_column, "long")
    label_of = _label_reader(path, header, label_column, "long", unlabelled)
    cur = header.index(curve_column) if curve_column in header else None
    cha = header.index(channel_column) if channel_column in header else None
    lab = header.index(label_column) if label_column in header else None
    if cha is not None:
        value_columns = [
            _required(path, header, value_column, "long file with a channel column")
        ]
        body = _body(path, rows, header)
        found = tuple(dict.fromkeys(cells[cha] for _, cells in body if cells[cha]))
        names = tuple(channels) if channels is not None else found
    else:
        named = {subject_column, time_column, label_column, curve_column}
        candidates = [h for h in header if h not in named]
        names = tuple(channels if channels is not None else candidates)
        value_columns = [_required(path, header, name, "long") for name in names]
        if not names:
            raise ValueError(f"{path.name} row 1: no value column (one per channel)")
        layout = _LongColumns(sub, tim, lab, cur, value_columns, names)
        read = _read_by_columns(
            path, delimiter, header, layout, spec_labels, unlabelled
        )
        if read is not None:
            return read
        body = _body(path, rows, header)
    builder = _Builder(names, spec_labels)
    given: dict[tuple[int, int, float, str], int] = {}
    comma = delimiter != ","  # a decimal comma is possible
    # Subject index by (subject cell, label cell): each pair is checked once.
    known: dict[tuple[str, str | None], int] = {}
    file = path.name
    for row, cells in body:
        where = f"{file} row {row}"
        pair = (cells[sub], cells[lab] if lab is not None else None)
        s = known.get(pair, -1)
        if s < 0:
            sid = _given(cells, sub, where, subject_column, "subject")
            s = known[pair] = builder.subject(sid, label_of(cells, where), where)
        curve = builder.curve(s, cells[cur]) if cur is not None else 0
        t = _read_number(cells[tim], where, time_column, missing_ok=False, comma=comma)
        values = [
            _read_number(cells[j], where, header[j], missing_ok=True, comma=comma)
            for j in value_columns
        ]
        if cha is not None:
            name = _given(cells, cha, where, channel_column, "channel")
            if name not in names:
                continue  # a channel that was not asked for
            key = (s, curve, t, name)
            if key in given:
                raise ValueError(
                    f"{where}: subject {cells[sub]!r}"
                    + (f" curve {cells[cur]!r}" if cur is not None else "")
                    + f" channel {name!r} at time {t!r} is already given in "
                    f"row {given[key]}"
                )
            given[key] = row
            observed = values[0]
            values = [math.nan] * len(names)
            values[names.index(name)] = observed
        builder.rows.append((s, curve, t, values))
    curves = builder.build()
    return _merge_channels(curves) if cha is not None else curves


@dataclass(frozen=True)
class _LongColumns:
    """Where a long file without a channel column keeps each field (None: absent)."""

    subject: int
    time: int
    label: int | None
    curve: int | None
    values: list[int]
    channels: tuple[str, ...]


class _RowByRow(Exception):
    """The file needs :func:`read_long_csv`'s row-by-row loop: to read a cell this
    reader does not check, or to name the error of one."""


def _read_by_columns(
    path: Path,
    delimiter: str,
    header: list[str],
    layout: _LongColumns,
    spec_labels: Sequence[str] | None,
    unlabelled: str | None,
) -> LongCurves | None:
    """The curves of a long file without a channel column, read column by column:
    what the row-by-row loop reads, or None where that loop must read the file (it
    then also names any error)."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        records = [c for c in csv.reader(handle, delimiter=delimiter) if c]
    if len(records) < 2 or [c.strip() for c in records[0]] != header:
        return None
    n = len(header)
    if any(len(c) != n for c in records):
        return None
    cells = list(zip(*records[1:], strict=True))
    builder = _Builder(layout.channels, spec_labels)
    times = _finite_numbers(cells[layout.time], missing_ok=False)
    parsed = [_finite_numbers(cells[j], missing_ok=True) for j in layout.values]
    columns = [c for c in parsed if c is not None]
    if times is None or len(columns) < len(parsed):
        return None
    values = np.stack(columns, axis=1)
    try:
        subjects = _subject_codes(builder, cells, layout, unlabelled)
        curves = _curve_codes(subjects, cells, layout.curve)
    except (_RowByRow, ValueError):
        return None
    return _assemble(
        subjects,
        curves,
        times,
        values,
        builder.labels,
        tuple(builder.subjects),
        layout.channels,
        spec_labels,
        ~np.all(np.isnan(values), axis=1),
    )


def _text(cell: str) -> str:
    """A text cell as the row-by-row loop takes it: not empty, no spaces around."""
    if not cell or cell != cell.strip():
        raise _RowByRow
    return cell


def _subject_codes(
    builder: _Builder,
    cells: list[tuple[str, ...]],
    layout: _LongColumns,
    unlabelled: str | None,
) -> NDArray[np.int64]:
    """Each record's subject index, subjects numbered as they first appear; each
    (subject, label) pair is checked once, by the builder."""
    sid = cells[layout.subject]
    keys: Any = (
        sid if layout.label is None else zip(sid, cells[layout.label], strict=True)
    )
    pairs = dict.fromkeys(keys)
    index = {}
    for key in pairs:
        if layout.label is None:
            if unlabelled is None:
                raise _RowByRow
            subject, label = key, _label_text(unlabelled)
        else:
            subject, label = key[0], _label_text(_text(key[1]))
        index[key] = builder.subject(_text(subject), label, "")
    keys = sid if layout.label is None else zip(sid, cells[layout.label], strict=True)
    return np.fromiter(map(index.__getitem__, keys), np.int64, len(sid))


def _curve_codes(
    subjects: NDArray[np.int64], cells: list[tuple[str, ...]], column: int | None
) -> NDArray[np.int64]:
    """Each record's curve index in its subject, numbered as they first appear (0
    for every record of a file without a curve column)."""
    if column is None:
        return np.zeros(subjects.size, dtype=np.int64)
    ids = subjects.tolist()
    numbers: dict[tuple[int, str], int] = {}
    count: dict[int, int] = {}
    for s, cid in dict.fromkeys(zip(ids, cells[column], strict=True)):
        if cid != cid.strip():
            raise _RowByRow
        numbers[s, cid] = count[s] = count.get(s, -1) + 1
    return np.fromiter(
        map(numbers.__getitem__, zip(ids, cells[column], strict=True)),
        np.int64,
        subjects.size,
    )


# -- NPZ -------------------------------------------------------------------------------

_KINDS = {
    "fiu": "numbers",
    "iu": "integers",
    "U": "strings",
    "Uiuf": "strings or integers",
}


class _Archive:
    """The arrays of one ``.npz`` file, checked as they are read."""

    def __init__(
        self,
        archive: Any,
        path: Path,
        spec_labels: Sequence[str] | None,
        unlabelled: str | None = None,
    ) -> None:
        self.archive, self.path, self.spec_labels = archive, path, spec_labels
        self.unlabelled = unlabelled
        self.keys = set(archive.files)

    def array(
        self,
        key: str,
        kinds: str,
        ndim: tuple[int, ...],
        length: tuple[int, str] | None = None,
    ) -> NDArray[Any]:
        """Array ``key`` of dtype ``kinds`` and ``ndim`` axes (a scalar becomes an
        array), with ``length[0]`` entries, one per ``length[1]``."""
        name = self.path.name
        array = self.archive[key]
        if array.dtype.kind not in kinds:
            raise ValueError(
                f"{name}, key {key!r}: dtype {array.dtype} is not allowed (expected "
                f"{_KINDS[kinds]})"
            )
        if array.ndim not in ndim:
            raise ValueError(
                f"{name}, key {key!r}: shape {array.shape} must have "
                f"{' or '.join(map(str, ndim))} axes"
            )
        array = np.atleast_1d(array)
        if length is not None and array.shape[0] != length[0]:
            raise ValueError(
                f"{name}, key {key!r}: {array.shape[0]} entries, but there are "
                f"{length[0]} {length[1]}"
            )
        return array

    def finite(self, key: str) -> NDArray[np.float64]:
        """1-D array ``key`` of finite numbers, as floats."""
        array = self.array(key, "fiu", (1,)).astype(float)
        self.refuse(array, key, ~np.isfinite(array), "{} is not a finite number")
        return array

    def refuse(
        self, array: NDArray[Any], key: str, wrong: NDArray[np.bool_], message: str
    ) -> None:
        """An error naming the first ``wrong`` entry (its value fills ``{}``)."""
        if np.any(wrong):
            index = tuple(int(i) for i in np.argwhere(wrong)[0])
            raise ValueError(
                f"{self.path.name}, key {key!r}, index "
                f"{index if len(index) > 1 else index[0]}: "
                + message.format(repr(float(array[index])))
            )

    def strings(self, key: str, length: tuple[int, str]) -> list[str] | None:
        if key not in self.keys:
            return None
        return [str(s) for s in self.array(key, "U", (1,), length).tolist()]

    def channels(self, key: str, n_channels: int, channel: str) -> tuple[str, ...]:
        names = self.strings("channels", (n_channels, "channels"))
        if names is None and n_channels != 1:
            raise ValueError(
                f"{self.path.name}: {key!r} holds {n_channels} channels; name them "
                "with a 'channels' key"
            )
        return tuple(names) if names is not None else (channel,)

    def labels(self, n: int) -> list[str]:
        """The ``n`` subjects' (or rows') label texts, checked against the spec."""
        name = self.path.name
        if "labels" not in self.keys and self.unlabelled is not None:
            where = f"{name} (no key 'labels'; every subject is {self.unlabelled!r})"
            return [_check_label(self.unlabelled, self.spec_labels, where)] * n
        if "labels" not in self.keys:
            raise ValueError(f"{name}: no key 'labels'")
        labels = self.array("labels", "Uiuf", (0, 1), (n, "subjects"))
        if "label_names" in self.keys:
            names = self.array("label_names", "U", (1,)).tolist()
            if labels.dtype.kind not in "iu":
                raise ValueError(
                    f"{name}, key 'labels': with 'label_names', labels must be "
                    f"integer indices, got dtype {labels.dtype}"
                )
            bad = (labels < 0) | (labels >= len(names))
            if np.any(bad):
                i = int(np.argmax(bad))
                raise ValueError(
                    f"{name}, key 'labels', index {i}: {int(labels[i])} is not an "
                    f"index into 'label_names' (0 .. {len(names) - 1})"
                )
            texts = [_label_text(names[k]) for k in labels.tolist()]
        else:
            if labels.dtype.kind == "f":
                message = "{} is not a finite number"
                self.refuse(labels, "labels", ~np.isfinite(labels), message)
            texts = [_label_text(v) for v in labels.tolist()]
        return [
            _check_label(t, self.spec_labels, f"{name}, key 'labels', index {i}")
            for i, t in enumerate(texts)
        ]


def read_npz(
    path: str | Path,
    *,
    spec_labels: Sequence[str] | None = None,
    channel: str = "value",
    unlabelled: str | None = None,
) -> LongCurves:
    """Curves of a ``.npz`` archive (no pickled objects), long or wide.

    *Long*, the fields of :class:`LongCurves`: ``times`` (m,), ``values`` (m,) or
    (m, C) with NaN for missing, ``subjects`` (m,) in ``0 .. n - 1``, ``labels``
    (n,) label names (or indices into ``label_names``), optional ``curves`` (m,),
    ``subject_ids`` (n,) and ``channels`` (C,). *Wide*, one row per curve on one
    grid: ``curves`` (n, T), (T,) or (n, C, T) with NaN for gaps, ``grid`` (T,),
    ``labels``, optional ``subject_ids`` (rows with one id are that subject's
    curves) and ``channels``.
    """
    path = Path(path)
    with np.load(path, allow_pickle=False) as npz:
        archive = _Archive(npz, path, spec_labels, unlabelled)
        try:
            if "times" in archive.keys:
                return _npz_long(archive, channel)
            if {"curves", "grid"} <= archive.keys:
                return _npz_wide(archive, channel)
        except ValueError as exc:
            if "Object arrays cannot be loaded" not in str(exc):
                raise
            raise ValueError(
                f"{path.name}: holds pickled objects; save strings as numpy string "
                "arrays"
            ) from None
    raise ValueError(
        f"{path.name}: keys {sorted(archive.keys)} are neither the long layout "
        "('times', 'values', 'subjects', 'labels') nor the wide one ('curves', "
        "'grid', 'labels')"
    )


def _npz_long(archive: _Archive, channel: str) -> LongCurves:
    needed = ("values", "subjects") + (
        ("labels",) if archive.unlabelled is None else ()
    )
    for key in needed:
        if key not in archive.keys:
            raise ValueError(f"{archive.path.name}: the long layout needs key {key!r}")
    times = archive.finite("times")
    m = (times.size, "times")
    values = archive.array("values", "fiu", (1, 2), m).astype(float)
    values = values.reshape(times.size, -1) if values.ndim == 1 else values
    message = "{} is not finite (NaN marks a missing value)"
    archive.refuse(values, "values", np.isinf(values), message)
    subjects = archive.array("subjects", "iu", (1,), m).astype(np.int64)
    n = int(subjects.max()) + 1 if subjects.size else 0
    if "labels" in archive.keys:
        n = max(n, np.atleast_1d(archive.archive["labels"]).shape[0])
    if subjects.size and subjects.min() < 0:
        i = int(np.argmin(subjects))
        raise ValueError(
            f"{archive.path.name}, key 'subjects', index {i}: {int(subjects[i])} is "
            "negative"
        )
    labels = archive.labels(n)
    curves = np.zeros(times.size, dtype=np.int64)
    if "curves" in archive.keys:
        curves = archive.array("curves", "iu", (1,), m).astype(np.int64)
    ids = archive.strings("subject_ids", (n, "subjects"))
    return _assemble(
        subjects,
        curves,
        times,
        values,
        labels,
        ids if ids is not None else [str(i) for i in range(n)],
        archive.channels("values", values.shape[1], channel),
        archive.spec_labels,
    )


def _npz_wide(archive: _Archive, channel: str) -> LongCurves:
    grid = archive.finite("grid")
    data = archive.array("curves", "fiu", (1, 2, 3)).astype(float)
    if data.ndim == 1:
        data = data[None, None, :]
    elif data.ndim == 2:
        data = data[:, None, :]
    rows, n_channels, n_times = data.shape
    if n_times != grid.size:
        raise ValueError(
            f"{archive.path.name}, key 'curves': {n_times} values per curve, but "
            f"'grid' has {grid.size} points"
        )
    archive.refuse(data, "curves", np.isinf(data), "not finite (NaN marks a gap)")
    labels = archive.labels(rows)
    channels = archive.channels("curves", n_channels, channel)
    ids = archive.strings("subject_ids", (rows, "rows of 'curves'"))
    builder = _Builder(channels, archive.spec_labels)
    subject = np.empty(rows, dtype=np.int64)
    curve = np.empty(rows, dtype=np.int64)
    for r in range(rows):  # one step per curve, not per value
        where = f"{archive.path.name}, key 'labels', index {r}"
        subject[r] = builder.subject(
            str(r) if ids is None else ids[r], labels[r], where
        )
        curve[r] = builder.curve(int(subject[r]), str(r))
    values = data.transpose(0, 2, 1).reshape(rows * n_times, n_channels)
    return _assemble(
        np.repeat(subject, n_times),
        np.repeat(curve, n_times),
        np.tile(grid, rows),
        values,
        builder.labels,
        tuple(builder.subjects),
        channels,
        archive.spec_labels,
        ~np.all(np.isnan(values), axis=1),
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
    column (``options['time_column']``), else wide, unless ``layout`` says. Its
    delimiter is ``options['delimiter']``, else :func:`csv_delimiter`'s.

    Every reader takes ``unlabelled``: the label of every subject of a file without
    labels (curves to classify, public calibration curves); without it a file must
    have them."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return read_npz(
            path,
            spec_labels=spec_labels,
            channel=channel,
            unlabelled=options.get("unlabelled"),
        )
    if suffix != ".csv":
        raise ValueError(f"curve files must be .csv or .npz, got {path.name!r}")
    if "delimiter" not in options:
        options["delimiter"] = csv_delimiter(path)
    if layout is None:
        header = csv_header(path, options["delimiter"])  # [] if empty: the reader says
        layout = "long" if options.get("time_column", "time") in header else "wide"
    if layout == "long":
        return read_long_csv(path, spec_labels=spec_labels, **options)
    if layout == "wide":
        options.pop("time_column", None)  # a wide file's times are its headers
        return read_wide_csv(path, spec_labels=spec_labels, channel=channel, **options)
    raise ValueError(f"layout must be 'wide' or 'long', got {layout!r}")


def csv_header(path: str | Path, delimiter: str | None = None) -> list[str]:
    """The column names of a CSV file (its first non-blank row, stripped), split by
    ``delimiter`` or else :func:`csv_delimiter`'s; [] for a file without any."""
    rows = _rows(Path(path), delimiter or csv_delimiter(path))
    first = next(rows, None)
    rows.close()
    return [] if first is None else first[1]


def csv_delimiter(path: str | Path) -> str:
    """The delimiter of a CSV file: of a comma, a semicolon and a tab, the one that
    divides its header line into the most columns; a comma where two do (spreadsheets
    in locales whose decimal mark is a comma write ';', and a wide file's time
    headers may then hold decimal commas)."""
    with Path(path).open(newline="", encoding="utf-8-sig") as handle:
        line = handle.readline()
    counts = {
        d: len(next(csv.reader([line], delimiter=d), [])) for d in (",", ";", "\t")
    }
    most = max(counts.values())
    found = [d for d, n in counts.items() if n == most]
    return found[0] if len(found) == 1 else ","


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
    header = ["subject", "curve"] + (["channel"] if with_channel else []) + ["label"]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header + [repr(float(t)) for t in times])
        for s, k in dict.fromkeys(pairs):
            rows = np.flatnonzero((curves.subjects == s) & (curves.curves == k))
            for c, name in enumerate(curves.channels):
                seen = rows[~np.isnan(curves.values[rows, c])]
                if seen.size == 0:
                    continue
                again = np.ones(seen.size, dtype=bool)  # a slot filled before
                again[np.unique(column[seen], return_index=True)[1]] = False
                if np.any(again):
                    raise ValueError(
                        f"subject {curves.subject_ids[s]!r} curve {k} has two values "
                        f"of channel {name!r} at time "
                        f"{float(curves.times[seen[np.argmax(again)]])!r}; the wide "
                        "form holds one per time"
                    )
                line = np.full(times.size, np.nan)
                line[column[seen]] = curves.values[seen, c]
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
        writer.writerow(
            ["subject", "curve", "time", "label"]
            + (["channel", "value"] if channel_column else list(curves.channels))
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
