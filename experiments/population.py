"""A lazy population of synthetic functional clients, generated chunk by chunk."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ldpfda._validation import check_int
from ldpfda.datasets.synthetic import FunctionalDesign
from ldpfda.engine.inprocess import Batch
from ldpfda.fda.features import Featurizer
from ldpfda.privacy.random import derive_seed

__all__ = ["LazyCurvePopulation"]


@dataclass
class LazyCurvePopulation:
    """Clients ``first_id .. first_id + n_clients - 1`` with curves of ``design``.

    A :class:`~ldpfda.engine.inprocess.ClientPopulation`: block ``b`` of
    ``block_size`` clients is drawn from its own generator, seeded by
    ``(seed, tag, b)``, so a client's curve and label depend on the seed and its
    position only, not on the engine's chunk size; each client computes its features
    with ``featurizer`` (fixed before any client data is drawn), and only the chunk
    being served is in memory. ``tag`` tells populations under one seed apart.
    """

    n_clients: int
    first_id: int
    featurizer: Featurizer
    seed: int
    tag: str = "clients"
    design: FunctionalDesign = FunctionalDesign()
    block_size: int = 50_000

    def __post_init__(self) -> None:
        check_int(self.n_clients, "n_clients", minimum=1)
        check_int(self.first_id, "first_id", minimum=0)
        check_int(self.block_size, "block_size", minimum=1)

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
