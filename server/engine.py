"""The in-process MRMA engine: the whole protocol for a population of clients.

Clients are processed in chunks with the same vectorised functions a single Flower client
calls, and each client's noise is keyed by (run seed, client id): the numbers do not
depend on the chunk size or on the order of clients.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from ldpfda.client.protocol import TrainingPayload, answer_evaluation, privatize
from ldpfda.config import Settings
from ldpfda.datasets.synthetic import FunctionalDesign, VectorDesign, make_design
from ldpfda.fda.features import CurveFeaturizer, Featurizer, VectorFeaturizer
from ldpfda.fda.scaling import CoefficientScaler
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.random import derive_seed
from ldpfda.server.mrma import (
    LinearModels,
    assign_groups,
    average_models,
    estimate_errors,
    fit_linear,
    fit_weak_models,
    majority_vote,
    mrma_weights,
    reverse_models,
)

__all__ = [
    "METHODS",
    "ArrayClients",
    "ClientPopulation",
    "ProtocolResult",
    "RepeatData",
    "aggregate",
    "make_featurizer",
    "repeat_data",
    "run_protocol",
    "run_repeat",
    "score",
    "train_weak",
]

#: Methods reported by every run, in table order.
METHODS = ("mrma", "mr", "ma", "weak", "voting", "averaging", "naive", "non_private")

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


@dataclass
class ProtocolResult:
    """Everything one run of the protocol produced (no raw client data)."""

    final: LinearModels
    weak: LinearModels
    reversed_models: LinearModels
    reversed: NDArray[np.bool_]
    estimated_errors: NDArray[np.float64]
    weights: NDArray[np.float64]
    kept: NDArray[np.bool_]
    selection_rule: str
    payload: TrainingPayload
    baselines: dict[str, LinearModels]
    privacy: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)
    test_errors: dict[str, float] = field(default_factory=dict)
    weak_test_errors: NDArray[np.float64] | None = None

    def report(self) -> dict[str, Any]:
        """A JSON-ready summary: per-model estimates, weights, flags, errors, privacy."""
        models = []
        for j in range(len(self.weak)):
            item = {
                "estimated_error": float(self.estimated_errors[j]),
                "reversed": bool(self.reversed[j]),
                "kept": bool(self.kept[j]),
                "weight": float(self.weights[j]),
            }
            if self.weak_test_errors is not None:
                item["test_error"] = float(self.weak_test_errors[j])
            models.append(item)
        return {
            "final_model": {
                "coef": self.final.coef[0].tolist(),
                "intercept": float(self.final.intercept[0]),
            },
            "selection_rule": self.selection_rule,
            "models": models,
            "test_errors": dict(self.test_errors),
            "privacy": self.privacy,
            "timings": dict(self.timings),
        }


def run_protocol(
    train: ClientPopulation,
    evaluation: ClientPopulation,
    settings: Settings,
    *,
    seed: int,
    server_rng: np.random.Generator,
    test: tuple[NDArray[np.float64], NDArray[np.int8]] | None = None,
    clean_train: tuple[NDArray[np.float64], NDArray[np.int8]] | None = None,
    chunk_size: int = 100_000,
    ledger: PrivacyLedger | None = None,
    keep_payload: bool = True,
) -> ProtocolResult:
    """Run MRMA end to end: privatize, train, evaluate, reverse, select, average.

    Parameters
    ----------
    train, evaluation : ClientPopulation
        Training and evaluation clients (disjoint ids).
    settings : Settings
    seed : int
        Run seed that keys every client's noise.
    server_rng : Generator
        The server's own randomness (subsamples, group assignment).
    test : (features, labels), optional
        Clean scaled test features; test errors of every method are then reported.
    clean_train : (features, labels), optional
        The clean training features, for the non-private reference model only.
    ledger : PrivacyLedger, optional
        Ledger over all clients; one is created with budget ``settings.epsilon``.
    """
    timings: dict[str, float] = {}
    if ledger is None:
        ids = np.concatenate([_all_ids(train), _all_ids(evaluation)])
        ledger = PrivacyLedger(budget=settings.epsilon, client_ids=ids)

    t0 = time.perf_counter()
    payload = TrainingPayload.concatenate(
        [
            privatize(
                x,
                y,
                client_ids=ids,
                seed=seed,
                epsilon=settings.epsilon,
                label_share=settings.label_share,
                ledger=ledger,
            )
            for ids, x, y in train.batches(chunk_size)
        ]
    )
    timings["clients_privatize_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    weak = train_weak(payload, settings, server_rng)
    timings["server_train_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    groups = assign_groups(evaluation.n_clients, settings.num_weak_models, server_rng)
    bits = np.empty(evaluation.n_clients, dtype=np.int8)
    start = 0
    for ids, x, y in evaluation.batches(chunk_size):
        g = groups[start : start + len(ids)]
        bits[start : start + len(ids)] = answer_evaluation(
            weak.coef[g],
            weak.intercept[g],
            x,
            y,
            client_ids=ids,
            seed=seed,
            epsilon=settings.epsilon,
            ledger=ledger,
        )
        start += len(ids)
    timings["clients_evaluate_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    result = aggregate(
        weak,
        bits,
        groups,
        payload,
        settings,
        clean_train=clean_train,
        privacy=ledger.summary(),
        keep_payload=keep_payload,
    )
    timings["server_aggregate_s"] = time.perf_counter() - t0
    result.timings = timings
    if test is not None:
        score(result, *test)
    return result


def train_weak(
    payload: TrainingPayload, settings: Settings, server_rng: np.random.Generator
) -> LinearModels:
    """Server step 1: the M weak classifiers on random subsamples of the payloads.

    Payloads must be ordered by client id so that a run does not depend on the order in
    which clients answered (the Flower server sorts them the same way).
    """
    return fit_weak_models(
        payload.features,
        payload.labels,
        n_models=settings.num_weak_models,
        subsample_size=settings.subsample_size,
        learner=settings.weak_learner,
        rng=server_rng,
    )


def aggregate(
    weak: LinearModels,
    bits: NDArray[np.int8],
    groups: NDArray[np.int64],
    payload: TrainingPayload,
    settings: Settings,
    *,
    clean_train: tuple[NDArray[np.float64], NDArray[np.int8]] | None = None,
    privacy: dict[str, Any] | None = None,
    keep_payload: bool = True,
) -> ProtocolResult:
    """Server steps 3-6 and the baselines, from the evaluation bits.

    ``bits[i]`` is the feedback of the evaluator in subgroup ``groups[i]``.
    """
    m = len(weak)
    estimates = estimate_errors(bits, groups, n_models=m, epsilon=settings.epsilon)
    reversed_models, flipped = reverse_models(weak, estimates.clipped)
    weights, kept, rule = mrma_weights(estimates.clipped, cutoff=settings.cutoff)
    norm = settings.normalize_models
    final = average_models(reversed_models, weights, normalize=norm)
    ma_weights, _, _ = mrma_weights(
        estimates.clipped, cutoff=settings.cutoff, reversal=False
    )
    baselines = {
        "ma": average_models(weak, ma_weights, normalize=norm),
        "averaging": average_models(weak, np.ones(m), normalize=norm),
        "naive": fit_linear(payload.features, payload.labels),
    }
    if clean_train is not None:
        baselines["non_private"] = fit_linear(*clean_train)
    return ProtocolResult(
        final=final,
        weak=weak,
        reversed_models=reversed_models,
        reversed=flipped,
        estimated_errors=estimates.clipped,
        weights=weights,
        kept=kept,
        selection_rule=rule,
        payload=payload if keep_payload else _head(payload),
        baselines=baselines,
        privacy=privacy or {},
    )


def _head(payload: TrainingPayload) -> TrainingPayload:
    return TrainingPayload(
        payload.client_ids[:0],
        payload.features[:0],
        payload.labels[:0],
        payload.feature_epsilon,
        payload.label_epsilon,
    )


def _all_ids(population: ClientPopulation) -> NDArray[np.int64]:
    ids = getattr(population, "client_ids", None)
    if ids is not None:
        return np.asarray(ids, dtype=np.int64)
    return np.concatenate([b[0] for b in population.batches(1_000_000)])


def score(result: ProtocolResult, x: NDArray[np.float64], y: NDArray[np.int8]) -> None:
    """Fill ``result.test_errors`` with every method's error on clean test data."""
    y = np.asarray(y)
    errors = {"mrma": float(result.final.errors(x, y)[0])}
    weak_errors = result.weak.errors(x, y)
    result.weak_test_errors = weak_errors
    errors["weak"] = float(weak_errors.mean())
    errors["mr"] = float(result.reversed_models.errors(x, y).mean())
    errors["voting"] = float((majority_vote(result.weak, x) != y).mean())
    for name, model in result.baselines.items():
        errors[name] = float(model.errors(x, y)[0])
    result.test_errors = {k: errors[k] for k in METHODS if k in errors}


def make_featurizer(
    design: VectorDesign | FunctionalDesign,
    settings: Settings,
    rng: np.random.Generator,
) -> Featurizer:
    """The featurizer clients use, fixed before any private data is seen.

    The vector design lives in [-1, 1]^4 already. For curves, the projection is fitted to
    the known sampling grid and the rescaling bounds to ``calibration_size`` public
    calibration curves drawn independently of every client.
    """
    if not design.is_functional:
        return VectorFeaturizer(CoefficientScaler(-1.0, 1.0), design.n_features)
    public, _ = design.sample(settings.calibration_size, rng)
    return CurveFeaturizer.calibrated(
        public, design.grid_points, n_basis=settings.n_basis, order=settings.order
    )


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

    Draw order on the repeat's data stream: public calibration curves (functional
    design only), training sample, evaluation sample, test sample. The Flower client
    serves its simulated partition from the same draws, so both runs see the same data.
    """
    design = make_design(settings.dataset)
    data_rng = np.random.default_rng(derive_seed(settings.seed, "data", repeat))
    featurizer = make_featurizer(design, settings, data_rng)
    train = design.sample(settings.n_train, data_rng)
    evaluation = design.sample(settings.n_eval, data_rng)
    test = design.sample(settings.n_test, data_rng) if with_test else None
    return RepeatData(featurizer, train, evaluation, test)


def run_repeat(
    settings: Settings,
    repeat: int = 0,
    *,
    chunk_size: int = 100_000,
) -> ProtocolResult:
    """One repeat of the simulation on an embedded design, with every baseline scored.

    Training clients have ids ``0 .. n_train-1`` and evaluation clients the next
    ``n_eval`` ids. Data, the run seed and the server's randomness are derived from
    ``(settings.seed, repeat)``.
    """
    data = repeat_data(settings, repeat)
    featurizer = data.featurizer
    (x_train, y_train), (x_eval, y_eval) = data.train, data.evaluation
    assert data.test is not None
    x_test, y_test = data.test
    train = ArrayClients(np.arange(settings.n_train), x_train, y_train, featurizer)
    evaluation = ArrayClients(
        settings.n_train + np.arange(settings.n_eval), x_eval, y_eval, featurizer
    )
    return run_protocol(
        train,
        evaluation,
        settings,
        seed=derive_seed(settings.seed, "clients", repeat),
        server_rng=np.random.default_rng(derive_seed(settings.seed, "server", repeat)),
        test=(featurizer.transform(x_test), y_test),
        clean_train=(train.features(), y_train),
        chunk_size=chunk_size,
    )
