r"""Joint release of a client's label and features.

:class:`SignedFeatureMechanism`
    Each training client releases the single vector

    .. math:: u = \tilde y\,(1, x) \in [-1, 1]^{p+1}, \qquad \tilde y = 2y - 1,

    once, with a vector mechanism at its *whole* epsilon. A linear classifier needs
    :math:`E[\tilde y\,(1, x)]` (and the second moment of the features, which does not
    involve the label: :math:`u u^\top = (1, x)(1, x)^\top`), so nothing is spent on
    parts the server cannot use, and the product :math:`\tilde y x` is perturbed once
    instead of multiplying the noise of a separately released label and separately
    released features.

    *Epsilon accounting.* :math:`(x, y) \mapsto u` is a fixed map into the box, so for
    any two clients :math:`(x, y), (x', y')` and any output set S,
    :math:`P(M(u) \in S) \le e^\varepsilon P(M(u') \in S)`: the release is
    epsilon-LDP for the pair, and it is the client's only release. One
    :class:`~ldpfda.privacy.ReleaseEvent` of the whole epsilon is charged.

References
----------
J. C. Duchi, M. I. Jordan, M. J. Wainwright, JASA 2018; N. Wang et al., ICDE 2019.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import (
    check_binary_labels,
    check_finite_array,
    check_int,
)
from ldpfda.privacy.base import Mechanism, ReleaseEvent
from ldpfda.privacy.random import RandomLike
from ldpfda.privacy.vector_mechanisms import (
    VECTOR_MECHANISMS,
    ProductMoments,
    make_vector_mechanism,
    product_moments,
)

__all__ = [
    "SignedFeatureMechanism",
    "signed_features",
]


def signed_features(
    features: ArrayLike, labels: ArrayLike, *, fit_intercept: bool = True
) -> NDArray[np.float64]:
    r"""The vector a client releases jointly: :math:`\tilde y (1, x)`.

    Parameters
    ----------
    features : array of shape (n, p)
        Features already rescaled into [-1, 1].
    labels : array of shape (n,)
        Labels in {0, 1}.
    fit_intercept : bool
        Prepend the constant 1 (so the server also learns :math:`E[\tilde y]` and
        :math:`E[\tilde y x]` jointly).
    """
    x = check_finite_array(features, "features", ndim=2)
    y = check_binary_labels(labels)
    if y.size != x.shape[0]:
        raise ValueError(f"labels has {y.size} entries for {x.shape[0]} feature rows")
    if np.any(np.abs(x) > 1.0 + 1e-12):
        raise ValueError(
            "features must be rescaled into [-1, 1], got max |x| = "
            f"{np.abs(x).max():.6g}"
        )
    signs = 2.0 * y.astype(float) - 1.0
    if fit_intercept:
        x = np.hstack([np.ones((x.shape[0], 1)), x])
    return signs[:, None] * np.clip(x, -1.0, 1.0)


class SignedFeatureMechanism(Mechanism):
    r"""One release per client of :math:`\tilde y (1, x)` with a vector mechanism.

    ``values`` passed to :meth:`randomise` are the rows :math:`(y, x_1, \dots, x_p)`
    (label first, in {0, 1}; features in [-1, 1]); :meth:`release` takes them apart.
    The output estimates :math:`u = \tilde y(1, x)` without bias, so :meth:`bias` and
    :meth:`variance` refer to u. The mean of the releases estimates
    :math:`E[\tilde y(1, x)]` (:meth:`cross_moment`), and :meth:`second_moment`
    estimates :math:`E[(1, x)(1, x)^\top]` where the inner mechanism identifies it.

    Parameters
    ----------
    epsilon : float
        The client's whole budget, in (0, inf].
    n_features : int
        p.
    mechanism : {"hybrid", "piecewise", "duchi", "laplace"}
        The vector mechanism applied to u, of dimension p + 1 (p without intercept);
        see :func:`~ldpfda.privacy.vector_mechanisms.make_vector_mechanism`.
    fit_intercept : bool
        Release :math:`\tilde y(1, x)` (True) or :math:`\tilde y x` (False; only when
        the classes are known to be balanced and the features centred).

    References
    ----------
    N. Wang et al., ICDE 2019 (the mechanisms and their use for gradients of linear
    models); J. C. Duchi, M. I. Jordan, M. J. Wainwright, JASA 2018.
    """

    name = "signed_features"

    def __init__(
        self,
        *,
        epsilon: float,
        n_features: int,
        mechanism: str = "hybrid",
        fit_intercept: bool = True,
    ) -> None:
        super().__init__(epsilon=epsilon)
        self.n_features = check_int(n_features, "n_features", minimum=1)
        if mechanism not in VECTOR_MECHANISMS:
            raise ValueError(
                f"mechanism must be one of {VECTOR_MECHANISMS}, got {mechanism!r}"
            )
        if not isinstance(fit_intercept, bool):
            raise TypeError(
                f"fit_intercept must be a bool, got {type(fit_intercept).__name__}"
            )
        self.fit_intercept = fit_intercept
        self.inner = make_vector_mechanism(
            mechanism, epsilon=self.epsilon, dimension=self.dimension
        )

    @property
    def dimension(self) -> int:
        """Length of the released vector: p + 1 with intercept, else p."""
        return self.n_features + int(self.fit_intercept)

    def parameters(self) -> dict[str, Any]:
        return {
            "inner": self.inner.name,
            "fit_intercept": self.fit_intercept,
            **self.inner.parameters(),
        }

    def event(self) -> ReleaseEvent:
        return ReleaseEvent.of(self.name, self.epsilon, **self.parameters())

    def _encode(self, values: ArrayLike) -> NDArray[np.float64]:
        v = check_finite_array(values, "values", ndim=2)
        if v.shape[1] != self.n_features + 1:
            raise ValueError(
                f"values must have shape (n_clients, {self.n_features + 1}) "
                f"(label, then features), got {v.shape}"
            )
        return signed_features(v[:, 1:], v[:, 0], fit_intercept=self.fit_intercept)

    def randomise(
        self, values: ArrayLike, rng: RandomLike = None
    ) -> NDArray[np.float64]:
        return self.inner.randomise(self._encode(values), rng)

    def release(
        self, features: ArrayLike, labels: ArrayLike, rng: RandomLike = None
    ) -> NDArray[np.float64]:
        """Release ``(features, labels)`` of a batch of clients, one row per client."""
        u = signed_features(features, labels, fit_intercept=self.fit_intercept)
        if u.shape[1] != self.dimension:
            raise ValueError(
                f"features must have {self.n_features} columns, got "
                f"{u.shape[1] - int(self.fit_intercept)}"
            )
        return self.inner.randomise(u, rng)

    def bias(self, values: ArrayLike) -> NDArray[np.float64]:
        return self.inner.bias(self._encode(values))

    def variance(self, values: ArrayLike) -> NDArray[np.float64]:
        return self.inner.variance(self._encode(values))

    def output_range(self) -> tuple[float, float]:
        """Every coordinate of a release lies in this range (the inner mechanism's)."""
        return self.inner.output_range()  # type: ignore[attr-defined]

    def product_moments(self) -> ProductMoments:
        """Second-moment map of the inner mechanism (on u)."""
        return product_moments(self.inner)

    def second_moment(
        self, released: ArrayLike
    ) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        r"""Estimate of :math:`E[(1, x)(1, x)^\top]` from the releases, and its mask.

        Since :math:`u u^\top = (1, x)(1, x)^\top`, the second moment of the releases
        identifies it through :func:`~ldpfda.privacy.vector_mechanisms.product_moments`;
        the constant entry is known to be 1. Entries the mechanism does not identify
        (e.g. all off-diagonal ones when one coordinate is sampled) are 0 and False in
        the mask.
        """
        estimate, mask = self.product_moments().second_moment(released)
        if self.fit_intercept:
            estimate[0, 0], mask[0, 0] = 1.0, True
        return estimate, mask
