"""Embedded simulation designs: nothing is downloaded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from ldpfda._validation import check_int
from ldpfda.privacy.random import as_generator

__all__ = ["FunctionalDesign", "VectorDesign", "make_design"]


@dataclass(frozen=True)
class VectorDesign:
    r"""The vector design of the method's reference code.

    :math:`x \sim U[-1,1]^4`, :math:`\beta = (1, -1/2, 1/3, -1/4)`,
    :math:`P(y=1\mid x) = \mathrm{logistic}(5\,x^\top\beta)`; Bayes error about 0.132.
    ``feature_shift`` is added to every coordinate (points may leave the box, and are
    clipped by the rescaling) and ``label_shift`` to the logit.
    """

    scale: float = 5.0
    feature_shift: float = 0.0
    label_shift: float = 0.0
    name: str = "vector"
    is_functional: Literal[False] = False

    @property
    def beta(self) -> NDArray[np.float64]:
        return np.array([1.0, -0.5, 1.0 / 3.0, -0.25])

    @property
    def n_features(self) -> int:
        return 4

    def sample(
        self, n: int, rng: np.random.Generator | int | None = None
    ) -> tuple[NDArray[np.float64], NDArray[np.int8]]:
        """``n`` pairs (x, y) with y in {0, 1}."""
        n = check_int(n, "n", minimum=0)
        gen = as_generator(rng)
        x = gen.uniform(-1.0, 1.0, size=(n, 4)) + self.feature_shift
        from scipy.special import expit  # 0.2 s to import: only when sampling

        p = expit(self.scale * x @ self.beta + self.label_shift)
        return x, (gen.random(n) < p).astype(np.int8)

    def bayes_error(self, n: int = 2_000_000, rng: int = 0) -> float:
        """Monte Carlo Bayes error E[min(p, 1-p)]."""
        x = as_generator(rng).uniform(-1.0, 1.0, size=(n, 4))
        from scipy.special import expit  # 0.2 s to import: only when sampling

        p = expit(self.scale * x @ self.beta)
        return float(np.minimum(p, 1.0 - p).mean())


@dataclass(frozen=True)
class FunctionalDesign:
    r"""The functional design: random curves in a cosine basis and a logistic link.

    .. math::
        X(t) = \sum_{j=1}^{J} U_j (-1)^{j+1} j^{-1} \phi_j(t), \qquad
        \beta(t) = \sum_{j=1}^{J} 4 (-1)^{j+1} j^{-2} \phi_j(t),

    with :math:`\phi_j(t) = \sqrt 2 \cos(j\pi t)` (orthonormal on [0, 1]),
    :math:`U_j \sim U(-\sqrt3, \sqrt3)`, :math:`J = 50`, and
    :math:`P(Y=1\mid X) = \mathrm{logistic}(\int_0^1 X\beta)`. By orthonormality the
    integral is exactly :math:`\sum_j 4 U_j j^{-3}`. Curves are sampled on ``n_points``
    equispaced points of [0, 1]. ``feature_shift`` adds a constant curve (leaving
    :math:`\int X\beta` unchanged) and ``label_shift`` is added to the logit.
    """

    n_terms: int = 50
    n_points: int = 100
    feature_shift: float = 0.0
    label_shift: float = 0.0
    name: str = "functional"
    is_functional: Literal[True] = True

    @property
    def grid_points(self) -> NDArray[np.float64]:
        return np.linspace(0.0, 1.0, self.n_points)

    def _basis(self) -> NDArray[np.float64]:
        j = np.arange(1, self.n_terms + 1)
        return np.sqrt(2.0) * np.cos(np.pi * j[:, None] * self.grid_points[None, :])

    def _draw(
        self, n: int, rng: np.random.Generator | int | None
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """Curves, their labels' log-odds and the labels' uniforms, drawn in order."""
        n = check_int(n, "n", minimum=0)
        gen = as_generator(rng)
        j = np.arange(1, self.n_terms + 1)
        sign = np.where(j % 2 == 1, 1.0, -1.0)
        u = gen.uniform(-np.sqrt(3.0), np.sqrt(3.0), size=(n, self.n_terms))
        curves = (u * (sign / j)) @ self._basis() + self.feature_shift
        eta = u @ (4.0 / j**3) + self.label_shift
        return curves, eta, gen.random(n)

    def sample(
        self, n: int, rng: np.random.Generator | int | None = None
    ) -> tuple[NDArray[np.float64], NDArray[np.int8]]:
        """``n`` curves, shape (n, n_points), and labels in {0, 1}."""
        curves, eta, uniform = self._draw(n, rng)
        from scipy.special import expit  # 0.2 s to import: only when sampling

        return curves, (uniform < expit(eta)).astype(np.int8)

    def sample_curves(
        self, n: int, rng: np.random.Generator | int | None = None
    ) -> NDArray[np.float64]:
        """The curves of :meth:`sample`, without their labels: ``rng`` moves on as
        after :meth:`sample` (a host builds its featurizer from public curves this
        way, without loading scipy.special)."""
        return self._draw(n, rng)[0]


def make_design(
    name: str, *, feature_shift: float = 0.0, label_shift: float = 0.0
) -> VectorDesign | FunctionalDesign:
    """The embedded design ``name`` ('vector' or 'functional'), optionally shifted."""
    designs: dict[str, VectorDesign | FunctionalDesign] = {
        "vector": VectorDesign(feature_shift=feature_shift, label_shift=label_shift),
        "functional": FunctionalDesign(
            feature_shift=feature_shift, label_shift=label_shift
        ),
    }
    if name not in designs:
        raise ValueError(f"dataset must be one of {sorted(designs)}, got {name!r}")
    return designs[name]
