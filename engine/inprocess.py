"""The in-process transport: every client of a population answers in this process.

:class:`InProcessClients` hands each chunk of asked clients to the vectorised client
function a Flower SuperNode calls on its one client
(:func:`ldpfda.client.answers.answer`) and checks the stacked replies as the Flower
transport checks each node's. Each client's noise is keyed by (run seed, client id),
so the numbers depend neither on the chunk size nor on the order of the asks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from ldpfda.client.answers import ClientBatch, answer
from ldpfda.config import Settings
from ldpfda.datasets.population import RepeatData
from ldpfda.fda.features import Featurizer
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.schema.queries import Query, Request
from ldpfda.server.session import Replies, check_replies

__all__ = [
    "ArrayClients",
    "Batch",
    "ClientPopulation",
    "InProcessClients",
    "all_ids",
    "split_clients",
]

Batch = tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.int8]]


class ClientPopulation(Protocol):
    """Clients that compute their scaled features locally, served in chunks."""

    @property
    def n_clients(self) -> int: ...

    def batches(self, chunk_size: int) -> Iterator[Batch]:
        """Yield (client ids, features in [-1, 1]^p, true labels) chunk by chunk."""
        ...


@dataclass
class ArrayClients:
    """Clients whose raw data (curves or vectors) are held in memory."""

    client_ids: NDArray[np.int64]
    raw: Any
    labels: NDArray[np.int8]
    featurizer: Featurizer

    @property
    def n_clients(self) -> int:
        return int(len(self.client_ids))

    def batches(self, chunk_size: int) -> Iterator[Batch]:
        for start in range(0, self.n_clients, chunk_size):
            stop = start + chunk_size
            features = self.featurizer.transform(self.raw[start:stop])
            yield self.client_ids[start:stop], features, self.labels[start:stop]

    def features(self) -> NDArray[np.float64]:
        return self.featurizer.transform(self.raw)


def split_clients(
    settings: Settings, data: RepeatData
) -> tuple[ArrayClients, ArrayClients, tuple[NDArray[np.float64], NDArray[np.int8]]]:
    """The training clients (ids ``0 .. n_train-1``) and evaluation clients (the next
    ``n_eval`` ids) of a repeat's samples, and its clean scaled test set."""
    (x_train, y_train), (x_eval, y_eval) = data.train, data.evaluation
    assert data.test is not None
    featurizer = data.featurizer
    n_train = settings.n_train
    train = ArrayClients(np.arange(n_train), x_train, y_train, featurizer)
    evaluation = ArrayClients(
        n_train + np.arange(settings.n_eval), x_eval, y_eval, featurizer
    )
    return train, evaluation, (featurizer.transform(data.test[0]), data.test[1])


def _slice(rows: NDArray[np.int64]) -> NDArray[np.int64] | slice:
    """``rows`` as a slice when they are consecutive (a view, not a copy)."""
    if rows.size and rows[-1] - rows[0] + 1 == rows.size and np.all(np.diff(rows) == 1):
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


def all_ids(population: ClientPopulation) -> NDArray[np.int64]:
    """Every client id of ``population``, in its order."""
    ids = getattr(population, "client_ids", None)
    if ids is not None:
        return np.asarray(ids, dtype=np.int64)
    return np.concatenate([b[0] for b in population.batches(1_000_000)])


class InProcessClients:
    """The clients of ``populations`` (disjoint ids) as a transport.

    ``seed`` is the run seed that, with the client id, keys every client's noise;
    ``ledger`` the clients' own ledgers, one row per client, charged before anything
    is released; ``chunk_size`` the clients per call of the client function.
    """

    def __init__(
        self,
        populations: Sequence[ClientPopulation],
        settings: Settings,
        *,
        seed: int,
        ledger: PrivacyLedger,
        chunk_size: int = 100_000,
    ) -> None:
        self.populations = list(populations)
        self.settings = settings
        self.seed = seed
        self.ledger = ledger
        self.chunk_size = chunk_size
        self._ranges = [
            (int(ids.min()), int(ids.max())) if ids.size else (0, -1)
            for ids in map(all_ids, self.populations)
        ]

    def clean(
        self, ids: NDArray[np.int64]
    ) -> tuple[NDArray[np.float64], NDArray[np.int8]]:
        """The clean scaled features and labels of clients ``ids``, in that order:
        what each client knows of itself, from which a fault study's attackers craft
        their replies. No server-side code calls it."""
        x: NDArray[np.float64] | None = None
        y = np.zeros(ids.size, dtype=np.int8)
        position = {int(c): i for i, c in enumerate(ids)}
        for population in self.populations:
            for batch_ids, features, labels in population.batches(self.chunk_size):
                if x is None:
                    x = np.zeros((ids.size, features.shape[1]))
                for j, c in enumerate(batch_ids.tolist()):
                    i = position.get(c)
                    if i is not None:
                        x[i], y[i] = features[j], labels[j]
        assert x is not None
        return x, y

    def _parts(
        self, query: Query, ids: NDArray[np.int64], request: Request
    ) -> Iterator[tuple[NDArray[np.int64], dict[str, NDArray]]]:
        """Chunk by chunk: the rows of ``ids`` that answered, and their raw replies."""
        ascending = bool(np.all(ids[1:] > ids[:-1]))  # the usual ask: no sort
        order = None if ascending else np.argsort(ids, kind="stable")
        sorted_ids = ids if order is None else ids[order]
        for population, (low, high) in zip(self.populations, self._ranges, strict=True):
            inside = np.searchsorted(sorted_ids, high, side="right") - np.searchsorted(
                sorted_ids, low
            )
            if inside == 0:  # nobody asked here: its clients need not compute
                continue
            for batch_ids, x, y in population.batches(self.chunk_size):
                if sorted_ids.size == 0:
                    break
                pos = np.searchsorted(sorted_ids, batch_ids)
                pos = np.minimum(pos, sorted_ids.size - 1)
                match = sorted_ids[pos] == batch_ids
                if not match.any():
                    continue
                rows = pos[match] if order is None else order[pos[match]]
                if not match.all():
                    batch_ids, x, y = batch_ids[match], x[match], y[match]
                batch = ClientBatch(batch_ids, x, y, self.seed, self.ledger)
                reply = answer(
                    query.name, batch, request.take(_slice(rows)), self.settings
                )
                yield rows, reply

    def answers(
        self, query: Query, ids: NDArray[np.int64], request: Request
    ) -> tuple[dict[str, NDArray], NDArray[np.bool_]]:
        """The raw reply arrays of ``ids`` (in that order) and who was found."""
        parts = list(self._parts(query, ids, request))
        found = np.zeros(ids.size, dtype=bool)
        values: dict[str, NDArray] = {}
        for spec in query.reply:
            first = next((r[spec.key] for _, r in parts), None)
            shape = () if first is None else first.shape[1:]
            values[spec.key] = np.zeros((ids.size, *shape), dtype=spec.dtype)
        for rows, reply in parts:
            found[rows] = True
            for key, array in reply.items():
                values[key][rows] = array
        return values, found

    def ask(self, query: Query, ids: NDArray[np.int64], request: Request) -> Replies:
        values, found = self.answers(query, ids, request)
        replies = check_replies(
            query, ids[found], {k: v[found] for k, v in values.items()}
        )
        replies.missing = {
            int(c): "unavailable: no such client in process" for c in ids[~found]
        }
        return replies

    def ask_chunks(
        self, query: Query, ids: NDArray[np.int64], request: Request
    ) -> Iterator[Replies]:
        """:meth:`ask`, one checked chunk of replies at a time (the last one names
        who was not found): a reduction over them holds one chunk, not every reply."""
        found = np.zeros(ids.size, dtype=bool)
        for rows, reply in self._parts(query, ids, request):
            found[rows] = True
            yield check_replies(query, ids[rows], reply)
        missing = {
            int(c): "unavailable: no such client in process" for c in ids[~found]
        }
        yield Replies(ids[:0], {}, missing)

    def rejoin(self, ids: NDArray[np.int64]) -> None:
        """Nothing to wait for: a client in process is there or it never was."""
