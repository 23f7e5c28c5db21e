"""LDP baselines for MRMA at the same per-client epsilon: each client releases once,
with its whole budget, through its own keyed stream."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import ndtri

from ldpfda._validation import (
    check_binary_labels,
    check_epsilon,
    check_finite_array,
    check_int,
    check_real,
)
from ldpfda.privacy.base import Mechanism, ReleaseEvent
from ldpfda.privacy.laplace import laplace_scale
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.random import ClientStreams, RandomLike, uniform
from ldpfda.server.mrma import LinearModels, fit_linear

__all__ = [
    "HISTOGRAM_STREAM",
    "GAUSSIAN_STREAM",
    "GaussianClassifier",
    "GaussianRelease",
    "HistogramClassifier",
    "HistogramPartition",
    "LabelledHistogramRelease",
    "gaussian_classifier",
    "gaussian_sigma",
    "histogram_bins_per_axis",
    "histogram_classifier",
    "histogram_laplace_scale",
]

HISTOGRAM_STREAM = "baseline/histogram"
GAUSSIAN_STREAM = "baseline/gaussian"

#: L1 distance between the label-weighted indicator vectors of any two clients.
HISTOGRAM_SENSITIVITY = 2.0


def histogram_laplace_scale(*, epsilon: float) -> float:
    r"""Laplace scale :math:`b = 2 / \varepsilon` of the histogram release (0 at inf).

    The released :math:`v_j = (2y - 1)\,1\{x \in B_j\}` has one non-zero entry of
    absolute value 1, so :math:`\|v - v'\|_1 \le 2` whatever the number of cells.

    References
    ----------
    T. B. Berrett, C. Butucea, arXiv:1912.04629 (2019), Sec. 2.
    """
    return laplace_scale(epsilon=epsilon, sensitivity=HISTOGRAM_SENSITIVITY)


def histogram_bins_per_axis(
    *, n_clients: int, epsilon: float, dimension: int, smoothness: float = 1.0
) -> int:
    r"""Bins per axis from the rate-optimal bin width, fixed before any data is seen.

    Balancing the bias :math:`h^\beta` of a :math:`\beta`-Hölder regression function
    against the count noise :math:`(n\varepsilon^2 h^{2d})^{-1/2}` gives
    :math:`L = \max(2, \mathrm{round}((n\varepsilon^2)^{1/(2\beta+2d)}))`
    (Berrett and Butucea 2019); ``epsilon = inf`` counts as :math:`10^3`.
    """
    n = check_int(n_clients, "n_clients", minimum=1)
    eps = min(check_epsilon(epsilon), 1e3)
    d = check_int(dimension, "dimension", minimum=1)
    beta = check_real(smoothness, "smoothness", low=0.0, low_open=True)
    return max(2, int(round((n * eps**2) ** (1.0 / (2.0 * beta + 2.0 * d)))))


@dataclass(frozen=True)
class HistogramPartition:
    r"""A regular partition of :math:`[-1, 1]^p` into at most ``max_cells`` cells.

    If :math:`L^p` exceeds ``max_cells``, L is lowered to
    :math:`\max(2, \lfloor \text{max\_cells}^{1/p} \rfloor)`; if :math:`2^p` still
    exceeds it, the p coordinates are averaged in
    :math:`d = \lfloor \log_2(\text{max\_cells}) \rfloor` contiguous blocks (a fixed,
    data-independent linear map that keeps [-1, 1]; for B-spline coefficients it is a
    coarser piecewise description of the curve), and the d averages are binned.
    ``blocks`` holds the coordinates averaged into each binned axis.
    """

    dimension: int
    bins_per_axis: int
    blocks: tuple[tuple[int, ...], ...]

    @classmethod
    def regular(
        cls, dimension: int, bins_per_axis: int, *, max_cells: int = 1024
    ) -> HistogramPartition:
        p = check_int(dimension, "dimension", minimum=1)
        bins = check_int(bins_per_axis, "bins_per_axis", minimum=1)
        max_cells = check_int(max_cells, "max_cells", minimum=2)
        d = p
        if bins > 1 and bins**p > max_cells:
            # Coarser bins first; average coordinates only if even 2 bins are too many.
            bins = max(2, int(math.floor(max_cells ** (1.0 / p) + 1e-9)))
            if bins**p > max_cells:
                d = max(1, int(math.floor(math.log(max_cells) / math.log(bins) + 1e-9)))
        split = np.array_split(np.arange(p), d)
        return cls(p, bins, tuple(tuple(int(i) for i in b) for b in split))

    @property
    def n_axes(self) -> int:
        return len(self.blocks)

    @property
    def n_cells(self) -> int:
        return int(self.bins_per_axis**self.n_axes)

    def cells(self, features: ArrayLike) -> NDArray[np.int64]:
        """The cell index of each row of ``features`` (values clipped to [-1, 1])."""
        x = np.clip(check_finite_array(features, "features", ndim=2), -1.0, 1.0)
        if x.shape[1] != self.dimension:
            raise ValueError(
                f"features must have {self.dimension} columns, got {x.shape[1]}"
            )
        z = np.stack([x[:, list(b)].mean(axis=1) for b in self.blocks], axis=1)
        bins = np.minimum(
            ((z + 1.0) / 2.0 * self.bins_per_axis).astype(np.int64),
            self.bins_per_axis - 1,
        )
        weights = self.bins_per_axis ** np.arange(self.n_axes, dtype=np.int64)
        return bins @ weights


class LabelledHistogramRelease(Mechanism):
    r"""Laplace release of a client's label-weighted cell indicator vector.

    A client with features in cell :math:`j(x)` and label :math:`y` releases

    .. math:: Z_k = (2y - 1)\,1\{k = j(x)\} + b\,\xi_k,\quad k = 1..K,\qquad
              b = 2/\varepsilon,

    with i.i.d. standard Laplace :math:`\xi_k`: :math:`\varepsilon`-LDP for (x, y),
    since any two inputs give vectors at L1 distance at most 2.

    References
    ----------
    T. B. Berrett, C. Butucea, arXiv:1912.04629 (2019).
    """

    name = "histogram_laplace"

    def __init__(self, *, epsilon: float, n_cells: int) -> None:
        super().__init__(epsilon=epsilon)
        self.n_cells = check_int(n_cells, "n_cells", minimum=1)
        self.scale = histogram_laplace_scale(epsilon=self.epsilon)

    def parameters(self) -> dict[str, Any]:
        return {
            "n_cells": self.n_cells,
            "scale": self.scale,
            "sensitivity": HISTOGRAM_SENSITIVITY,
        }

    def indicators(self, cells: ArrayLike, labels: ArrayLike) -> NDArray[np.float64]:
        r"""The clean vectors :math:`(2y-1) 1\{k = j\}`, shape (n, K)."""
        j = np.asarray(cells, dtype=np.int64).reshape(-1)
        y = check_binary_labels(labels)
        if j.size != y.size:
            raise ValueError(f"cells has {j.size} entries for {y.size} labels")
        if j.size and (j.min() < 0 or j.max() >= self.n_cells):
            raise ValueError(
                f"cells must be in [0, {self.n_cells}), got {j.min()}..{j.max()}"
            )
        v = np.zeros((j.size, self.n_cells))
        v[np.arange(j.size), j] = 2.0 * y - 1.0
        return v

    def randomise(
        self, values: ArrayLike, rng: RandomLike = None
    ) -> NDArray[np.float64]:
        """Add the Laplace noise to indicator vectors of shape (n, K)."""
        v = check_finite_array(values, "values", ndim=2)
        if v.shape[1] != self.n_cells:
            raise ValueError(
                f"values must have {self.n_cells} columns, got {v.shape[1]}"
            )
        if not self.is_private:
            return v.copy()
        u = uniform(rng, v.shape) - 0.5
        return v - self.scale * np.sign(u) * np.log1p(-2.0 * np.abs(u))

    def bias(self, values: ArrayLike) -> NDArray[np.float64]:
        return np.zeros_like(check_finite_array(values, "values", ndim=2))

    def variance(self, values: ArrayLike) -> NDArray[np.float64]:
        shape = check_finite_array(values, "values", ndim=2).shape
        return np.full(shape, 2.0 * self.scale**2)


@dataclass(frozen=True)
class HistogramClassifier:
    r"""The private histogram rule: one label per cell, by the sign of its noisy sum.

    ``cell_sums`` is :math:`\sum_i Z_{ik}`, unbiased for
    :math:`n\,E[(2Y-1) 1\{X \in B_k\}]`.
    """

    partition: HistogramPartition
    cell_sums: NDArray[np.float64]

    def error(self, features: ArrayLike, labels: ArrayLike) -> float:
        """Misclassification rate on clean (features, labels)."""
        predicted = (self.cell_sums > 0).astype(np.int8)[self.partition.cells(features)]
        return float(np.mean(predicted != np.asarray(labels)))


def histogram_classifier(
    features: ArrayLike,
    labels: ArrayLike,
    *,
    epsilon: float,
    client_ids: ArrayLike,
    seed: int,
    max_cells: int = 1024,
    smoothness: float = 1.0,
    chunk_size: int = 2048,
    ledger: PrivacyLedger | None = None,
) -> HistogramClassifier:
    r"""Fit the locally private histogram classifier of Berrett and Butucea (2019).

    1. The partition is fixed in advance: L bins per axis of [-1, 1]
       (:func:`histogram_bins_per_axis`), at most ``max_cells`` cells
       (:class:`HistogramPartition`).
    2. Each client releases :math:`Z_i = (2y_i - 1) e_{j(x_i)} + (2/\varepsilon)\xi_i`
       (:class:`LabelledHistogramRelease`).
    3. The server labels cell k by the sign of :math:`\sum_i Z_{ik}`, the sign of the
       estimated :math:`(2\eta - 1)` on the cell, where :math:`\eta(x) = P(Y=1|X=x)`.

    ``features`` are already in [-1, 1]; ``seed`` keys the clients' noise;
    ``chunk_size`` clients are processed at once (memory only, the result does not
    depend on it); ``ledger`` is charged with every client's release.

    References
    ----------
    T. B. Berrett, C. Butucea, "Classification under local differential privacy",
    arXiv:1912.04629 (2019).
    """
    x, y, ids = _clients(features, labels, client_ids)
    epsilon = check_epsilon(epsilon)
    chunk_size = check_int(chunk_size, "chunk_size", minimum=1)
    bins = histogram_bins_per_axis(
        n_clients=max(1, y.size),
        epsilon=epsilon,
        dimension=x.shape[1],
        smoothness=smoothness,
    )
    partition = HistogramPartition.regular(x.shape[1], bins, max_cells=max_cells)
    mechanism = LabelledHistogramRelease(epsilon=epsilon, n_cells=partition.n_cells)
    if ledger is not None:
        ledger.charge(mechanism.event(), ids)
    sums = np.zeros(partition.n_cells)
    for start in range(0, y.size, chunk_size):
        sl = slice(start, start + chunk_size)
        clean = mechanism.indicators(partition.cells(x[sl]), y[sl])
        stream = ClientStreams(seed, ids[sl]).stream(HISTOGRAM_STREAM)
        sums += mechanism.randomise(clean, stream).sum(axis=0)
    return HistogramClassifier(partition, sums)


def _clients(
    features: ArrayLike, labels: ArrayLike, client_ids: ArrayLike
) -> tuple[NDArray[np.float64], NDArray[np.int8], NDArray[np.int64]]:
    """Checked features, labels and client ids, one row each."""
    x = check_finite_array(features, "features", ndim=2)
    y = check_binary_labels(labels)
    if y.size != x.shape[0]:
        raise ValueError(f"labels has {y.size} entries for {x.shape[0]} feature rows")
    ids = np.asarray(client_ids, dtype=np.int64).reshape(-1)
    if ids.size != y.size:
        raise ValueError(f"client_ids has {ids.size} entries for {y.size} clients")
    return x, y, ids


def gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float) -> float:
    r"""Noise standard deviation of the classic Gaussian mechanism, as Flower uses it.

    .. math:: \sigma = \frac{\Delta_2 \sqrt{2 \ln(1.25/\delta)}}{\varepsilon}

    The formula of ``flwr``'s ``LocalDpMod``: :math:`(\varepsilon, \delta)`-DP only for
    :math:`\varepsilon < 1`; above, what a Flower user gets, not a proven guarantee.
    ``epsilon = inf`` gives 0.

    References
    ----------
    C. Dwork, A. Roth, Found. Trends Theor. Comput. Sci. 9 (2014), Thm. A.1.
    """
    epsilon = check_epsilon(epsilon)
    delta = _check_delta(delta)
    sensitivity = check_real(sensitivity, "sensitivity", low=0.0, low_open=True)
    if math.isinf(epsilon):
        return 0.0
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def _check_delta(delta: float) -> float:
    return check_real(delta, "delta", low=0.0, high=1.0, low_open=True, high_open=True)


class GaussianRelease(Mechanism):
    r"""Clip a vector to L2 norm C and add Gaussian noise, as Flower's ``LocalDpMod``.

    .. math:: \tilde v = v \min(1, C/\|v\|_2) + \sigma \zeta, \qquad
              \sigma = \Delta_2 \sqrt{2\ln(1.25/\delta)}/\varepsilon,

    with i.i.d. standard normal :math:`\zeta`. Two clipped vectors are at L2 distance at
    most 2C: the sensitivity is :math:`\Delta_2 = 2C`.
    """

    name = "gaussian"

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float = 1e-5,
        clipping_norm: float,
    ) -> None:
        super().__init__(epsilon=epsilon)
        self.delta = _check_delta(delta)
        self.clipping_norm = check_real(
            clipping_norm, "clipping_norm", low=0.0, low_open=True
        )
        self.sensitivity = 2.0 * self.clipping_norm
        self.sigma = gaussian_sigma(
            epsilon=self.epsilon, delta=self.delta, sensitivity=self.sensitivity
        )

    def parameters(self) -> dict[str, Any]:
        return {
            "delta": self.delta,
            "clipping_norm": self.clipping_norm,
            "sensitivity": self.sensitivity,
            "sigma": self.sigma,
        }

    def clip(self, values: ArrayLike) -> NDArray[np.float64]:
        """Rows scaled down to L2 norm at most C."""
        v = check_finite_array(values, "values", ndim=2)
        norm = np.linalg.norm(v, axis=1, keepdims=True)
        return v * np.minimum(1.0, self.clipping_norm / np.maximum(norm, 1e-300))

    def randomise(
        self, values: ArrayLike, rng: RandomLike = None
    ) -> NDArray[np.float64]:
        v = self.clip(values)
        if not self.is_private:
            return v
        return v + self.sigma * ndtri(uniform(rng, v.shape))

    def bias(self, values: ArrayLike) -> NDArray[np.float64]:
        v = check_finite_array(values, "values", ndim=2)
        return self.clip(v) - v

    def variance(self, values: ArrayLike) -> NDArray[np.float64]:
        shape = check_finite_array(values, "values", ndim=2).shape
        return np.full(shape, self.sigma**2)


@dataclass(frozen=True)
class GaussianClassifier:
    """Logistic regression fitted on Gaussian-noised features and thresholded labels."""

    model: LinearModels
    event: ReleaseEvent

    def error(self, features: ArrayLike, labels: ArrayLike) -> float:
        return float(self.model.errors(features, labels)[0])


def gaussian_classifier(
    features: ArrayLike,
    labels: ArrayLike,
    *,
    epsilon: float,
    client_ids: ArrayLike,
    seed: int,
    delta: float = 1e-5,
    label_mode: str = "threshold",
    ledger: PrivacyLedger | None = None,
) -> GaussianClassifier:
    r"""The "Flower user" baseline: Gaussian LDP on (features, label), then logistic.

    Each client releases :math:`\tilde v = v + \sigma\zeta`, :math:`v = (x, 2y - 1)`
    clipped to L2 norm :math:`C = \sqrt{p+1}` (no clipping),
    :math:`\sigma = 2C\sqrt{2\ln(1.25/\delta)}/\varepsilon` (:class:`GaussianRelease`):
    ``LocalDpMod(clipping_norm=C, sensitivity=2C, epsilon, delta)`` on the data instead
    of a model update. The server fits logistic regression on :math:`\tilde x` of the
    label :math:`1\{\tilde v_{p+1} > 0\}` (``'threshold'``), or least squares of
    :math:`\tilde v_{p+1}` on :math:`(1, \tilde x)`, whose sign gives the class
    (``'regress'``).

    References
    ----------
    D. J. Beutel et al., "Flower: a friendly federated learning research framework",
    arXiv:2007.14390 (``flwr.client.mod.LocalDpMod``); C. Dwork, A. Roth, "The
    algorithmic foundations of differential privacy" (2014), Thm. A.1.
    """
    x, y, ids = _clients(features, labels, client_ids)
    n, p = x.shape
    if label_mode not in ("threshold", "regress"):
        raise ValueError(
            f"label_mode must be 'threshold' or 'regress', got {label_mode!r}"
        )
    mechanism = GaussianRelease(
        epsilon=epsilon, delta=delta, clipping_norm=math.sqrt(p + 1.0)
    )
    if ledger is not None:
        ledger.charge(mechanism.event(), ids)
    v = np.column_stack([np.clip(x, -1.0, 1.0), 2.0 * y - 1.0])
    stream = ClientStreams(seed, ids).stream(GAUSSIAN_STREAM)
    noisy = mechanism.randomise(v, stream)
    x_noisy, label = noisy[:, :p], noisy[:, p]
    if label_mode == "threshold":
        model = fit_linear(x_noisy, (label > 0).astype(np.int8))
    else:
        design = np.column_stack([np.ones(n), x_noisy])
        solution, *_ = np.linalg.lstsq(design, label, rcond=None)
        coef = cast(NDArray[np.float64], solution)  # lstsq of float64 is float64
        model = LinearModels(coef[None, 1:], coef[:1])
    return GaussianClassifier(model, mechanism.event())
