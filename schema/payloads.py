r"""What clients release, as the server holds it, and the linear models it sends back.

Plain frozen containers over numpy arrays, ordered by client id, shared by the client
side (which produces them), the server (which learns from them) and the transports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda.privacy.joint import SignedFeatureMechanism

__all__ = [
    "JointPayload",
    "LabelPayload",
    "LinearModels",
    "Payload",
    "TrainingPayload",
    "concatenate",
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

    def select(
        self, index: int | Sequence[int] | NDArray[np.integer] | NDArray[np.bool_]
    ) -> LinearModels:
        return LinearModels(self.coef[index], self.intercept[index])


@dataclass(frozen=True)
class TrainingPayload:
    """What training clients release: perturbed features and randomized labels.

    Attributes
    ----------
    client_ids : ndarray of shape (n,)
    features : ndarray of shape (n, p)
        Perturbed scaled coefficients.
    labels : ndarray of shape (n,)
        Randomized labels in {0, 1}.
    feature_epsilon, label_epsilon : float
        What each client spent on each part.
    """

    client_ids: NDArray[np.int64]
    features: NDArray[np.float64]
    labels: NDArray[np.int8]
    feature_epsilon: float
    label_epsilon: float

    def __len__(self) -> int:
        return int(self.client_ids.size)

    def arrays(self) -> dict[str, NDArray]:
        """The released arrays by name (``payload.npz`` of a run)."""
        return {
            "client_ids": self.client_ids,
            "features": self.features,
            "labels": self.labels,
        }

    def take(self, index: Any) -> TrainingPayload:
        return TrainingPayload(
            self.client_ids[index],
            self.features[index],
            self.labels[index],
            self.feature_epsilon,
            self.label_epsilon,
        )

    @classmethod
    def concatenate(cls, parts: list[TrainingPayload]) -> TrainingPayload:
        if not parts:
            raise ValueError("no payloads to concatenate")
        return cls(
            np.concatenate([p.client_ids for p in parts]),
            np.concatenate([p.features for p in parts]),
            np.concatenate([p.labels for p in parts]),
            parts[0].feature_epsilon,
            parts[0].label_epsilon,
        )


@dataclass(frozen=True)
class JointPayload:
    r"""What clients release jointly: one perturbed :math:`\tilde y\,(1, x)` each.

    Attributes
    ----------
    client_ids : ndarray of shape (n,)
    releases : ndarray of shape (n, p + 1)
        Released signed vectors, constant coordinate first (see
        :class:`~ldpfda.privacy.joint.SignedFeatureMechanism`).
    epsilon : float
        What each client spent: its whole budget, once.
    mechanism : {"hybrid", "piecewise", "duchi", "laplace"}
        The vector mechanism of the release.
    """

    client_ids: NDArray[np.int64]
    releases: NDArray[np.float64]
    epsilon: float
    mechanism: str

    def __len__(self) -> int:
        return int(self.client_ids.size)

    @property
    def n_features(self) -> int:
        """p (the releases carry p + 1 coordinates)."""
        return int(self.releases.shape[1]) - 1

    def release_mechanism(self) -> SignedFeatureMechanism:
        """The mechanism that produced the releases (for the server's moment map)."""
        return SignedFeatureMechanism(
            epsilon=self.epsilon, n_features=self.n_features, mechanism=self.mechanism
        )

    def arrays(self) -> dict[str, NDArray]:
        return {"client_ids": self.client_ids, "releases": self.releases}

    def take(self, index: Any) -> JointPayload:
        return JointPayload(
            self.client_ids[index], self.releases[index], self.epsilon, self.mechanism
        )

    @classmethod
    def concatenate(cls, parts: list[JointPayload]) -> JointPayload:
        if not parts:
            raise ValueError("no payloads to concatenate")
        return cls(
            np.concatenate([p.client_ids for p in parts]),
            np.concatenate([p.releases for p in parts]),
            parts[0].epsilon,
            parts[0].mechanism,
        )


@dataclass(frozen=True)
class LabelPayload:
    r"""What the server holds after a label-only run, ordered by client id.

    Attributes
    ----------
    client_ids : ndarray of shape (n,)
    features : ndarray of shape (n, p)
        Public scaled features.
    labels : ndarray of shape (n,)
        Released labels (randomized, or forwarded by a peer).
    priors : ndarray of shape (n, K)
        The prior of each label's channel: :math:`\tilde y` was kept with probability
        :math:`1 - \lambda_i` and otherwise drawn from this row.
    epsilon : float
        The epsilon of the channel, from which :math:`\lambda_i` follows
        (:func:`~ldpfda.schema.releases.prior_probabilities`): the run's epsilon, or
        :math:`\varepsilon_0` of the peer-to-peer randomized response.
    """

    client_ids: NDArray[np.int64]
    features: NDArray[np.float64]
    labels: NDArray[np.int64]
    priors: NDArray[np.float64]
    epsilon: float

    def __len__(self) -> int:
        return int(self.client_ids.size)

    @property
    def resample_probabilities(self) -> NDArray[np.float64]:
        r""":math:`\lambda_i` of every label's channel."""
        from ldpfda.schema.releases import prior_probabilities

        return prior_probabilities(self.priors, epsilon=self.epsilon)

    def arrays(self) -> dict[str, NDArray]:
        return {
            "client_ids": self.client_ids,
            "features": self.features,
            "labels": self.labels,
            "priors": self.priors,
        }

    def take(self, index: Any) -> LabelPayload:
        return LabelPayload(
            self.client_ids[index],
            self.features[index],
            self.labels[index],
            self.priors[index],
            self.epsilon,
        )

    def head(self) -> LabelPayload:
        """An empty payload with the same shapes (for results kept without data)."""
        return self.take(slice(0, 0))


#: What a population of clients releases: the reference payload, joint releases, or
#: public features with randomized labels (label-only modes).
Payload = TrainingPayload | JointPayload | LabelPayload


def concatenate(parts: list[Any]) -> Any:
    """One payload from chunks of the same kind, in order."""
    if not parts:
        raise ValueError("no payloads to concatenate")
    return type(parts[0]).concatenate(parts)
