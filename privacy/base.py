"""The mechanism base class and the immutable record of a release."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import check_epsilon
from ldpfda.privacy.random import RandomLike

__all__ = ["Mechanism", "ReleaseEvent", "check_vectors"]


def check_vectors(values: ArrayLike, dimension: int) -> NDArray[np.float64]:
    """``values`` as a finite float array of shape ``(n_clients, dimension)``."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 2 or x.shape[1] != dimension:
        raise ValueError(
            f"values must have shape (n_clients, {dimension}), got {x.shape}"
        )
    if not np.all(np.isfinite(x)):
        raise ValueError("values contain NaN or infinite entries")
    return x


@dataclass(frozen=True)
class ReleaseEvent:
    """What one release spends: the mechanism, its epsilon and its parameters (a
    sorted tuple of (name, value) pairs, so events are hashable); never the data."""

    mechanism: str
    epsilon: float
    parameters: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon, "event epsilon")

    @classmethod
    def of(cls, mechanism: str, epsilon: float, **parameters: Any) -> ReleaseEvent:
        return cls(mechanism, float(epsilon), tuple(sorted(parameters.items())))

    def as_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            **dict(self.parameters),
        }


class Mechanism(ABC):
    """Base class of every local randomizer: keyword-only, validated parameters, and
    :meth:`randomise` on a batch of clients (row ``i`` of ``values`` is client i)."""

    #: Short identifier recorded in :class:`ReleaseEvent`.
    name: str = "mechanism"
    #: Attributes recorded with a release, in this order (see :meth:`parameters`).
    _recorded: tuple[str, ...] = ()

    def __init__(self, *, epsilon: float) -> None:
        self.epsilon = check_epsilon(epsilon)

    @property
    def is_private(self) -> bool:
        """False for ``epsilon = inf``, which releases the input unchanged."""
        return not math.isinf(self.epsilon)

    @abstractmethod
    def randomise(self, values: ArrayLike, rng: RandomLike = None) -> NDArray:
        """Release ``values`` privately (one row per client)."""

    @abstractmethod
    def bias(self, values: ArrayLike) -> NDArray[np.float64]:
        """E[output] - input, per entry of ``values``."""

    @abstractmethod
    def variance(self, values: ArrayLike) -> NDArray[np.float64]:
        """Var[output], per entry of ``values``."""

    def parameters(self) -> dict[str, Any]:
        """The noise parameters recorded with a release."""
        return {k: getattr(self, k) for k in self._recorded}

    def event(self) -> ReleaseEvent:
        """The immutable description of one release by this mechanism."""
        return ReleaseEvent.of(self.name, self.epsilon, **self.parameters())

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.parameters().items())
        return (
            f"{type(self).__name__}(epsilon={self.epsilon!r}"
            f"{', ' if params else ''}{params})"
        )
