"""Parameter validation shared by the whole package.

Errors follow one pattern: a wrong type is a :class:`TypeError`, a bad value a
:class:`ValueError` that names the parameter and repeats the value.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray


def check_epsilon(
    epsilon: Any, name: str = "epsilon", *, allow_inf: bool = True
) -> float:
    """Return ``epsilon`` as a float in (0, inf] (or (0, inf) if ``allow_inf`` is
    False)."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(epsilon).__name__}")
    value = float(epsilon)
    upper = "inf]" if allow_inf else "inf)"
    if math.isnan(value) or value <= 0 or (not allow_inf and math.isinf(value)):
        raise ValueError(f"{name} must be in (0, {upper}, got {value!r}")
    return value


def check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return str(value)


def check_int(
    value: Any, name: str, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """Return ``value`` as an int within [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def check_real(
    value: Any,
    name: str,
    *,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Return ``value`` as a finite-or-bounded float within the stated interval."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    too_low = value <= low if low_open else value < low
    too_high = value >= high if high_open else value > high
    if math.isnan(value) or too_low or too_high:
        left = "(" if low_open else "["
        right = ")" if high_open else "]"
        raise ValueError(f"{name} must be in {left}{low}, {high}{right}, got {value!r}")
    return value


def check_finite_array(
    values: ArrayLike, name: str, *, ndim: int | None = None
) -> NDArray:
    """Return ``values`` as a float array, refusing NaN/inf and the wrong number of
    axes."""
    try:
        array = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be numeric, got {type(values).__name__}") from exc
    if ndim is not None and array.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        bad = np.argwhere(~np.isfinite(array))
        raise ValueError(
            f"{name} contains {len(bad)} NaN or infinite value(s), first at index "
            f"{tuple(int(i) for i in bad[0])}"
        )
    return array


def check_binary_labels(labels: ArrayLike, name: str = "labels") -> NDArray[np.int8]:
    """Return ``labels`` as an int8 array, refusing anything outside {0, 1}."""
    array = np.asarray(labels)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {array.shape}")
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be numeric 0/1, got dtype {array.dtype}")
    # Two comparisons, not np.isin: as exact, and a tenth of its time on one label.
    bad = ~((array == 0) | (array == 1))
    if np.any(bad):
        first = array[np.argmax(bad)]
        raise ValueError(
            f"{name} must be in {{0, 1}}, got {first!r} ({int(bad.sum())} bad)"
        )
    return array.astype(np.int8)


def check_class_labels(
    labels: ArrayLike, n_classes: int, name: str = "labels"
) -> NDArray[np.int8]:
    """Return ``labels`` as an int8 array, refusing anything outside 0 .. K - 1."""
    k = check_int(n_classes, "n_classes", minimum=2, maximum=127)
    array = np.asarray(labels)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {array.shape}")
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be class indices, got dtype {array.dtype}")
    bad = ~np.isin(array, np.arange(k))
    if np.any(bad):
        first = array[np.argmax(bad)]
        raise ValueError(
            f"{name} must be in {{0, ..., {k - 1}}}, got {first!r} "
            f"({int(bad.sum())} bad)"
        )
    return array.astype(np.int8)
