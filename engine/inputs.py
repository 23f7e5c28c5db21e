r"""What the estimators accept as clients' data, and the featurizer each form needs.

Every row (sample) is one client, and every form ends as the scaled features
:math:`x \in [-1, 1]^p` that the client computes before any noise, with a featurizer
fixed before the private data is seen:

========================================  =============================================
form of ``X``                             featurizer (bounds from)
========================================  =============================================
2-D array + ``grid_points``, scikit-fda   B-spline projection on the grid, every channel
``FDataGrid`` (several channels:          on its own basis, coefficients concatenated
``dim_codomain > 1``), pandas DataFrame   (``public_curves`` on the same grid)
whose column names are the grid
scikit-fda ``FDataIrregular``             least squares on each sample's own points
                                          (:mod:`ldpfda.fda.irregular`; public curves)
scikit-fda ``FDataBasis`` in a            its coefficients (public curves in the same
``BSplineBasis``                          basis)
any of these, or ``LongCurves``, with a   the spec's bases, penalties and bounds
federation spec                           (:class:`~ldpfda.schema.spec.SpecFeaturizer`)
vectors (``input_type="vectors"``)        clipping to [-1, 1] (data-independent)
========================================  =============================================

A 2-D array is never read as vectors unless the estimator is told so: an array of
curves without its grid is an error that says what to pass. Bounds never come from the
training data: if ``public_curves`` are the training curves themselves, a
:class:`~ldpfda.exceptions.PrivacyLeakWarning` says that no epsilon covers them.
scikit-fda and pandas are recognised without being imported.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import check_finite_array
from ldpfda.datasets.curves import LongCurves
from ldpfda.exceptions import PrivacyLeakWarning
from ldpfda.fda.bspline import as_curves, bspline_knots
from ldpfda.fda.features import CurveFeaturizer, Featurizer
from ldpfda.fda.irregular import IrregularProjection, knots_from_interior
from ldpfda.fda.scaling import CoefficientScaler
from ldpfda.schema.spec import FederationSpec

__all__ = [
    "INPUT_TYPES",
    "BasisFeaturizer",
    "CurveInputs",
    "GridFeaturizer",
    "IrregularFeaturizer",
    "SpecCurvesFeaturizer",
    "check_spec",
    "curve_inputs",
    "describe",
    "grid_channels",
    "is_curves",
    "to_long_curves",
    "warn_if_private",
]

#: How a plain 2-D array is read: sampled ``curves`` (they need their grid) or
#: ``vectors`` already in [-1, 1].
INPUT_TYPES = ("curves", "vectors")

#: The default basis of curves without a spec (the platform's ``fda.*`` defaults).
DEFAULT_N_BASIS, DEFAULT_ORDER = 10, 4


# -- recognising the forms ------------------------------------------------------------


def _instance(X: Any, module: str, name: str) -> bool:
    """``isinstance(X, module.name)`` if ``module`` is imported (else X is none)."""
    loaded = sys.modules.get(module)
    kind = getattr(loaded, name, None) if loaded is not None else None
    return isinstance(kind, type) and isinstance(X, kind)


def _kind(X: Any) -> str:
    if isinstance(X, LongCurves):
        return "LongCurves"
    for name in ("FDataGrid", "FDataIrregular", "FDataBasis"):
        if _instance(X, "skfda", name):
            return name
    if _instance(X, "pandas", "DataFrame"):
        return "DataFrame"
    return "array"


def describe(X: Any) -> str:
    """The form of ``X`` in words, for error messages."""
    kind = _kind(X)
    return f"a {kind}" if kind in ("LongCurves", "DataFrame") else f"an {kind}"


def is_curves(X: Any) -> bool:
    """Whether ``X`` is curves by its type alone (scikit-fda data or LongCurves)."""
    return _kind(X) in ("LongCurves", "FDataGrid", "FDataIrregular", "FDataBasis")


def check_spec(spec: Any) -> FederationSpec | None:
    """A :class:`FederationSpec` from a spec or a path to its file (None passes)."""
    if spec is None or isinstance(spec, FederationSpec):
        return spec
    if isinstance(spec, str | Path):
        return FederationSpec.load(spec)
    raise TypeError(
        f"spec must be a FederationSpec, a path to a spec file or None, got "
        f"{type(spec).__name__}"
    )


def _same_data(a: Any, b: Any) -> bool:
    if a is b:
        return True
    values = []
    for item in (a, b):
        for attribute in ("data_matrix", "coefficients", "values"):
            if _kind(item) != "array" and hasattr(item, attribute):
                item = getattr(item, attribute)
                break
        try:
            values.append(np.asarray(item, dtype=float))
        except (TypeError, ValueError):
            return False
    return values[0].shape == values[1].shape and bool(
        np.array_equal(values[0], values[1], equal_nan=True)
    )


@contextmanager
def _public_curves() -> Iterator[None]:
    """Say that a ValueError or TypeError raised inside was about ``public_curves``
    (the readers and featurizers call whatever they read "curves")."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        if type(exc) not in (ValueError, TypeError):
            raise
        raise type(exc)(f"public_curves: {exc}") from exc


def warn_if_private(public_curves: Any, X: Any) -> None:
    """Warn with :class:`~ldpfda.exceptions.PrivacyLeakWarning` if the "public"
    curves are the training data: bounds and moments taken from them are not covered
    by any epsilon."""
    if public_curves is not None and _same_data(public_curves, X):
        warnings.warn(
            "public_curves are the training data: the rescaling bounds (and the "
            "public second moment) then depend on the private data and no epsilon "
            "covers them; pass curves drawn independently of every client, or a spec",
            PrivacyLeakWarning,
            stacklevel=4,
        )


# -- curves on one grid ----------------------------------------------------------------


def _check_one_variable(X: Any) -> None:
    if X.dim_domain != 1:
        raise ValueError(
            f"curves must be functions of one variable, got dim_domain={X.dim_domain}"
        )


def _dataframe_grid(frame: Any) -> NDArray[np.float64]:
    """The grid of a DataFrame of curves: its column names as numbers."""
    grid, bad = [], []
    for name in frame.columns:
        try:
            if isinstance(name, bool):
                raise TypeError(name)
            grid.append(float(name))
        except (TypeError, ValueError):
            bad.append(name)
    if bad:
        shown = ", ".join(repr(c) for c in bad[:3])
        raise ValueError(
            "a DataFrame of curves needs numeric column names, the grid's time "
            f"points; got {shown}{' ...' if len(bad) > 3 else ''}; for a table of "
            "feature vectors in [-1, 1] pass input_type='vectors'"
        )
    return np.array(grid)


def grid_channels(
    X: Any,
    grid_points: ArrayLike | None,
    *,
    allow_missing: bool = False,
    name: str = "curves",
) -> tuple[list[Any], NDArray[np.float64]]:
    """Curves on one grid as one 2-D array per channel, and the grid.

    ``X`` is a 2-D array with ``grid_points``, an ``FDataGrid`` (any number of
    channels) or a DataFrame whose column names are the grid. Values must be finite
    unless ``allow_missing``; the grid is checked by :func:`~ldpfda.fda.as_curves`.
    Errors call the curves ``name``.
    """
    kind = _kind(X)
    if kind in ("FDataGrid", "DataFrame") and grid_points is not None:
        raise ValueError(f"grid_points must not be given with {describe(X)}")
    if kind == "FDataGrid":
        _check_one_variable(X)
        grid = np.asarray(X.grid_points[0], dtype=float)
        matrix = X.data_matrix
        channels = [matrix[..., c] for c in range(X.dim_codomain)]
    elif kind == "DataFrame":
        grid = _dataframe_grid(X)
        channels = [X.to_numpy(dtype=float)]
    elif kind == "array":
        if grid_points is None:
            raise ValueError(
                "grid_points are needed to read a 2-D array as curves (fit(X, y, "
                "grid_points=...)); pass an FDataGrid, a spec with a common grid, or "
                "input_type='vectors' if the rows are feature vectors already in "
                "[-1, 1]"
            )
        grid = np.asarray(grid_points, dtype=float)
        channels = [X]
    else:
        raise TypeError(f"{describe(X)} is not sampled on one grid")
    if allow_missing:
        grid = check_finite_array(grid, "grid_points", ndim=1)
        return [np.asarray(c, dtype=float) for c in channels], grid
    first, checked_grid = as_curves(channels[0], grid, name=name)
    rest = [as_curves(values, checked_grid, name=name)[0] for values in channels[1:]]
    return [first, *rest], checked_grid


class GridFeaturizer:
    """Curves on one grid: each channel's B-spline projection and rescaling
    (:class:`~ldpfda.fda.features.CurveFeaturizer`), channels concatenated."""

    def __init__(self, channels: Sequence[CurveFeaturizer], grid: ArrayLike) -> None:
        self.channels = list(channels)
        self.grid = np.asarray(grid, dtype=float)

    @property
    def n_features_out(self) -> int:
        return sum(c.n_features_out for c in self.channels)

    @classmethod
    def calibrated(
        cls, public_curves: Any, grid: ArrayLike, *, n_basis: int, order: int
    ) -> GridFeaturizer:
        """Bases on ``grid`` and bounds from public curves (an array on ``grid``, an
        FDataGrid or a DataFrame)."""
        channels, public_grid = grid_channels(
            public_curves,
            grid if _kind(public_curves) == "array" else None,
            name="public_curves",
        )
        _check_same_grid(public_grid, grid, "public_curves")
        return cls(
            [
                CurveFeaturizer.calibrated(c, public_grid, n_basis=n_basis, order=order)
                for c in channels
            ],
            public_grid,
        )

    def transform(self, X: Any) -> NDArray[np.float64]:
        channels, grid = grid_channels(X, self.grid if _kind(X) == "array" else None)
        _check_same_grid(grid, self.grid, "curves")
        if len(channels) != len(self.channels):
            raise ValueError(
                f"curves have {len(channels)} channel(s), the model was fitted on "
                f"{len(self.channels)}"
            )
        parts = [f.transform(c) for f, c in zip(self.channels, channels, strict=True)]
        return parts[0] if len(parts) == 1 else np.hstack(parts)


def _check_same_grid(grid: NDArray[np.float64], fitted: ArrayLike, what: str) -> None:
    fitted = np.asarray(fitted, dtype=float)
    if grid.shape != fitted.shape or not np.allclose(grid, fitted):
        raise ValueError(
            f"{what} are sampled on a grid of {grid.size} points that differs from "
            f"the grid of {fitted.size} points the featurizer is fixed on"
        )


# -- curves on their own timestamps ------------------------------------------------


def to_long_curves(
    X: Any,
    *,
    grid_points: ArrayLike | None = None,
    channels: Sequence[str] | None = None,
    label_names: Sequence[str] = ("0", "1"),
) -> LongCurves:
    """Curves of any form in long form, one subject per sample, labels all 0.

    Channels are named by the data's coordinate names if it has them all, else by
    position with ``channels``. NaN values stay as missing observations.
    """
    kind = _kind(X)
    if kind == "LongCurves":
        return X
    if kind == "FDataBasis":
        raise TypeError("an FDataBasis holds coefficients, not observed points")
    if kind == "FDataIrregular":
        _check_one_variable(X)
        n = len(X)
        starts = np.asarray(X.start_indices, dtype=np.int64)
        counts = np.diff(np.append(starts, X.points.shape[0]))
        times = np.asarray(X.points, dtype=float)[:, 0]
        values = np.asarray(X.values, dtype=float)
        subjects = np.repeat(np.arange(n, dtype=np.int64), counts)
        names = getattr(X, "coordinate_names", None)
    else:
        arrays, grid = grid_channels(X, grid_points, allow_missing=True)
        n = arrays[0].shape[0] if arrays[0].ndim == 2 else 0
        for a in arrays:
            if a.ndim != 2 or a.shape[1] != grid.size:
                raise ValueError(
                    f"curves must have shape (n, {grid.size}) for a grid of "
                    f"{grid.size} points, got {a.shape}"
                )
        times = np.tile(grid, n)
        values = np.stack([a.reshape(-1) for a in arrays], axis=1)
        subjects = np.repeat(np.arange(n, dtype=np.int64), grid.size)
        names = getattr(X, "coordinate_names", None) if kind == "FDataGrid" else None
    d = values.shape[1]
    if names is not None and all(isinstance(c, str) for c in names):
        channel_names = tuple(names)
    elif channels is not None:
        if len(channels) != d:
            raise ValueError(
                f"curves have {d} channel(s), the spec declares {len(channels)}: "
                f"{tuple(channels)}"
            )
        channel_names = tuple(channels)
    else:
        channel_names = tuple(f"channel{c}" for c in range(d))
    return LongCurves(
        subjects,
        np.zeros(times.size, dtype=np.int64),
        times,
        values,
        np.zeros(n, dtype=np.int64),
        tuple(str(i) for i in range(n)),
        channel_names,
        tuple(label_names),
    )


class IrregularFeaturizer:
    """Curves sampled on their own timestamps: every channel's least-squares
    coefficients in one equispaced B-spline basis of the domain
    (:class:`~ldpfda.fda.irregular.IrregularProjection`), then rescaling."""

    def __init__(
        self,
        projections: Sequence[IrregularProjection],
        scaler: CoefficientScaler,
        min_points: int,
    ) -> None:
        self.projections = list(projections)
        self.scaler = scaler
        self.min_points = int(min_points)

    @property
    def n_features_out(self) -> int:
        return sum(p.n_basis for p in self.projections)

    @classmethod
    def calibrated(
        cls,
        public_curves: Any,
        domain_range: tuple[float, float],
        n_channels: int,
        *,
        n_basis: int,
        order: int,
    ) -> IrregularFeaturizer:
        """One basis per channel on ``domain_range``, bounds from public curves."""
        projection = IrregularProjection.equispaced(domain_range, n_basis, order)
        draft = cls([projection] * n_channels, CoefficientScaler(), n_basis)
        coefficients = draft.coefficients(public_curves)
        scaler = CoefficientScaler.from_public(coefficients)
        return cls(draft.projections, scaler, n_basis)

    def coefficients(self, X: Any) -> NDArray[np.float64]:
        if _kind(X) not in ("FDataIrregular", "FDataGrid"):
            raise TypeError(
                f"curves on their own timestamps must be an FDataIrregular (or an "
                f"FDataGrid), got {describe(X)}"
            )
        curves = to_long_curves(X)
        if curves.n_channels != len(self.projections):
            raise ValueError(
                f"curves have {curves.n_channels} channel(s), the model was fitted "
                f"on {len(self.projections)}"
            )
        if np.isnan(curves.values).any():
            raise ValueError(
                "curves contain NaN values; leave unobserved points out of an "
                "FDataIrregular (or fit with a spec, where NaN is a missing value)"
            )
        parts = []
        for c, projection in enumerate(self.projections):
            fit = projection.fit_subjects(curves, c, min_points=self.min_points)
            if not fit.usable.all():
                i = int(np.argmin(fit.usable))
                why = fit.why_unusable(i, self.min_points)
                raise ValueError(f"curve {i}, channel {c}: {why}")
            parts.append(fit.coefficients)
        return np.hstack(parts)

    def transform(self, X: Any) -> NDArray[np.float64]:
        return self.scaler.transform(self.coefficients(X))


# -- coefficients given --------------------------------------------------------------


def _basis_knots(X: Any) -> tuple[NDArray[np.float64], int]:
    basis = X.basis
    if type(basis).__name__ != "BSplineBasis":
        raise TypeError(
            f"an FDataBasis must be in a BSplineBasis, got {type(basis).__name__}"
        )
    return np.asarray(basis.knots, dtype=float), int(basis.order)


class BasisFeaturizer:
    """Curves given by their coefficients in one B-spline basis (an ``FDataBasis``):
    the coefficients, rescaled."""

    def __init__(self, knots: ArrayLike, order: int, scaler: CoefficientScaler) -> None:
        self.knots = np.asarray(knots, dtype=float)  # distinct knots, ends included
        self.order = int(order)
        self.scaler = scaler

    @property
    def n_features_out(self) -> int:
        return self.knots.size - 2 + self.order

    def coefficients(self, X: Any) -> NDArray[np.float64]:
        if _kind(X) != "FDataBasis":
            raise TypeError(f"the model reads FDataBasis curves, got {describe(X)}")
        knots, order = _basis_knots(X)
        if (
            order != self.order
            or knots.shape != self.knots.shape
            or not np.allclose(knots, self.knots)
        ):
            raise ValueError(
                f"curves are in a B-spline basis of order {order} with knots "
                f"{knots.tolist()}, the model's basis has order {self.order} and "
                f"knots {self.knots.tolist()}"
            )
        return check_finite_array(X.coefficients, "coefficients", ndim=2)

    def transform(self, X: Any) -> NDArray[np.float64]:
        return self.scaler.transform(self.coefficients(X))


# -- a federation spec ---------------------------------------------------------------


class SpecCurvesFeaturizer:
    """The spec's featurizer (:class:`~ldpfda.schema.spec.SpecFeaturizer`) for curves
    of any form: arrays on ``grid`` (``grid_points`` or the spec's common grid),
    FDataGrid, FDataIrregular, DataFrame, LongCurves, or an FDataBasis in the basis
    of a one-channel spec. NaN values are missing observations, as in a host's file."""

    def __init__(self, spec: FederationSpec, grid: ArrayLike | None = None) -> None:
        self.spec = spec
        self.featurizer = spec.featurizer()
        if grid is None and spec.domain.grid is not None:
            grid = spec.domain.grid
        self.grid = None if grid is None else np.asarray(grid, dtype=float)

    @property
    def n_features_out(self) -> int:
        return self.spec.n_features

    def long_curves(self, X: Any) -> LongCurves:
        grid = self.grid if _kind(X) == "array" else None
        if _kind(X) == "array" and grid is None:
            raise ValueError(
                "grid_points are needed to read a 2-D array as curves: the spec has "
                "no common grid (domain.grid); pass fit(X, y, grid_points=...), an "
                "FDataGrid or LongCurves"
            )
        return to_long_curves(
            X,
            grid_points=grid,
            channels=self.spec.channel_names,
            label_names=self.spec.labels,
        )

    def _basis_coefficients(self, X: Any) -> NDArray[np.float64]:
        spec = self.spec
        if len(spec.channels) != 1:
            raise ValueError(
                f"an FDataBasis holds one channel; the spec declares "
                f"{len(spec.channels)}: {spec.channel_names}"
            )
        basis = spec.channels[0].basis
        domain = (spec.domain.start, spec.domain.end)
        if basis.interior_knots is not None:
            full = knots_from_interior(domain, basis.interior_knots, basis.order)
        else:
            full = bspline_knots(domain, basis.size, basis.order)
        expected = BasisFeaturizer(np.unique(full), basis.order, self.featurizer.scaler)
        return expected.coefficients(X)

    def featurize(self, X: Any) -> tuple[NDArray[np.float64], NDArray[np.int64] | None]:
        """Features and, for LongCurves, the spec index of every subject's label."""
        if _kind(X) == "FDataBasis":
            return self.featurizer.scaler.transform(self._basis_coefficients(X)), None
        features = self.featurizer.featurize(self.long_curves(X))
        labels = features.labels if isinstance(X, LongCurves) else None
        return features.features, labels

    def transform(self, X: Any) -> NDArray[np.float64]:
        return self.featurize(X)[0]


# -- everything a fit needs from curves --------------------------------------------


@dataclass(frozen=True)
class CurveInputs:
    """The featurizer fixed for a fit and what it gives.

    ``labels`` are the spec's label indices of LongCurves subjects (None otherwise);
    ``public`` the scaled public features (None without public curves);
    ``n_columns`` the columns of a 2-D array or DataFrame (None for other forms).
    """

    featurizer: Featurizer
    features: NDArray[np.float64]
    labels: NDArray[np.int64] | None
    public: NDArray[np.float64] | None
    n_columns: int | None


def _resolve_basis(
    n_basis: int | None, order: int | None, spec: FederationSpec | None
) -> tuple[int, int]:
    if spec is not None:
        for name, value in (("n_basis", n_basis), ("order", order)):
            if value is not None:
                raise ValueError(
                    f"{name} must be None with a spec (the spec fixes every channel's "
                    f"basis), got {name}={value!r}"
                )
        return DEFAULT_N_BASIS, DEFAULT_ORDER
    return (
        DEFAULT_N_BASIS if n_basis is None else n_basis,
        DEFAULT_ORDER if order is None else order,
    )


def curve_inputs(
    X: Any,
    *,
    grid_points: ArrayLike | None,
    public_curves: Any,
    spec: FederationSpec | None,
    n_basis: int | None,
    order: int | None,
) -> CurveInputs:
    """Fix the featurizer for curves ``X`` (any form of the module docstring) and
    compute every client's features, and the public features if given."""
    kind = _kind(X)
    warn_if_private(public_curves, X)
    n_columns = None
    if kind in ("array", "DataFrame"):
        shape = np.shape(X)
        n_columns = int(shape[1]) if len(shape) == 2 else None
    if spec is not None:
        _resolve_basis(n_basis, order, spec)
        if grid_points is not None and kind != "array":
            raise ValueError(f"grid_points must not be given with {describe(X)}")
        spec_featurizer = SpecCurvesFeaturizer(spec, grid_points)
        features, labels = spec_featurizer.featurize(X)
        public = None
        if public_curves is not None:
            with _public_curves():
                public = spec_featurizer.transform(public_curves)
        return CurveInputs(spec_featurizer, features, labels, public, n_columns)
    if kind == "LongCurves":
        raise ValueError(
            "LongCurves carry no basis, domain or bounds: pass spec=... (a "
            "FederationSpec or the path of its file)"
        )
    if kind == "array" and grid_points is None:
        # A missing grid is the first error: its message says what to pass.
        grid_channels(X, None)
    if public_curves is None:
        raise ValueError(
            "public_curves are needed to fix the rescaling bounds of curves (fit(X, "
            "y, public_curves=...), curves drawn independently of every client), or "
            "pass a spec or a featurizer with bounds fixed in advance"
        )
    featurizer: Featurizer
    size, degree_order = _resolve_basis(n_basis, order, None)
    if kind == "FDataBasis":
        knots, basis_order = _basis_knots(X)
        basis_size = knots.size - 2 + basis_order
        for name, value, actual in (
            ("n_basis", n_basis, basis_size),
            ("order", order, basis_order),
        ):
            if value is not None and value != actual:
                raise ValueError(
                    f"{name}={value!r} but the curves are an FDataBasis with "
                    f"{name}={actual}: leave {name}=None or match it"
                )
        draft = BasisFeaturizer(knots, basis_order, CoefficientScaler())
        with _public_curves():
            coefficients = draft.coefficients(public_curves)
        scaler = CoefficientScaler.from_public(coefficients)
        featurizer = BasisFeaturizer(knots, basis_order, scaler)
    elif kind == "FDataIrregular":
        start, end = X.domain_range[0]
        with _public_curves():
            featurizer = IrregularFeaturizer.calibrated(
                public_curves,
                (float(start), float(end)),
                int(X.dim_codomain),
                n_basis=size,
                order=degree_order,
            )
    else:
        _, grid = grid_channels(X, grid_points)
        featurizer = GridFeaturizer.calibrated(
            public_curves, grid, n_basis=size, order=degree_order
        )
    features = featurizer.transform(X)
    return CurveInputs(
        featurizer, features, None, featurizer.transform(public_curves), n_columns
    )
