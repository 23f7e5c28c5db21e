"""The federation spec: parsing, validation that names the key, exact round trips, a
hash of the content only, the featurizer it defines, ``init`` from calibration curves
and the ``spec`` command."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldpfda.datasets.curves import LongCurves
from ldpfda.datasets.readers import read_curves, write_long_csv, write_wide_csv
from ldpfda.fda.bspline import BSplineProjection
from ldpfda.fda.irregular import IrregularProjection
from ldpfda.schema.spec import (
    FORMAT_VERSION,
    VALUE_BOUND_POINTS,
    Basis,
    Bounds,
    Channel,
    Domain,
    FederationSpec,
    Release,
    SpecError,
    SpecTypeError,
    init_spec,
    spec_main,
)

EXAMPLE = """\
# Heart rate and steps of a wearable, one curve per day.
format-version = 1
labels = ["healthy", "condition"]
min-points = 24                # per curve and channel

[domain]
start = 0.0
end = 24.0
unit = "h"
grid = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0,
        14.0, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0, 21.0, 22.0, 23.0, 24.0]

[release]
protocol = "default"
epsilon = 4.0

[[channels]]
name = "hr"
unit = "bpm"

[channels.basis]
order = 4
n-basis = 12
penalty = 0.0

[channels.bounds]
value-low = 30.0
value-high = 220.0

[[channels]]
name = "steps"
unit = "1/min"

[channels.basis]
order = 4
interior-knots = [6.0, 12.0, 18.0]
penalty = 0.001

[channels.bounds]
coefficient-low = [-5.0, -5.0, -5.0, -5.0, -5.0, -5.0, -5.0]
coefficient-high = [120.0, 120.0, 120.0, 120.0, 120.0, 120.0, 120.0]
"""

#: The same content written differently: other key order, inline tables, comments,
#: integers for integral floats, other spacing.
EXAMPLE_RESTYLED = """\
channels = [
  {unit = "bpm", name = "hr", bounds = {value-high = 220, value-low = 30}, basis = {n-basis = 12, order = 4}},
  {bounds = {coefficient-high = [120, 120, 120, 120, 120, 120, 120], coefficient-low = [-5, -5, -5, -5, -5, -5, -5]}, name = "steps", basis = {penalty = 1e-3, interior-knots = [6, 12, 18], order = 4}, unit = "1/min"},
]
min-points = 24
release = { epsilon = 4, protocol = "default" }   # one line
labels = [ "healthy" , "condition" ]
format-version = 1
domain.unit = "h"
domain.end = 24
domain.start = 0
domain.grid = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24]
"""  # noqa: E501

#: SHA-256 of EXAMPLE's content: a change to the canonical serialisation changes
#: every federation's identity, and must be deliberate.
EXAMPLE_HASH = "c74ea62d44a5528cd2074f7a4b4beafb47857892ca6cb9404f51aff68f0ebddc"


@pytest.fixture
def spec() -> FederationSpec:
    return FederationSpec.loads(EXAMPLE)


def _mapping() -> dict:
    return tomllib.loads(EXAMPLE)


# -- parsing and round trips -----------------------------------------------------------


def test_the_example_parses_into_its_parts(spec):
    assert spec.format_version == FORMAT_VERSION == 1
    assert spec.labels == ("healthy", "condition") and spec.min_points == 24
    assert spec.domain == Domain(0.0, 24.0, "h", tuple(float(h) for h in range(25)))
    assert spec.release == Release("default", 4.0)
    assert spec.channels[0] == Channel(
        "hr", "bpm", Basis(4, 12, None, 0.0), Bounds.values(30.0, 220.0)
    )
    steps = spec.channels[1]
    assert steps.basis == Basis(4, None, (6.0, 12.0, 18.0), 0.001)
    assert steps.basis.size == 7 and steps.bounds.kind == "coefficients"
    assert spec.channel_names == ("hr", "steps") and spec.n_features == 19


def test_dumps_then_loads_round_trips_exactly(spec, tmp_path):
    text = spec.dumps()
    again = FederationSpec.loads(text)
    assert again == spec and again.dumps() == text and again.hash == spec.hash
    path = spec.save(tmp_path / "federation.toml")
    assert FederationSpec.load(path) == spec
    assert path.read_text(encoding="utf-8") == text


def test_the_hash_ignores_comments_key_order_and_layout(spec):
    restyled = FederationSpec.loads(EXAMPLE_RESTYLED)
    assert restyled == spec
    assert restyled.hash == spec.hash == FederationSpec.loads(spec.dumps()).hash
    assert len(spec.hash) == 64 and spec.short_hash == spec.hash[:16]


def test_the_hash_of_the_example_is_pinned(spec):
    assert spec.hash == EXAMPLE_HASH


#: Valid changes of every kind of value: each must change the hash.
CHANGES = {
    "labels": (("labels", 1), "sick"),
    "label-order": (("labels",), ["condition", "healthy"]),
    "more-labels": (("labels",), ["healthy", "condition", "other"]),
    "min-points": (("min-points",), 25),
    "start": (("domain", "start"), -1.0),
    "end": (("domain", "end"), 25.0),
    "unit": (("domain", "unit"), "hour"),
    "grid-point": (("domain", "grid", 3), 3.5),
    "no-grid": (("domain", "grid"), None),
    "protocol": (("release", "protocol"), "reference"),
    "epsilon": (("release", "epsilon"), 4.000000000000001),
    "channel-name": (("channels", 0, "name"), "heart-rate"),
    "channel-unit": (("channels", 0, "unit"), "1/s"),
    "order": (("channels", 0, "basis", "order"), 3),
    "n-basis": (("channels", 0, "basis", "n-basis"), 13),
    "penalty": (("channels", 0, "basis", "penalty"), 1e-6),
    "knot": (("channels", 1, "basis", "interior-knots", 0), 5.0),
    "value-low": (("channels", 0, "bounds", "value-low"), 29.0),
    "value-high": (("channels", 0, "bounds", "value-high"), 221.0),
    "coefficient-low": (("channels", 1, "bounds", "coefficient-low", 6), -5.5),
    "coefficient-high": (("channels", 1, "bounds", "coefficient-high", 0), 121.0),
}

DELETE = object()


def _changed(path: tuple, value) -> dict:
    data = copy.deepcopy(_mapping())
    target = data
    for step in path[:-1]:
        target = target[step]
    if value is DELETE or value is None:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


def test_every_value_changes_the_hash(spec):
    hashes = {"example": spec.hash}
    for name, (path, value) in CHANGES.items():
        hashes[name] = FederationSpec.from_mapping(_changed(path, value)).hash
    assert len(set(hashes.values())) == len(hashes)


def test_channel_order_is_meaningful(spec):
    data = _mapping()
    data["channels"] = data["channels"][::-1]
    swapped = FederationSpec.from_mapping(data)
    assert swapped.channel_names == ("steps", "hr") and swapped.hash != spec.hash


# -- validation names the key ----------------------------------------------------------


BAD = {
    # key, new value (DELETE removes it), error type, message
    "version-missing": (
        ("format-version",),
        DELETE,
        SpecError,
        r"^missing key 'format-version': it must be the integer 1$",
    ),
    "version-unknown": (
        ("format-version",),
        2,
        SpecError,
        r"^format-version must be 1 \(the only version this ldpfda reads\), got 2$",
    ),
    "version-type": (
        ("format-version",),
        "1",
        SpecTypeError,
        r"^format-version must be the integer 1, got '1' \(a string\)$",
    ),
    "unknown-top-level": (
        ("min_points",),
        24,
        SpecError,
        r"^unknown key 'min_points' = 24: the keys of the spec's top level are .*; did "
        r"you mean 'min-points'\?$",
    ),
    "labels-one": (("labels",), ["a"], SpecError, r"^labels must be an array of >= 2"),
    "labels-repeated": (
        ("labels",),
        ["a", "b", "a"],
        SpecError,
        r"^labels\[2\] must differ from every other label, got 'a' again$",
    ),
    "labels-number": (
        ("labels", 0),
        0,
        SpecTypeError,
        r"^labels\[0\] must be a string \(a label name\), got 0 \(an integer\) \(quote "
        r'it: "0"\)$',
    ),
    "labels-blank": (
        ("labels", 1),
        " sick",
        SpecError,
        r"^labels\[1\] must be a non-empty string without leading or trailing spaces, "
        r"got ' sick'$",
    ),
    "labels-table": (
        ("labels",),
        {"a": 1},
        SpecTypeError,
        r"^labels must be an array of >= 2 distinct label names, got a table$",
    ),
    "min-points-zero": (
        ("min-points",),
        0,
        SpecError,
        r"^min-points must be an integer >= 1, got 0$",
    ),
    "min-points-float": (
        ("min-points",),
        24.0,
        SpecTypeError,
        r"^min-points must be an integer >= 1, got 24\.0 \(a float\)$",
    ),
    "min-points-below-n-basis": (
        ("min-points",),
        11,
        SpecError,
        r"^min-points must be >= 12: fewer points cannot determine the 12 "
        r"coefficients of channels\[0\] \('hr'\), which has no penalty; got 11$",
    ),
    "domain-missing": (
        ("domain",),
        DELETE,
        SpecError,
        r"^missing key 'domain': it must be a table",
    ),
    "domain-not-a-table": (
        ("domain",),
        [0, 24],
        SpecTypeError,
        r"^domain must be a table, got \[0, 24\] \(an array\)$",
    ),
    "start-text": (
        ("domain", "start"),
        "0",
        SpecTypeError,
        r"^domain\.start must be a finite real number, got '0' \(a string\)$",
    ),
    "start-boolean": (
        ("domain", "start"),
        False,
        SpecTypeError,
        r"^domain\.start must be a finite real number, got false \(a boolean\)$",
    ),
    "start-infinite": (
        ("domain", "start"),
        float("-inf"),
        SpecError,
        r"^domain\.start must be a finite real number, got -inf$",
    ),
    "end-before-start": (
        ("domain", "end"),
        0.0,
        SpecError,
        r"^domain\.end must be a finite real number > domain\.start \(0\.0\), "
        r"got 0\.0$",
    ),
    "unit-empty": (
        ("domain", "unit"),
        "",
        SpecError,
        r"^domain\.unit must be a non-empty string",
    ),
    "domain-unknown": (
        ("domain", "length"),
        24,
        SpecError,
        r"^unknown key 'domain\.length' = 24: the keys of domain are start, end, unit, "
        r"grid$",
    ),
    "grid-decreasing": (
        ("domain", "grid", 5),
        3.0,
        SpecError,
        r"^domain\.grid must be an array of >= 2 strictly increasing times in \[0\.0, "
        r"24\.0\], got 3\.0 at domain\.grid\[5\] after 4\.0$",
    ),
    "grid-outside": (
        ("domain", "grid", 24),
        25.0,
        SpecError,
        r"^domain\.grid must be .*, got 25\.0 at domain\.grid\[24\]$",
    ),
    "grid-text": (
        ("domain", "grid", 2),
        "2",
        SpecTypeError,
        r"^domain\.grid\[2\] must be a finite real number, got '2' \(a string\)$",
    ),
    "grid-short": (
        ("domain", "grid"),
        [0.0],
        SpecError,
        r"^domain\.grid must be an array of >= 2 .*, got 1 value\(s\)$",
    ),
    "protocol": (
        ("release", "protocol"),
        "joint",
        SpecError,
        r"^release\.protocol must be one of 'default', 'reference', got 'joint'$",
    ),
    "epsilon-zero": (
        ("release", "epsilon"),
        0,
        SpecError,
        r"^release\.epsilon must be a finite real number > 0 .*, got 0\.0$",
    ),
    "epsilon-infinite": (
        ("release", "epsilon"),
        float("inf"),
        SpecError,
        r"^release\.epsilon must be a finite real number > 0 \(inf, no noise, is for "
        r"simulations only\), got inf$",
    ),
    "epsilon-text": (
        ("release", "epsilon"),
        "4",
        SpecTypeError,
        r"^release\.epsilon must be .*, got '4' \(a string\)$",
    ),
    "epsilon-missing": (
        ("release", "epsilon"),
        DELETE,
        SpecError,
        r"^missing key 'release\.epsilon': it must be a finite real number > 0$",
    ),
    "channels-empty": (
        ("channels",),
        [],
        SpecError,
        r"^channels must be an array of >= 1 channel tables",
    ),
    "channels-table": (
        ("channels",),
        {"name": "hr"},
        SpecTypeError,
        r"^channels must be an array of >= 1 channel tables .*, got a table$",
    ),
    "channel-not-a-table": (
        ("channels", 1),
        "steps",
        SpecTypeError,
        r"^channels\[1\] must be a table, got 'steps' \(a string\)$",
    ),
    "channel-name-repeated": (
        ("channels", 1, "name"),
        "hr",
        SpecError,
        r"^channels\[1\]\.name must differ from every other channel's, got 'hr', the "
        r"name of channels\[0\]$",
    ),
    "channel-unit-missing": (
        ("channels", 1, "unit"),
        DELETE,
        SpecError,
        r"^missing key 'channels\[1\]\.unit': it must be a non-empty string$",
    ),
    "channel-unknown": (
        ("channels", 0, "colour"),
        "red",
        SpecError,
        r"^unknown key 'channels\[0\]\.colour' = 'red': the keys of channels\[0\] are "
        r"name, unit, basis, bounds$",
    ),
    "order-zero": (
        ("channels", 1, "basis", "order"),
        0,
        SpecError,
        r"^channels\[1\]\.basis\.order must be an integer >= 1, got 0$",
    ),
    "order-text": (
        ("channels", 1, "basis", "order"),
        "4",
        SpecTypeError,
        r"^channels\[1\]\.basis\.order must be an integer >= 1, got '4' \(a string\)$",
    ),
    "n-basis-below-order": (
        ("channels", 0, "basis", "n-basis"),
        3,
        SpecError,
        r"^channels\[0\]\.basis\.n-basis must be an integer >= 4, got 3$",
    ),
    "basis-both": (
        ("channels", 1, "basis", "n-basis"),
        7,
        SpecError,
        r"^channels\[1\]\.basis must give exactly one of n-basis \(equispaced knots\) "
        r"and interior-knots, got both$",
    ),
    "basis-neither": (
        ("channels", 0, "basis", "n-basis"),
        DELETE,
        SpecError,
        r"^channels\[0\]\.basis must give exactly one of .*, got neither$",
    ),
    "basis-unknown": (
        ("channels", 0, "basis", "nbasis"),
        12,
        SpecError,
        r"^unknown key 'channels\[0\]\.basis\.nbasis' = 12: .*; did you mean "
        r"'n-basis'\?$",
    ),
    "knots-outside": (
        ("channels", 1, "basis", "interior-knots", 2),
        24.0,
        SpecError,
        r"^channels\[1\]\.basis\.interior-knots must be an array of strictly "
        r"increasing knots inside \(0\.0, 24\.0\), got 24\.0 at "
        r"channels\[1\]\.basis\.interior-knots\[2\]$",
    ),
    "knots-decreasing": (
        ("channels", 1, "basis", "interior-knots", 1),
        6.0,
        SpecError,
        r"^channels\[1\]\.basis\.interior-knots must be .*, got 6\.0 at "
        r"channels\[1\]\.basis\.interior-knots\[1\] after 6\.0$",
    ),
    "penalty-negative": (
        ("channels", 1, "basis", "penalty"),
        -0.1,
        SpecError,
        r"^channels\[1\]\.basis\.penalty must be a finite real number >= 0 .*, got "
        r"-0\.1$",
    ),
    "penalty-piecewise-linear": (
        ("channels", 1, "basis", "order"),
        2,
        SpecError,
        r"^channels\[1\]\.basis\.penalty must be 0 for order < 3 .*, got 0\.001 with "
        r"order 2$",
    ),
    "bounds-neither": (
        ("channels", 0, "bounds"),
        {},
        SpecError,
        r"^channels\[0\]\.bounds must give either value-low and value-high or "
        r"coefficient-low and coefficient-high, got neither$",
    ),
    "bounds-both": (
        ("channels", 1, "bounds", "value-low"),
        0.0,
        SpecError,
        r"^channels\[1\]\.bounds must give either .*, got both$",
    ),
    "value-high-missing": (
        ("channels", 0, "bounds", "value-high"),
        DELETE,
        SpecError,
        r"^missing key 'channels\[0\]\.bounds\.value-high': it must be a finite real "
        r"number > value-low$",
    ),
    "value-high-below-low": (
        ("channels", 0, "bounds", "value-high"),
        30.0,
        SpecError,
        r"^channels\[0\]\.bounds\.value-high must be a finite real number > value-low "
        r"\(30\.0\), got 30\.0$",
    ),
    "coefficients-length": (
        ("channels", 1, "bounds", "coefficient-high"),
        [1.0, 2.0],
        SpecError,
        r"^channels\[1\]\.bounds\.coefficient-high must be an array of 7 finite real "
        r"numbers \(one per basis function\), got 2 value\(s\)$",
    ),
    "coefficient-high-below-low": (
        ("channels", 1, "bounds", "coefficient-high", 4),
        -5.0,
        SpecError,
        r"^channels\[1\]\.bounds\.coefficient-high\[4\] must be > coefficient-low\[4\] "
        r"\(-5\.0\), got -5\.0$",
    ),
    "coefficient-nan": (
        ("channels", 1, "bounds", "coefficient-low", 0),
        float("nan"),
        SpecError,
        r"^channels\[1\]\.bounds\.coefficient-low\[0\] must be a finite real number, "
        r"got nan$",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_refused_naming_the_key(case):
    path, value, error, match = BAD[case]
    with pytest.raises(error, match=match) as info:
        FederationSpec.from_mapping(_changed(path, value))
    assert info.value.key.split(".")[0].split("[")[0] == path[0]


def test_a_grid_with_a_gap_is_refused():
    # The grid leaves [8, 16] empty; with 20 basis functions of support < 8 h, some
    # coefficients of channels[0] cannot be computed on it.
    data = _changed(("channels", 0, "basis", "n-basis"), 20)
    data["min-points"] = 20
    data["domain"]["grid"] = [float(t) for t in range(9)] + [
        float(t) for t in range(16, 25)
    ]
    with pytest.raises(
        SpecError,
        match=r"^domain\.grid \(18 points\) must determine the 20 coefficients of "
        r"channels\[0\] \('hr'\)",
    ):
        FederationSpec.from_mapping(data)


def test_broken_toml_is_a_spec_error():
    with pytest.raises(SpecError, match=r"^not valid TOML: .*\(at line 2, column 10\)"):
        FederationSpec.loads("format-version = 1\nlabels = = 2\n")


def test_errors_of_a_file_start_with_its_name(tmp_path):
    path = tmp_path / "federation.toml"
    path.write_text(EXAMPLE.replace("epsilon = 4.0", "epsilon = -4.0"))
    with pytest.raises(SpecError, match=r"^federation\.toml: release\.epsilon must"):
        FederationSpec.load(path)
    with pytest.raises(FileNotFoundError, match="no such spec file"):
        FederationSpec.load(tmp_path / "missing.toml")


def test_a_spec_built_from_parts_is_validated_and_normalised(spec):
    built = FederationSpec(
        Domain(0, 24, "h", tuple(range(25))),
        (
            Channel("hr", "bpm", Basis(4, 12), Bounds.values(30, 220)),
            spec.channels[1],
        ),
        ("healthy", "condition"),
        Release("default", 4),
        24,
    )
    assert built == spec and built.hash == spec.hash
    assert isinstance(built.domain.start, float)
    with pytest.raises(SpecError, match=r"^channels\[0\]\.basis\.order must be"):
        FederationSpec(
            spec.domain,
            (Channel("hr", "bpm", Basis(0, 12), Bounds.values(0, 1)),),
            spec.labels,
            spec.release,
            24,
        )
    with pytest.raises(SpecTypeError, match=r"^channels\[0\]\.bounds must be a Bounds"):
        FederationSpec(
            spec.domain,
            (Channel("hr", "bpm", Basis(4, 12), (0, 1)),),  # type: ignore[arg-type]
            spec.labels,
            spec.release,
            24,
        )


# -- hypothesis: any valid spec round-trips, in any layout -----------------------------

# names as a spec author may write them: any printable text, quotes and backslashes
# included, without leading or trailing spaces
TEXT = (
    st.text(
        alphabet=st.characters(
            exclude_categories=("Cs", "Cc", "Cf", "Co", "Cn", "Zl", "Zp", "Zs"),
            include_characters=' "\\',
        ),
        min_size=1,
        max_size=12,
    )
    .map(str.strip)
    .filter(bool)
)


@st.composite
def spec_mappings(draw) -> dict:
    start = draw(st.floats(-1e3, 1e3))
    width = draw(st.floats(0.5, 1e3))
    end = start + width
    names = draw(st.lists(TEXT, min_size=1, max_size=3, unique=True))
    channels, needs = [], []
    for name in names:
        order = draw(st.integers(1, 5))
        basis: dict = {"order": order}
        if draw(st.booleans()):
            basis["n-basis"] = size = draw(st.integers(order, order + 8))
        else:
            k = draw(st.integers(0, 4))
            jitter = draw(st.lists(st.floats(-0.3, 0.3), min_size=k, max_size=k))
            basis["interior-knots"] = [
                start + width * (j + 1 + jitter[j]) / (k + 1) for j in range(k)
            ]
            size = k + order
        penalty = draw(st.sampled_from([0.0, 1e-4, 2.5])) if order >= 3 else 0.0
        if penalty > 0 or draw(st.booleans()):  # optional when 0
            basis["penalty"] = penalty
        low = draw(st.floats(-1e6, 1e6))
        if draw(st.booleans()):
            bounds = {"value-low": low, "value-high": low + draw(st.floats(1e-3, 1e6))}
        else:
            lows = draw(st.lists(st.floats(-1e6, 1e6), min_size=size, max_size=size))
            bounds = {
                "coefficient-low": lows,
                "coefficient-high": [v + draw(st.floats(1e-3, 1e3)) for v in lows],
            }
        channels.append(
            {"name": name, "unit": draw(TEXT), "basis": basis, "bounds": bounds}
        )
        needs.append(size if penalty == 0 else 2)
    domain: dict = {"start": start, "end": end, "unit": draw(TEXT)}
    if draw(st.booleans()):
        domain["grid"] = np.linspace(start, end, draw(st.integers(80, 120))).tolist()
    return {
        "format-version": 1,
        "labels": draw(st.lists(TEXT, min_size=2, max_size=5, unique=True)),
        "min-points": max(needs) + draw(st.integers(0, 10)),
        "domain": domain,
        "release": {
            "protocol": draw(st.sampled_from(["default", "reference"])),
            "epsilon": draw(st.floats(1e-3, 50.0)),
        },
        "channels": channels,
    }


def _toml(value) -> str:
    """Inline TOML of a value (json's strings are TOML basic strings for this text)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f'"{k}" = {_toml(v)}' for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, float) and value == int(value) and abs(value) < 1e15:
        return str(int(value))  # an integer spelling of the same number
    return json.dumps(value, ensure_ascii=False)


def _restyled(data: dict, rng: np.random.Generator) -> str:
    """The same content with keys in random order, inline tables and comments."""

    def shuffled(table: dict) -> dict:
        keys = list(table)
        rng.shuffle(keys)
        return {
            k: shuffled(table[k])
            if isinstance(table[k], dict)
            else [shuffled(v) if isinstance(v, dict) else v for v in table[k]]
            if isinstance(table[k], list)
            else table[k]
            for k in keys
        }

    lines = ["# restyled"]
    for key, value in shuffled(data).items():
        lines.append(f"{key}   =   {_toml(value)}  # {key}")
    return "\n".join(lines) + "\n"


@settings(max_examples=60, deadline=None)
@given(data=spec_mappings(), seed=st.integers(0, 2**32 - 1))
def test_any_valid_spec_round_trips_and_hashes_by_content(data, seed):
    spec = FederationSpec.from_mapping(data)
    text = spec.dumps()
    again = FederationSpec.loads(text)
    assert again == spec and again.dumps() == text and again.hash == spec.hash
    restyled = FederationSpec.loads(_restyled(data, np.random.default_rng(seed)))
    assert restyled == spec and restyled.hash == spec.hash


# -- the featurizer --------------------------------------------------------------------

GRID = np.arange(288) / 12.0  # every 5 minutes over a day, in hours


def _curves(
    times: list[np.ndarray],
    values: list[np.ndarray],
    subject_of_curve: list[int],
    labels: list[int],
    *,
    channels: tuple[str, ...] = ("hr",),
    label_names: tuple[str, ...] = ("healthy", "condition"),
    subject_ids: tuple[str, ...] | None = None,
) -> LongCurves:
    """LongCurves from per-curve times and (points x channels) values."""
    n = len(labels)
    curve_index, counter = [], {}
    for s in subject_of_curve:
        curve_index.append(counter.get(s, 0))
        counter[s] = curve_index[-1] + 1
    return LongCurves(
        np.concatenate(
            [np.full(t.size, s) for t, s in zip(times, subject_of_curve, strict=True)]
        ).astype(np.int64),
        np.concatenate(
            [np.full(t.size, k) for t, k in zip(times, curve_index, strict=True)]
        ).astype(np.int64),
        np.concatenate(times).astype(float),
        np.vstack(
            [
                np.asarray(v, dtype=float).reshape(len(t), -1)
                for t, v in zip(times, values, strict=True)
            ]
        ),
        np.asarray(labels, dtype=np.int64),
        subject_ids or tuple(f"s{i}" for i in range(n)),
        channels,
        label_names,
    )


def _hr_spec(**changes) -> FederationSpec:
    data = _mapping()
    data["channels"] = data["channels"][:1]
    data["domain"].pop("grid")
    data["min-points"] = 12
    for path, value in changes.items():
        target = data
        *head, last = path.split(".")
        for step in head:
            target = target[int(step) if step.isdigit() else step]
        target[last] = value
    return FederationSpec.from_mapping(data)


def _heart_rates(n: int, rng: np.random.Generator) -> np.ndarray:
    phase = rng.uniform(0, 24, size=(n, 1))
    return 70 + 15 * np.sin(2 * np.pi * (GRID - phase) / 24) + rng.normal(size=(n, 288))


def test_features_on_a_common_grid_are_the_scaled_bspline_coefficients():
    spec = _hr_spec(**{"domain.grid": GRID.tolist()})
    rng = np.random.default_rng(0)
    y = _heart_rates(20, rng)
    curves = _curves([GRID] * 20, list(y), list(range(20)), [0, 1] * 10)
    out = spec.featurizer().featurize(curves)
    reference = BSplineProjection.fit(
        grid_points=GRID, n_basis=12, order=4, domain_range=(0.0, 24.0)
    )
    c = reference.transform(y)
    # value bounds on the spec's grid are the exact range of the coefficients of
    # curves within them: BSplineProjection's bound, centred on the middle value
    half = reference.coefficient_bound((220.0 - 30.0) / 2)
    low, high = 125.0 - half, 125.0 + half
    np.testing.assert_allclose(spec.coefficient_bounds("hr")[0], low, rtol=1e-12)
    np.testing.assert_allclose(spec.coefficient_bounds("hr")[1], high, rtol=1e-12)
    expected = 2 * (c - low) / (high - low) - 1
    np.testing.assert_allclose(out.features, expected, rtol=0, atol=1e-12)
    assert np.all(out.clipped == 0.0)  # every value lies in [30, 220] bpm
    assert out.n_points.tolist() == [[288]] * 20
    assert out.n_curves.tolist() == [[1]] * 20 and out.n_dropped.tolist() == [[0]] * 20
    assert out.labels.tolist() == [0, 1] * 10 and out.subject_ids == curves.subject_ids


def test_without_a_grid_value_bounds_use_a_dense_equispaced_grid():
    spec = _hr_spec()
    projection = IrregularProjection.equispaced((0.0, 24.0), 12, 4)
    dense = np.linspace(0.0, 24.0, VALUE_BOUND_POINTS)
    expected = projection.coefficient_range(30.0, 220.0, dense)
    for got, want in zip(spec.coefficient_bounds(0), expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_irregular_subjects_with_several_days_and_gaps():
    spec = _hr_spec()
    rng = np.random.default_rng(1)
    days = []
    for _ in range(3):
        t = np.sort(rng.uniform(0, 24, size=200))
        days.append((t, 70 + 10 * np.sin(t / 4) + rng.normal(size=t.size)))
    short = np.sort(rng.uniform(0, 24, size=5))
    times = [d[0] for d in days] + [short]
    values = [d[1] for d in days] + [np.full(5, 80.0)]
    values[1][::4] = np.nan  # day 2 lost every 4th reading
    curves = _curves(times, values, [0, 0, 1, 0], [1, 0])
    out = spec.featurizer().featurize(curves)
    assert out.n_points.tolist() == [[200 + 150 + 5], [200]]
    assert out.n_curves.tolist() == [[2], [1]] and out.n_dropped.tolist() == [[1], [0]]
    projection = spec.projection("hr")
    mean = (
        projection.project_curve(times[0], values[0])
        + projection.project_curve(times[1], values[1])
    ) / 2
    low, high = spec.coefficient_bounds("hr")
    np.testing.assert_allclose(
        out.features[0], np.clip(2 * (mean - low) / (high - low) - 1, -1, 1), atol=1e-12
    )


def test_channels_are_matched_by_name_and_concatenated_in_spec_order(spec):
    rng = np.random.default_rng(2)
    t = np.sort(rng.uniform(0, 24, size=100))
    hr, steps = 70 + rng.normal(size=100), rng.uniform(0, 100, size=100)
    forward = _curves(
        [t], [np.column_stack([hr, steps])], [0], [0], channels=("hr", "steps")
    )
    backward = _curves(
        [t], [np.column_stack([steps, hr])], [0], [0], channels=("steps", "hr")
    )
    featurizer = spec.featurizer()
    np.testing.assert_array_equal(
        featurizer.transform(forward), featurizer.transform(backward)
    )
    assert featurizer.n_features_out == 19
    assert featurizer.feature_names[:2] == ("hr[0]", "hr[1]")
    assert featurizer.feature_names[12:14] == ("steps[0]", "steps[1]")


def test_labels_are_mapped_to_the_spec_order():
    spec = _hr_spec()
    curves = _curves(
        [GRID, GRID],
        [np.full(288, 70.0), np.full(288, 90.0)],
        [0, 1],
        [0, 1],
        label_names=("condition", "healthy"),
    )
    assert spec.featurizer().featurize(curves).labels.tolist() == [1, 0]


def test_clipping_is_counted_per_subject():
    spec = _hr_spec()
    inside = np.full(288, 70.0)
    spike = inside.copy()
    spike[140:150] = 2000.0  # a sensor fault, far beyond 220 bpm
    out = spec.featurizer().featurize(
        _curves([GRID, GRID], [inside, spike], [0, 1], [0, 0])
    )
    assert out.clipped[0] == 0.0 and 0.0 < out.clipped[1] < 1.0
    assert np.all(np.abs(out.features) <= 1.0)
    assert np.isclose(out.clipped[1], np.mean(np.abs(out.features[1]) == 1.0))


def test_one_subject_alone_gets_the_features_it_gets_in_a_batch():
    spec = _hr_spec(**{"channels.0.basis.penalty": 1e-3})
    rng = np.random.default_rng(3)
    y = _heart_rates(6, rng)
    curves = _curves(
        [GRID] * 5 + [np.sort(rng.uniform(0, 24, 288))],
        list(y),
        list(range(6)),
        [0] * 6,
    )
    featurizer = spec.featurizer()
    together = featurizer.transform(curves)
    for i in range(6):
        alone = featurizer.transform(curves.subject(i))
        np.testing.assert_allclose(alone[0], together[i], rtol=0, atol=1e-12)


FEATURIZER_ERRORS = {
    "channel-missing": (
        {"channels": ("heart",)},
        r"^the curves have 1 channel\(s\) \('heart',\) but the spec declares 1: "
        r"\('hr',\) \(missing 'hr'; not in the spec: 'heart'\)$",
    ),
    "channel-count": (
        {"channels": ("hr", "steps")},
        r"^the curves have 2 channel\(s\) .* \(not in the spec: 'steps'\)$",
    ),
    "channel-twice": ({"channels": ("hr", "hr")}, r"channel\(s\) \['hr'\] more than"),
    "label": (
        {"label_names": ("healthy", "sick")},
        r"^subject 's1': label 'sick' is not in the spec's labels \('healthy', "
        r"'condition'\)$",
    ),
    "time": (
        {"shift": 1.0},
        r"^subject 's0', curve 0: time 24\.0833\d* is outside the spec's domain "
        r"\[0\.0, 24\.0\] h \(11 observation\(s\) outside\)$",
    ),
    "too-few-points": (
        {"missing": 280},
        r"^subject 's0', channel 'hr': no usable curve: 1 curve\(s\) with fewer than "
        r"min_points \(12\) observed points, 0 with a gap",
    ),
    "all-missing": (
        {"missing": 288},
        r"^subject 's0', channel 'hr': no observed point \(every value is missing\)$",
    ),
}


@pytest.mark.parametrize("case", sorted(FEATURIZER_ERRORS))
def test_the_featurizer_refuses_curves_that_do_not_fit_the_spec(case):
    change, match = FEATURIZER_ERRORS[case]
    n_channels = len(change.get("channels", ("hr",)))
    values = np.full((288, n_channels), 70.0)
    values[: change.get("missing", 0)] = np.nan
    curves = _curves(
        [GRID + change.get("shift", 0.0), GRID],
        [values, np.full((288, n_channels), 80.0)],
        [0, 1],
        [0, 1],
        channels=change.get("channels", ("hr",)),
        label_names=change.get("label_names", ("healthy", "condition")),
    )
    with pytest.raises(ValueError, match=match):
        _hr_spec().featurizer().featurize(curves)


def test_the_featurizer_needs_long_curves():
    with pytest.raises(TypeError, match="curves must be LongCurves, got ndarray"):
        _hr_spec().featurizer().featurize(np.zeros((2, 288)))


# -- init from public calibration curves -----------------------------------------------


def _calibration(n: int = 40, seed: int = 4) -> LongCurves:
    rng = np.random.default_rng(seed)
    y = _heart_rates(n, rng)
    steps = rng.gamma(2.0, 10.0, size=(n, 288))
    values = [np.column_stack([y[i], steps[i]]) for i in range(n)]
    return _curves(
        [GRID] * n,
        values,
        list(range(n)),
        [i % 2 for i in range(n)],
        channels=("hr", "steps"),
    )


INIT = {
    "domain": (0.0, 24.0),
    "unit": "h",
    "channel_units": {"hr": "bpm", "steps": "1/min"},
    "epsilon": 2.0,
    "n_basis": (10, 8),
    "penalty": (0.0, 1e-3),
}


@pytest.mark.parametrize(("quantile", "margin"), [(0.0, 0.0), (0.05, 0.1)])
def test_init_derives_bounds_from_calibration_coefficients(quantile, margin):
    calibration = _calibration()
    spec = init_spec(calibration, quantile=quantile, margin=margin, **INIT)
    assert spec.channel_names == ("hr", "steps") and spec.labels == (
        "healthy",
        "condition",
    )
    assert spec.min_points == 10 and spec.release == Release("default", 2.0)
    for c, (n_basis, penalty) in enumerate([(10, 0.0), (8, 1e-3)]):
        projection = IrregularProjection.equispaced(
            (0.0, 24.0), n_basis, 4, penalty=penalty
        )
        per_subject = (
            np.vstack(
                [calibration.values[calibration.subjects == i, c] for i in range(40)]
            )
            @ projection.projection_matrix(GRID).T
        )
        lo = np.quantile(per_subject, quantile, axis=0)
        hi = np.quantile(per_subject, 1 - quantile, axis=0)
        low, high = spec.coefficient_bounds(c)
        np.testing.assert_allclose(low, lo - margin * (hi - lo), rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(high, hi + margin * (hi - lo), rtol=1e-12, atol=1e-9)
    clipped = spec.featurizer().featurize(calibration).clipped
    if quantile == 0.0:
        assert np.all(clipped == 0.0)  # the calibration subjects span the bounds
    assert FederationSpec.loads(spec.dumps()) == spec


def test_init_writes_the_common_grid_and_labels_it_is_given():
    spec = init_spec(
        _calibration(),
        grid=GRID.tolist(),
        labels=("condition", "healthy", "other"),
        **INIT,
    )
    assert spec.domain.grid == tuple(GRID.tolist())
    assert spec.labels == ("condition", "healthy", "other")


INIT_ERRORS = {
    "one-subject": ({"calibration": 1}, ValueError, "at least 2 subjects, got 1"),
    "quantile": ({"quantile": 0.5}, ValueError, r"quantile must be in \[0, 0\.5\)"),
    "margin": (
        {"margin": -1.0},
        ValueError,
        "margin must be a finite real number >= 0",
    ),
    "units": ({"channel_units": ["bpm"]}, ValueError, "one entry per channel"),
    "n-basis": (
        {"n_basis": 3},
        SpecError,
        r"^channels\[0\]\.basis\.n-basis must be an integer >= 4, got 3$",
    ),
    "epsilon": ({"epsilon": 0.0}, SpecError, r"^release\.epsilon must be"),
    "domain": (
        {"domain": (0.0, 12.0)},
        ValueError,
        r"^subject 's0', curve 0: time 12\.0833\d* is outside the spec's domain",
    ),
}


@pytest.mark.parametrize("case", sorted(INIT_ERRORS))
def test_init_refuses_bad_input(case):
    change, error, match = INIT_ERRORS[case]
    calibration = _calibration()
    if "calibration" in change:
        calibration = calibration.subject(0)
    kwargs = INIT | {k: v for k, v in change.items() if k != "calibration"}
    with pytest.raises(error, match=match):
        init_spec(calibration, **kwargs)


def test_init_refuses_calibration_without_spread():
    same = _curves([GRID] * 3, [np.full(288, 70.0)] * 3, [0, 1, 2], [0, 1, 0])
    with pytest.raises(
        ValueError, match="calibration coefficient 0 of channel 'hr' has no"
    ):
        init_spec(
            same, **(INIT | {"channel_units": "bpm", "n_basis": 10, "penalty": 0.0})
        )


# -- the command -----------------------------------------------------------------------


@pytest.fixture
def calibration_file(tmp_path) -> Path:
    return write_long_csv(tmp_path / "calibration.csv", _calibration(12))


def _init_args(calibration: Path, out: Path, *extra: str) -> list[str]:
    return [
        "init", "--calibration", str(calibration), "--out", str(out),
        "--domain", "0", "24", "--unit", "h", "--channel-unit", "hr=bpm",
        "--channel-unit", "steps=1/min", "--epsilon", "2", "--n-basis", "8",
        *extra,
    ]  # fmt: skip


def test_spec_init_writes_what_init_spec_derives(tmp_path, calibration_file, capsys):
    out = tmp_path / "federation.toml"
    assert spec_main(_init_args(calibration_file, out, "--margin", "0.1")) == 0
    written = FederationSpec.load(out)
    expected = init_spec(
        read_curves(calibration_file),
        domain=(0.0, 24.0),
        unit="h",
        channel_units={"hr": "bpm", "steps": "1/min"},
        epsilon=2.0,
        n_basis=8,
        margin=0.1,
    )
    assert written == expected
    assert f"hash: {written.hash}" in capsys.readouterr().out


def test_spec_init_declares_the_common_grid_when_asked(tmp_path, calibration_file):
    out = tmp_path / "federation.toml"
    assert spec_main(_init_args(calibration_file, out, "--common-grid")) == 0
    assert FederationSpec.load(out).domain.grid == tuple(GRID.tolist())


def test_spec_init_does_not_overwrite_without_force(tmp_path, calibration_file, capsys):
    out = tmp_path / "federation.toml"
    out.write_text("keep me")
    assert spec_main(_init_args(calibration_file, out)) == 1
    assert "exists; pass --force" in capsys.readouterr().err
    assert out.read_text() == "keep me"
    assert spec_main(_init_args(calibration_file, out, "--force")) == 0


def test_spec_init_reads_a_wide_single_channel_file(tmp_path, capsys):
    calibration = _calibration(12)
    hr_only = LongCurves(
        calibration.subjects, calibration.curves, calibration.times,
        calibration.values[:, :1], calibration.labels, calibration.subject_ids,
        ("hr",), calibration.label_names,
    )  # fmt: skip
    path = write_wide_csv(tmp_path / "hr.csv", hr_only)
    out = tmp_path / "federation.toml"
    args = [
        "init", "--calibration", str(path), "--out", str(out), "--domain", "0", "24",
        "--unit", "h", "--channel-unit", "bpm", "--epsilon", "1", "--channel", "hr",
        "--labels", "condition, healthy",
    ]  # fmt: skip
    assert spec_main(args) == 0, capsys.readouterr().err
    spec = FederationSpec.load(out)
    assert spec.channel_names == ("hr",) and spec.labels == ("condition", "healthy")


def test_spec_check_prints_the_hash_or_the_error(tmp_path, spec, capsys):
    good = spec.save(tmp_path / "good.toml")
    assert spec_main(["check", str(good)]) == 0
    out = capsys.readouterr().out
    assert "a valid federation spec" in out and f"hash: {spec.hash}" in out
    assert "channel 'steps' (1/min): order 4, 7 basis functions" in out
    bad = tmp_path / "bad.toml"
    bad.write_text(EXAMPLE.replace("order = 4\nn-basis", "order = 0\nn-basis"))
    assert spec_main(["check", str(bad)]) == 1
    assert capsys.readouterr().err == (
        "ldpfda spec check: bad.toml: channels[0].basis.order must be an integer >= 1,"
        " got 0\n"
    )


def test_spec_flags_are_never_abbreviated(tmp_path, calibration_file, capsys):
    args = _init_args(calibration_file, tmp_path / "f.toml")
    args[args.index("--calibration")] = "--calib"
    with pytest.raises(SystemExit) as exit_info:
        spec_main(args)
    assert exit_info.value.code == 2
    assert "--calib" in capsys.readouterr().err


# -- a host needs numpy and scipy only -------------------------------------------------

HEAVY = ("sklearn", "skfda", "dp_accounting", "ray", "pandas", "flwr")

CHILD = textwrap.dedent(
    """
    import importlib.abc, json, sys

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {heavy!r}:
                raise ImportError(f"{{name}} is not installed on this host")

    sys.meta_path.insert(0, Refuse())
    from ldpfda.datasets.readers import read_curves
    from ldpfda.schema.spec import FederationSpec

    spec = FederationSpec.load(sys.argv[1])
    out = spec.featurizer().featurize(read_curves(sys.argv[2], channel="hr"))
    loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({heavy!r}))
    print(json.dumps({{"features": out.features.tolist(), "heavy": loaded}}))
    """
)


def test_a_host_featurizes_its_file_with_numpy_and_scipy_only(tmp_path):
    spec = _hr_spec()
    rng = np.random.default_rng(5)
    t = np.sort(rng.uniform(0, 24, size=150))
    curves = _curves([t], [70 + rng.normal(size=150)], [0], [1])
    data = write_long_csv(tmp_path / "mine.csv", curves)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD.format(heavy=HEAVY),
            str(spec.save(tmp_path / "s.toml")),
            str(data),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["heavy"] == []
    np.testing.assert_array_equal(
        result["features"], spec.featurizer().transform(curves)
    )


def test_numpy_numbers_are_numbers_and_a_string_is_not_a_label_set(spec):
    built = FederationSpec(
        Domain(np.float64(0.0), np.int64(24), "h", tuple(np.arange(25.0))),
        (
            Channel(
                "hr", "bpm", Basis(np.int64(4), np.int64(12)), Bounds.values(30, 220)
            ),
            spec.channels[1],
        ),
        ("healthy", "condition"),
        Release("default", np.float32(4.0)),
        np.int64(24),
    )
    assert built == spec and built.hash == spec.hash
    assert type(built.min_points) is int and type(built.domain.end) is float
    with pytest.raises(SpecTypeError, match=r"^labels must be a sequence \(a tuple\)"):
        FederationSpec(spec.domain, spec.channels, "ab", spec.release, 24)


def test_the_documented_example_is_this_example(spec):
    docs = Path(__file__).resolve().parents[2] / "docs" / "spec.md"
    text = docs.read_text(encoding="utf-8")
    block = text.split("```toml\n", 1)[1].split("```", 1)[0]
    assert FederationSpec.loads(block) == spec
