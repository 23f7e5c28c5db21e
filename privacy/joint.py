r"""Joint release of a client's label and features as one vector,
:math:`u = \tilde y\,(1, x) \in [-1, 1]^{p+1}`, :math:`\tilde y = 2y - 1`.

A linear classifier needs :math:`E[\tilde y\,(1, x)]` and the feature second moment
(:math:`u u^\top = (1, x)(1, x)^\top`), so nothing is spent on parts the server cannot
use. :math:`(x, y) \mapsto u` is a fixed map into the box, so one release of u at the
whole epsilon is epsilon-LDP for the pair.

With K > 2 classes (:class:`ClassSignedFeatureMechanism`) a client draws a class j
uniformly at random, independently of its data, and releases j with
:math:`\tilde y_j\,(1, x)`, :math:`\tilde y_j = 2\cdot 1\{y = j\} - 1`, at the whole
epsilon: the draw is public randomness, so the pair is epsilon-LDP as well.
:class:`ClassSplitMechanism` is the other K-class release: the label by K-ary
randomized response and x by the vector mechanism, the epsilon split between them, so
that every client informs every class's moment (no draw).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import (
    check_binary_labels,
    check_class_labels,
    check_finite_array,
    check_int,
)
from ldpfda.privacy.base import Mechanism
from ldpfda.privacy.random import RandomLike, as_source, uniform
from ldpfda.privacy.randomized_response import KaryRandomizedResponse
from ldpfda.privacy.vector_mechanisms import make_vector_mechanism

__all__ = [
    "ClassSignedFeatureMechanism",
    "ClassSplitMechanism",
    "SignedFeatureMechanism",
    "signed_features",
    "split_label_share",
]

#: The label shares :func:`split_label_share` chooses from.
LABEL_SHARES = tuple(round(0.05 * i, 2) for i in range(1, 20))


def signed_features(
    features: ArrayLike, labels: ArrayLike, *, fit_intercept: bool = True
) -> NDArray[np.float64]:
    r""":math:`\tilde y (1, x)` (:math:`\tilde y x` without intercept) of features in
    [-1, 1] and labels in {0, 1}."""
    signs = 2.0 * check_binary_labels(labels).astype(np.float64) - 1.0
    return _signed(features, signs, fit_intercept)


def _signed(
    features: ArrayLike, signs: NDArray[np.float64], fit_intercept: bool = True
) -> NDArray[np.float64]:
    """``signs[i] * (1, x_i)`` of features checked to lie in [-1, 1]."""
    x = check_finite_array(features, "features", ndim=2)
    if signs.size != x.shape[0]:
        raise ValueError(
            f"labels has {signs.size} entries for {x.shape[0]} feature rows"
        )
    if np.any(np.abs(x) > 1.0 + 1e-12):
        raise ValueError(
            "features must be rescaled into [-1, 1], got max |x| = "
            f"{np.abs(x).max():.6g}"
        )
    if fit_intercept:
        x = np.hstack([np.ones((x.shape[0], 1)), x])
    return signs[:, None] * np.clip(x, -1.0, 1.0)


class _JointRelease(Mechanism):
    """What both joint releases share: a vector ``mechanism`` on (1, x) of
    ``n_features`` features, its parameters, the rows ``(label, x)`` that
    :meth:`randomise` takes, and its output range."""

    def __init__(
        self, *, epsilon: float, n_features: int, mechanism: str = "hybrid"
    ) -> None:
        super().__init__(epsilon=epsilon)
        self.n_features = check_int(n_features, "n_features", minimum=1)
        self.dimension = self.n_features + 1
        self.inner = make_vector_mechanism(
            mechanism, epsilon=self.epsilon, dimension=self.dimension
        )

    def _own_parameters(self) -> dict[str, Any]:
        return {}

    def parameters(self) -> dict[str, Any]:
        return {
            "inner": self.inner.name,
            "fit_intercept": True,
            **self._own_parameters(),
            **self.inner.parameters(),
        }

    def _rows(self, values: ArrayLike) -> NDArray[np.float64]:
        v = check_finite_array(values, "values", ndim=2)
        if v.shape[1] != self.dimension:
            raise ValueError(
                f"values must have shape (n_clients, {self.dimension}) "
                f"(label, then features), got {v.shape}"
            )
        return v

    def output_range(self) -> tuple[float, float]:
        """The inner mechanism's range of every released coordinate (of z)."""
        return self.inner.output_range()  # type: ignore[attr-defined]


class SignedFeatureMechanism(_JointRelease):
    r"""One release per client of :math:`u = \tilde y (1, x)` with the vector
    ``mechanism`` (:func:`~ldpfda.privacy.vector_mechanisms.make_vector_mechanism`).

    :meth:`randomise` takes rows :math:`(y, x_1, \dots, x_p)` (label first),
    :meth:`release` features and labels apart; :meth:`bias` and :meth:`variance` refer
    to u, which the release estimates without bias.

    References
    ----------
    N. Wang et al., ICDE 2019 (the mechanisms and their use for gradients of linear
    models); J. C. Duchi, M. I. Jordan, M. J. Wainwright, JASA 2018.
    """

    name = "signed_features"

    def _encode(self, values: ArrayLike) -> NDArray[np.float64]:
        v = self._rows(values)
        return signed_features(v[:, 1:], v[:, 0])

    def randomise(
        self, values: ArrayLike, rng: RandomLike = None
    ) -> NDArray[np.float64]:
        return self.inner.randomise(self._encode(values), rng)

    def release(
        self, features: ArrayLike, labels: ArrayLike, rng: RandomLike = None
    ) -> NDArray[np.float64]:
        """Release ``(features, labels)`` of a batch of clients, one row per client."""
        u = signed_features(features, labels)
        if u.shape[1] != self.dimension:
            raise ValueError(
                f"features must have {self.n_features} columns, got {u.shape[1] - 1}"
            )
        return self.inner.randomise(u, rng)

    def bias(self, values: ArrayLike) -> NDArray[np.float64]:
        return self.inner.bias(self._encode(values))

    def variance(self, values: ArrayLike) -> NDArray[np.float64]:
        return self.inner.variance(self._encode(values))


class ClassSignedFeatureMechanism(_JointRelease):
    r"""One release per client of K > 2 classes: a class j drawn uniformly at random,
    and :math:`v = \tilde y_j\,(1, x)`, :math:`\tilde y_j = 2\cdot 1\{y = j\} - 1`,
    through the vector ``mechanism`` at the whole epsilon.

    j is drawn from the client's own stream, independently of (x, y), and v lies in
    the box for every j, so for any output (j, z) and inputs d, d',
    :math:`P(j, z \mid d) = \frac1K P(M(v_j(d)) = z) \le e^\varepsilon P(j, z \mid
    d')`. The release estimates the K blocks
    :math:`U = (\tilde y_0 w, \dots, \tilde y_{K-1} w)`, :math:`w = (1, x)`, without
    bias: :math:`\hat U = K\, e_j \otimes z`, with
    :math:`\mathrm{Var}(\hat U_{kl}) = K\big(\mathrm{Var}(z_l \mid v_k)
    + w_l^2\big) - w_l^2` (:meth:`variance`), and :math:`z z^\top` estimates
    :math:`w w^\top` as in the binary release. With two classes
    :math:`\tilde y_0 = -\tilde y_1`, the draw carries nothing, and the release is
    :class:`SignedFeatureMechanism` (j = 1 always), which K = 2 therefore refuses.

    :meth:`randomise` takes rows :math:`(y, x_1, \dots, x_p)` and returns rows
    :math:`(j, z_0, \dots, z_p)`; :meth:`release` takes features and labels apart and
    returns (j, z).

    References
    ----------
    N. Wang et al., ICDE 2019 (dimension sampling, here over the label's K coordinates);
    T. Hastie, R. Tibshirani, J. Friedman, "The Elements of Statistical Learning",
    2nd ed., Section 4.2 (linear regression of an indicator matrix).
    """

    name = "class_signed_features"
    _recorded = ("n_classes",)

    def __init__(
        self,
        *,
        epsilon: float,
        n_features: int,
        n_classes: int,
        mechanism: str = "hybrid",
    ) -> None:
        super().__init__(epsilon=epsilon, n_features=n_features, mechanism=mechanism)
        self.n_classes = check_int(n_classes, "n_classes", minimum=3, maximum=127)

    def _own_parameters(self) -> dict[str, Any]:
        return {"n_classes": self.n_classes}

    def _split(self, values: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.int8]]:
        v = self._rows(values)
        return v[:, 1:], check_class_labels(v[:, 0], self.n_classes)

    def draw_classes(self, n: int, rng: RandomLike) -> NDArray[np.int64]:
        """The class each of ``n`` clients reports on: uniform on 0 .. K - 1."""
        u = uniform(rng, (n, 1))[:, 0]
        return np.minimum((u * self.n_classes).astype(np.int64), self.n_classes - 1)

    def encode(
        self, features: ArrayLike, labels: ArrayLike, classes: ArrayLike
    ) -> NDArray[np.float64]:
        r""":math:`\tilde y_j (1, x)` of every client, j its entry of ``classes``."""
        y = check_class_labels(labels, self.n_classes)
        signs = np.where(y == np.asarray(classes), 1.0, -1.0)
        u = _signed(features, signs)
        if u.shape[1] != self.dimension:
            raise ValueError(
                f"features must have {self.n_features} columns, got {u.shape[1] - 1}"
            )
        return u

    def release(
        self, features: ArrayLike, labels: ArrayLike, rng: RandomLike = None
    ) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """(j, z) of a batch of clients, one row per client: the class first, then the
        vector from the same stream."""
        source = as_source(rng)
        n = check_finite_array(features, "features", ndim=2).shape[0]
        classes = self.draw_classes(n, source)
        return classes, self.inner.randomise(
            self.encode(features, labels, classes), source
        )

    def randomise(
        self, values: ArrayLike, rng: RandomLike = None
    ) -> NDArray[np.float64]:
        x, y = self._split(values)
        classes, z = self.release(x, y, rng)
        return np.column_stack([classes.astype(np.float64), z])

    def _blocks(self, values: ArrayLike) -> NDArray[np.float64]:
        """U of every row: (n, K, p + 1)."""
        x, y = self._split(values)
        n, k = y.size, self.n_classes
        every = np.repeat(np.arange(k)[None, :], n, axis=0).reshape(-1)
        u = self.encode(np.repeat(x, k, axis=0), np.repeat(y, k), every)
        return u.reshape(n, k, self.dimension)

    def bias(self, values: ArrayLike) -> NDArray[np.float64]:
        r"""Of :math:`\hat U`, flattened to (n, K (p + 1)): zero inside the box."""
        u = self._blocks(values)
        return self.inner.bias(u.reshape(-1, self.dimension)).reshape(u.shape[0], -1)

    def variance(self, values: ArrayLike) -> NDArray[np.float64]:
        r"""Of :math:`\hat U`, flattened to (n, K (p + 1)) (see the class docstring)."""
        u = np.clip(self._blocks(values), -1.0, 1.0)
        rows = u.reshape(-1, self.dimension)
        inner = self.inner.variance(rows).reshape(u.shape)
        return (self.n_classes * (inner + u**2) - u**2).reshape(u.shape[0], -1)


@functools.lru_cache(maxsize=256)
def split_label_share(
    epsilon: float, n_features: int, n_classes: int, mechanism: str = "hybrid"
) -> float:
    r"""The share of epsilon on the label that minimises the split release's stated
    variance (:meth:`ClassSplitMechanism.variance`, summed over the K (p + 1) entries)
    for a client at the box's root mean square, :math:`|x_l| = 1/\sqrt 3`, among
    :data:`LABEL_SHARES` (the first of equal ones). The sum does not depend on the
    label, and the choice only on public quantities, so every client and the server
    make it alike."""
    row = np.r_[0.0, np.full(n_features, 1.0 / np.sqrt(3.0))][None, :]
    totals = [
        ClassSplitMechanism(
            epsilon=epsilon,
            n_features=n_features,
            n_classes=n_classes,
            mechanism=mechanism,
            label_share=share,
        )
        .variance(row)
        .sum()
        for share in LABEL_SHARES
    ]
    return LABEL_SHARES[int(np.argmin(totals))]


class ClassSplitMechanism(Mechanism):
    r"""One release per client of K > 2 classes that every class's moment uses: the
    label by K-ary randomized response at ``label_share`` of epsilon, and x by the
    vector ``mechanism`` at the rest, each from the client's own stream. By default
    (None) the share minimises the stated variance (:func:`split_label_share`).

    Sequential composition: the pair is epsilon-LDP. With :math:`\tilde\jmath` the
    reported label, :math:`R_k = (1\{\tilde\jmath = k\} - q)/(p - q)` (p, q the
    probabilities of keeping the label and of reporting one given other class) is
    unbiased for :math:`1\{y = k\}`, and the noise of the label and of x are
    independent given the data, so for every class k

    .. math:: \hat U_k = (2 R_k - 1)\,(1, z)

    is unbiased for :math:`\tilde y_k\,w`, :math:`w = (1, x)`: every client informs
    all K blocks, where the drawn-class release (:class:`ClassSignedFeatureMechanism`)
    informs one, at K times the data's own spread. The constant coordinate is not
    released (it is 1); :math:`z z^\top` estimates :math:`x x^\top` as for any vector
    release. Per entry (:meth:`variance`)
    :math:`\mathrm{Var}(\hat U_{kl}) = (4 \mathrm{Var}(R_k) + 1)(\mathrm{Var}(z_l)
    + w_l^2) - w_l^2` (:math:`\mathrm{Var}(z_0) = 0`).

    :meth:`release` takes features and labels and returns the reported labels and
    the rows :math:`(1, z)`; :meth:`randomise` takes rows :math:`(y, x)` and returns
    rows :math:`(\tilde\jmath, 1, z)`.

    References
    ----------
    S. L. Warner, JASA 1965; N. Wang et al., ICDE 2019; T. Hastie, R. Tibshirani,
    J. Friedman, "The Elements of Statistical Learning", 2nd ed., Section 4.2.
    """

    name = "class_split_features"

    def __init__(
        self,
        *,
        epsilon: float,
        n_features: int,
        n_classes: int,
        mechanism: str = "hybrid",
        label_share: float | None = None,
    ) -> None:
        super().__init__(epsilon=epsilon)
        self.n_features = check_int(n_features, "n_features", minimum=1)
        self.n_classes = check_int(n_classes, "n_classes", minimum=3, maximum=127)
        if label_share is None:
            label_share = split_label_share(
                self.epsilon, self.n_features, self.n_classes, mechanism
            )
        if not 0.0 < label_share < 1.0:
            raise ValueError(f"label_share must be in (0, 1), got {label_share!r}")
        self.label_share = float(label_share)
        self.dimension = self.n_features + 1
        self.labels = KaryRandomizedResponse(
            epsilon=self.label_share * self.epsilon, n_categories=self.n_classes
        )
        self.inner = make_vector_mechanism(
            mechanism,
            epsilon=(1.0 - self.label_share) * self.epsilon,
            dimension=self.n_features,
        )

    def parameters(self) -> dict[str, Any]:
        return {
            "inner": self.inner.name,
            "fit_intercept": True,
            "n_classes": self.n_classes,
            "label_share": self.label_share,
            **self.inner.parameters(),
        }

    def output_range(self) -> tuple[float, float]:
        """The vector mechanism's range (it holds the constant 1 as well)."""
        low, high = self.inner.output_range()  # type: ignore[attr-defined]
        return min(low, 1.0), max(high, 1.0)

    def release(
        self, features: ArrayLike, labels: ArrayLike, rng: RandomLike = None
    ) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """(reported label, (1, z)) of a batch of clients: the label's uniforms first,
        then the vector's, from the same stream."""
        source = as_source(rng)
        y = check_class_labels(labels, self.n_classes)
        # (1, x) checked to lie in the box and clipped, as the joint releases take it.
        w = _signed(features, np.ones(y.size))
        if w.shape[1] != self.dimension:
            raise ValueError(
                f"features must have {self.n_features} columns, got {w.shape[1] - 1}"
            )
        reported = self.labels.randomise(y, source)
        z = self.inner.randomise(w[:, 1:], source)
        return reported, np.hstack([w[:, :1], z])

    def randomise(
        self, values: ArrayLike, rng: RandomLike = None
    ) -> NDArray[np.float64]:
        v = check_finite_array(values, "values", ndim=2)
        reported, z = self.release(v[:, 1:], v[:, 0], rng)
        return np.column_stack([reported.astype(np.float64), z])

    def indicators(self, reported: ArrayLike) -> NDArray[np.float64]:
        r""":math:`2 R_k - 1` of every reported label and class, shape (n, K)."""
        j = np.asarray(reported, dtype=np.int64).reshape(-1, 1)
        keep, other = self.labels.keep_probability, self.labels.other_probability
        hit = (j == np.arange(self.n_classes)[None, :]).astype(np.float64)
        return 2.0 * (hit - other) / (keep - other) - 1.0

    def blocks(self, reported: ArrayLike, z: ArrayLike) -> NDArray[np.float64]:
        r""":math:`\hat U` of every client, shape (n, K, p + 1)."""
        rows = check_finite_array(z, "z", ndim=2)
        return self.indicators(reported)[:, :, None] * rows[:, None, :]

    def variance(self, values: ArrayLike) -> NDArray[np.float64]:
        r"""Of :math:`\hat U` for rows :math:`(y, x)`, flattened to (n, K (p + 1))."""
        v = check_finite_array(values, "values", ndim=2)
        y = check_class_labels(v[:, 0], self.n_classes)
        w = np.hstack([np.ones((y.size, 1)), np.clip(v[:, 1:], -1.0, 1.0)])
        noise = np.hstack([np.zeros((y.size, 1)), self.inner.variance(w[:, 1:])])
        hit = self.labels.transition_matrix()[y]
        keep, other = self.labels.keep_probability, self.labels.other_probability
        second = 4.0 * hit * (1.0 - hit) / (keep - other) ** 2 + 1.0  # (n, K)
        out = second[:, :, None] * (noise + w**2)[:, None, :] - (w**2)[:, None, :]
        return out.reshape(y.size, -1)

    def bias(self, values: ArrayLike) -> NDArray[np.float64]:
        r"""Of :math:`\hat U`: zero inside the box."""
        return np.zeros_like(self.variance(values))
