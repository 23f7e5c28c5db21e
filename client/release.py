"""A node's releases: each one charged once, stored, and repeated on an identical ask.

:func:`release` answers one query for a deployed node from its record's lifetime
state (:class:`~ldpfda.client.ledger.RecordState`): a query identical in everything
that determines the release (:func:`memo_key`) gets the stored release at no cost, as
RAPPOR's permanent randomized response; anything else is a new release, charged and
then stored. It has no Flower import, so the privacy audit runs it as a node does.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldpfda.client.answers import ClientBatch, answer
from ldpfda.client.policy import NodePolicy
from ldpfda.config import Settings
from ldpfda.datasets.population import simulated_noise_seed
from ldpfda.exceptions import BudgetExceededError
from ldpfda.privacy.random import derive_seed
from ldpfda.schema import catalog
from ldpfda.schema.queries import Request

__all__ = ["RELEASES", "ClientSetup", "memo_key", "noise_seed", "period_cap", "release"]


@dataclass(frozen=True)
class ClientSetup:
    """Everything a node derives from its context before answering.

    Attributes
    ----------
    client_id : int
    settings : Settings
        The run's settings, parsed like the in-process CLI's.
    repeat : int
        The repeat whose derived seeds the run uses (``flower.repeat``).
    policy : NodePolicy
        The node's own privacy rules (its budget among them).
    record : str or None
        A deployed node's record (client id and data hash); None when simulated.
    secret : int or None
        The node's ``noise-seed``, if its operator set one.
    spec : FederationSpec or None
        The federation spec of the node's ``spec-path``: its data are featurized by
        it, and it answers only queries made under the same spec.
    """

    client_id: int
    settings: Settings
    repeat: int
    policy: NodePolicy
    record: str | None = None
    secret: int | None = None
    spec: Any = None

    @property
    def budget(self) -> float:
        return self.policy.budget


#: The queries that release something private (charged, and memoized on a host).
RELEASES = (catalog.PRIVATIZE, catalog.EVALUATE, catalog.LABEL, catalog.P2P_RANDOMIZE)


def memo_key(
    name: str,
    settings: Any,
    features: np.ndarray,
    labels: np.ndarray,
    request: Request,
) -> str:
    """A hash of everything that determines a release: an equal key, an equal release.

    The query, the release's mechanism and budget, the scaled features and label (so
    the featurizer and the data), and every request array.
    """
    digest = hashlib.sha256()
    parts: list[Any] = [
        name,
        settings.mechanism,
        settings.epsilon,
        settings.label_share,
    ]
    digest.update(json.dumps(parts, default=str).encode())
    for array in (features, labels):
        digest.update(np.ascontiguousarray(array, dtype=np.float64).tobytes())
    arrays = {**request.rows, **request.shared}
    for key, (values, _, _) in request.ragged.items():
        arrays[key] = values
    for key in sorted(arrays):
        digest.update(key.encode())
        digest.update(np.ascontiguousarray(arrays[key], dtype=np.float64).tobytes())
    return digest.hexdigest()


def noise_seed(setup: ClientSetup, counter: int) -> int:
    """The seed that, with the client id, keys the noise of a node's next release.

    A simulated partition uses the engine's client seed, so a simulation releases what
    the in-process engine does. A deployed node draws fresh OS entropy for every
    release; with a ``noise-seed`` (its operator's secret) the seed is derived from the
    secret, the record and the record's persistent release counter, never from
    anything the server chooses.
    """
    if setup.record is None:
        return simulated_noise_seed(setup.settings, setup.repeat)
    if setup.secret is None:
        return secrets.randbits(62)
    return derive_seed(setup.secret, "noise", setup.record, counter)


@contextmanager
def period_cap(setup: Any, state: Any) -> Iterator[None]:
    """Lower the record's ledger budget, while a query is answered, to what its policy's
    period budget leaves: the releases charged within the last ``period`` seconds
    count against ``period_budget``.

    Raises
    ------
    BudgetExceededError
        Naming the period budget, when it (not the lifetime budget) refuses a charge.
    """
    policy, ledger = setup.policy, state.ledger
    lifetime = ledger.budget
    if math.isinf(policy.period_budget):
        yield
        return
    since = time.time() - policy.period
    recent = sum(
        entry.event.epsilon
        for entry, at in zip(ledger.entries, state.times, strict=False)
        if at > since
    )
    left = max(policy.period_budget - recent, 0.0)
    ledger.budget = min(lifetime, ledger.spent(setup.client_id) + left)
    try:
        yield
    except BudgetExceededError as exc:
        if ledger.budget < lifetime:
            raise BudgetExceededError(
                f"the release would spend more than the node's period-budget "
                f"{policy.period_budget:g} per {policy.period:g} s ({recent:g} spent "
                "in the current period)"
            ) from exc
        raise
    finally:
        ledger.budget = lifetime


def release(
    name: str,
    setup: Any,
    state: Any,
    features: np.ndarray,
    labels: np.ndarray,
    request: Request,
    *,
    memoize: bool,
) -> dict[str, np.ndarray]:
    """The reply arrays of query ``name``: the stored release of an identical query
    (``memoize``), or a new one, charged to ``state``'s ledger and then stored."""
    key = memo_key(name, setup.settings, features, labels, request) if memoize else ""
    if key in state.memo:
        stored = state.memo[key]
        return {
            k: np.asarray(v, dtype=stored["dtypes"][k])
            for k, v in stored["arrays"].items()
        }
    batch = ClientBatch(
        np.array([setup.client_id], dtype=np.int64),
        features,
        labels,
        noise_seed(setup, state.counter),
        state.ledger,
    )
    with period_cap(setup, state):
        arrays = answer(name, batch, request, setup.settings)
    state.times.extend([time.time()] * (len(state.ledger.entries) - len(state.times)))
    if name in RELEASES:
        state.counter += 1
    if memoize:
        state.memo[key] = {
            "arrays": {k: np.asarray(v).tolist() for k, v in arrays.items()},
            "dtypes": {k: np.asarray(v).dtype.str for k, v in arrays.items()},
        }
    return arrays
