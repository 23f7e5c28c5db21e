r"""Joint release of a client's label and features as one vector,
:math:`u = \tilde y\,(1, x) \in [-1, 1]^{p+1}`, :math:`\tilde y = 2y - 1`.

A linear classifier needs :math:`E[\tilde y\,(1, x)]` and the feature second moment
(:math:`u u^\top = (1, x)(1, x)^\top`), so nothing is spent on parts the server cannot
use. :math:`(x, y) \mapsto u` is a fixed map into the box, so one release of u at the
whole epsilon is epsilon-LDP for the pair.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import check_binary_labels, check_finite_array, check_int
from ldpfda.privacy.base import Mechanism
from ldpfda.privacy.random import RandomLike
from ldpfda.privacy.vector_mechanisms import make_vector_mechanism

__all__ = ["SignedFeatureMechanism", "signed_features"]


def signed_features(
    features: ArrayLike, labels: ArrayLike, *, fit_intercept: bool = True
) -> NDArray[np.float64]:
    r""":math:`\tilde y (1, x)` (:math:`\tilde y x` without intercept) of features in
    [-1, 1] and labels in {0, 1}."""
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

    def __init__(
        self, *, epsilon: float, n_features: int, mechanism: str = "hybrid"
    ) -> None:
        super().__init__(epsilon=epsilon)
        self.n_features = check_int(n_features, "n_features", minimum=1)
        self.dimension = self.n_features + 1
        self.inner = make_vector_mechanism(
            mechanism, epsilon=self.epsilon, dimension=self.dimension
        )

    def parameters(self) -> dict[str, Any]:
        return {
            "inner": self.inner.name,
            "fit_intercept": True,
            **self.inner.parameters(),
        }

    def _encode(self, values: ArrayLike) -> NDArray[np.float64]:
        v = check_finite_array(values, "values", ndim=2)
        if v.shape[1] != self.dimension:
            raise ValueError(
                f"values must have shape (n_clients, {self.dimension}) "
                f"(label, then features), got {v.shape}"
            )
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

    def output_range(self) -> tuple[float, float]:
        """The inner mechanism's range of every released coordinate."""
        return self.inner.output_range()  # type: ignore[attr-defined]
