"""Per-client privacy budget ledgers."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import check_epsilon
from ldpfda.exceptions import BudgetExceededError
from ldpfda.privacy.base import ReleaseEvent

__all__ = ["LedgerEntry", "PrivacyLedger"]

#: Relative slack for floating-point sums of a split budget (eps/(p+1) added p+1 times).
_SLACK = 1e-9
#: Runs of equal spending a ledger over consecutive ids keeps before it holds one
#: figure per client instead.
_MAX_RUNS = 1 << 12


def _has_duplicates(sorted_ids: NDArray[np.int64]) -> bool:
    return bool(sorted_ids.size > 1 and np.any(sorted_ids[1:] == sorted_ids[:-1]))


def _increasing(ids: NDArray[np.int64]) -> bool:
    return bool(np.all(ids[1:] > ids[:-1]))


@dataclass(frozen=True)
class LedgerEntry:
    """One release charged to a set of clients."""

    event: ReleaseEvent
    client_ids: NDArray[np.int64]


class PrivacyLedger:
    """Records every release of a set of clients and refuses any that would overspend.

    Under sequential composition a client's epsilon is the sum of its releases'. A
    charge that would push any named client over ``budget`` (each client's total)
    raises :class:`~ldpfda.BudgetExceededError` and charges nobody. A Flower client
    holds a ledger over its own id, the in-process engine one over all its clients.
    """

    def __init__(self, *, budget: float, client_ids: ArrayLike) -> None:
        self.budget = check_epsilon(budget, "budget")
        ids = np.asarray(client_ids, dtype=np.int64).reshape(-1)
        # Ids first, first + 1, ... (every run of the engine): a client's row is its
        # id minus the first, with no search (and no sorter held).
        first = int(ids[0]) if ids.size else 0
        consecutive = ids.size == 0 or (
            int(ids[-1]) - first + 1 == ids.size and _increasing(ids)
        )
        self._first = first if consecutive else None
        self._sorter = None if consecutive else np.argsort(ids)
        if self._sorter is not None and _has_duplicates(ids[self._sorter]):
            raise ValueError("client_ids must be unique")
        self.client_ids = ids.view()  # read-only: entries keep views of it
        self.client_ids.flags.writeable = False
        # Over consecutive ids, charged run by run as the engine charges them, the
        # spending is kept as runs of equal totals: row ``_starts[i]`` on spent
        # ``_levels[i]`` (a ledger of ten million clients holds a few numbers, not
        # ten million). Any other charge, or too many runs, turns it into one total
        # per client (``_spent``); either way every total is the same float.
        self._spent: NDArray[np.float64] | None = None
        self._starts = np.zeros(1 if ids.size else 0, dtype=np.int64)
        self._levels = np.zeros(self._starts.size)
        if self._first is None:
            self._densify()
        self.entries: list[LedgerEntry] = []

    def _densify(self) -> NDArray[np.float64]:
        """One total per client from now on."""
        if self._spent is None:
            self._spent = self._expand(0, self.client_ids.size)
        return self._spent

    def _expand(self, start: int, stop: int) -> NDArray[np.float64]:
        """The totals of rows ``start .. stop - 1`` from the runs."""
        if stop <= start:
            return np.zeros(0)
        first = int(np.searchsorted(self._starts, start, side="right")) - 1
        last = int(np.searchsorted(self._starts, stop, side="left"))
        bounds = np.concatenate([[start], self._starts[first + 1 : last], [stop]])
        return np.repeat(self._levels[first:last], np.diff(bounds))

    def _cut(self, row: int) -> int:
        """The run that starts at ``row`` (split off the run holding it)."""
        if row >= self.client_ids.size:
            return int(self._starts.size)
        at = int(np.searchsorted(self._starts, row, side="right")) - 1
        if self._starts[at] == row:
            return at
        self._starts = np.insert(self._starts, at + 1, row)
        self._levels = np.insert(self._levels, at + 1, self._levels[at])
        return at + 1

    def _values(self, rows: NDArray[np.int64] | slice) -> NDArray[np.float64]:
        """The totals of ``rows``."""
        if self._spent is not None:
            return self._spent[rows]
        if isinstance(rows, slice):
            return self._expand(rows.start, rows.stop)
        at = np.searchsorted(self._starts, rows, side="right") - 1
        return self._levels[at]

    def _add(self, rows: NDArray[np.int64] | slice, epsilon: float) -> None:
        """Add ``epsilon`` to the totals of ``rows``."""
        if self._spent is not None or not isinstance(rows, slice):
            self._densify()[rows] += epsilon
            return
        start, stop = self._cut(rows.start), self._cut(rows.stop)
        self._levels[start:stop] += epsilon
        # Neighbouring runs that now spend the same become one.
        new = np.concatenate([[True], self._levels[1:] != self._levels[:-1]])
        self._starts, self._levels = self._starts[new], self._levels[new]
        if self._starts.size > _MAX_RUNS:
            self._densify()

    def _rows(self, ids: NDArray[np.int64]) -> NDArray[np.int64] | slice:
        """The rows of ``ids``: a slice (no copy) for a run of consecutive ids, one
        id included."""
        if self._first is not None and ids.size:
            start = int(ids[0]) - self._first
            if int(ids[-1]) - int(ids[0]) + 1 == ids.size and _increasing(ids):
                if start < 0 or start + ids.size > self.client_ids.size:
                    end = self._first + self.client_ids.size
                    outside = int(ids[0]) if start < 0 else max(int(ids[0]), end)
                    raise KeyError(f"client {outside} is not in this ledger")
                return slice(start, start + ids.size)
        return self._index(ids)

    def _index(self, client_ids: ArrayLike) -> NDArray[np.int64]:
        ids = np.asarray(client_ids, dtype=np.int64).reshape(-1)
        if self._first is not None:
            pos = ids - self._first
            outside = (pos < 0) | (pos >= self.client_ids.size)
            if np.any(outside):
                raise KeyError(f"client {int(ids[outside][0])} is not in this ledger")
            return pos
        assert self._sorter is not None
        pos = np.searchsorted(self.client_ids, ids, sorter=self._sorter)
        pos = self._sorter[np.clip(pos, 0, self.client_ids.size - 1)]
        unknown = self.client_ids[pos] != ids if ids.size else np.zeros(0, bool)
        if np.any(unknown):
            raise KeyError(f"client {int(ids[unknown][0])} is not in this ledger")
        return pos

    def can_spend(self, epsilon: float, client_ids: ArrayLike) -> NDArray[np.bool_]:
        """Which of ``client_ids`` could still spend ``epsilon``."""
        ids = np.asarray(client_ids, dtype=np.int64).reshape(-1)
        idx = self._rows(ids)
        if math.isinf(self.budget):
            return np.ones(ids.size, dtype=bool)
        return self._values(idx) + epsilon <= self.budget * (1.0 + _SLACK)

    def charge(self, event: ReleaseEvent, client_ids: ArrayLike) -> None:
        """Record ``event`` for every client in ``client_ids``, or refuse it for all."""
        self.charge_all([event], client_ids)

    def charge_all(self, events: list[ReleaseEvent], client_ids: ArrayLike) -> None:
        """Record several releases of the same clients atomically: all, or (raising
        :class:`~ldpfda.BudgetExceededError`) none."""
        ids = np.asarray(client_ids, dtype=np.int64).reshape(-1)
        if not _increasing(ids) and _has_duplicates(np.sort(ids)):
            raise ValueError(
                "a release may be charged to each client only once per call"
            )
        for event in events:
            if not isinstance(event, ReleaseEvent):
                raise TypeError(
                    f"events must be ReleaseEvent, got {type(event).__name__}"
                )
        total = float(sum(event.epsilon for event in events))
        ok = self.can_spend(total, ids)
        if not np.all(ok):
            first = int(ids[~ok][0])
            names = "+".join(event.mechanism for event in events)
            raise BudgetExceededError(
                f"{names} release of epsilon={total:.6g} would exceed the budget "
                f"{self.budget:.6g} of {int((~ok).sum())} client(s), e.g. client "
                f"{first} (already spent {self.spent(first):.6g})"
            )
        rows = self._rows(ids)
        self._add(rows, total)
        kept = self._kept(ids, rows)
        self.entries.extend(LedgerEntry(event, kept) for event in events)

    def _kept(self, ids: NDArray[np.int64], rows: NDArray[np.int64] | slice) -> NDArray:
        """The ids an entry keeps: a read-only view of the ledger's own for a run of
        consecutive ids (a million clients' entries cost no copy), else a copy."""
        return self.client_ids[rows] if isinstance(rows, slice) else ids.copy()

    def restore(self, events: list[ReleaseEvent], client_ids: ArrayLike) -> None:
        """Record releases that already happened (a stored ledger read back), with no
        budget check; a ledger then over its budget refuses every further charge."""
        ids = np.asarray(client_ids, dtype=np.int64).reshape(-1)
        index = self._rows(ids)
        for event in events:
            self._add(index, event.epsilon)
            self.entries.append(LedgerEntry(event, self._kept(ids, index)))

    def spent(self, client_id: int) -> float:
        """Total epsilon spent so far by one client."""
        return float(self._values(self._index([client_id]))[0])

    def spent_all(self) -> NDArray[np.float64]:
        """Total epsilon spent by every client, in ``client_ids`` order."""
        if self._spent is not None:
            return self._spent.copy()
        return self._expand(0, self.client_ids.size)

    def summary(self) -> dict[str, object]:
        """Totals for a run report: budget, spent (max/min/mean), releases by kind."""
        releases: dict[str, dict[str, float | int]] = {}
        for entry in self.entries:
            event, n = entry.event, int(entry.client_ids.size)
            item = releases.setdefault(
                event.mechanism,
                {"epsilon": event.epsilon, "clients": 0, "epsilon_total": 0.0},
            )
            if item["epsilon"] != event.epsilon:
                item["epsilon"] = float("nan")  # mixed epsilons: see epsilon_total
            item["clients"] += n
            item["epsilon_total"] += event.epsilon * n
        levels, counts = self._runs()
        n = int(self.client_ids.size)
        return {
            "budget_per_client": self.budget,
            "n_clients": n,
            "max_spent": float(levels.max()) if n else 0.0,
            "min_spent": float(levels.min()) if n else 0.0,
            # From the runs of equal totals, so that the same totals give the same
            # mean however the ledger holds them.
            "mean_spent": math.fsum((levels * counts).tolist()) / n if n else 0.0,
            "releases": releases,
        }

    def _runs(self) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        """The totals as runs of equal spending: each run's total and length."""
        n = self.client_ids.size
        if self._spent is None:
            return self._levels, np.diff(np.append(self._starts, n))
        spent = self._spent
        starts = np.flatnonzero(np.concatenate([[n > 0], spent[1:] != spent[:-1]]))
        return self._spent[starts], np.diff(np.append(starts, n))
