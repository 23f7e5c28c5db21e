"""A lazy population of synthetic functional clients, generated chunk by chunk.

Nothing is held for all clients at once: block ``b`` of a population is drawn from its
own generator seeded by ``(seed, tag, b)``, so a client's curve and label depend only on
the seed and on its position, not on the chunk size the engine asks for.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ldpfda.datasets.synthetic import FunctionalDesign
from ldpfda.engine.inprocess import Batch
from ldpfda.fda.features import Featurizer
from ldpfda.privacy.random import derive_seed

__all__ = ["LazyCurvePopulation"]


@dataclass
class LazyCurvePopulation:
    """Clients ``first_id .. first_id + n_clients - 1`` with curves of ``design``.

    Satisfies :class:`ldpfda.server.engine.ClientPopulation`. Each client computes its
    features locally with ``featurizer``; only the features of the chunk being served
    are in memory.

    Parameters
    ----------
    n_clients : int
    first_id : int
        Id of the first client; ids are consecutive.
    featurizer : Featurizer
        Fixed before any client data is drawn (e.g. calibrated on public curves).
    seed : int
    tag : str
        Distinguishes populations drawn under one seed (``"train"``, ``"eval"``).
    design : FunctionalDesign
    block_size : int
        Clients drawn per generator; fixes the data, unlike the engine's chunk size.
    """

    n_clients: int
    first_id: int
    featurizer: Featurizer
    seed: int
    tag: str = "clients"
    design: FunctionalDesign = FunctionalDesign()
    block_size: int = 50_000

    def __post_init__(self) -> None:
        if self.n_clients < 1:
            raise ValueError(f"n_clients must be >= 1, got {self.n_clients}")
        if self.first_id < 0:
            raise ValueError(f"first_id must be >= 0, got {self.first_id}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")

    @property
    def client_ids(self) -> NDArray[np.int64]:
        """All ids (cheap: the engine's ledger needs them up front)."""
        return self.first_id + np.arange(self.n_clients, dtype=np.int64)

    def block(self, index: int) -> tuple[NDArray[np.float64], NDArray[np.int8]]:
        """Raw curves and labels of block ``index``, drawn from its own generator."""
        start = index * self.block_size
        size = min(self.block_size, self.n_clients - start)
        if size <= 0:
            raise IndexError(f"block {index} is past the last client")
        rng = np.random.default_rng(derive_seed(self.seed, self.tag, index))
        return self.design.sample(size, rng)

    def batches(self, chunk_size: int) -> Iterator[Batch]:
        """(ids, features in [-1, 1]^p, labels), at most ``chunk_size`` clients each."""
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        n_blocks = -(-self.n_clients // self.block_size)
        for b in range(n_blocks):
            curves, labels = self.block(b)
            base = self.first_id + b * self.block_size
            for s in range(0, labels.size, chunk_size):
                part = slice(s, s + chunk_size)
                ids = base + np.arange(s, s + labels[part].size, dtype=np.int64)
                yield ids, self.featurizer.transform(curves[part]), labels[part]
