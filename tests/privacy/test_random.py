"""Keyed per-client Philox streams: known answers, uniformity, batch independence."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import ldpfda.privacy.random as random_module
from ldpfda.privacy.random import (
    ClientStreams,
    KeyedUniform,
    UniformSource,
    as_generator,
    client_keys,
    derive_seed,
    philox4x32,
    uniform,
)

# Random123 kat_vectors, philox4x32_10: (counter, key, expected output).
PHILOX_KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    (
        (0xFFFFFFFF,) * 4,
        (0xFFFFFFFF,) * 2,
        (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
    ),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]

#: p-value below which a goodness-of-fit test fails; fixed seeds make each test
#: deterministic, so this is the chance that a correct generator is caught by bad luck.
GOF_ALPHA = 1e-4


def _words(values: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    return tuple(np.array([v], dtype=np.uint64) for v in values)


@pytest.mark.parametrize(("counter", "key", "expected"), PHILOX_KAT)
def test_philox4x32_10_matches_random123_known_answers(counter, key, expected):
    out = philox4x32(_words(counter), _words(key))
    assert tuple(int(w[0]) for w in out) == expected


def test_philox4x32_is_vectorised_over_counters_and_keys():
    counters = [c for c, _, _ in PHILOX_KAT]
    keys = [k for _, k, _ in PHILOX_KAT]
    c = tuple(np.array(col, dtype=np.uint64) for col in zip(*counters, strict=True))
    k = tuple(np.array(col, dtype=np.uint64) for col in zip(*keys, strict=True))
    out = np.stack(philox4x32(c, k), axis=1)
    np.testing.assert_array_equal(
        out, np.array([e for _, _, e in PHILOX_KAT], np.uint64)
    )


# --- uniforms -------------------------------------------------------------------------


def _keyed(
    seed: int, n_clients: int, per_client: int, purpose: str = "test"
) -> np.ndarray:
    return (
        ClientStreams(seed, np.arange(n_clients))
        .stream(purpose)
        .uniform((n_clients, per_client))
    )


def test_keyed_uniforms_are_in_the_open_unit_interval_with_uniform_moments():
    u = _keyed(seed=11, n_clients=2000, per_client=101)  # odd: both words of a block
    n = u.size
    assert np.all(u > 0.0) and np.all(u < 1.0)
    # Mean 1/2, variance 1/12; SE of the sample variance from mu4 = 1/80.
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / n)
    assert abs(u.var() - 1 / 12) < 5 * np.sqrt((1 / 80 - 1 / 144) / n)


def test_keyed_uniforms_pass_chi_square_and_ks():
    u = _keyed(seed=12, n_clients=1000, per_client=200).ravel()
    counts = np.bincount((u * 100).astype(int), minlength=100)
    assert stats.chisquare(counts).pvalue > GOF_ALPHA
    assert stats.kstest(u, "uniform").pvalue > GOF_ALPHA
    # Every draw position (first/second word of a Philox block, later blocks) and
    # every client is uniform on its own, too.
    per_position = _keyed(seed=13, n_clients=20_000, per_client=4)
    for column in per_position.T:
        assert stats.kstest(column, "uniform").pvalue > GOF_ALPHA / 4


def test_keyed_uniforms_are_uncorrelated_across_draws_and_neighbouring_clients():
    u = _keyed(seed=14, n_clients=5000, per_client=40)
    centred = u - 0.5
    n_lag = centred[:, 1:].size
    lag_draw = np.mean(centred[:, 1:] * centred[:, :-1]) * 12
    lag_client = np.mean(centred[1:] * centred[:-1]) * 12
    # Correlation of independent uniforms has SE 1/sqrt(n).
    assert abs(lag_draw) < 5 / np.sqrt(n_lag)
    assert abs(lag_client) < 5 / np.sqrt(centred[1:].size)


def test_generator_uniforms_are_in_the_open_unit_interval_with_uniform_moments():
    u = uniform(np.random.default_rng(3), (200_000,))
    assert np.all(u > 0.0) and np.all(u < 1.0)
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / u.size)
    assert stats.kstest(u, "uniform").pvalue > GOF_ALPHA


class _ExtremeBitsGenerator(np.random.Generator):
    """A Generator whose ``integers`` returns the largest (or least) value in range."""

    def __init__(self, *, top: bool) -> None:
        super().__init__(np.random.PCG64(0))
        self.top = top

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False):  # noqa: D102
        value = (high - 1 if not endpoint else high) if self.top else low
        return np.full(size, value, dtype=dtype)


@pytest.mark.parametrize("top", [False, True], ids=["smallest-bits", "largest-bits"])
def test_generator_uniform_stays_open_at_the_extreme_bit_patterns(top):
    # The largest 53-bit pattern, centred in its cell, must still be < 1:
    # (2^53 - 1 + 1/2) 2^-53 is not representable and rounds to exactly 1.0.
    u = uniform(_ExtremeBitsGenerator(top=top), (4,))
    assert np.all(u > 0.0) and np.all(u < 1.0), u


@pytest.mark.parametrize(
    "word", [0, 0xFFFFFFFF], ids=["all-zero-words", "all-one-words"]
)
def test_keyed_uniform_stays_open_at_the_extreme_philox_outputs(monkeypatch, word):
    def extreme(counter, key):
        shape = np.broadcast(*counter, *key).shape
        return tuple(np.full(shape, word, dtype=np.uint64) for _ in range(4))

    monkeypatch.setattr(random_module, "philox4x32", extreme)
    u = ClientStreams(0, np.arange(3)).stream("edge").uniform((3, 5))
    assert np.all(u > 0.0) and np.all(u < 1.0), u


# --- per-client streams ---------------------------------------------------------------


def test_a_clients_draws_alone_equal_its_row_in_a_big_batch():
    ids = np.array([7, 0, 123_456, 3, 99, 2**40 + 5])
    batch = ClientStreams(5, ids).stream("noise").uniform((ids.size, 7))
    for i, client in enumerate(ids):
        alone = ClientStreams(5, [client]).stream("noise").uniform((1, 7))
        np.testing.assert_array_equal(alone[0], batch[i])


def test_draws_do_not_depend_on_chunking_of_clients():
    ids = np.arange(1000, 1100)
    whole = ClientStreams(9, ids).stream("noise").uniform((100, 3))
    chunks = [
        ClientStreams(9, ids[a:b]).stream("noise").uniform((b - a, 3))
        for a, b in [(0, 1), (1, 40), (40, 41), (41, 100)]
    ]
    np.testing.assert_array_equal(np.concatenate(chunks), whole)


def test_reversed_client_order_gives_permuted_rows():
    ids = np.arange(50)
    forward = ClientStreams(1, ids).stream("noise").uniform((50, 6))
    order = np.random.default_rng(0).permutation(50)
    for perm in (ids[::-1], ids[order]):
        permuted = ClientStreams(1, perm).stream("noise").uniform((50, 6))
        np.testing.assert_array_equal(permuted, forward[perm])


@pytest.mark.parametrize("split", [[1, 1, 1, 1, 1, 1, 1], [3, 4], [2, 5], [1, 6], [7]])
def test_successive_draws_continue_the_stream(split):
    ids = np.arange(20)
    whole = ClientStreams(4, ids).stream("noise").uniform((20, 7))
    stream = ClientStreams(4, ids).stream("noise")
    parts = [stream.uniform((20, k)) for k in split]
    np.testing.assert_array_equal(np.concatenate(parts, axis=1), whole)
    assert stream.drawn == 7


def test_successive_draws_differ_and_streams_are_shared_per_purpose():
    streams = ClientStreams(4, np.arange(10))
    first = streams.stream("noise").uniform((10, 3))
    second = streams.stream("noise").uniform((10, 3))
    assert streams.stream("noise") is streams.stream("noise")
    assert not np.any(first == second)


def test_multi_axis_draws_reshape_the_per_client_sequence():
    ids = np.arange(8)
    flat = ClientStreams(2, ids).stream("noise").uniform((8, 12))
    shaped = ClientStreams(2, ids).stream("noise").uniform((8, 3, 4))
    np.testing.assert_array_equal(shaped.reshape(8, 12), flat)


def test_purposes_are_independent_streams():
    streams = ClientStreams(4, np.arange(1000))
    a = streams.stream("features").uniform((1000, 4))
    b = streams.stream("label").uniform((1000, 4))
    assert not np.any(a == b)
    assert abs(np.corrcoef(a.ravel(), b.ravel())[0, 1]) < 5 / np.sqrt(a.size)


def test_same_seed_reproduces_and_different_seeds_differ():
    ids = np.arange(500)
    a = ClientStreams(2024, ids).stream("noise").uniform((500, 4))
    again = ClientStreams(2024, ids).stream("noise").uniform((500, 4))
    other = ClientStreams(2025, ids).stream("noise").uniform((500, 4))
    np.testing.assert_array_equal(a, again)
    assert not np.any(a == other)


def test_keys_are_distinct_across_client_ids_and_seeds():
    ids = np.arange(200_000)
    keys = client_keys(0, ids)
    assert np.unique(keys).size == ids.size
    sparse = np.array([0, 1, 2**31, 2**32, 2**32 + 1, 2**62], dtype=np.int64)
    assert np.unique(client_keys(0, sparse)).size == sparse.size
    assert not np.any(client_keys(0, ids[:1000]) == client_keys(1, ids[:1000]))


def test_stream_refuses_a_batch_of_the_wrong_number_of_clients():
    stream = ClientStreams(0, np.arange(4)).stream("noise")
    with pytest.raises(ValueError, match="first axis must be 4"):
        stream.uniform((3, 2))
    with pytest.raises(ValueError, match="first axis"):
        stream.uniform(())


def test_client_ids_must_be_non_negative_integers():
    with pytest.raises(TypeError, match="client_ids"):
        client_keys(0, np.array([0.5, 1.0]))
    with pytest.raises(ValueError, match="client_ids"):
        ClientStreams(0, [3, -1])


def test_keyed_streams_are_a_uniform_source():
    stream = ClientStreams(0, np.arange(3)).stream("noise")
    assert isinstance(stream, KeyedUniform)
    assert isinstance(stream, UniformSource)
    expected = ClientStreams(0, np.arange(3)).stream("noise").uniform((3, 2))
    np.testing.assert_array_equal(uniform(stream, (3, 2)), expected)


# --- generators and seeds -------------------------------------------------------------


def test_as_generator_normalises_seeds_and_refuses_other_types():
    gen = np.random.default_rng(0)
    assert as_generator(gen) is gen
    assert as_generator(5).random() == np.random.default_rng(5).random()
    assert as_generator(np.int64(5)).random() == np.random.default_rng(5).random()
    assert isinstance(as_generator(None), np.random.Generator)
    for bad in (True, 1.5, "0", np.random.RandomState(0)):
        with pytest.raises(TypeError, match="rng"):
            as_generator(bad)


def test_uniform_from_an_int_seed_is_reproducible():
    np.testing.assert_array_equal(uniform(3, (5, 2)), uniform(3, (5, 2)))
    assert not np.any(uniform(3, (5, 2)) == uniform(4, (5, 2)))


def test_derive_seed_is_deterministic_and_separates_tags():
    assert derive_seed(1, "train", 3) == derive_seed(1, "train", 3)
    seeds = {
        derive_seed(1, "train", 3),
        derive_seed(1, "train", 4),
        derive_seed(1, "eval", 3),
        derive_seed(2, "train", 3),
        derive_seed(1),
    }
    assert len(seeds) == 5
    assert all(0 <= s < 2**63 for s in seeds)
