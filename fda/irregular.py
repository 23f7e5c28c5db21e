r"""B-spline coefficients of curves observed on their own timestamps.

:class:`IrregularProjection` maps the observed points :math:`(t_j, y_j)_{j=1}^n` of
one curve (irregular times, gaps, missing values) to the coefficients of a fixed
B-spline basis :math:`B_1, \dots, B_p` by penalised least squares,

.. math::

    \hat c = \arg\min_c \; \frac{1}{n} \sum_{j=1}^n \big(y_j - B(t_j)^\top c\big)^2
    + \lambda\, c^\top R\, c, \qquad R_{kl} = \int_a^b B_k''(t)\, B_l''(t)\, dt,

with the roughness penalty :math:`R` (:func:`roughness_matrix`), solved as the stacked
least-squares problem

.. math::

    \begin{pmatrix} \Phi / \sqrt{n} \\ \sqrt{\lambda}\, L \end{pmatrix} c \approx
    \begin{pmatrix} y / \sqrt{n} \\ 0 \end{pmatrix}, \qquad L^\top L = R,
    \qquad \Phi_{jk} = B_k(t_j),

by a singular value decomposition (never the normal equations). The residual is a
*mean* over the curve's points (Ramsay and Silverman's penalised sum of squares with
:math:`\lambda` scaled by :math:`n`), so one :math:`\lambda` smooths a sparse and a
dense curve alike; :math:`\lambda = 0` on a common grid is
:class:`~ldpfda.fda.bspline.BSplineProjection`.

A curve is *usable* when it has at least ``min_points`` observed points and they
determine every coefficient (the stacked matrix has full numerical rank). With
:math:`\lambda = 0` a gap without a point in some basis function's support leaves its
coefficient undetermined (the Schoenberg-Whitney condition fails); :math:`\lambda > 0`
bridges it with the smoothest continuation. Curves that share one set of timestamps
are projected by one precomputed :math:`p \times T` matrix, the others by batched SVDs
grouped by their number of points.

References
----------
J. O. Ramsay, B. W. Silverman, *Functional Data Analysis*, 2nd ed., Springer 2005,
ch. 5 (penalised least squares, the roughness penalty).
C. de Boor, *A Practical Guide to Splines*, revised ed., Springer 2001, ch. XIII
(the Schoenberg-Whitney condition).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import check_finite_array, check_int, check_real
from ldpfda.fda.bspline import bspline_design, bspline_knots

if TYPE_CHECKING:
    from ldpfda.datasets.curves import LongCurves

__all__ = [
    "GAP",
    "OK",
    "TOO_FEW_POINTS",
    "ClientFit",
    "CurveFit",
    "IrregularProjection",
    "coefficient_range",
    "knots_from_interior",
    "roughness_matrix",
]

#: Status of a curve in :class:`CurveFit`: usable.
OK = 0
#: Fewer observed points than ``min_points``: dropped.
TOO_FEW_POINTS = 1
#: The points do not determine every coefficient (a gap, or too few distinct times):
#: dropped.
GAP = 2

#: Largest stacked system (floats) solved at once; bounds the memory of a batch.
_BATCH_FLOATS = 1 << 22


def knots_from_interior(
    domain_range: tuple[float, float], interior_knots: ArrayLike, order: int
) -> NDArray[np.float64]:
    """Full knot vector from interior knots: the boundary knots repeated ``order``
    times, so the basis has ``len(interior_knots) + order`` functions.

    Interior knots must be strictly increasing and strictly inside the domain.
    """
    order = check_int(order, "order", minimum=1)
    a, b = float(domain_range[0]), float(domain_range[1])
    inner = check_finite_array(interior_knots, "interior_knots", ndim=1)
    if inner.size and not (
        np.all(np.diff(inner) > 0) and a < inner[0] and inner[-1] < b
    ):
        raise ValueError(
            f"interior_knots must be strictly increasing and strictly inside the "
            f"domain ({a!r}, {b!r}), got {inner.tolist()}"
        )
    return np.concatenate([np.full(order, a), inner, np.full(order, b)])


def roughness_matrix(knots: ArrayLike, order: int) -> NDArray[np.float64]:
    r"""Roughness penalty :math:`R_{kl} = \int B_k''(t) B_l''(t)\, dt`, shape (p, p).

    Exact: on every knot interval :math:`B_k'' B_l''` is a polynomial of degree
    :math:`2(\text{order} - 3)`, which Gauss-Legendre quadrature with ``order`` nodes
    integrates exactly. Bases of order < 3 are piecewise linear; their second
    derivative vanishes between knots and :math:`R = 0`.
    """
    t = np.asarray(knots, dtype=float)
    p = t.size - order
    if order < 3:
        return np.zeros((p, p))
    from scipy.interpolate import BSpline

    second = BSpline(t, np.eye(p), order - 1).derivative(2)
    breaks = np.unique(t)
    nodes, weights = np.polynomial.legendre.leggauss(order)
    half = np.diff(breaks)[:, None] / 2.0
    points = (breaks[:-1, None] + half * (nodes[None, :] + 1.0)).ravel()
    w = (half * weights[None, :]).ravel()
    d2 = second(points)  # (points, p)
    r = d2.T @ (w[:, None] * d2)
    return (r + r.T) / 2.0


def _penalty_root(r: NDArray[np.float64]) -> NDArray[np.float64]:
    r"""A matrix :math:`L` with :math:`L^\top L = R` (R symmetric positive
    semi-definite), from its eigendecomposition."""
    w, v = np.linalg.eigh(r)
    return np.sqrt(np.clip(w, 0.0, None))[:, None] * v.T


def coefficient_range(
    projection: ArrayLike, low: float, high: float
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Exact range of :math:`c = P x` over every sample with :math:`low \le x_i \le
    high`.

    Coordinate :math:`k` ranges over :math:`\sum_i \min(P_{ki}\,low, P_{ki}\,high)`
    .. :math:`\sum_i \max(P_{ki}\,low, P_{ki}\,high)`: a data-independent bound. For
    ``low = -high`` it is :meth:`~ldpfda.fda.bspline.BSplineProjection.
    coefficient_bound`; as the basis reproduces constants, the range is centred on
    :math:`(low + high) / 2`.
    """
    p = np.asarray(projection, dtype=float)
    lo, hi = p * float(low), p * float(high)
    return np.minimum(lo, hi).sum(axis=1), np.maximum(lo, hi).sum(axis=1)


@dataclass(frozen=True, eq=False)
class CurveFit:
    """Coefficients of many curves, one row per distinct curve id.

    Attributes
    ----------
    curve_ids : ndarray of shape (n_curves,)
        The distinct curve ids, sorted; row ``i`` belongs to ``curve_ids[i]``.
    coefficients : ndarray of shape (n_curves, p)
        NaN in the rows of curves that are not usable.
    n_points : ndarray of shape (n_curves,)
        Observed (non-NaN) points of each curve.
    status : ndarray of shape (n_curves,)
        :data:`OK`, :data:`TOO_FEW_POINTS` or :data:`GAP`.
    """

    curve_ids: NDArray[np.int64]
    coefficients: NDArray[np.float64]
    n_points: NDArray[np.int64]
    status: NDArray[np.int8]

    @property
    def usable(self) -> NDArray[np.bool_]:
        return self.status == OK


@dataclass(frozen=True, eq=False)
class ClientFit:
    """One coefficient vector per client: the mean over its usable curves.

    Attributes
    ----------
    coefficients : ndarray of shape (n_clients, p)
        NaN in the rows of clients without a usable curve.
    n_points : ndarray of shape (n_clients,)
        Observed points over all of the client's curves (used or dropped).
    n_curves : ndarray of shape (n_clients,)
        Usable curves, whose mean is the client's coefficient vector.
    n_too_few, n_gap : ndarray of shape (n_clients,)
        Curves dropped for fewer than ``min_points`` points, and for points that do
        not determine every coefficient.
    """

    coefficients: NDArray[np.float64]
    n_points: NDArray[np.int64]
    n_curves: NDArray[np.int64]
    n_too_few: NDArray[np.int64]
    n_gap: NDArray[np.int64]

    @property
    def usable(self) -> NDArray[np.bool_]:
        return self.n_curves > 0

    def why_unusable(self, i: int, min_points: int) -> str:
        """Why client ``i`` has no usable curve, in words (for an error message)."""
        too_few, gap = int(self.n_too_few[i]), int(self.n_gap[i])
        if self.n_points[i] == 0:
            return "no observed point (every value is missing)"
        return (
            f"no usable curve: {too_few} curve(s) with fewer than min_points "
            f"({min_points}) observed points, {gap} with a gap that leaves a "
            "coefficient undetermined (use a roughness penalty or more points)"
        )


def _check_observations(
    times: ArrayLike, values: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    t = check_finite_array(times, "times", ndim=1)
    try:
        y = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"values must be numeric, got {type(values).__name__}") from exc
    if y.shape != t.shape:
        raise ValueError(
            f"values must have the shape of times {t.shape}, got {y.shape}"
        )
    if np.any(np.isinf(y)):
        first = int(np.argmax(np.isinf(y)))
        raise ValueError(
            f"values must be finite or NaN (missing), got {y[first]!r} at "
            f"observation {first}"
        )
    return t, y


@dataclass(frozen=True, eq=False)
class IrregularProjection:
    r"""Penalised least-squares coefficients of curves observed at any times.

    Build it with :meth:`equispaced` (scikit-fda's knots, as
    :class:`~ldpfda.fda.bspline.BSplineProjection`) or :meth:`with_knots` (explicit
    interior knots); the fields are read-only results.
    """

    order: int
    #: Full knot vector, boundary knots repeated ``order`` times, shape (p + order,).
    knots: NDArray[np.float64] = field(repr=False)
    #: :math:`\lambda >= 0`.
    penalty: float
    #: :math:`R`, shape (p, p).
    roughness: NDArray[np.float64] = field(repr=False)
    #: :math:`\sqrt{\lambda} L`, shape (p, p).
    penalty_rows: NDArray[np.float64] = field(repr=False)

    @classmethod
    def equispaced(
        cls,
        domain_range: tuple[float, float],
        n_basis: int,
        order: int = 4,
        *,
        penalty: float = 0.0,
    ) -> IrregularProjection:
        """The basis of ``BSplineBasis(domain_range, n_basis, order)``."""
        order = check_int(order, "order", minimum=1)
        n_basis = check_int(n_basis, "n_basis", minimum=order)
        domain = _check_domain(domain_range)
        return cls._build(bspline_knots(domain, n_basis, order), order, penalty)

    @classmethod
    def with_knots(
        cls,
        domain_range: tuple[float, float],
        interior_knots: ArrayLike,
        order: int = 4,
        *,
        penalty: float = 0.0,
    ) -> IrregularProjection:
        """The basis with these interior knots (``len + order`` functions)."""
        domain = _check_domain(domain_range)
        return cls._build(
            knots_from_interior(domain, interior_knots, order), order, penalty
        )

    @classmethod
    def _build(
        cls, knots: NDArray[np.float64], order: int, penalty: Any
    ) -> IrregularProjection:
        lam = check_real(penalty, "penalty", low=0.0, high=np.inf, high_open=True)
        if lam > 0 and order < 3:
            raise ValueError(
                f"penalty must be 0 for order < 3 (the second derivative of a "
                f"piecewise linear spline vanishes), got {lam!r} with order {order}"
            )
        r = roughness_matrix(knots, order)
        rows = np.sqrt(lam) * _penalty_root(r) if lam > 0 else np.zeros_like(r)
        return cls(order, knots, lam, r, rows)

    @property
    def n_basis(self) -> int:
        return int(self.knots.size - self.order)

    @property
    def domain_range(self) -> tuple[float, float]:
        return float(self.knots[0]), float(self.knots[-1])

    def design(self, times: ArrayLike) -> NDArray[np.float64]:
        r""":math:`\Phi_{jk} = B_k(t_j)`, shape (n, p); times outside the domain are
        refused."""
        t = check_finite_array(times, "times", ndim=1)
        self._check_times(t)
        return bspline_design(t, self.knots, self.order)

    def _check_times(self, t: NDArray[np.float64]) -> None:
        a, b = self.domain_range
        outside = (t < a) | (t > b)
        if np.any(outside):
            first = int(np.argmax(outside))
            got = float(t[first])
            raise ValueError(
                f"times must lie in the domain [{a!r}, {b!r}], got {got!r} at "
                f"observation {first} ({int(outside.sum())} outside)"
            )

    def projection_matrix(self, grid: ArrayLike) -> NDArray[np.float64]:
        r"""The map :math:`P` (p, T) with :math:`\hat c = P y` for every curve
        observed at all points of ``grid``.

        Raises a ``ValueError`` if the grid does not determine every coefficient.
        """
        g = check_finite_array(grid, "grid", ndim=1)
        projection = self._grid_projection(g)
        if projection is None:
            raise ValueError(
                f"the {g.size} grid points do not determine all {self.n_basis} "
                "coefficients (a gap in the grid or too few points); add points or "
                "a roughness penalty"
            )
        return projection

    def _grid_projection(self, grid: NDArray[np.float64]) -> NDArray[np.float64] | None:
        phi = self.design(grid) / np.sqrt(grid.size)
        stacked = np.vstack([phi, self.penalty_rows])
        u, s, vt = np.linalg.svd(stacked, full_matrices=False)
        if not _full_rank(s[None, :], stacked.shape[0])[0]:
            return None
        return vt.T @ (u[: grid.size].T / s[:, None]) / np.sqrt(grid.size)

    def coefficient_range(
        self, low: float, high: float, grid: ArrayLike
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Range of the coefficients of every curve with values in [low, high] at the
        points of ``grid`` (see :func:`coefficient_range`)."""
        return coefficient_range(self.projection_matrix(grid), low, high)

    def project_curve(
        self, times: ArrayLike, values: ArrayLike, *, min_points: int = 1
    ) -> NDArray[np.float64]:
        """Coefficients (p,) of one curve; NaN values are dropped.

        A curve with fewer than ``min_points`` observed points, or whose points do
        not determine every coefficient, is a ``ValueError``.
        """
        t, y = _check_observations(times, values)
        fit = self._fit_curves(t, y, np.zeros(t.size, np.int64), min_points)
        n = int(fit.n_points[0]) if fit.n_points.size else 0
        if not fit.n_points.size or fit.status[0] == TOO_FEW_POINTS:
            raise ValueError(
                f"the curve has {n} observed point(s), fewer than min_points "
                f"({min_points})"
            )
        if fit.status[0] == GAP:
            raise ValueError(
                f"the curve's {n} observed points do not determine all "
                f"{self.n_basis} coefficients (a gap with no point in the support of "
                "a basis function, or too few distinct times); use a roughness "
                "penalty or more points"
            )
        return fit.coefficients[0]

    def project_client(
        self,
        times: ArrayLike,
        values: ArrayLike,
        curves: ArrayLike | None = None,
        *,
        min_points: int = 1,
    ) -> NDArray[np.float64]:
        """One client's coefficient vector (p,): the mean over its usable curves.

        ``curves`` labels each observation with its curve (e.g. the day; all one
        curve if None). Curves with too few points or a gap are dropped (see
        :meth:`fit_clients`); a client without any usable curve is a ``ValueError``.
        """
        m = np.size(times)
        c = np.zeros(m, np.int64) if curves is None else np.asarray(curves)
        fit = self.fit_clients(
            times, values, np.zeros(m, np.int64), c, 1, min_points=min_points
        )
        if not fit.usable[0]:
            raise ValueError(fit.why_unusable(0, min_points))
        return fit.coefficients[0]

    def fit_curves(
        self,
        times: ArrayLike,
        values: ArrayLike,
        curves: ArrayLike,
        *,
        min_points: int = 1,
    ) -> CurveFit:
        """Coefficients of every curve at once; observations (m,) may come in any
        order, ``curves`` (m,) gives each one's curve. A NaN value is missing and
        dropped, a time outside the domain a ``ValueError``; a curve with fewer than
        ``min_points`` observed points has status :data:`TOO_FEW_POINTS`."""
        t, y = _check_observations(times, values)
        return self._fit_curves(t, y, curves, min_points)

    def _fit_curves(
        self,
        t: NDArray[np.float64],
        y: NDArray[np.float64],
        curves: ArrayLike,
        min_points: int,
    ) -> CurveFit:
        min_points = check_int(min_points, "min_points", minimum=1)
        self._check_times(t)
        ids, inverse = _curve_index(curves, t.size)
        keep = ~np.isnan(y)
        t, y, inverse = t[keep], y[keep], inverse[keep]
        if t.size and not _is_sorted(inverse, t):
            order = np.lexsort((t, inverse))
            t, y, inverse = t[order], y[order], inverse[order]
        n_curves = ids.size
        counts = np.bincount(inverse, minlength=n_curves).astype(np.int64)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        coefficients = np.full((n_curves, self.n_basis), np.nan)
        status = np.where(counts < min_points, TOO_FEW_POINTS, OK).astype(np.int8)
        candidates = np.flatnonzero(status == OK)
        for n in np.unique(counts[candidates]):
            same = candidates[counts[candidates] == n]
            index = starts[same, None] + np.arange(n)
            self._solve_same_length(t[index], y[index], same, coefficients, status)
        return CurveFit(ids, coefficients, counts, status)

    def _solve_same_length(
        self,
        t: NDArray[np.float64],
        y: NDArray[np.float64],
        rows: NDArray[np.int64],
        coefficients: NDArray[np.float64],
        status: NDArray[np.int8],
    ) -> None:
        """Curves with the same number of points: one projection matrix for every
        set of timestamps that two or more of them share, batched SVDs for the
        rest."""
        if np.all(t == t[:1]):  # one grid for all: the common case, no sort
            grids, which, sizes = t[:1], np.zeros(len(t), np.int64), np.array([len(t)])
        else:
            grids, which, sizes = np.unique(
                t, axis=0, return_inverse=True, return_counts=True
            )
            which = which.ravel()
        shared = np.flatnonzero(sizes > 1)
        for g in shared:
            members = np.flatnonzero(which == g)
            projection = self._grid_projection(grids[g])
            if projection is None:
                status[rows[members]] = GAP
            else:
                coefficients[rows[members]] = y[members] @ projection.T
        alone = np.flatnonzero(np.isin(which, shared, invert=True))
        n, p = t.shape[1], self.n_basis
        step = max(1, _BATCH_FLOATS // ((n + p) * p))
        for begin in range(0, alone.size, step):
            chunk = alone[begin : begin + step]
            c, ok = self._solve_batch(t[chunk], y[chunk])
            coefficients[rows[chunk[ok]]] = c[ok]
            status[rows[chunk[~ok]]] = GAP

    def _solve_batch(
        self, t: NDArray[np.float64], y: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        """Stacked systems of k curves with n points each, solved by one batched
        SVD; returns the coefficients (k, p) and which systems have full rank."""
        k, n = t.shape
        p = self.n_basis
        phi = bspline_design(t.ravel(), self.knots, self.order).reshape(k, n, p)
        stacked = np.concatenate(
            [phi / np.sqrt(n), np.broadcast_to(self.penalty_rows, (k, p, p))], axis=1
        )
        u, s, vt = np.linalg.svd(stacked, full_matrices=False)
        ok = _full_rank(s, n + p)
        s_safe = np.where(ok[:, None], s, 1.0)
        uty = np.einsum("knp,kn->kp", u[:, :n, :], y) / np.sqrt(n)
        c = np.einsum("kqp,kq->kp", vt, uty / s_safe)
        return c, ok

    def fit_subjects(
        self, curves: LongCurves, column: int, *, min_points: int = 1
    ) -> ClientFit:
        """:meth:`fit_clients` of channel ``column`` of long curves: a client per
        subject."""
        return self.fit_clients(
            curves.times,
            curves.values[:, column],
            curves.subjects,
            curves.curves,
            curves.n_subjects,
            min_points=min_points,
        )

    def fit_clients(
        self,
        times: ArrayLike,
        values: ArrayLike,
        clients: ArrayLike,
        curves: ArrayLike,
        n_clients: int,
        *,
        min_points: int = 1,
    ) -> ClientFit:
        r"""One coefficient vector per client: the mean of its usable curves'.

        The mean weighs every curve (day) alike however densely it was sampled, and
        on a common grid it is the coefficient vector of the client's mean curve; the
        client still releases one vector in the same bounded box. Curves with fewer
        than ``min_points`` observed points, or a coefficient left undetermined, are
        dropped; a client without a usable curve gets a NaN row and ``n_curves ==
        0`` (the caller decides: a node refuses to answer). ``clients`` and
        ``curves`` (m,) give each observation's client, in ``0 .. n_clients - 1``,
        and its curve within the client (any non-negative ints).
        """
        t, y = _check_observations(times, values)
        n_clients = check_int(n_clients, "n_clients", minimum=0)
        who = _int_labels(clients, "clients", t.size)
        day = _int_labels(curves, "curves", t.size)
        if who.size and (who.min() < 0 or who.max() >= n_clients):
            raise ValueError(f"clients must lie in 0 .. {n_clients - 1}")
        if day.size and day.min() < 0:
            raise ValueError(f"curves must be >= 0, got {int(day.min())}")
        if day.size and int(day.max()) >= (1 << 62) // max(n_clients, 1):
            day = np.unique(day, return_inverse=True)[1].ravel()  # keys fit int64
        stride = int(day.max()) + 1 if day.size else 1
        fit = self._fit_curves(t, y, who * stride + day, min_points)
        owner = fit.curve_ids // stride
        p = self.n_basis
        usable = fit.usable

        def per_client(mask: NDArray[np.bool_]) -> NDArray[np.int64]:
            return np.bincount(owner[mask], minlength=n_clients).astype(np.int64)

        n_curves = per_client(usable)
        sums = np.zeros((n_clients, p))
        np.add.at(sums, owner[usable], fit.coefficients[usable])
        with np.errstate(invalid="ignore", divide="ignore"):
            coefficients = sums / n_curves[:, None]
        coefficients[n_curves == 0] = np.nan
        n_points = np.bincount(owner, weights=fit.n_points, minlength=n_clients).astype(
            np.int64
        )
        return ClientFit(
            coefficients,
            n_points,
            n_curves,
            per_client(fit.status == TOO_FEW_POINTS),
            per_client(fit.status == GAP),
        )


def _check_domain(domain_range: Any) -> tuple[float, float]:
    try:
        a, b = (float(v) for v in domain_range)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"domain_range must be two real numbers, got {domain_range!r}"
        ) from exc
    if not (np.isfinite(a) and np.isfinite(b) and a < b):
        raise ValueError(f"domain_range must be finite with start < end, got {(a, b)}")
    return a, b


def _int_labels(values: ArrayLike, name: str, m: int) -> NDArray[np.int64]:
    array = np.asarray(values)
    if array.shape != (m,):
        raise ValueError(f"{name} must have shape ({m},), got {array.shape}")
    if array.size and array.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, got dtype {array.dtype}")
    return array.astype(np.int64)


def _curve_index(
    curves: ArrayLike, m: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Distinct curve ids and each observation's row among them."""
    labels = _int_labels(curves, "curves", m)
    step = np.diff(labels)
    if np.all(step >= 0):  # already grouped in order: no sort needed
        new = np.concatenate([[True], step > 0])
        return labels[new], np.cumsum(new) - 1
    ids, inverse = np.unique(labels, return_inverse=True)
    return ids.astype(np.int64), inverse.ravel().astype(np.int64)


def _is_sorted(group: NDArray[np.int64], t: NDArray[np.float64]) -> bool:
    """Whether observations are sorted by group, then by time within a group."""
    dg = np.diff(group)
    return bool(np.all((dg > 0) | ((dg == 0) & (np.diff(t) >= 0))))


def _full_rank(s: NDArray[np.float64], rows: int) -> NDArray[np.bool_]:
    """Full numerical rank from singular values (k, p), sorted descending, with
    numpy's ``matrix_rank`` tolerance ``s_max * max(rows, p) * eps``."""
    tol = s[:, :1] * max(rows, s.shape[1]) * np.finfo(float).eps
    return np.asarray(s[:, -1] > tol[:, 0])
