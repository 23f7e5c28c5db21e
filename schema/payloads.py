r"""What clients release, as the server holds it, and the linear models it sends back.

Plain frozen containers over numpy arrays, ordered by client id, shared by the client
side (which produces them), the server (which learns from them) and the transports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda.privacy.joint import (
    ClassSignedFeatureMechanism,
    ClassSplitMechanism,
    SignedFeatureMechanism,
)
from ldpfda.schema.releases import joint_mechanism

__all__ = [
    "JointPayload",
    "LabelPayload",
    "LinearModels",
    "Payload",
    "TrainingPayload",
]


@dataclass(frozen=True)
class LinearModels:
    """M linear classifiers ``sign(intercept_j + coef_j . x)``; M = 1 for one model."""

    coef: NDArray[np.float64]  # (M, p)
    intercept: NDArray[np.float64]  # (M,)

    def __post_init__(self) -> None:
        coef = np.atleast_2d(np.asarray(self.coef, dtype=float))
        intercept = np.atleast_1d(np.asarray(self.intercept, dtype=float))
        if intercept.shape != (coef.shape[0],):
            raise ValueError(f"intercept shape {intercept.shape} != ({coef.shape[0]},)")
        object.__setattr__(self, "coef", coef)
        object.__setattr__(self, "intercept", intercept)

    def __len__(self) -> int:
        return int(self.coef.shape[0])

    def decision_function(self, X: ArrayLike) -> NDArray[np.float64]:
        """Scores, shape (n, M)."""
        return np.asarray(X, dtype=float) @ self.coef.T + self.intercept

    def predict(self, X: ArrayLike) -> NDArray[np.int8]:
        """Labels in {0, 1}, shape (n, M)."""
        return (self.decision_function(X) > 0).astype(np.int8)

    def errors(self, X: ArrayLike, y: ArrayLike) -> NDArray[np.float64]:
        """Misclassification rate of each model on (X, y)."""
        return (self.predict(X) != np.asarray(y)[:, None]).mean(axis=0)


class _ClientRows:
    """Arrays with one row per client, ordered by client id, and run-wide scalars."""

    client_ids: NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.client_ids.size)

    def arrays(self) -> dict[str, NDArray]:
        """The released arrays by name (``payload.npz`` of a run)."""
        return {k: v for k, v in vars(self).items() if isinstance(v, np.ndarray)}

    def take(self, index: Any) -> Self:
        """The clients at positions ``index``, in that order."""
        taken = {k: v[index] for k, v in self.arrays().items()}
        return type(self)(**{**vars(self), **taken})


@dataclass(frozen=True)
class TrainingPayload(_ClientRows):
    """What training clients release: perturbed scaled coefficients ``features`` (n, p)
    and randomized ``labels`` in {0, 1} (in 0 .. K - 1 for ``n_classes`` K > 2, by
    K-ary randomized response); each client spent ``feature_epsilon`` and
    ``label_epsilon`` on them."""

    client_ids: NDArray[np.int64]
    features: NDArray[np.float64]
    labels: NDArray[np.int8]
    feature_epsilon: float
    label_epsilon: float
    n_classes: int = 2


@dataclass(frozen=True)
class JointPayload(_ClientRows):
    r"""What clients release jointly: one perturbed :math:`\tilde y\,(1, x)` each.

    ``releases`` (n, p + 1) are the released signed vectors, constant coordinate first
    (:class:`~ldpfda.privacy.joint.SignedFeatureMechanism` with vector mechanism
    ``mechanism``); each client spent its whole budget ``epsilon`` on it, once. With
    ``n_classes`` K > 2, ``classes`` holds the class j each client drew, and its row of
    ``releases`` is the perturbed :math:`\tilde y_j\,(1, x)`
    (:class:`~ldpfda.privacy.joint.ClassSignedFeatureMechanism`); with ``design``
    ``"split"`` ``classes`` holds the labels as randomized response reported them and
    ``releases`` the rows (1, z) (:class:`~ldpfda.privacy.joint.ClassSplitMechanism`).
    """

    client_ids: NDArray[np.int64]
    releases: NDArray[np.float64]
    epsilon: float
    mechanism: str
    classes: NDArray[np.int64] | None = None
    n_classes: int = 2
    design: str = "draw"

    @property
    def n_features(self) -> int:
        """p (the releases carry p + 1 coordinates)."""
        return int(self.releases.shape[1]) - 1

    def release_mechanism(
        self,
    ) -> SignedFeatureMechanism | ClassSignedFeatureMechanism | ClassSplitMechanism:
        """The mechanism that produced the releases (for the server's moment map)."""
        return joint_mechanism(
            self.epsilon, self.n_features, self.mechanism, self.n_classes, self.design
        )


@dataclass(frozen=True)
class LabelPayload(_ClientRows):
    r"""What the server holds after a label-only run: public scaled ``features``
    (n, p) and released ``labels`` (randomized, or forwarded by a peer).

    Each label's channel kept :math:`\tilde y` with probability :math:`1 - \lambda_i`
    and otherwise drew it from its row of ``priors`` (n, K); :math:`\lambda_i` follows
    from ``epsilon`` (:func:`~ldpfda.schema.releases.prior_probabilities`): the run's
    epsilon, or :math:`\varepsilon_0` of the peer-to-peer randomized response.
    """

    client_ids: NDArray[np.int64]
    features: NDArray[np.float64]
    labels: NDArray[np.int64]
    priors: NDArray[np.float64]
    epsilon: float

    @property
    def resample_probabilities(self) -> NDArray[np.float64]:
        r""":math:`\lambda_i` of every label's channel."""
        from ldpfda.schema.releases import prior_probabilities

        return prior_probabilities(self.priors, epsilon=self.epsilon)

    def head(self) -> LabelPayload:
        """An empty payload with the same shapes (for results kept without data)."""
        return self.take(slice(0, 0))


#: What a population of clients releases: the reference payload, joint releases, or
#: public features with randomized labels (label-only modes).
Payload = TrainingPayload | JointPayload | LabelPayload
