"""Readers of a host's own curve files: layouts, round trips, and errors that name the
file, the spreadsheet row and the column."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldpfda.datasets.curves import LongCurves
from ldpfda.datasets.files import save_node_data
from ldpfda.datasets.readers import (
    csv_delimiter,
    read_curves,
    read_long_csv,
    read_npz,
    read_wide_csv,
    write_long_csv,
    write_npz,
    write_wide_csv,
)

SPEC_LABELS = ("healthy", "condition")


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def canonical(curves: LongCurves) -> dict:
    """The content of ``curves`` independent of the order of observations, without
    observations where every channel is missing (a file cannot hold them)."""
    keep = ~np.all(np.isnan(curves.values), axis=1)
    order = np.lexsort((curves.times[keep], curves.curves[keep], curves.subjects[keep]))
    return {
        "subjects": curves.subjects[keep][order].tolist(),
        "curves": curves.curves[keep][order].tolist(),
        "times": curves.times[keep][order].tolist(),
        "values": np.nan_to_num(curves.values[keep][order], nan=-1e300).tolist(),
        "labels": [curves.label_names[k] for k in curves.labels],
        "subject_ids": curves.subject_ids,
        "channels": curves.channels,
    }


# -- layouts ---------------------------------------------------------------------------


def test_wide_csv_with_gaps_and_several_curves_per_subject(tmp_path):
    path = _write(
        tmp_path,
        "hr.csv",
        "subject,label,0.0,0.5,1.0\n"
        "s1,healthy,60,,62\n"
        "s1,healthy,61,63,NA\n"
        "s2,condition,80,81,82\n",
    )
    curves = read_wide_csv(path, channel="hr", spec_labels=SPEC_LABELS)
    assert curves.subject_ids == ("s1", "s2") and curves.channels == ("hr",)
    assert curves.label_names == SPEC_LABELS and curves.labels.tolist() == [0, 1]
    assert curves.subjects.tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert curves.curves.tolist() == [0, 0, 1, 1, 0, 0, 0]
    assert curves.times.tolist() == [0.0, 1.0, 0.0, 0.5, 0.0, 0.5, 1.0]
    assert curves.values[:, 0].tolist() == [60, 62, 61, 63, 80, 81, 82]


def test_wide_csv_without_a_subject_column_is_one_subject_per_row(tmp_path):
    path = _write(tmp_path, "d.csv", "label,0,1\n1,0.5,0.25\n0,1.5,2.5\n")
    curves = read_wide_csv(path)
    assert curves.subject_ids == ("row 2", "row 3")
    assert curves.label_names == ("0", "1") and curves.labels.tolist() == [1, 0]
    assert curves.channels == ("value",)


@pytest.mark.parametrize("layout", ["wide", "long", "npz"])
def test_a_file_without_labels_reads_only_with_a_placeholder_label(tmp_path, layout):
    # Curves to classify and public calibration curves carry no label.
    if layout == "wide":
        path = _write(tmp_path, "d.csv", "subject,0,1\na,0.5,0.25\nb,1.5,2.5\n")
    elif layout == "long":
        path = _write(tmp_path, "d.csv", "subject,time,value\na,0,0.5\nb,1,2.5\n")
    else:
        path = tmp_path / "d.npz"
        np.savez(
            path,
            times=np.array([0.0, 1.0]),
            values=np.array([0.5, 2.5]),
            subjects=np.array([0, 1]),
        )
    with pytest.raises(ValueError, match="label"):
        read_curves(path, spec_labels=SPEC_LABELS)
    curves = read_curves(path, spec_labels=SPEC_LABELS, unlabelled="condition")
    assert curves.n_subjects == 2
    assert [curves.label_names[k] for k in curves.labels] == ["condition"] * 2
    # The placeholder is checked like any label.
    with pytest.raises(ValueError, match="not in the spec's labels"):
        read_curves(path, spec_labels=SPEC_LABELS, unlabelled="sick")


def test_wide_csv_with_a_channel_column_merges_the_channels(tmp_path):
    # Without a curve column the k-th row of each channel is curve k.
    path = _write(
        tmp_path,
        "two.csv",
        "subject,channel,label,0,1\ns1,hr,a,60,61\ns1,steps,a,5,\ns1,hr,a,70,71\n",
    )
    curves = read_wide_csv(path)
    assert curves.channels == ("hr", "steps")
    assert curves.curves.tolist() == [0, 0, 1, 1]
    np.testing.assert_array_equal(
        curves.values, [[60, 5], [61, np.nan], [70, np.nan], [71, np.nan]]
    )


def test_long_csv_with_one_column_per_channel(tmp_path):
    path = _write(
        tmp_path,
        "long.csv",
        "subject,day,time,hr,steps,label\n"
        "s1,mon,0.0,60,5,healthy\n"
        "s2,mon,0.0,80,,condition\n"
        "s1,tue,0.5,61,,healthy\n"
        "s1,mon,0.5,62,7,healthy\n",
    )
    curves = read_long_csv(path, curve_column="day", spec_labels=SPEC_LABELS)
    assert curves.channels == ("hr", "steps") and curves.subject_ids == ("s1", "s2")
    assert curves.subjects.tolist() == [0, 1, 0, 0]
    assert curves.curves.tolist() == [0, 0, 1, 0]
    np.testing.assert_array_equal(
        curves.values, [[60, 5], [80, np.nan], [61, np.nan], [62, 7]]
    )
    only_hr = read_long_csv(path, curve_column="day", channels=["hr"])
    assert only_hr.channels == ("hr",) and only_hr.values.shape == (4, 1)


def test_long_csv_with_a_channel_column_merges_rows_at_one_time(tmp_path):
    path = _write(
        tmp_path,
        "long.csv",
        "subject,time,channel,value,label\n"
        "s1,0,hr,60,a\n"
        "s1,0,steps,5,a\n"
        "s1,1,hr,61,a\n",
    )
    curves = read_long_csv(path)
    assert curves.channels == ("hr", "steps")
    assert curves.times.tolist() == [0.0, 1.0]
    np.testing.assert_array_equal(curves.values, [[60, 5], [61, np.nan]])


def test_spreadsheet_rows_count_blank_lines_and_the_header(tmp_path):
    # A byte order mark, spaces around cells and blank lines, as spreadsheets write
    path = tmp_path / "hr.csv"
    path.write_bytes(
        "\ufeffsubject , time , value , label\n s1 , 0 , 60 , a \n\n"
        "s1,abc,61,a\n".encode()
    )
    with pytest.raises(ValueError, match=r"^hr\.csv row 4, column 'time': 'abc' is"):
        read_long_csv(path)


def test_integer_labels_in_any_spelling_are_one_label(tmp_path):
    path = _write(
        tmp_path,
        "d.csv",
        "subject,time,value,label\ns1,0,1,1\ns1,1,1,1.0\ns2,0,1,10\ns3,0,1,2\n",
    )
    curves = read_long_csv(path)
    assert curves.label_names == ("1", "2", "10")  # numeric order
    assert curves.labels.tolist() == [0, 2, 1]


def test_node_data_files_of_today_read_as_wide_npz(tmp_path):
    grid = np.linspace(0.0, 1.0, 5)
    raw = np.arange(10.0).reshape(2, 5)
    path = save_node_data(tmp_path / "node.npz", raw, [1, 0], grid)
    curves = read_npz(path, channel="x")
    assert curves.subject_ids == ("0", "1") and curves.label_names == ("0", "1")
    assert curves.labels.tolist() == [1, 0]
    assert curves.times.tolist() == grid.tolist() * 2
    assert curves.values[:, 0].tolist() == raw.ravel().tolist()


def test_wide_npz_with_channels_and_repeated_subjects(tmp_path):
    data = np.arange(24.0).reshape(3, 2, 4)
    data[1, 1, 2] = np.nan
    np.savez(
        tmp_path / "w.npz",
        curves=data,
        grid=np.arange(4.0),
        labels=np.array(["a", "a", "b"]),
        subject_ids=np.array(["p", "p", "q"]),
        channels=np.array(["hr", "steps"]),
    )
    curves = read_npz(tmp_path / "w.npz")
    assert curves.subject_ids == ("p", "q") and curves.channels == ("hr", "steps")
    assert curves.curves.tolist() == [0] * 4 + [1] * 4 + [0] * 4
    np.testing.assert_array_equal(curves.values[6], [10.0, np.nan])


def test_read_curves_picks_the_layout(tmp_path):
    long = _write(tmp_path, "l.csv", "subject,time,value,label\ns,0,1,a\n")
    wide = _write(tmp_path, "w.csv", "label,0,1\na,1,2\n")
    assert read_curves(long).times.tolist() == [0.0]
    assert read_curves(wide).times.tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match=r"layout must be 'wide' or 'long'"):
        read_curves(wide, layout="tall")
    with pytest.raises(ValueError, match=r"\.csv or \.npz, got 'x\.txt'"):
        read_curves(tmp_path / "x.txt")


@pytest.mark.parametrize("delimiter", [";", "\t"])
def test_a_semicolon_or_tab_file_reads_as_its_comma_twin(tmp_path, delimiter):
    # Spreadsheets in locales whose decimal mark is a comma write ';' (or tabs).
    long = "subject,curve,time,label,hr\ns1,0,0.5,a,60.5\ns1,0,2,a,\ns2,0,1,b,70\n"
    wide = "subject,label,0,1.5\ns1,a,60,61\ns2,b,70,NA\n"
    for name, text in (("long", long), ("wide", wide)):
        comma = read_curves(_write(tmp_path, f"{name}.csv", text))
        other = _write(tmp_path, f"{name}-x.csv", text.replace(",", delimiter))
        assert csv_delimiter(other) == delimiter
        got = read_curves(other)
        for field in ("subjects", "curves", "times", "values", "labels"):
            np.testing.assert_array_equal(getattr(got, field), getattr(comma, field))
        assert (got.subject_ids, got.label_names) == (
            comma.subject_ids,
            comma.label_names,
        )
    # A delimiter given is used as given.
    with pytest.raises(ValueError, match="no column 'label'"):
        read_curves(other, delimiter=",")


@pytest.mark.parametrize("delimiter", [";", "\t"])
def test_a_decimal_comma_is_read_where_cells_are_not_divided_by_commas(
    tmp_path, delimiter
):
    long = "subject;time;label;hr\ns1;0,5;a;60,25\ns1;2;a;1,5e1\ns2;1;b;70\n"
    wide = "subject;label;0;1,5\ns1;a;60,25;61\ns2;b;70;NA\n"
    for name, text in (("long", long), ("wide", wide)):
        got = read_curves(_write(tmp_path, f"{name}.csv", text.replace(";", delimiter)))
        point = read_curves(
            _write(tmp_path, f"{name}-p.csv", _point(text).replace(";", ","))
        )
        for field in ("subjects", "times", "values", "labels"):
            np.testing.assert_array_equal(getattr(got, field), getattr(point, field))
    # One comma and no point, nothing else: '1,234.5' and '1,2,3' are not numbers.
    for cell in ("1,234.5", "1,2,3"):
        bad = _write(tmp_path, "bad.csv", f"subject;time;label;hr\ns1;0;a;{cell}\n")
        with pytest.raises(ValueError, match=rf"column 'hr': '{cell}' is not a number"):
            read_curves(bad)


def _point(text: str) -> str:
    """``text`` with its decimal commas (a digit, a comma, a digit) as points."""
    import re

    return re.sub(r"(\d),(\d)", r"\1.\2", text)


def test_the_delimiter_is_the_one_that_gives_the_header_the_most_columns(tmp_path):
    assert csv_delimiter(_write(tmp_path, "a.csv", "subject;x,y,z\n")) == ","
    assert csv_delimiter(_write(tmp_path, "d.csv", "subject;label;0;1,5\n")) == ";"
    assert csv_delimiter(_write(tmp_path, "q.csv", '"a;b";c;d\n')) == ";"
    assert csv_delimiter(_write(tmp_path, "e.csv", "subject\n")) == ","
    # As many columns by semicolons as by tabs: a comma; the error shows the header.
    both = _write(tmp_path, "b.csv", "subject;time\tlabel\ns;0\ta\n")
    assert csv_delimiter(both) == ","
    with pytest.raises(ValueError, match="subject;time"):
        read_curves(both)
    # A byte order mark before the header is not part of it.
    bom = tmp_path / "c.csv"
    bom.write_text("subject;time;label;hr\ns;0;a;1\n", encoding="utf-8-sig")
    assert csv_delimiter(bom) == ";"
    assert read_curves(bom).values.tolist() == [[1.0]]


# -- round trips -----------------------------------------------------------------------


NAMES = st.sampled_from(["s1", "s 2", "x,y", 'q"uote', "ünï", "42"])
LABELS = ["healthy", "condition", "0", "1", "a b", "c,d"]


@st.composite
def long_curves(draw) -> LongCurves:
    n_subjects = draw(st.integers(1, 4))
    n_channels = draw(st.integers(1, 3))
    ids = draw(st.lists(NAMES, min_size=n_subjects, max_size=n_subjects, unique=True))
    label_names = tuple(
        draw(st.lists(st.sampled_from(LABELS), min_size=2, max_size=4, unique=True))
    )
    grid = draw(
        st.lists(
            st.floats(-100, 100, allow_nan=False), min_size=1, max_size=6, unique=True
        )
    )
    value = st.one_of(st.just(np.nan), st.floats(-1e6, 1e6, allow_nan=False))
    rows = []
    for s in range(n_subjects):
        for k in range(draw(st.integers(1, 3))):
            times = sorted(
                draw(st.lists(st.sampled_from(grid), min_size=1, unique=True))
            )
            for t in times:
                values = [draw(value) for _ in range(n_channels)]
                values[0] = draw(st.floats(-1e6, 1e6, allow_nan=False))  # observed
                rows.append((s, k, t, values))
    # every channel is observed somewhere: a file names the channels it holds
    rows[0] = (*rows[0][:3], [draw(st.floats(-1e6, 1e6)) for _ in range(n_channels)])
    return LongCurves(
        np.array([r[0] for r in rows], dtype=np.int64),
        np.array([r[1] for r in rows], dtype=np.int64),
        np.array([r[2] for r in rows], dtype=float),
        np.array([r[3] for r in rows], dtype=float),
        np.array(
            [draw(st.integers(0, len(label_names) - 1)) for _ in range(n_subjects)],
            dtype=np.int64,
        ),
        tuple(ids),
        tuple(["hr", "steps", "temp"][:n_channels]),
        label_names,
    )


ROUND_TRIPS = {
    "wide": (write_wide_csv, {}, "csv"),
    "long": (write_long_csv, {}, "csv"),
    "long-channel-column": (write_long_csv, {"channel_column": True}, "csv"),
    "npz": (write_npz, {}, "npz"),
}


@settings(max_examples=40, deadline=None)
@given(curves=long_curves(), layout=st.sampled_from(sorted(ROUND_TRIPS)))
def test_written_curves_read_back_exactly(curves, layout):
    write, options, suffix = ROUND_TRIPS[layout]
    with tempfile.TemporaryDirectory() as folder:
        path = write(Path(folder) / f"c.{suffix}", curves, **options)
        back = read_curves(
            path,
            spec_labels=curves.label_names,
            **({"channel": "hr"} if layout == "wide" else {}),
        )
    assert back.label_names == curves.label_names
    assert canonical(back) == canonical(curves)


# -- errors: one per kind, each naming the file, row and column ------------------------


WIDE_ERRORS = {
    "time-header": (
        "label,0,abc\nhealthy,1,2\n",
        r"^hr\.csv row 1, column 'abc': 'abc' is not a number; every column other",
    ),
    "no-label-column": (
        "subject,0,1\ns,1,2\n",
        r"^hr\.csv row 1: no column 'label'; a wide file needs one",
    ),
    "duplicate-header": (
        "label,0,0\nhealthy,1,2\n",
        r"^hr\.csv row 1: column '0' appears twice \(columns 2 and 3\)",
    ),
    "empty-header": (
        "label,,1\nhealthy,1,2\n",
        r"^hr\.csv row 1: column 2 has no header",
    ),
    "cell": (
        "label,0,0.5\nhealthy,1,2\nhealthy,1,x\n",
        r"^hr\.csv row 3, column '0\.5': 'x' is not a number",
    ),
    "infinite": (
        "label,0,1\nhealthy,inf,2\n",
        r"^hr\.csv row 2, column '0': 'inf' is not a",
    ),
    "cell-count": (
        "label,0,1\nhealthy,1,2\nhealthy,1\n",
        r"^hr\.csv row 3: 2 cells, but the header has 3 columns",
    ),
    "empty-label": ("label,0,1\n,1,2\n", r"^hr\.csv row 2, column 'label': the label"),
    "label-outside-spec": (
        "label,0\nhealthy,1\ncondition,1\ncondition,1\nsick,2\n",
        r"^hr\.csv row 5: label 'sick' is not in the spec's labels \('healthy', "
        r"'condition'\)",
    ),
    "two-labels": (
        "subject,label,0\ns3,healthy,1\ns3,condition,2\n",
        r"^hr\.csv row 3: subject 's3' has labels 'healthy' and 'condition' \(hr\.csv "
        r"row 2 has 'healthy'\)",
    ),
    "curve-without-subject": (
        "curve,label,0\nd1,healthy,1\n",
        r"^hr\.csv row 1: a 'curve' column needs a 'subject' column",
    ),
    "repeated-curve": (
        "subject,curve,label,0\ns,d1,healthy,1\ns,d1,healthy,2\n",
        r"^hr\.csv row 3: subject 's' curve 'd1' channel 'value' is already given in "
        r"row 2",
    ),
    "empty-channel": (
        "subject,channel,label,0\ns,,healthy,1\n",
        r"^hr\.csv row 2, column 'channel': the channel is empty",
    ),
    "empty-subject": (
        "subject,label,0\n,healthy,1\n",
        r"^hr\.csv row 2, column 'subject': the subject is empty",
    ),
    "empty-file": ("", r"^hr\.csv is empty: it needs a header row"),
    "no-times": ("subject,label\ns,healthy\n", r"^hr\.csv row 1: no time columns"),
}


@pytest.mark.parametrize("case", sorted(WIDE_ERRORS))
def test_wide_csv_errors_name_the_row_and_column(tmp_path, case):
    text, match = WIDE_ERRORS[case]
    path = _write(tmp_path, "hr.csv", text)
    with pytest.raises(ValueError, match=match):
        read_wide_csv(path, spec_labels=SPEC_LABELS)


LONG_HEAD = "subject,time,value,label\n"
LONG_ERRORS = {
    "time-not-a-number": (
        LONG_HEAD + "s1,0,1,healthy\n" * 15 + "s1,abc,1,healthy\n",
        r"^hr\.csv row 17, column 'time': 'abc' is not a number",
    ),
    "time-empty": (
        LONG_HEAD + "s1,,1,healthy\n",
        r"^hr\.csv row 2, column 'time': the cell is empty; a number is needed",
    ),
    "time-infinite": (
        LONG_HEAD + "s1,-inf,1,healthy\n",
        r"^hr\.csv row 2, column 'time': '-inf' is not a finite number",
    ),
    "value": (
        LONG_HEAD + "s1,0,1..2,healthy\n",
        r"^hr\.csv row 2, column 'value': '1\.\.2' is not a number",
    ),
    "no-time-column": (
        "subject,value,label\ns1,1,healthy\n",
        r"^hr\.csv row 1: no column 'time'; a long file needs one",
    ),
    "no-subject-column": (
        "time,value,label\n0,1,healthy\n",
        r"^hr\.csv row 1: no column 'subject'",
    ),
    "no-value-column": (
        "subject,time,label\ns1,0,healthy\n",
        r"^hr\.csv row 1: no value column",
    ),
    "label-outside-spec": (
        LONG_HEAD + "s1,0,1,healthy\n" * 3 + "s2,0,1,sick\n",
        r"^hr\.csv row 5: label 'sick' is not in the spec's labels \('healthy', "
        r"'condition'\)",
    ),
    "two-labels": (
        LONG_HEAD + "s3,0,1,healthy\ns3,1,1,condition\n",
        r"^hr\.csv row 3: subject 's3' has labels 'healthy' and 'condition'",
    ),
    "empty-label": (
        LONG_HEAD + "s3,0,1,\n",
        r"^hr\.csv row 2, column 'label': the label is empty",
    ),
    "repeated-channel-value": (
        "subject,time,channel,value,label\ns1,0,hr,1,healthy\ns1,0,hr,2,healthy\n",
        r"^hr\.csv row 3: subject 's1' channel 'hr' at time 0\.0 is already given in "
        r"row 2",
    ),
    # The subject named is the row's own, not the one read last.
    "repeated-channel-value-after-another-subject": (
        "subject,time,channel,value,label\ns1,0,hr,1,healthy\ns2,0,hr,2,healthy\n"
        "s1,0,hr,3,healthy\n",
        r"^hr\.csv row 4: subject 's1' channel 'hr' at time 0\.0 is already given in "
        r"row 2",
    ),
    "channel-without-value-column": (
        "subject,time,channel,label\ns1,0,hr,healthy\n",
        r"^hr\.csv row 1: no column 'value'; a long file with a channel column",
    ),
    "asked-channel-missing": (
        LONG_HEAD + "s1,0,1,healthy\n",
        r"^hr\.csv row 1: no column 'hr'",
    ),
}


@pytest.mark.parametrize("case", sorted(LONG_ERRORS))
def test_long_csv_errors_name_the_row_and_column(tmp_path, case):
    text, match = LONG_ERRORS[case]
    path = _write(tmp_path, "hr.csv", text)
    channels = ["hr"] if case == "asked-channel-missing" else None
    with pytest.raises(ValueError, match=match):
        read_long_csv(path, spec_labels=SPEC_LABELS, channels=channels)


def _long_npz(**overrides):
    arrays = {
        "times": np.array([0.0, 1.0, 0.0]),
        "values": np.array([1.0, 2.0, 3.0]),
        "subjects": np.array([0, 0, 1]),
        "labels": np.array(["healthy", "condition"]),
    }
    arrays.update(overrides)
    return {k: v for k, v in arrays.items() if v is not None}


NPZ_ERRORS = {
    "no-layout": ({"x": np.zeros(3)}, r"^hr\.npz: keys \['x'\] are neither the long"),
    "times-not-finite": (
        _long_npz(times=np.array([0.0, np.nan, 1.0])),
        r"^hr\.npz, key 'times', index 1: nan is not a finite number",
    ),
    "values-infinite": (
        _long_npz(values=np.array([1.0, np.inf, 3.0])),
        r"^hr\.npz, key 'values', index \(1, 0\): inf is not finite",
    ),
    "values-length": (
        _long_npz(values=np.array([1.0, 2.0])),
        r"^hr\.npz, key 'values': 2 entries, but there are 3 times",
    ),
    "subjects-dtype": (
        _long_npz(subjects=np.array([0.0, 0.0, 1.0])),
        r"^hr\.npz, key 'subjects': dtype float64 is not allowed \(expected integers\)",
    ),
    "labels-short": (
        _long_npz(labels=np.array(["healthy"])),
        r"^hr\.npz, key 'labels': 1 entries, but there are 2 subjects",
    ),
    "label-outside-spec": (
        _long_npz(labels=np.array(["healthy", "sick"])),
        r"^hr\.npz, key 'labels', index 1: label 'sick' is not in the spec's labels",
    ),
    "label-index": (
        _long_npz(labels=np.array([0, 2]), label_names=np.array(["a", "b"])),
        r"^hr\.npz, key 'labels', index 1: 2 is not an index into 'label_names'",
    ),
    "unnamed-channels": (
        _long_npz(values=np.ones((3, 2))),
        r"^hr\.npz: 'values' holds 2 channels; name them with a 'channels' key",
    ),
    "missing-values": (
        _long_npz(values=None),
        r"^hr\.npz: the long layout needs key 'values'",
    ),
    "pickled": (
        _long_npz(labels=np.array(["healthy", None], dtype=object)),
        r"^hr\.npz: holds pickled objects",
    ),
    "wide-grid-length": (
        {"curves": np.ones((2, 4)), "grid": np.arange(3.0), "labels": np.array([0, 1])},
        r"^hr\.npz, key 'curves': 4 values per curve, but 'grid' has 3 points",
    ),
}


@pytest.mark.parametrize("case", sorted(NPZ_ERRORS))
def test_npz_errors_name_the_key(tmp_path, case):
    arrays, match = NPZ_ERRORS[case]
    np.savez(tmp_path / "hr.npz", **arrays)
    spec_labels = None if case in ("label-index", "wide-grid-length") else SPEC_LABELS
    with pytest.raises(ValueError, match=match):
        read_npz(tmp_path / "hr.npz", spec_labels=spec_labels)


def test_writing_two_values_at_one_time_in_the_wide_form_is_an_error(tmp_path):
    curves = LongCurves(
        np.zeros(2, np.int64),
        np.zeros(2, np.int64),
        np.array([1.0, 1.0]),
        np.array([[1.0], [2.0]]),
        np.zeros(1, np.int64),
        ("s",),
        ("hr",),
        ("a", "b"),
    )
    with pytest.raises(ValueError, match="two values of channel 'hr' at time 1.0"):
        write_wide_csv(tmp_path / "w.csv", curves)
    path = write_long_csv(tmp_path / "l.csv", curves)  # the long form holds both
    assert read_long_csv(path, channels=["hr"]).times.tolist() == [1.0, 1.0]


CELLS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["", "nan", "NaN", "NA", "n/a", "null", "1_0", "-0", "1e400"]),
    st.sampled_from(["inf", "-inf", "+nan", "abc", "1,5", "0x10", "1,234.5"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(CELLS, min_size=1, max_size=8), st.booleans())
def test_a_wide_row_parsed_in_one_step_is_the_row_parsed_cell_by_cell(cells, comma):
    import operator

    from ldpfda.datasets.readers import _read_number, _row_numbers

    columns = list(range(len(cells)))
    header = [str(j) for j in columns]

    def one_by_one():
        return [
            _read_number(c, "f row 2", h, missing_ok=True, comma=comma)
            for c, h in zip(cells, header, strict=True)
        ]

    try:
        expected = one_by_one()
    except ValueError as error:
        with pytest.raises(ValueError, match=re.escape(str(error))):
            _row_numbers(
                cells, columns, operator.itemgetter(*columns), header, "f row 2", comma
            )
        return
    got = _row_numbers(
        cells, columns, operator.itemgetter(*columns), header, "f row 2", comma
    )
    assert got.dtype == np.float64 and got.shape == (len(cells),)
    assert [v.hex() for v in got.tolist()] == [float(v).hex() for v in expected]


NUMBERS = st.floats(-1e3, 1e3, allow_nan=False).map(repr)
#: Cells each reader takes (a file of these only is read by columns) ...
CLEAN = (
    st.sampled_from(["s1", "s2", "7", "x;y"]),
    st.sampled_from(["0", "1", "d1"]),
    NUMBERS,
    st.sampled_from(["a", "b", "1", "1.0", "c"]),
    st.one_of(NUMBERS, st.sampled_from(["", "nan", "NA"])),
)
#: ... and cells with which the column reader leaves the file to the row-by-row loop.
MESSY = (
    st.sampled_from(["s1", " s1", "s3 ", ""]),
    st.sampled_from(["0", " 0", ""]),
    st.one_of(NUMBERS, st.sampled_from(["", "inf", "abc", " 2 ", "1,5", "+nan"])),
    st.sampled_from(["a", "", " a", "b "]),
    st.one_of(NUMBERS, st.sampled_from(["inf", "abc", " 2 ", "+nan", "N/A"])),
)


@st.composite
def long_rows(draw):
    if not draw(st.booleans()):
        return draw(st.lists(st.tuples(*MESSY), min_size=1, max_size=12))
    rows = draw(st.lists(st.tuples(*CLEAN), min_size=1, max_size=12))
    # Mostly one label a subject, as in a file that reads.
    if draw(st.integers(0, 3)):
        first = {}
        rows = [(s, c, t, first.setdefault(s, label), v) for s, c, t, label, v in rows]
    return rows


@settings(max_examples=300, deadline=None)
@given(long_rows(), st.booleans(), st.sampled_from([None, ("a", "b", "c", "1")]))
def test_a_long_file_read_by_columns_is_the_file_read_row_by_row(
    rows, with_curve, spec_labels
):
    # Every cell the column reader does not take as the row-by-row loop would sends
    # the file to that loop, which then reads it or names its error.
    import csv
    import io

    from ldpfda.datasets import readers

    out = io.StringIO()
    writer = csv.writer(out)
    header = ["subject", "curve", "time", "label", "hr"]
    keep = [0, 1, 2, 3, 4] if with_curve else [0, 2, 3, 4]
    writer.writerow([header[j] for j in keep])
    writer.writerows([[row[j] for j in keep] for row in rows])
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "hr.csv"
        path.write_text(out.getvalue(), encoding="utf-8")

        def read(by_columns: bool):
            saved = readers._read_by_columns
            if not by_columns:
                readers._read_by_columns = lambda *args, **kwargs: None
            try:
                return readers.read_long_csv(path, spec_labels=spec_labels)
            except ValueError as error:
                return str(error)
            finally:
                readers._read_by_columns = saved

        got, expected = read(True), read(False)
    if isinstance(expected, str):
        assert got == expected
        return
    for field in ("subjects", "curves", "times", "values", "labels"):
        a, b = getattr(got, field), getattr(expected, field)
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert (got.subject_ids, got.channels, got.label_names) == (
        expected.subject_ids,
        expected.channels,
        expected.label_names,
    )


def test_a_read_leaves_the_garbage_collector_as_it_found_it(tmp_path):
    import gc

    good = _write(tmp_path, "g.csv", "subject,time,label,hr\ns,0,a,1\n")
    bad = _write(tmp_path, "b.csv", "subject,time,label,hr\ns,x,a,1\n")
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            read_curves(good)
            with pytest.raises(ValueError, match="'x' is not a number"):
                read_curves(bad)
            assert gc.isenabled() is enabled
        finally:
            gc.enable()
