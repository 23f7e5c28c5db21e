"""The simulated populations of the embedded datasets, drawn the same on every side.

The in-process engine, a simulated SuperNode and the ServerApp all draw a repeat's data
here, from ``(settings.seed, repeat)`` in a fixed order, so they see the same rows bit
for bit. A deployed node reads its own data file instead.

The ``wearable`` dataset is a day of heart rate per subject from
:func:`~ldpfda.datasets.wearable.make_wearable`, featurized by the spec the package
ships (:func:`~ldpfda.datasets.wearable_spec.wearable_spec` with ``fda.n-basis`` and
``fda.order``). A subject's features depend only on its own curve, so each simulated
client's features are computed once, as its host would, and the engine's clients
hold them (the run's featurizer is then the identity on [-1, 1]^p). Repeat ``r``'s
training and evaluation subjects are subjects ``0 .. n_train + n_eval - 1`` of the
``make_wearable`` seed ``derive_seed(seed, "data", r)``; its public calibration
subjects come from the disjoint public seed range
(:data:`~ldpfda.datasets.wearable_spec.PUBLIC_SEED_BASE` plus
``derive_seed(seed, "public", r)``). The ``n_test`` test subjects (seed
``derive_seed(seed, "test")``) are drawn once and shared by the repeats: drawing and
projecting 10^5 subjects takes about 20 s, too long to repeat per run, and with that
many test subjects a shared test set changes the spread over repeats by about 0.001.
"""

from __future__ import annotations

import collections
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda._validation import check_int
from ldpfda.config import Settings
from ldpfda.datasets.synthetic import FunctionalDesign, VectorDesign, make_design
from ldpfda.fda.features import CurveFeaturizer, Featurizer, VectorFeaturizer
from ldpfda.fda.scaling import CoefficientScaler
from ldpfda.privacy.random import derive_seed

__all__ = [
    "WEARABLE_BLOCK",
    "RepeatData",
    "design_test_set",
    "make_featurizer",
    "population_data",
    "public_featurizer",
    "public_features",
    "repeat_data",
    "simulated_noise_seed",
    "simulated_partition",
    "wearable_features",
]

#: Subjects drawn and featurized at once for the wearable dataset (about 30 MB).
WEARABLE_BLOCK = 10_000


def make_featurizer(
    design: VectorDesign | FunctionalDesign,
    settings: Settings,
    rng: np.random.Generator,
) -> Featurizer:
    """The featurizer clients use, fixed before any private data is seen: the identity
    on [-1, 1]^4 for the vector design; for curves, the projection on the design's grid
    with bounds from ``calibration_size`` public curves drawn from ``rng``."""
    if not design.is_functional:
        return VectorFeaturizer(CoefficientScaler(-1.0, 1.0), design.n_features)
    public = design.sample_curves(settings.calibration_size, rng)
    return CurveFeaturizer.calibrated(
        public, design.grid_points, n_basis=settings.n_basis, order=settings.order
    )


def public_features(
    settings: Settings, repeat: int = 0, *, featurizer: Featurizer | None = None
) -> NDArray[np.float64]:
    """Public, unlabeled scaled features of a repeat, which the server may use freely
    (the moment classifier's feature second moment).

    The functional design's calibration curves (:func:`make_featurizer`); for the
    vector design, ``calibration_size`` vectors from the stream
    ``(seed, "public", repeat)``; for the wearable dataset, ``calibration_size``
    subjects of the public seed range. ``featurizer`` defaults to the repeat's own.
    """
    if settings.dataset == "wearable":
        seed = _wearable_public_seed(settings, repeat)
        features, _ = wearable_features(
            settings.n_basis, settings.order, seed, 0, settings.calibration_size
        )
        return features
    design = make_design(settings.dataset)
    if featurizer is None:
        rng = np.random.default_rng(derive_seed(settings.seed, "data", repeat))
        featurizer = make_featurizer(design, settings, rng)
    # The calibration curves are the first draws of the data stream.
    stream = "data" if design.is_functional else "public"
    rng = np.random.default_rng(derive_seed(settings.seed, stream, repeat))
    raw, _ = design.sample(settings.calibration_size, rng)
    return featurizer.transform(raw)


@dataclass(frozen=True)
class RepeatData:
    """The data of one repeat on an embedded design, drawn in a fixed order."""

    featurizer: Featurizer
    train: tuple[Any, NDArray[np.int8]]
    evaluation: tuple[Any, NDArray[np.int8]]
    test: tuple[Any, NDArray[np.int8]] | None


def repeat_data(
    settings: Settings, repeat: int = 0, *, with_test: bool = True
) -> RepeatData:
    """Featurizer and raw samples of one repeat, from ``(settings.seed, repeat)``.

    Draw order on the repeat's data stream: calibration curves (functional design
    only), training, evaluation, test sample. The wearable dataset's samples are the
    features of its subjects (see the module docstring).
    """
    if settings.dataset == "wearable":
        return _wearable_repeat(settings, repeat, with_test=with_test)
    design = make_design(settings.dataset)
    data_rng = np.random.default_rng(derive_seed(settings.seed, "data", repeat))
    featurizer = make_featurizer(design, settings, data_rng)
    train = design.sample(settings.n_train, data_rng)
    evaluation = design.sample(settings.n_eval, data_rng)
    test = design.sample(settings.n_test, data_rng) if with_test else None
    return RepeatData(featurizer, train, evaluation, test)


@functools.lru_cache(maxsize=8)
def public_featurizer(settings: Settings, repeat: int = 0) -> tuple[Featurizer, Any]:
    """The run's public featurizer and the grid it expects (None for vector data),
    from the settings and the run seed only: the engine's calibration curves, or in a
    multi-server session those of the public stream every server shares."""
    if settings.dataset == "wearable":
        return _wearable_featurizer(settings), None
    design = make_design(settings.dataset)
    stream = ("data",) if settings.server_id < 0 else ("public",)
    rng = np.random.default_rng(derive_seed(settings.seed, *stream, repeat))
    featurizer = make_featurizer(design, settings, rng)
    grid = design.grid_points if design.is_functional else None
    return featurizer, grid


def population_data(
    settings: Settings, repeat: int = 0, *, with_test: bool = True
) -> RepeatData:
    """Featurizer and raw samples of the simulated population of a run.

    :func:`repeat_data` for a single server; server ``s >= 0`` of a multi-server
    session draws training, evaluation and test samples from the design shifted by
    ``settings.feature_shift`` and ``settings.label_shift`` on the stream
    ``(seed, "data", repeat, s)``, with the shared :func:`public_featurizer` (the
    wearable dataset, unshifted: its own subjects of that seed, and test subjects of
    ``(seed, "test", s)``).
    """
    if settings.server_id < 0:
        return repeat_data(settings, repeat, with_test=with_test)
    if settings.dataset == "wearable":
        server = (settings.server_id,)
        return _wearable_repeat(settings, repeat, with_test=with_test, server=server)
    featurizer, _ = public_featurizer(settings, repeat)
    design = make_design(
        settings.dataset,
        feature_shift=settings.feature_shift,
        label_shift=settings.label_shift,
    )
    rng = np.random.default_rng(
        derive_seed(settings.seed, "data", repeat, settings.server_id)
    )
    train = design.sample(settings.n_train, rng)
    evaluation = design.sample(settings.n_eval, rng)
    test = design.sample(settings.n_test, rng) if with_test else None
    return RepeatData(featurizer, train, evaluation, test)


def simulated_noise_seed(settings: Settings, repeat: int = 0) -> int:
    """The seed that, with the client id, keys simulated clients' noise (one per server
    in a multi-server session, where client ids repeat)."""
    server = () if settings.server_id < 0 else (settings.server_id,)
    return derive_seed(settings.seed, "clients", repeat, *server)


@functools.lru_cache(maxsize=4)
def _simulated_population(
    settings: Settings, repeat: int
) -> tuple[NDArray[np.float64], NDArray[np.int8]]:
    # The engine's own draws (population_data); features are computed for the whole
    # sample at once, as the engine does, so rows are bit-equal.
    data = population_data(settings, repeat, with_test=False)
    (x_train, y_train), (x_eval, y_eval) = data.train, data.evaluation
    features = np.vstack(
        [data.featurizer.transform(x_train), data.featurizer.transform(x_eval)]
    )
    features.setflags(write=False)
    labels = np.concatenate([y_train, y_eval]).astype(np.int8)
    labels.setflags(write=False)
    return features, labels


def simulated_partition(
    settings: Settings, repeat: int, partition_id: int, count: int = 1
) -> tuple[NDArray[np.float64], NDArray[np.int8]]:
    """Scaled features ``(n, p)`` and labels ``(n,)`` of the ``count`` simulated
    clients from ``partition_id`` on (fewer at the end of the run): client i of
    :func:`ldpfda.engine.run_repeat` (training clients first, then evaluation
    clients), or of the server ``settings.server_id``."""
    total = settings.n_train + settings.n_eval
    partition_id = check_int(partition_id, "partition_id", minimum=0)
    if partition_id >= total:
        raise ValueError(
            f"partition {partition_id} has no data: the run has {total} clients "
            f"(data.n-train + data.n-eval)"
        )
    features, labels = _simulated_population(settings, repeat)
    rows = slice(partition_id, partition_id + check_int(count, "count", minimum=1))
    return features[rows].copy(), labels[rows].copy()


def design_test_set(
    settings: Settings, repeat: int = 0
) -> tuple[NDArray[np.float64], NDArray[np.int8]]:
    """The scaled clean test set the engine scores on (the server's own population's
    in a multi-server session)."""
    data = population_data(settings, repeat)
    assert data.test is not None
    x_test, y_test = data.test
    return data.featurizer.transform(x_test), y_test


# -- the wearable dataset --------------------------------------------------------------


def _wearable_featurizer(settings: Settings) -> VectorFeaturizer:
    """The identity on the wearable spec's [-1, 1]^p: the clients hold features."""
    from ldpfda.datasets.wearable_spec import wearable_spec

    p = wearable_spec(settings.n_basis, settings.order).n_features
    return VectorFeaturizer(CoefficientScaler(-1.0, 1.0), p)


def _wearable_public_seed(settings: Settings, repeat: int) -> int:
    from ldpfda.datasets.wearable_spec import PUBLIC_SEED_BASE

    return PUBLIC_SEED_BASE + derive_seed(settings.seed, "public", repeat)


#: Bytes of wearable features kept between runs: a simulation runs every repeat for
#: one epsilon, then again for the next, and a repeat's data do not depend on it.
_CACHE_BYTES = 512 * 2**20
_cache: collections.OrderedDict[tuple[int, ...], Any] = collections.OrderedDict()


def wearable_features(
    n_basis: int, order: int, seed: int, first: int, n: int, n_classes: int = 2
) -> tuple[NDArray[np.float64], NDArray[np.int8]]:
    """Features and labels of ``make_wearable`` subjects ``first .. first + n - 1`` of
    ``seed`` (labelled by its first ``n_classes`` conditions), under the wearable spec
    with ``n_basis`` B-splines of ``order``.

    Drawn and featurized :data:`WEARABLE_BLOCK` subjects at a time. The arrays are
    read-only and kept for the next call (up to 512 MB, least recently used first
    out).
    """
    key = (n_basis, order, seed, first, n, n_classes)
    if key in _cache:
        _cache.move_to_end(key)
        return _cache[key]
    result = _draw_wearable(n_basis, order, seed, first, n, n_classes)
    _cache[key] = result
    while len(_cache) > 1 and sum(f.nbytes for f, _ in _cache.values()) > _CACHE_BYTES:
        _cache.popitem(last=False)
    return result


def _draw_wearable(
    n_basis: int, order: int, seed: int, first: int, n: int, n_classes: int
) -> tuple[NDArray[np.float64], NDArray[np.int8]]:
    from ldpfda.datasets.wearable import make_wearable
    from ldpfda.datasets.wearable_spec import wearable_spec

    featurizer = wearable_spec(n_basis, order, n_classes).featurizer()
    features = np.empty((n, featurizer.n_features_out))
    labels = np.empty(n, dtype=np.int8)
    for start in range(0, n, WEARABLE_BLOCK):
        size = min(WEARABLE_BLOCK, n - start)
        block = featurizer.featurize(
            make_wearable(
                size, seed=seed, first_subject=first + start, n_classes=n_classes
            )
        )
        features[start : start + size] = block.features
        labels[start : start + size] = block.labels
    features.setflags(write=False)
    labels.setflags(write=False)
    return features, labels


def _wearable_repeat(
    settings: Settings, repeat: int, *, with_test: bool, server: tuple[int, ...] = ()
) -> RepeatData:
    seed = derive_seed(settings.seed, "data", repeat, *server)
    basis, k = (settings.n_basis, settings.order), settings.n_classes
    train = wearable_features(*basis, seed, 0, settings.n_train, k)
    evaluation = wearable_features(*basis, seed, settings.n_train, settings.n_eval, k)
    test = None
    if with_test:
        test_seed = derive_seed(settings.seed, "test", *server)
        test = wearable_features(*basis, test_seed, 0, settings.n_test, k)
    return RepeatData(_wearable_featurizer(settings), train, evaluation, test)
