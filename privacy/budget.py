"""How a client's epsilon is split over what it releases."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ldpfda._validation import check_epsilon, check_int, check_real

__all__ = ["BudgetSplit", "split_budget"]


@dataclass(frozen=True)
class BudgetSplit:
    """Epsilon of each release of one training client: ``total``, each of the
    ``n_coefficients`` (p) coefficient releases, and the label release."""

    total: float
    per_coordinate: float
    label: float
    n_coefficients: int

    @property
    def coefficients(self) -> float:
        """Epsilon of the whole coefficient vector."""
        return self.per_coordinate * self.n_coefficients

    @property
    def laplace_scale(self) -> float:
        r"""Laplace scale on [-1, 1] coordinates: :math:`2/\varepsilon_{coord}`."""
        return 0.0 if math.isinf(self.per_coordinate) else 2.0 / self.per_coordinate


def split_budget(
    *, epsilon: float, n_coefficients: int, label_share: float | None = None
) -> BudgetSplit:
    r"""Split a training client's ``epsilon`` over p coefficients and one label.

    The reference split (``label_share=None``) spends :math:`\varepsilon/(p+1)` on each
    coordinate and on the label; otherwise the label gets ``label_share`` of the budget
    and the coordinates share the rest evenly. The total is exactly ``epsilon``.
    """
    epsilon = check_epsilon(epsilon)
    p = check_int(n_coefficients, "n_coefficients", minimum=1)
    if label_share is None:
        share = 1.0 / (p + 1)
    else:
        share = check_real(
            label_share, "label_share", low=0.0, high=1.0, low_open=True, high_open=True
        )
    return BudgetSplit(epsilon, epsilon * (1.0 - share) / p, epsilon * share, p)
