r"""The federation spec: what every party agrees on before any private data is seen.

A federation spec is one public, versioned TOML file (``format-version = 1``; its keys,
an example and the ``spec`` command are in docs/spec.md). It fixes everything that
turns a client's own curves into the vector it releases: the time domain, the
channels and their units, every channel's B-spline basis, the data-independent
rescaling bounds, the label set, the release protocol with its epsilon, and how many
observed points a curve needs. Every party compares its :attr:`FederationSpec.hash`.

Channel :math:`c`'s coefficients are the penalised least-squares fit of
:mod:`ldpfda.fda.irregular`, averaged over a client's curves; coefficient :math:`k`
is mapped from :math:`[\ell_k, h_k]` onto :math:`[-1, 1]` and clipped
(:class:`~ldpfda.fda.scaling.CoefficientScaler`), and the features concatenate the
channels in spec order, :math:`p = \sum_c n_c`. With value bounds :math:`[a, b]`,
:math:`[\ell_k, h_k]` is the exact range of coefficient :math:`k` over every curve
with values in :math:`[a, b]` at the points of ``domain.grid`` (at
:data:`VALUE_BOUND_POINTS` equispaced points of the domain without a grid). Errors
name the dotted key, the value and what is allowed.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import math
import numbers
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda.datasets.curves import LongCurves
from ldpfda.fda.irregular import ClientFit, IrregularProjection
from ldpfda.fda.scaling import CoefficientScaler

__all__ = [
    "CLIP_WARNING",
    "FORMAT_VERSION",
    "PROTOCOLS",
    "VALUE_BOUND_POINTS",
    "Basis",
    "Bounds",
    "Channel",
    "Domain",
    "FederationSpec",
    "Release",
    "SpecError",
    "SpecFeaturizer",
    "SpecTypeError",
    "SubjectFeatures",
    "init_spec",
    "main",
    "spec_main",
]

#: Share of a host's clipped coordinates, or of its values outside a channel's value
#: range, above which its data and the spec's bounds do not fit (its release then
#: carries little of its curve): the node warns.
CLIP_WARNING = 0.25
#: The one format version this module reads and writes.
FORMAT_VERSION = 1
#: Release protocols: ``default`` (the joint release) and ``reference`` (MRMA).
PROTOCOLS = ("default", "reference")
#: Points of the equispaced grid on which value bounds become coefficient bounds
#: when the spec has no common grid (a dense stand-in for a continuous curve).
VALUE_BOUND_POINTS = 1001


class SpecError(ValueError):
    """A federation spec is invalid; ``key`` is the dotted key at fault."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class SpecTypeError(SpecError, TypeError):
    """A key of a federation spec holds a value of the wrong type."""


# -- the parsed content ----------------------------------------------------------------


@dataclass(frozen=True)
class Domain:
    """The time domain ``[start, end]`` in ``unit``, with an optional common grid."""

    start: float
    end: float
    unit: str
    grid: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Basis:
    """A channel's B-spline basis: ``order`` and either ``n_basis`` equispaced
    knots or explicit ``interior_knots``; ``penalty`` is the roughness penalty."""

    order: int
    n_basis: int | None = None
    interior_knots: tuple[float, ...] | None = None
    penalty: float = 0.0

    @property
    def size(self) -> int:
        """Number of basis functions."""
        if self.interior_knots is not None:
            return len(self.interior_knots) + self.order
        return int(self.n_basis or 0)


@dataclass(frozen=True)
class Bounds:
    """Rescaling bounds of a channel: value bounds of the curve, or explicit
    per-coefficient bounds (exactly one pair)."""

    value_low: float | None = None
    value_high: float | None = None
    coefficient_low: tuple[float, ...] | None = None
    coefficient_high: tuple[float, ...] | None = None

    @classmethod
    def values(cls, low: float, high: float) -> Bounds:
        return cls(value_low=low, value_high=high)

    @classmethod
    def coefficients(cls, low: Sequence[float], high: Sequence[float]) -> Bounds:
        return cls(
            coefficient_low=tuple(float(v) for v in low),
            coefficient_high=tuple(float(v) for v in high),
        )

    @property
    def kind(self) -> str:
        """``"values"`` or ``"coefficients"``."""
        return "values" if self.coefficient_low is None else "coefficients"


@dataclass(frozen=True)
class Channel:
    """One channel: its name, unit, basis and rescaling bounds."""

    name: str
    unit: str
    basis: Basis
    bounds: Bounds


@dataclass(frozen=True)
class Release:
    """The release protocol and each client's epsilon per release."""

    protocol: str
    epsilon: float


# -- validation ------------------------------------------------------------------------


def _show(value: Any) -> str:
    """A value as a spec author wrote it (TOML spelling for booleans)."""
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return repr(int(value))
    if isinstance(value, numbers.Real):
        return repr(float(value))
    if isinstance(value, Mapping):
        return "a table"
    text = repr(list(value) if isinstance(value, tuple) else value)
    return text if len(text) <= 60 else text[:57] + "..."


_KINDS = (
    (bool | np.bool_, "a boolean"),
    (numbers.Integral, "an integer"),
    (numbers.Real, "a float"),
    (str, "a string"),
    (Mapping, "a table"),
    (list | tuple, "an array"),
)


def _got(value: Any) -> str:
    """``'12' (a string)``: the value and its type, for a type error."""
    shown = _show(value)
    if shown == "a table":
        return shown
    kind = next((name for k, name in _KINDS if isinstance(value, k)), None)
    return f"{shown} ({kind or f'a {type(value).__name__}'})"


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)


def _bad(key: str, allowed: str, got: str) -> SpecError:
    return SpecError(key, f"{key} must be {allowed}, got {got}")


def _check(
    value: Any,
    key: str,
    allowed: str,
    kind: Any,
    ok: Callable[[Any], bool] = lambda _: True,
    shown: Callable[[Any], str] = repr,
) -> Any:
    """``value``, if it is a ``kind`` (never a boolean) and passes ``ok``."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, kind):
        raise SpecTypeError(key, f"{key} must be {allowed}, got {_got(value)}")
    if not ok(value):
        raise _bad(key, allowed, shown(value))
    return value


def _integer(value: Any, key: str, minimum: int) -> int:
    allowed = f"an integer >= {minimum}"
    return int(
        _check(value, key, allowed, numbers.Integral, lambda v: v >= minimum, str)
    )


def _real(
    value: Any,
    key: str,
    allowed: str = "a finite real number",
    ok: Callable[[float], bool] = lambda _: True,
) -> float:
    """A finite real number (an integer is accepted) for which ``ok`` holds."""
    _check(
        value,
        key,
        allowed,
        numbers.Real,
        lambda v: math.isfinite(float(v)) and ok(float(v)),
        lambda v: _show(float(v)),
    )
    return float(value) + 0.0  # -0.0 and 0.0 are one value


def _reals(value: Any, key: str, allowed: str) -> tuple[float, ...]:
    _check(value, key, allowed, list | tuple)
    return tuple(_real(v, f"{key}[{i}]") for i, v in enumerate(value))


def _increasing(
    value: Any,
    key: str,
    allowed: str,
    inside: Callable[[float], bool],
    minimum: int = 0,
    ends: bool = False,
) -> tuple[float, ...]:
    """At least ``minimum`` strictly increasing finite numbers, all ``inside``
    (checked at the two ``ends`` only, if asked, which names the last one)."""
    points = _reals(value, key, allowed)
    if len(points) < minimum:
        raise _bad(key, allowed, f"{len(points)} value(s)")
    for i in range(1, len(points)):
        if not points[i] > points[i - 1]:
            got = f"{_show(points[i])} at {key}[{i}] after {_show(points[i - 1])}"
            raise _bad(key, allowed, got)
    for i in (0, len(points) - 1) if ends else range(len(points)):
        if not inside(points[i]):
            raise _bad(key, allowed, f"{_show(points[i])} at {key}[{i}]")
    return points


def _text(value: Any, key: str) -> str:
    return _check(
        value,
        key,
        "a non-empty string without leading or trailing spaces",
        str,
        lambda v: bool(v) and v == v.strip() and v.isprintable(),
    )


class _Table:
    """A TOML table at a dotted key; unknown keys are refused on sight."""

    def __init__(self, data: Any, key: str, keys: dict[str, str]) -> None:
        if not isinstance(data, Mapping):
            raise SpecTypeError(key, f"{key} must be a table, got {_got(data)}")
        self.data, self.key, self.keys = data, key, keys
        for name in data:
            if name not in keys:
                close = difflib.get_close_matches(str(name), list(keys), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                where = key or "the spec's top level"
                raise SpecError(
                    self.path(str(name)),
                    f"unknown key {self.path(str(name))!r} = {_show(data[name])}: "
                    f"the keys of {where} are {', '.join(keys)}{hint}",
                )

    def path(self, name: str) -> str:
        return f"{self.key}.{name}" if self.key else name

    def has(self, name: str) -> bool:
        return name in self.data

    def get(self, name: str, check: Callable[..., Any], *args: Any) -> Any:
        """The value of key ``name``, checked by ``check(value, dotted key, *args)``."""
        return check(self[name], self.path(name), *args)

    def __getitem__(self, name: str) -> Any:
        if name not in self.data:
            raise SpecError(
                self.path(name),
                f"missing key {self.path(name)!r}: it must be {self.keys[name]}",
            )
        return self.data[name]


_ROOT_KEYS = {
    "format-version": f"the integer {FORMAT_VERSION}",
    "labels": "an array of >= 2 distinct label names",
    "min-points": "an integer >= 1",
    "domain": "a table (start, end, unit, optional grid)",
    "release": "a table (protocol, epsilon)",
    "channels": "an array of >= 1 channel tables ([[channels]])",
}
_DOMAIN_KEYS = {
    "start": "a finite real number",
    "end": "a finite real number > domain.start",
    "unit": "a non-empty string",
    "grid": "an optional array of >= 2 strictly increasing times in the domain",
}
_RELEASE_KEYS = {
    "protocol": "one of " + ", ".join(repr(c) for c in PROTOCOLS),
    "epsilon": "a finite real number > 0",
}
_CHANNEL_KEYS = {
    "name": "a non-empty string",
    "unit": "a non-empty string",
    "basis": "a table (order, n-basis or interior-knots, optional penalty)",
    "bounds": "a table (value-low and value-high, or coefficient-low and "
    "coefficient-high)",
}
_BASIS_KEYS = {
    "order": "an integer >= 1",
    "n-basis": "an integer >= order (equispaced knots)",
    "interior-knots": "an array of strictly increasing knots inside the domain",
    "penalty": "a finite real number >= 0 (optional, default 0.0)",
}
_BOUNDS_KEYS = {
    "value-low": "a finite real number in the channel's unit",
    "value-high": "a finite real number > value-low",
    "coefficient-low": "an array of one finite real number per basis function",
    "coefficient-high": "an array of one finite real number per basis function, "
    "each > coefficient-low's",
}


def _parse(data: Any) -> dict[str, Any]:
    """Validate a spec's content (parsed TOML) into :class:`FederationSpec` fields."""
    root = _Table(data, "", _ROOT_KEYS)
    version = root.get(
        "format-version", _check, root.keys["format-version"], numbers.Integral
    )
    if version != FORMAT_VERSION:
        raise SpecError(
            "format-version",
            f"format-version must be {FORMAT_VERSION} (the only version this ldpfda "
            f"reads), got {version}",
        )
    labels = _parse_labels(root["labels"])
    domain = _parse_domain(root["domain"])
    release = _parse_release(root["release"])
    raw = root.get("channels", _check, root.keys["channels"], list | tuple, bool, _show)
    channels = tuple(
        _parse_channel(c, f"channels[{i}]", domain) for i, c in enumerate(raw)
    )
    first: dict[str, int] = {}
    for i, channel in enumerate(channels):
        j = first.setdefault(channel.name, i)
        if j != i:
            raise SpecError(
                f"channels[{i}].name",
                f"channels[{i}].name must differ from every other channel's, got "
                f"{channel.name!r}, the name of channels[{j}]",
            )
    min_points = root.get("min-points", _integer, 1)
    for i, channel in enumerate(channels):
        need = channel.basis.size if channel.basis.penalty == 0 else 2
        if min_points < need:
            why = (
                f"the {need} coefficients of channels[{i}] ({channel.name!r}), "
                "which has no penalty"
                if channel.basis.penalty == 0
                else f"the linear part of channels[{i}] ({channel.name!r})"
            )
            raise SpecError(
                "min-points",
                f"min-points must be >= {need}: fewer points cannot determine {why}; "
                f"got {min_points}",
            )
    for i, channel in enumerate(channels):
        _check_numerics(channel, f"channels[{i}]", domain)
    return {
        "domain": domain,
        "channels": channels,
        "labels": labels,
        "release": release,
        "min_points": min_points,
        "format_version": int(version),
    }


def _parse_labels(value: Any) -> tuple[str, ...]:
    allowed = _ROOT_KEYS["labels"]
    labels: list[str] = []
    for i, item in enumerate(_check(value, "labels", allowed, list | tuple)):
        key = f"labels[{i}]"
        if not isinstance(item, str):
            hint = f' (quote it: "{item}")' if _is_real(item) else ""
            raise SpecTypeError(
                key, f"{key} must be a string (a label name), got {_got(item)}{hint}"
            )
        if _text(item, key) in labels:
            raise SpecError(
                key, f"{key} must differ from every other label, got {item!r} again"
            )
        labels.append(item)
    if len(labels) < 2:
        raise _bad("labels", allowed, _show(value))
    return tuple(labels)


def _parse_domain(value: Any) -> Domain:
    table = _Table(value, "domain", _DOMAIN_KEYS)
    start = table.get("start", _real)
    start_ok = f"a finite real number > domain.start ({_show(start)})"
    end = table.get("end", _real, start_ok, lambda v: v > start)
    unit = table.get("unit", _text)
    grid = None
    if table.has("grid"):
        allowed = (
            f"an array of >= 2 strictly increasing times in [{_show(start)}, "
            f"{_show(end)}]"
        )
        grid = table.get(
            "grid", _increasing, allowed, lambda t: start <= t <= end, 2, True
        )
    return Domain(start, end, unit, grid)


def _parse_release(value: Any) -> Release:
    table = _Table(value, "release", _RELEASE_KEYS)
    allowed = _RELEASE_KEYS["protocol"]
    protocol = table.get("protocol", _check, allowed, str, lambda v: v in PROTOCOLS)
    allowed = "a finite real number > 0 (inf, no noise, is for simulations only)"
    return Release(protocol, table.get("epsilon", _real, allowed, lambda v: v > 0))


def _parse_channel(value: Any, key: str, domain: Domain) -> Channel:
    table = _Table(value, key, _CHANNEL_KEYS)
    name, unit = table.get("name", _text), table.get("unit", _text)
    basis = table.get("basis", _parse_basis, domain)
    return Channel(name, unit, basis, table.get("bounds", _parse_bounds, basis.size))


def _parse_basis(value: Any, key: str, domain: Domain) -> Basis:
    table = _Table(value, key, _BASIS_KEYS)
    order = table.get("order", _integer, 1)
    if table.has("n-basis") == table.has("interior-knots"):
        raise SpecError(
            f"{key}.n-basis",
            f"{key} must give exactly one of n-basis (equispaced knots) and "
            f"interior-knots, got {'both' if table.has('n-basis') else 'neither'}",
        )
    n_basis = knots = None
    if table.has("n-basis"):
        n_basis = table.get("n-basis", _integer, order)
    else:
        a, b = domain.start, domain.end
        allowed = (
            f"an array of strictly increasing knots inside ({_show(a)}, {_show(b)})"
        )
        knots = table.get("interior-knots", _increasing, allowed, lambda t: a < t < b)
    penalty = 0.0
    if table.has("penalty"):
        penalty = table.get("penalty", _real, table.keys["penalty"], lambda v: v >= 0)
    if penalty > 0 and order < 3:
        raise SpecError(
            f"{key}.penalty",
            f"{key}.penalty must be 0 for order < 3 (the second derivative of a "
            f"piecewise linear spline vanishes), got {_show(penalty)} with order "
            f"{order}",
        )
    return Basis(order, n_basis, knots, penalty)


def _parse_bounds(value: Any, key: str, size: int) -> Bounds:
    table = _Table(value, key, _BOUNDS_KEYS)
    values = table.has("value-low") or table.has("value-high")
    if values == (table.has("coefficient-low") or table.has("coefficient-high")):
        raise SpecError(
            key,
            f"{key} must give either value-low and value-high or coefficient-low and "
            f"coefficient-high, got {'both' if values else 'neither'}",
        )
    if values:
        low = table.get("value-low", _real)
        allowed = f"a finite real number > value-low ({_show(low)})"
        return Bounds.values(
            low, table.get("value-high", _real, allowed, lambda v: v > low)
        )
    allowed = f"an array of {size} finite real numbers (one per basis function)"
    names = ("coefficient-low", "coefficient-high")
    lows, highs = (table.get(name, _reals, allowed) for name in names)
    for name, array in zip(names, (lows, highs), strict=True):
        if len(array) != size:
            raise _bad(f"{key}.{name}", allowed, f"{len(array)} value(s)")
    for k, (lo, hi) in enumerate(zip(lows, highs, strict=True)):
        if not hi > lo:
            raise SpecError(
                f"{key}.coefficient-high",
                f"{key}.coefficient-high[{k}] must be > coefficient-low[{k}] "
                f"({_show(lo)}), got {_show(hi)}",
            )
    return Bounds.coefficients(lows, highs)


def _projection(channel: Channel, domain: Domain) -> IrregularProjection:
    basis, span = channel.basis, (domain.start, domain.end)
    if basis.interior_knots is not None:
        return IrregularProjection.with_knots(
            span, basis.interior_knots, basis.order, penalty=basis.penalty
        )
    return IrregularProjection.equispaced(
        span, basis.size, basis.order, penalty=basis.penalty
    )


def _bound_grid(domain: Domain) -> NDArray[np.float64]:
    if domain.grid is not None:
        return np.array(domain.grid)
    return np.linspace(domain.start, domain.end, VALUE_BOUND_POINTS)


def _determines(projection: IrregularProjection, grid: Any) -> bool:
    try:
        projection.projection_matrix(grid)
    except ValueError:
        return False
    return True


def _check_numerics(channel: Channel, key: str, domain: Domain) -> None:
    """The common grid, and the grid on which value bounds become coefficient
    bounds, determine every coefficient of the channel."""
    projection = _projection(channel, domain)
    if domain.grid is not None and not _determines(projection, domain.grid):
        raise SpecError(
            "domain.grid",
            f"domain.grid ({len(domain.grid)} points) must determine the "
            f"{channel.basis.size} coefficients of {key} ({channel.name!r}), but a "
            "gap leaves a basis function without grid points; move the knots, add "
            "points or a penalty",
        )
    if channel.bounds.kind == "values" and not _determines(
        projection, _bound_grid(domain)
    ):
        raise SpecError(
            f"{key}.basis",
            f"{key}.basis must be determined by the {VALUE_BOUND_POINTS} equispaced "
            f"points on which {key}.bounds become coefficient bounds, but its knots "
            "are too close together; move the knots or add a penalty",
        )


def _check_times(domain: Domain, curves: LongCurves) -> None:
    outside = (curves.times < domain.start) | (curves.times > domain.end)
    if np.any(outside):
        row = int(np.argmax(outside))
        subject = curves.subject_ids[int(curves.subjects[row])]
        raise ValueError(
            f"subject {subject!r}, curve {int(curves.curves[row])}: time "
            f"{float(curves.times[row])!r} is outside the spec's domain "
            f"[{_show(domain.start)}, {_show(domain.end)}] {domain.unit} "
            f"({int(outside.sum())} observation(s) outside)"
        )


# -- the spec --------------------------------------------------------------------------


def _expect(key: str, value: Any, kind: type) -> None:
    if not isinstance(value, kind):
        raise SpecTypeError(key, f"{key} must be a {kind.__name__}, got {_got(value)}")


def _table(part: Any) -> dict[str, Any]:
    """A part's fields that have a value, as TOML data: kebab-case keys, lists."""
    values = ((f.name, getattr(part, f.name)) for f in fields(part))
    return {
        name.replace("_", "-"): list(value) if isinstance(value, tuple) else value
        for name, value in values
        if value is not None
    }


@dataclass(frozen=True)
class FederationSpec:
    """A validated federation spec (the file format is in docs/spec.md).

    Build it with :meth:`load`, :meth:`loads`, :meth:`from_mapping`,
    :func:`init_spec` or directly from its parts; every way validates the content
    and names the key at fault.
    """

    domain: Domain
    channels: tuple[Channel, ...]
    labels: tuple[str, ...]
    release: Release
    min_points: int
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        _expect("domain", self.domain, Domain)
        _expect("release", self.release, Release)
        for name in ("channels", "labels"):
            value = getattr(self, name)
            if not isinstance(value, Sequence) or isinstance(value, str):
                raise SpecTypeError(
                    name, f"{name} must be a sequence (a tuple), got {_got(value)}"
                )
        for i, channel in enumerate(self.channels):
            _expect(f"channels[{i}]", channel, Channel)
            _expect(f"channels[{i}].basis", channel.basis, Basis)
            _expect(f"channels[{i}].bounds", channel.bounds, Bounds)
        for name, value in _parse(self.to_mapping()).items():
            object.__setattr__(self, name, value)

    # -- reading and writing --------------------------------------------------------

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> FederationSpec:
        """The spec of parsed TOML content (a nested mapping)."""
        return cls(**_parse(data))

    @classmethod
    def loads(cls, text: str) -> FederationSpec:
        """Parse and validate a spec from TOML text."""
        if not isinstance(text, str):
            raise TypeError(f"a spec's text must be a str, got {type(text).__name__}")
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise SpecError("", f"not valid TOML: {exc}") from None
        return cls.from_mapping(data)

    @classmethod
    def load(cls, path: str | Path) -> FederationSpec:
        """Read a spec file; errors start with the file's name."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: no such spec file") from None
        try:
            return cls.loads(text)
        except SpecError as exc:
            raise type(exc)(exc.key, f"{path.name}: {exc}") from None

    def to_mapping(self) -> dict[str, Any]:
        """The content as plain TOML data (kebab-case keys, lists), as :meth:`dumps`
        writes it."""
        return {
            "format-version": self.format_version,
            "labels": list(self.labels),
            "min-points": self.min_points,
            "domain": _table(self.domain),
            "release": _table(self.release),
            "channels": [  # name and unit as given, basis and bounds as tables
                {**vars(c), "basis": _table(c.basis), "bounds": _table(c.bounds)}
                for c in self.channels
            ],
        }

    def dumps(self) -> str:
        """The spec as TOML text; :meth:`loads` of it gives this spec back exactly."""
        data = self.to_mapping()
        lines = [
            "# Federation spec of ldpfda: what every party agrees on before any",
            "# private data is seen. Its hash identifies it: ldpfda spec check FILE",
        ]
        lines += [
            _toml_pair(key, data[key])
            for key in ("format-version", "labels", "min-points")
        ]
        for table in ("domain", "release"):
            lines += ["", f"[{table}]"]
            lines += [_toml_pair(k, v) for k, v in data[table].items()]
        for channel in data["channels"]:
            lines += ["", "[[channels]]"]
            lines += [_toml_pair(k, channel[k]) for k in ("name", "unit")]
            for table in ("basis", "bounds"):
                lines += ["", f"[channels.{table}]"]
                lines += [_toml_pair(k, v) for k, v in channel[table].items()]
        return "\n".join(lines) + "\n"

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.dumps(), encoding="utf-8")
        return path

    # -- identity -------------------------------------------------------------------

    @cached_property
    def hash(self) -> str:
        """SHA-256 (hex) of the canonical serialisation of the content: comments,
        key order and layout of the file do not change it; every value does."""
        canonical = json.dumps(
            self.to_mapping(),
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )
        payload = b"ldpfda-federation-spec\n" + canonical.encode("utf-8")
        return hashlib.sha256(payload).hexdigest()

    @property
    def short_hash(self) -> str:
        return self.hash[:16]

    # -- what follows from the content ------------------------------------------------

    @property
    def channel_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.channels)

    @property
    def n_features(self) -> int:
        """p: the sum of the channels' basis sizes."""
        return sum(c.basis.size for c in self.channels)

    def channel_index(self, channel: int | str) -> int:
        names = self.channel_names
        if isinstance(channel, str):
            if channel not in names:
                raise ValueError(
                    f"channel {channel!r} is not in the spec's channels {names}"
                )
            return names.index(channel)
        if not 0 <= int(channel) < len(names):
            raise ValueError(f"channel must be in 0 .. {len(names) - 1}, got {channel}")
        return int(channel)

    @cached_property
    def _projections(self) -> tuple[IrregularProjection, ...]:
        return tuple(_projection(c, self.domain) for c in self.channels)

    def projection(self, channel: int | str) -> IrregularProjection:
        """The channel's basis with its penalty, as a projection of observed points."""
        return self._projections[self.channel_index(channel)]

    def coefficient_bounds(
        self, channel: int | str
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The channel's rescaling bounds ``(low, high)`` per coefficient."""
        i = self.channel_index(channel)
        bounds = self.channels[i].bounds
        if bounds.coefficient_low is not None and bounds.coefficient_high is not None:
            return np.array(bounds.coefficient_low), np.array(bounds.coefficient_high)
        assert bounds.value_low is not None and bounds.value_high is not None
        return self._projections[i].coefficient_range(
            bounds.value_low, bounds.value_high, _bound_grid(self.domain)
        )

    def featurizer(self) -> SpecFeaturizer:
        return SpecFeaturizer(self)

    def featurize_file(self, path: str | Path) -> tuple[LongCurves, SubjectFeatures]:
        """A curve file (:func:`~ldpfda.datasets.readers.read_curves`, labels checked
        against the spec's) and what the spec makes of it."""
        from ldpfda.datasets.readers import read_curves

        curves = read_curves(path, spec_labels=self.labels)
        return curves, self.featurizer().featurize(curves)

    def outside_range(self, curves: LongCurves) -> dict[str, float]:
        """Per channel with value bounds: the share of ``curves``' observed values
        outside them."""
        out = {}
        for k, channel in enumerate(self.channels):
            low, high = channel.bounds.value_low, channel.bounds.value_high
            values = curves.values[:, k][~np.isnan(curves.values[:, k])]
            if low is not None and high is not None and values.size:
                out[channel.name] = float(np.mean((values < low) | (values > high)))
        return out

    def summary(self) -> str:
        """A few lines that describe the spec, for ``spec check``."""
        d = self.domain
        grid = f"a common grid of {len(d.grid)} points" if d.grid else "no common grid"
        lines = [
            f"hash: {self.hash}",
            f"domain: [{_show(d.start)}, {_show(d.end)}] {d.unit}, {grid}",
            f"labels: {', '.join(self.labels)}",
            f"release: {self.release.protocol}, epsilon {_show(self.release.epsilon)} "
            "per release",
            f"min-points: {self.min_points} per curve and channel",
        ]
        for c in self.channels:
            knots = (
                "equispaced knots"
                if c.basis.interior_knots is None
                else f"{len(c.basis.interior_knots)} interior knots"
            )
            bounds = (
                f"values in [{_show(c.bounds.value_low)}, "
                f"{_show(c.bounds.value_high)}] {c.unit}"
                if c.bounds.kind == "values"
                else "explicit coefficient bounds"
            )
            lines.append(
                f"channel {c.name!r} ({c.unit}): order {c.basis.order}, "
                f"{c.basis.size} basis functions ({knots}), penalty "
                f"{_show(c.basis.penalty)}, bounds from {bounds}"
            )
        lines.append(f"features: p = {self.n_features}")
        return "\n".join(lines)


def _toml_pair(key: str, value: Any) -> str:
    """``key = value`` in TOML; a long array is wrapped at 88 columns. The spec's
    strings are printable and its numbers finite, so JSON spells them as TOML does."""
    if not isinstance(value, list):
        return f"{key} = {json.dumps(value, ensure_ascii=False)}"
    items = [json.dumps(v, ensure_ascii=False) for v in value]
    inline = f"{key} = [{', '.join(items)}]"
    if len(inline) <= 88:
        return inline
    lines, line = [f"{key} = ["], "   "
    for item in items:
        if len(line) + len(item) + 2 > 88:
            lines.append(line.rstrip())
            line = "   "
        line += f" {item},"
    lines.append(line.rstrip())
    return "\n".join([*lines, "]"])


# -- features --------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class SubjectFeatures:
    """What :meth:`SpecFeaturizer.featurize` computes for every subject.

    Attributes
    ----------
    features : ndarray of shape (n_subjects, p)
        Scaled coefficients in [-1, 1], channels concatenated in spec order.
    labels : ndarray of shape (n_subjects,)
        Each subject's label, an index into the spec's labels.
    subject_ids : tuple of str
    n_points : ndarray of shape (n_subjects, n_channels)
        Observed (non-missing) points per channel, over all of a subject's curves.
    n_curves, n_dropped : ndarray of shape (n_subjects, n_channels)
        Curves averaged, and curves dropped (too few points or a gap), per channel.
    clipped : ndarray of shape (n_subjects,)
        Fraction of the p coefficients outside the spec's bounds, clipped to +-1.
    """

    features: NDArray[np.float64]
    labels: NDArray[np.int64]
    subject_ids: tuple[str, ...]
    n_points: NDArray[np.int64]
    n_curves: NDArray[np.int64]
    n_dropped: NDArray[np.int64]
    clipped: NDArray[np.float64]


class SpecFeaturizer:
    """Maps a host's curves to features in [-1, 1]^p with the spec's bases and bounds
    (numpy and scipy only): curves with fewer than ``min-points`` points or a gap are
    dropped, a subject's curves averaged, the coefficients rescaled and clipped."""

    def __init__(self, spec: FederationSpec) -> None:
        if not isinstance(spec, FederationSpec):
            raise TypeError(f"spec must be a FederationSpec, got {type(spec).__name__}")
        self.spec = spec
        bounds = [spec.coefficient_bounds(i) for i in range(len(spec.channels))]
        self.low = np.concatenate([low for low, _ in bounds])
        self.high = np.concatenate([high for _, high in bounds])
        self.scaler = CoefficientScaler(self.low, self.high).fit(spec.n_features)

    @property
    def n_features_out(self) -> int:
        return self.spec.n_features

    @property
    def feature_names(self) -> tuple[str, ...]:
        """``"<channel>[<k>]"`` for every feature, in order."""
        return tuple(
            f"{c.name}[{k}]" for c in self.spec.channels for k in range(c.basis.size)
        )

    def featurize(self, curves: LongCurves) -> SubjectFeatures:
        """Features, labels and per-subject diagnostics of every subject.

        Raises a ``ValueError`` naming the subject for channels or labels that the
        spec does not declare, times outside the domain and a channel without a
        usable curve.
        """
        if not isinstance(curves, LongCurves):
            raise TypeError(f"curves must be LongCurves, got {type(curves).__name__}")
        spec = self.spec
        columns = self._channel_columns(curves)
        labels = self._labels(curves)
        _check_times(spec.domain, curves)
        coefficients = []
        counts = np.zeros((3, curves.n_subjects, len(spec.channels)), dtype=np.int64)
        for c, column in enumerate(columns):
            fit = _fit(spec, c, curves, column)
            coefficients.append(fit.coefficients)
            counts[:, :, c] = fit.n_points, fit.n_curves, fit.n_too_few + fit.n_gap
        coef = np.hstack(coefficients)
        return SubjectFeatures(
            self.scaler.transform(coef),
            labels,
            curves.subject_ids,
            counts[0],
            counts[1],
            counts[2],
            ((coef < self.low) | (coef > self.high)).mean(axis=1),
        )

    def transform(self, X: LongCurves) -> NDArray[np.float64]:
        return self.featurize(X).features

    def _channel_columns(self, curves: LongCurves) -> list[int]:
        names = self.spec.channel_names
        given = tuple(curves.channels)
        if len(set(given)) != len(given):
            twice = sorted({c for c in given if given.count(c) > 1})
            raise ValueError(f"the curves name channel(s) {twice} more than once")
        missing = [c for c in names if c not in given]
        extra = [c for c in given if c not in names]
        if missing or extra:
            parts = [f"missing {', '.join(map(repr, missing))}"] if missing else []
            if extra:
                parts.append(f"not in the spec: {', '.join(map(repr, extra))}")
            raise ValueError(
                f"the curves have {len(given)} channel(s) {given} but the spec "
                f"declares {len(names)}: {names} ({'; '.join(parts)})"
            )
        return [given.index(c) for c in names]

    def _labels(self, curves: LongCurves) -> NDArray[np.int64]:
        labels = self.spec.labels
        index = [labels.index(n) if n in labels else -1 for n in curves.label_names]
        out = np.array(index, dtype=np.int64)[curves.labels]
        if np.any(out < 0):
            i = int(np.argmax(out < 0))
            raise ValueError(
                f"subject {curves.subject_ids[i]!r}: label "
                f"{curves.label_names[curves.labels[i]]!r} is not in the spec's labels "
                f"{labels}"
            )
        return out


def _fit(
    spec: FederationSpec, c: int, curves: LongCurves, column: int, who: str = "subject"
) -> ClientFit:
    """Every subject's coefficients of channel ``c`` (the curves' ``column``); a
    subject without a usable curve is a ``ValueError``."""
    fit = spec.projection(c).fit_subjects(curves, column, min_points=spec.min_points)
    if not fit.usable.all():
        i = int(np.argmin(fit.usable))
        raise ValueError(
            f"{who} {curves.subject_ids[i]!r}, channel {spec.channels[c].name!r}: "
            f"{fit.why_unusable(i, spec.min_points)}"
        )
    return fit


# -- deriving a spec from public calibration curves ------------------------------------


def _per_channel(value: Any, names: tuple[str, ...], what: str) -> list[Any]:
    """A scalar for every channel, or one value per channel (sequence or mapping)."""
    if isinstance(value, Mapping):
        if set(value) != set(names):
            raise ValueError(
                f"{what} must give every channel of {names}, got keys {sorted(value)}"
            )
        return [value[n] for n in names]
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != len(names):
            raise ValueError(
                f"{what} must have one entry per channel {names}, got {len(value)}"
            )
        return list(value)
    return [value] * len(names)


def init_spec(
    calibration: LongCurves,
    *,
    domain: tuple[float, float],
    unit: str,
    channel_units: str | Sequence[str] | Mapping[str, str],
    epsilon: float,
    n_basis: int | Sequence[int] | Mapping[str, int] = 10,
    order: int | Sequence[int] | Mapping[str, int] = 4,
    penalty: float | Sequence[float] | Mapping[str, float] = 0.0,
    labels: Sequence[str] | None = None,
    protocol: str = "default",
    min_points: int | None = None,
    grid: Sequence[float] | None = None,
    quantile: float = 0.0,
    margin: float = 0.0,
) -> FederationSpec:
    r"""A spec whose per-coefficient bounds come from public calibration curves.

    Every calibration subject is projected as a client would be; coefficient
    :math:`k` spans the ``quantile`` .. ``1 - quantile`` range of the calibration
    subjects, widened by ``margin`` times its width on both sides (as
    :meth:`~ldpfda.fda.scaling.CoefficientScaler.from_public`). The calibration
    curves must be public, never the federation's private data: the bounds are
    written into a public file and no epsilon covers them. Their channels become the
    spec's, in order; ``channel_units``, ``n_basis``, ``order`` and ``penalty`` are
    one value for all or one per channel (a sequence, or a mapping by name).
    ``labels`` default to the calibration's label names, ``min_points`` to the
    largest basis size of a channel without penalty (at least 2).
    """
    if not isinstance(calibration, LongCurves):
        raise TypeError(
            f"calibration must be LongCurves, got {type(calibration).__name__}"
        )
    if calibration.n_subjects < 2:
        raise ValueError(
            f"calibration must hold at least 2 subjects, got {calibration.n_subjects}"
        )
    if not (isinstance(quantile, int | float) and 0.0 <= quantile < 0.5):
        raise ValueError(f"quantile must be in [0, 0.5), got {quantile!r}")
    if not (isinstance(margin, int | float) and math.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin must be a finite real number >= 0, got {margin!r}")
    names = tuple(calibration.channels)
    sizes, orders, penalties, units = (
        _per_channel(value, names, what)
        for what, value in dict(
            n_basis=n_basis, order=order, penalty=penalty, channel_units=channel_units
        ).items()
    )
    # Provisional channels with unit bounds: validated, and they give the bases.
    provisional = tuple(
        Channel(name, u, Basis(k, n, None, lam), Bounds.values(-1.0, 1.0))
        for name, u, k, n, lam in zip(
            names, units, orders, sizes, penalties, strict=True
        )
    )
    if min_points is None:
        min_points = max(
            [2] + [c.basis.size for c in provisional if c.basis.penalty == 0]
        )
    draft = FederationSpec(
        Domain(domain[0], domain[1], unit, None if grid is None else tuple(grid)),
        provisional,
        tuple(calibration.label_names if labels is None else labels),
        Release(protocol, epsilon),
        min_points,
    )
    _check_times(draft.domain, calibration)
    channels = tuple(
        _calibrated(draft, c, calibration, quantile, margin)
        for c in range(len(draft.channels))
    )
    return replace(draft, channels=channels)


#: A calibration coefficient whose spread is at most this share of the channel's largest
#: coefficient has none (rounding of the fit reaches about 1e-14 of it).
_NO_SPREAD = 1e-9


def _calibrated(
    draft: FederationSpec,
    c: int,
    calibration: LongCurves,
    quantile: float,
    margin: float,
) -> Channel:
    """Channel ``c`` of ``draft`` with bounds from the calibration's coefficients."""
    channel = draft.channels[c]
    coef = _fit(draft, c, calibration, c, "calibration subject").coefficients
    lo = np.quantile(coef, quantile, axis=0)
    hi = np.quantile(coef, 1.0 - quantile, axis=0)
    width = hi - lo
    # identical calibration curves can still give coefficients that differ by rounding
    # (a least-squares fit in BLAS): a spread at that level is no spread
    flat = width <= _NO_SPREAD * np.max(np.abs(coef))
    if np.any(flat):
        k = int(np.flatnonzero(flat)[0])
        raise ValueError(
            f"calibration coefficient {k} of channel {channel.name!r} has no "
            f"spread (all {calibration.n_subjects} subjects give {lo[k]!r}); "
            "give more varied calibration curves"
        )
    bounds = Bounds.coefficients(lo - margin * width, hi + margin * width)
    return replace(channel, bounds=bounds)


# -- command line ----------------------------------------------------------------------


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        allow_abbrev=False,
        description="Write or check a federation spec: the public TOML file that "
        "fixes the domain, channels, bases, rescaling bounds, labels and release of "
        "a federation before any private data is seen.",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    init = sub.add_parser(
        "init",
        allow_abbrev=False,
        help="derive a spec from public calibration curves",
        description="Project public calibration curves onto the bases and write a "
        "spec whose per-coefficient bounds span their range. The calibration file "
        "must be public data, never the federation's private data.",
    )
    init.add_argument("--calibration", required=True, type=Path, metavar="FILE")
    init.add_argument("--out", required=True, type=Path, metavar="SPEC")
    init.add_argument(
        "--domain", required=True, nargs=2, type=float, metavar=("START", "END")
    )
    init.add_argument("--unit", required=True, help="unit of the time domain")
    init.add_argument(
        "--channel-unit",
        action="append",
        required=True,
        metavar="NAME=UNIT",
        help="unit of a channel (repeat per channel; UNIT alone for all channels)",
    )
    init.add_argument("--epsilon", required=True, type=float)
    init.add_argument("--protocol", choices=PROTOCOLS, default="default")
    for flag, kind, default in (
        ("--n-basis", int, 10),
        ("--order", int, 4),
        ("--penalty", float, 0.0),
        ("--min-points", int, None),
        ("--quantile", float, 0.0),
        ("--margin", float, 0.0),
    ):
        init.add_argument(flag, type=kind, default=default)
    init.add_argument(
        "--labels",
        help="comma-separated label set (default: the calibration file's labels)",
    )
    init.add_argument(
        "--common-grid",
        action="store_true",
        help="declare the calibration curves' shared timestamps as the common grid",
    )
    init.add_argument(
        "--layout",
        choices=("wide", "long"),
        help="layout of a CSV calibration file (default: long if it has a time "
        "column, else wide)",
    )
    init.add_argument(
        "--channel",
        default="value",
        help="channel name of a single-channel file without channel names",
    )
    init.add_argument("--force", action="store_true", help="overwrite --out")
    check = sub.add_parser(
        "check",
        allow_abbrev=False,
        help="validate a spec and print its hash",
        description="Validate a spec file; print its summary and hash.",
    )
    check.add_argument("spec", type=Path, metavar="SPEC")
    return parser


def _channel_units(items: list[str], names: tuple[str, ...]) -> dict[str, str]:
    if len(items) == 1 and "=" not in items[0]:
        return dict.fromkeys(names, items[0])
    units = {}
    for item in items:
        name, sep, unit = item.partition("=")
        if not sep:
            raise ValueError(f"--channel-unit must be NAME=UNIT, got {item!r}")
        units[name] = unit
    missing = [n for n in names if n not in units]
    extra = [n for n in units if n not in names]
    if missing or extra:
        raise ValueError(
            f"--channel-unit must name every channel of the calibration file {names}"
            f" exactly (missing {missing}, unknown {extra})"
        )
    return units


def _common_grid(curves: LongCurves) -> tuple[float, ...]:
    keys = curves.subjects * (int(curves.curves.max()) + 1) + curves.curves
    grids = {
        tuple(np.sort(curves.times[keys == key]).tolist()) for key in np.unique(keys)
    }
    if len(grids) != 1:
        raise ValueError(
            f"--common-grid: the calibration curves are sampled on {len(grids)} "
            "different sets of timestamps, not one"
        )
    return grids.pop()


def _init(args: argparse.Namespace) -> str:
    from ldpfda.datasets.readers import read_curves

    if args.out.exists() and not args.force:
        raise ValueError(f"{args.out} exists; pass --force to overwrite it")
    calibration = read_curves(
        args.calibration, layout=args.layout, channel=args.channel
    )
    labels = (
        None if args.labels is None else [s.strip() for s in args.labels.split(",")]
    )
    # the options init_spec takes as they are given
    same = "unit epsilon n_basis order penalty protocol min_points quantile margin"
    spec = init_spec(
        calibration,
        domain=tuple(args.domain),
        channel_units=_channel_units(args.channel_unit, calibration.channels),
        labels=labels,
        grid=_common_grid(calibration) if args.common_grid else None,
        **{name: getattr(args, name) for name in same.split()},
    )
    spec.save(args.out)
    return (
        f"wrote {args.out} from {calibration.n_subjects} calibration subjects\n"
        + spec.summary()
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``ldpfda spec ...``: :func:`spec_main` under the package's command."""
    return spec_main(argv)


def spec_main(argv: Sequence[str] | None = None, *, prog: str = "ldpfda spec") -> int:
    """``spec init --calibration FILE --out SPEC [options]`` and ``spec check SPEC``.

    Returns the exit status: 0 on success, 1 if the spec or the calibration data is
    invalid (the reason goes to stderr); argparse exits with 2 on bad usage.
    """
    args = _parser(prog).parse_args(None if argv is None else list(argv))
    try:
        if args.action == "init":
            print(_init(args))
        else:
            spec = FederationSpec.load(args.spec)
            print(f"{args.spec}: a valid federation spec\n{spec.summary()}")
    except (ValueError, TypeError, OSError) as exc:
        print(f"{prog} {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0
