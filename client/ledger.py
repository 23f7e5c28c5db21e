"""A deployed node's lifetime ledger: one file per record, kept across every run.

A *record* is one client's data on the host: the client id and a hash of the data
file's content. Its ledger holds every release the record ever made (each one's
:class:`~ldpfda.privacy.ReleaseEvent`), the replies of those releases (so that an
identical query is answered with the identical release, at no further cost, as
RAPPOR's permanent randomized response), and a monotone release counter. It does not
depend on the run id or on any session name the server chooses, so a new run cannot
reset it, and it survives restarts.

The budget is the client's, not the file's: a host that rewrites its data file (a
value corrected, a day's curve added, another format) makes a new record of the same
person, whose releases compose with the old ones. So the releases of every record of
the client id that the state directory lists count against the lifetime and period
budgets of each (the stored releases and the noise counter stay the record's own);
a new client id, or another state directory, is another person.

The file is ``<state-dir>/<record>.json``, written atomically (temporary file, fsync,
rename) under an exclusive lock on ``<state-dir>/.lock``, so two queries in flight
cannot both spend. It fails closed: a file that cannot be read, holds another record
or another format, or is missing although the state directory's index lists
the record, raises :class:`LedgerError`, and the node answers nothing until its
operator acts.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ldpfda.privacy.base import ReleaseEvent
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.schema.queries import ERROR_LEDGER

__all__ = [
    "LEDGER_FORMAT",
    "ClientSpending",
    "LedgerError",
    "RecordSpending",
    "RecordState",
    "open_record",
    "record_key",
    "spending",
]

LEDGER_FORMAT = "ldpfda-node-ledger/1"
_INDEX = "records.json"


class LedgerError(Exception):
    """The node's ledger cannot be trusted: the node refuses every query."""

    code = ERROR_LEDGER

    def __init__(self, reason: str) -> None:
        super().__init__("the node's privacy ledger needs its operator")
        self.reason = reason


def record_key(client_id: int, data: bytes) -> str:
    """The name of a record: its client id and the SHA-256 of its data file."""
    return f"client-{int(client_id)}-{hashlib.sha256(data).hexdigest()[:16]}"


@dataclass
class RecordState:
    """What a record's ledger holds while one query is answered.

    Attributes
    ----------
    ledger : PrivacyLedger
        Over the record's one client id, with every release made so far.
    memo : dict
        Reply arrays of earlier releases, by the hash of everything that determined
        them.
    counter : int
        Releases made so far (never decreases).
    times : list of float
        When each entry of the ledger was charged (Unix seconds), for a period budget.
    carried : int
        How many of the first entries (and times) are releases of the client's other
        records, counted but not the record's own (not saved with it).
    """

    ledger: PrivacyLedger
    memo: dict[str, dict[str, Any]] = field(default_factory=dict)
    counter: int = 0
    times: list[float] = field(default_factory=list)
    carried: int = 0


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _event(item: dict[str, Any]) -> ReleaseEvent:
    return ReleaseEvent.of(item["mechanism"], item["epsilon"], **item["parameters"])


def _load(path: Path, record: str, client_id: int, budget: float) -> RecordState:
    """The record's state from its file; a :class:`LedgerError` if it cannot be
    trusted."""
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        if body.get("format") != LEDGER_FORMAT or body.get("record") != record:
            raise LedgerError(
                f"{path} is not this record's ledger (format {body.get('format')!r}, "
                f"record {body.get('record')!r})"
            )
        events = [_event(item) for item in body["events"]]
        memo, counter = dict(body["memo"]), int(body["counter"])
        times = [float(t) for t in body["times"]]
        if len(times) != len(events):
            raise LedgerError(f"{path} holds {len(events)} events, {len(times)} times")
    except LedgerError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise LedgerError(
            f"{path} cannot be read: {type(exc).__name__}: {exc}"
        ) from exc
    ledger = PrivacyLedger(budget=budget, client_ids=[client_id])
    ledger.restore(events, [client_id])
    return RecordState(ledger, memo, counter, times)


def _save(path: Path, record: str, state: RecordState) -> None:
    body = {
        "format": LEDGER_FORMAT,
        "record": record,
        "counter": state.counter,
        "events": [
            {
                "mechanism": e.event.mechanism,
                "epsilon": e.event.epsilon,
                "parameters": dict(e.event.parameters),
            }
            for e in state.ledger.entries[state.carried :]
        ],
        "memo": state.memo,
        "times": state.times[state.carried :],
    }
    _write_atomically(path, json.dumps(body, allow_nan=False))


@contextmanager
def open_record(
    state_dir: Path, record: str, client_id: int, budget: float
) -> Iterator[RecordState]:
    """The record's state for one query, locked, and saved afterwards.

    The state is written back even if the query fails after a charge, so a charged
    release is on disk before any reply can leave.

    Raises
    ------
    LedgerError
        When the ledger cannot be trusted (see the module docstring).
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / f"{record}.json"
    index = state_dir / _INDEX
    with (state_dir / ".lock").open("a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            known = set(json.loads(index.read_text(encoding="utf-8")))
        except FileNotFoundError:
            known = set()
        except (OSError, ValueError, TypeError) as exc:
            raise LedgerError(f"{index} cannot be read: {exc}") from exc
        if path.exists():
            state = _load(path, record, client_id, budget)
        elif record in known:
            raise _missing(path, index)
        else:
            state = RecordState(PrivacyLedger(budget=budget, client_ids=[client_id]))
        state = _with_other_records(state, state_dir, known, record, client_id)
        try:
            yield state
        finally:
            _save(path, record, state)
            if record not in known:
                _write_atomically(index, json.dumps(sorted(known | {record})))


class RecordSpending(NamedTuple):
    """What one record (one version of a client's data file) spent: its releases,
    their epsilon, and when the last was charged (Unix seconds; None before any)."""

    record: str
    releases: int
    epsilon: float
    last: float | None


@dataclass(frozen=True)
class ClientSpending:
    """What one client id spent on the host, per record."""

    client_id: int
    records: tuple[RecordSpending, ...]

    @property
    def releases(self) -> int:
        return sum(r.releases for r in self.records)

    @property
    def spent(self) -> float:
        return math.fsum(r.epsilon for r in self.records)

    @property
    def last(self) -> float | None:
        return max((r.last for r in self.records if r.last is not None), default=None)


def spending(state_dir: Path) -> list[ClientSpending]:
    """Every client's spending in ``state_dir``, by client id, read under the state
    directory's lock (shared: no query can spend meanwhile); none before the node's
    first release; a :class:`LedgerError` if a ledger the index lists cannot be
    trusted. Changes nothing."""
    index = state_dir / _INDEX
    if not index.exists():
        return []
    with (state_dir / ".lock").open("a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_SH)
        try:
            known = sorted(json.loads(index.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as exc:
            raise LedgerError(f"{index} cannot be read: {exc}") from exc
        by_client: dict[int, list[RecordSpending]] = {}
        for record in known:
            client_id = _client_of(str(record), index)
            state = _load_listed(state_dir, record, client_id, math.inf)
            by_client.setdefault(client_id, []).append(
                RecordSpending(
                    record,
                    len(state.ledger.entries),
                    math.fsum(e.event.epsilon for e in state.ledger.entries),
                    max(state.times) if state.times else None,
                )
            )
    return [ClientSpending(c, tuple(rows)) for c, rows in sorted(by_client.items())]


def _client_of(record: str, index: Path) -> int:
    """The client id of a record name (:func:`record_key`)."""
    parts = record.split("-")
    if len(parts) != 3 or parts[0] != "client" or not parts[1].isdigit():
        raise LedgerError(f"{index} lists {record!r}, which names no record")
    return int(parts[1])


def _load_listed(
    state_dir: Path, record: str, client_id: int, budget: float
) -> RecordState:
    """A record the index lists: its file must be there."""
    path = state_dir / f"{record}.json"
    if not path.exists():
        raise _missing(path, state_dir / _INDEX)
    return _load(path, record, client_id, budget)


def _missing(path: Path, index: Path) -> LedgerError:
    return LedgerError(
        f"{path} is missing although {index} lists the record: restore it from a "
        "backup (the node answers nothing until then)"
    )


def _with_other_records(
    state: RecordState, state_dir: Path, known: set[str], record: str, client_id: int
) -> RecordState:
    """``state`` with the releases of the client's other records (the index's records
    of the same client id, in name order) before its own, as ``carried`` entries."""
    index = state_dir / _INDEX
    others = sorted(
        r for r in known if r != record and _client_of(r, index) == client_id
    )
    if not others:
        return state
    events: list[ReleaseEvent] = []
    times: list[float] = []
    for other in others:
        loaded = _load_listed(state_dir, other, client_id, state.ledger.budget)
        events.extend(e.event for e in loaded.ledger.entries)
        times.extend(loaded.times)
    ledger = PrivacyLedger(budget=state.ledger.budget, client_ids=[client_id])
    ledger.restore(events + [e.event for e in state.ledger.entries], [client_id])
    return RecordState(
        ledger, state.memo, state.counter, times + state.times, carried=len(events)
    )
