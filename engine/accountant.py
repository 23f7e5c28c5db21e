r"""A budget across fits: every fit of an estimator makes every client release again.

A fit of :class:`~ldpfda.LDPClassifier` or :class:`~ldpfda.MRMAClassifier` runs the
whole protocol: each client it is given spends up to ``epsilon`` on fresh releases. A
second fit on the same clients (a refit, a cross-validation fold, a grid-search
candidate) spends again, and by sequential composition the epsilons add up. A
:class:`BudgetAccountant` holds a total and refuses, before anything is released, a
fit that would take the sum past it.

The accountant is conservative, as diffprivlib's: it charges every fit's ``epsilon`` to
the whole data set, whichever of its clients the fit sees, so that a client's total over
all fits an accountant allowed is at most the accountant's total:

.. math::

    \varepsilon_{\text{client}} \le \sum_{\text{fits}} \varepsilon_{\text{fit}}
    \le \varepsilon_{\text{total}}.

Unlike diffprivlib there is no default accountant that records every fit behind the
user's back: a default exists only while one is installed (``with accountant:`` or
:meth:`BudgetAccountant.set_default`), and an estimator uses it only when its own
``accountant`` parameter is None.

References
----------
N. Holohan, S. Braghin, P. Mac Aonghusa, K. Levacher, "Diffprivlib: the IBM
differential privacy library", arXiv:1907.02444, 2019 (``BudgetAccountant``).
C. Dwork, A. Roth, "The algorithmic foundations of differential privacy", Found.
Trends Theor. Comput. Sci. 9, 2014, Thm. 3.16 (sequential composition).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ldpfda._validation import check_epsilon, check_int
from ldpfda.exceptions import BudgetExceededError

__all__ = ["BudgetAccountant", "Spend"]

#: Relative slack for floating-point sums (0.1 + 0.1 + 0.1 must fit a total of 0.3),
#: as the per-client ledger's.
_SLACK = 1e-9

#: Accountants installed as the default, innermost last.
_DEFAULTS: list[BudgetAccountant] = []


@dataclass(frozen=True)
class Spend:
    """One fit charged to an accountant: its epsilon, who asked and how many clients
    it made release."""

    epsilon: float
    what: str
    n_clients: int


class BudgetAccountant:
    r"""Total epsilon over many fits, refusing a fit that would overspend it.

    Parameters
    ----------
    epsilon : float
        The total, in (0, inf]; inf records every fit and refuses none.
    spent : iterable of Spend, optional
        Fits already charged (an accountant carried over from an earlier session).

    Examples
    --------
    >>> from ldpfda import BudgetAccountant
    >>> accountant = BudgetAccountant(10.0)
    >>> accountant.spend(4.0, what="fit")
    Spend(epsilon=4.0, what='fit', n_clients=0)
    >>> accountant.remaining()
    6.0

    Notes
    -----
    An accountant is a handle on one budget, not a value: copying it (``copy``,
    ``deepcopy``, scikit-learn's ``clone``, which copies every parameter) gives the
    same accountant, so every candidate and fold of a ``GridSearchCV`` charges the one
    the user passed. A pickled accountant read back (e.g. in a worker process of
    ``n_jobs > 1``) cannot charge its original; it refuses every spend rather than
    count on its own.
    """

    def __init__(self, epsilon: float = math.inf, *, spent: Iterable[Spend] = ()):
        self.epsilon = check_epsilon(epsilon, "epsilon")
        self._spends: list[Spend] = []
        for item in spent:
            if not isinstance(item, Spend):
                raise TypeError(f"spent must hold Spend, got {type(item).__name__}")
            self._spends.append(item)
        self._lock = threading.Lock()
        self._detached = False

    # -- the budget --------------------------------------------------------------

    @property
    def spends(self) -> tuple[Spend, ...]:
        """Every fit charged so far, in order."""
        return tuple(self._spends)

    @property
    def spent(self) -> float:
        """Total epsilon charged so far (sequential composition: the sum)."""
        return math.fsum(s.epsilon for s in self._spends)

    def remaining(self, k: int = 1) -> float:
        """The epsilon each of ``k`` more equal fits may spend."""
        k = check_int(k, "k", minimum=1)
        if math.isinf(self.epsilon):
            return math.inf
        return max(self.epsilon - self.spent, 0.0) / k

    def _fits(self, epsilon: float) -> bool:
        if math.isinf(self.epsilon):
            return True
        return self.spent + epsilon <= self.epsilon * (1.0 + _SLACK)

    def check(self, epsilon: float) -> None:
        """Raise :class:`~ldpfda.BudgetExceededError` if a fit of ``epsilon`` would
        overspend; charge nothing."""
        epsilon = check_epsilon(epsilon, "epsilon")
        if not self._fits(epsilon):
            raise BudgetExceededError(
                f"a fit of epsilon={epsilon:.6g} would exceed the accountant's total "
                f"{self.epsilon:.6g}: {self.spent:.6g} spent by {len(self._spends)} "
                f"fit(s), {self.remaining():.6g} remaining"
            )

    def spend(self, epsilon: float, *, what: str = "", n_clients: int = 0) -> Spend:
        """Charge a fit of ``epsilon``, or raise :class:`~ldpfda.BudgetExceededError`
        and charge nothing. Call it before any client releases."""
        epsilon = check_epsilon(epsilon, "epsilon")
        n_clients = check_int(n_clients, "n_clients", minimum=0)
        if self._detached:
            raise RuntimeError(
                "this accountant is a copy read back from a pickle (another process, "
                "e.g. a worker of n_jobs > 1): it cannot charge the original budget; "
                "fit in the accountant's own process (n_jobs=1)"
            )
        with self._lock:
            self.check(epsilon)
            item = Spend(epsilon, str(what), n_clients)
            self._spends.append(item)
        return item

    # -- the default accountant --------------------------------------------------

    @staticmethod
    def default() -> BudgetAccountant | None:
        """The installed default accountant (the innermost), or None."""
        return _DEFAULTS[-1] if _DEFAULTS else None

    @staticmethod
    def load_default(accountant: BudgetAccountant | None) -> BudgetAccountant | None:
        """``accountant`` if given, else the installed default (None if there is
        none); what an estimator's ``fit`` charges."""
        if accountant is None:
            return BudgetAccountant.default()
        if not isinstance(accountant, BudgetAccountant):
            raise TypeError(
                "accountant must be a BudgetAccountant or None, got "
                f"{type(accountant).__name__}"
            )
        return accountant

    def set_default(self) -> BudgetAccountant:
        """Install this accountant as the default (until :meth:`pop_default`)."""
        _DEFAULTS.append(self)
        return self

    @staticmethod
    def pop_default() -> BudgetAccountant | None:
        """Remove the innermost default accountant and return it (None if none)."""
        return _DEFAULTS.pop() if _DEFAULTS else None

    def __enter__(self) -> BudgetAccountant:
        return self.set_default()

    def __exit__(self, *exc: object) -> None:
        if self in _DEFAULTS:
            # The innermost occurrence: nested ``with`` blocks unwind in order.
            del _DEFAULTS[len(_DEFAULTS) - 1 - _DEFAULTS[::-1].index(self)]

    # -- one budget, however often it is copied ------------------------------------

    def __copy__(self) -> BudgetAccountant:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> BudgetAccountant:
        return self

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._detached = True

    def __repr__(self) -> str:
        return (
            f"BudgetAccountant(epsilon={self.epsilon!r}, spent={self.spent:.6g}, "
            f"fits={len(self._spends)})"
        )
