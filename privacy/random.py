"""Randomness: numpy Generators for the server and data, keyed streams for clients.

A client's privatization noise comes from its own counter-based Philox4x32-10 stream
keyed by ``(run seed, client id)`` and evaluated with numpy over many keys at once, so
its numbers depend only on the seed, its id and how many it has drawn for a purpose,
not on the batch or the order of clients.

References
----------
J. K. Salmon, M. A. Moraes, R. O. Dror, D. E. Shaw, "Parallel random numbers: as easy
as 1, 2, 3", SC'11.
"""

from __future__ import annotations

import secrets
import zlib
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "ClientStreams",
    "KeyedUniform",
    "RandomLike",
    "UniformSource",
    "as_generator",
    "as_source",
    "client_keys",
    "derive_seed",
    "philox4x32",
    "run_seed",
    "uniform",
]

_MASK32 = np.uint64(0xFFFFFFFF)
_PHILOX_M0 = np.uint64(0xD2511F53)
_PHILOX_M1 = np.uint64(0xCD9E8D57)
_PHILOX_W0 = np.uint64(0x9E3779B9)
_PHILOX_W1 = np.uint64(0xBB67AE85)


@runtime_checkable
class UniformSource(Protocol):
    """Anything that yields uniforms in the open interval (0, 1), one row per client."""

    def uniform(self, shape: tuple[int, ...]) -> NDArray[np.float64]: ...


RandomLike = np.random.Generator | int | None | UniformSource


def as_generator(rng: np.random.Generator | int | None) -> np.random.Generator:
    """Normalise ``rng`` (a Generator, an int seed or None) into a Generator."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or (
        isinstance(rng, (int, np.integer)) and not isinstance(rng, bool)
    ):
        return np.random.default_rng(rng)
    raise TypeError(
        f"rng must be a numpy Generator, an int or None, got {type(rng).__name__}"
    )


def run_seed(random_state: np.random.Generator | int | None) -> int:
    """The seed of a run from a scikit-learn style ``random_state`` (int >= 0 or one
    Generator draw). ``None`` draws 62 bits of OS entropy: noise keyed by a seed anyone
    knows protects nothing, so only a caller who asks for reproducibility gets it."""
    if random_state is None:
        return secrets.randbits(62)
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(2**62))
    if isinstance(random_state, (int, np.integer)) and not isinstance(
        random_state, bool
    ):
        if random_state < 0:
            raise ValueError(f"random_state must be >= 0, got {random_state}")
        return int(random_state)
    raise TypeError(
        "random_state must be a numpy Generator, an int or None, got "
        f"{type(random_state).__name__}"
    )


def derive_seed(seed: int, *tags: int | str) -> int:
    """A 63-bit seed derived deterministically from ``seed`` and int or str tags."""
    words = [int(seed) & 0xFFFFFFFFFFFFFFFF]
    words += [zlib.crc32(t.encode()) if isinstance(t, str) else int(t) for t in tags]
    state = np.random.SeedSequence(words).generate_state(2, dtype=np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1]))


def as_source(rng: RandomLike) -> np.random.Generator | UniformSource:
    """Normalise ``rng`` once before several draws, so an int seed becomes one
    Generator instead of restarting the same stream at every draw."""
    if isinstance(rng, UniformSource) and not isinstance(rng, np.random.Generator):
        return rng
    return as_generator(rng)


def uniform(rng: RandomLike, shape: tuple[int, ...]) -> NDArray[np.float64]:
    """Uniform draws in the open interval (0, 1) from any accepted source."""
    source = as_source(rng)
    if not isinstance(source, np.random.Generator):
        return source.uniform(shape)
    # 52 random bits centred in their cells: the largest value 1 - 2^-53 is exactly
    # representable, so the interval is open at both ends.
    bits = source.integers(0, 1 << 52, size=shape, dtype=np.int64)
    return (bits.astype(np.float64) + 0.5) * 2.0**-52


def _splitmix64(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """The SplitMix64 finaliser: a bijection of 64-bit words that mixes every bit."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def client_keys(seed: int, client_ids: ArrayLike) -> NDArray[np.uint64]:
    """64-bit Philox keys for ``client_ids`` under run ``seed`` (a bijection of the id,
    so two clients of one run never share a key)."""
    ids = np.asarray(client_ids)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"client_ids must be integers, got dtype {ids.dtype}")
    if ids.size and ids.min() < 0:
        raise ValueError(f"client_ids must be >= 0, got {ids.min()}")
    base = _splitmix64(np.array([int(seed) & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
    return _splitmix64(base ^ ids.astype(np.uint64))


def philox4x32(
    counter: tuple[ArrayLike, ...], key: tuple[ArrayLike, ArrayLike]
) -> tuple[NDArray[np.uint64], ...]:
    """Philox4x32-10 on four counter and two key arrays of 32-bit words in uint64
    (broadcasting); returns the four output words."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) & _MASK32 for c in counter)
    k0, k1 = (np.asarray(k, dtype=np.uint64) & _MASK32 for k in key)
    for round_index in range(10):
        if round_index:
            k0 = (k0 + _PHILOX_W0) & _MASK32
            k1 = (k1 + _PHILOX_W1) & _MASK32
        p0 = _PHILOX_M0 * c0
        p1 = _PHILOX_M1 * c2
        hi0, lo0 = p0 >> np.uint64(32), p0 & _MASK32
        hi1, lo1 = p1 >> np.uint64(32), p1 & _MASK32
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


class KeyedUniform:
    """Per-client uniform stream for one purpose; row ``i`` belongs to client ``i``.

    Draw ``j`` of client ``i`` is a pure function of (run seed, client id, purpose, j);
    successive calls continue the stream, so no noise is ever reused.
    """

    def __init__(self, keys: NDArray[np.uint64], purpose: str) -> None:
        self._k0 = (keys & _MASK32)[:, None]
        self._k1 = (keys >> np.uint64(32))[:, None]
        self._purpose = np.uint64(zlib.crc32(purpose.encode()))
        self._offset = 0
        self.n_clients = int(keys.size)

    @property
    def drawn(self) -> int:
        """How many uniforms each client has drawn from this stream so far."""
        return self._offset

    def uniform(self, shape: tuple[int, ...]) -> NDArray[np.float64]:
        shape = tuple(int(s) for s in shape)
        if not shape or shape[0] != self.n_clients:
            raise ValueError(
                f"a keyed stream draws one row per client: first axis must be "
                f"{self.n_clients}, got shape {shape}"
            )
        per_client = int(np.prod(shape[1:], dtype=np.int64))
        first_block = self._offset // 2
        n_blocks = (self._offset + per_client + 1) // 2 - first_block
        block = np.arange(first_block, first_block + n_blocks, dtype=np.uint64)[None, :]
        w0, w1, w2, w3 = philox4x32(
            (block & _MASK32, block >> np.uint64(32), self._purpose, np.uint64(0)),
            (self._k0, self._k1),
        )
        # Two 52-bit doubles per Philox block, each centred in its cell: the largest
        # value 1 - 2^-53 is representable, so the interval is open at both ends.
        a = ((w0 >> np.uint64(6)) << np.uint64(26)) | (w1 >> np.uint64(6))
        b = ((w2 >> np.uint64(6)) << np.uint64(26)) | (w3 >> np.uint64(6))
        pairs = np.stack([a, b], axis=-1).reshape(self.n_clients, 2 * n_blocks)
        start = self._offset - 2 * first_block
        draws = pairs[:, start : start + per_client]
        self._offset += per_client
        return ((draws.astype(np.float64) + 0.5) * 2.0**-52).reshape(shape)


class ClientStreams:
    """The keyed streams of a set of clients (stable ids: partition ids in simulation,
    configured ids on hosts) under one run seed."""

    def __init__(self, seed: int, client_ids: ArrayLike) -> None:
        self._keys = client_keys(int(seed), np.asarray(client_ids).reshape(-1))
        self._streams: dict[str, KeyedUniform] = {}

    def stream(self, purpose: str) -> KeyedUniform:
        """The (stateful) stream for ``purpose``; the same object on every call."""
        if purpose not in self._streams:
            self._streams[purpose] = KeyedUniform(self._keys, purpose)
        return self._streams[purpose]
