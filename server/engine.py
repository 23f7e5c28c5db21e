r"""The in-process engine: the whole protocol for a population of clients.

Two server methods (:attr:`ldpfda.config.Settings.protocol`):

``moment`` (the default, with the default joint release)
    Every client releases :math:`\tilde y\,(1, x)` once with a vector mechanism at its
    whole epsilon (:func:`~ldpfda.client.protocol.privatize_joint`), and the server fits
    :class:`~ldpfda.server.learners.MomentLinearClassifier` on all releases
    (:func:`fit_moment`), with the feature second moment of public, unlabeled features
    (:func:`public_features`).
``mrma`` (the default with ``mechanism = "reference"``)
    The reference MRMA protocol: training clients release, the server fits M weak
    models, each evaluation client answers one feedback bit, then model reversal,
    selection and averaging.

Clients are processed in chunks with the same vectorised functions a single Flower
client calls, and each client's noise is keyed by (run seed, client id): the numbers do
not depend on the chunk size or on the order of clients.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda.client.labeldp_protocol import LabelPayload
from ldpfda.client.protocol import (
    JointPayload,
    TrainingPayload,
    answer_evaluation,
    privatize,
    privatize_joint,
)
from ldpfda.config import Settings
from ldpfda.datasets.synthetic import FunctionalDesign, VectorDesign, make_design
from ldpfda.fda.features import CurveFeaturizer, Featurizer, VectorFeaturizer
from ldpfda.fda.scaling import CoefficientScaler
from ldpfda.privacy.laplace import LaplaceMechanism
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.random import derive_seed
from ldpfda.privacy.randomized_response import rr_keep_probability
from ldpfda.server.learners import (
    MomentLinearClassifier,
    NoisyLabelLogisticRegression,
    as_weak_learner,
    fit_weak_models_with,
)
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
    "NATARAJAN_ALPHA",
    "ArrayClients",
    "ClientPopulation",
    "Payload",
    "ProtocolResult",
    "RepeatData",
    "aggregate",
    "fit_moment",
    "make_featurizer",
    "make_learner",
    "moment_result",
    "public_features",
    "public_gram",
    "release",
    "repeat_data",
    "run_protocol",
    "run_repeat",
    "score",
    "train_weak",
]

#: Methods a run may report, in table order: a ``moment`` run reports ``moment`` and a
#: label-only run ``label`` (and ``non_private`` when given clean data); an ``mrma`` run
#: reports all the others.
METHODS = (
    "moment",
    "label",
    "mrma",
    "mr",
    "ma",
    "weak",
    "voting",
    "averaging",
    "naive",
    "non_private",
)

#: L2 strength of the flip-corrected logistic weak learner (``weak_learner =
#: "natarajan"``), chosen on the validation seed of the issue-6 study.
NATARAJAN_ALPHA = 10.0

#: What a population of clients releases: the reference payload, joint releases, or
#: public features with randomized labels (label-only modes).
Payload = TrainingPayload | JointPayload | LabelPayload

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
    payload: Payload
    baselines: dict[str, LinearModels]
    privacy: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)
    test_errors: dict[str, float] = field(default_factory=dict)
    weak_test_errors: NDArray[np.float64] | None = None
    method: str = "mrma"

    def report(self) -> dict[str, Any]:
        """A JSON-ready summary: per-model estimates, weights, flags, errors, privacy.

        A ``moment`` run has no weak models: ``models`` is empty.
        """
        models = []
        for j in range(len(self.weak) if self.method == "mrma" else 0):
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
            "method": self.method,
            "selection_rule": self.selection_rule,
            "models": models,
            "test_errors": dict(self.test_errors),
            "privacy": self.privacy,
            "timings": dict(self.timings),
        }


def release(
    population: ClientPopulation,
    settings: Settings,
    *,
    seed: int,
    ledger: PrivacyLedger | None = None,
    chunk_size: int = 100_000,
) -> Payload:
    """Every client of ``population`` releases once, as ``settings.mechanism`` says.

    Joint releases give a :class:`~ldpfda.client.protocol.JointPayload`
    (:func:`~ldpfda.client.protocol.privatize_joint`), the reference release a
    :class:`~ldpfda.client.protocol.TrainingPayload`
    (:func:`~ldpfda.client.protocol.privatize`); rows are in the population's order.
    """
    parts: list[Any] = []
    for ids, x, y in population.batches(chunk_size):
        if settings.joint_release:
            parts.append(
                privatize_joint(
                    x,
                    y,
                    client_ids=ids,
                    seed=seed,
                    epsilon=settings.epsilon,
                    mechanism=settings.vector_mechanism,
                    ledger=ledger,
                )
            )
        else:
            parts.append(
                privatize(
                    x,
                    y,
                    client_ids=ids,
                    seed=seed,
                    epsilon=settings.epsilon,
                    label_share=settings.label_share,
                    ledger=ledger,
                )
            )
    return _concatenate(parts)


def _concatenate(parts: list[Any]) -> Payload:
    if not parts:
        raise ValueError("no payloads to concatenate")
    return type(parts[0]).concatenate(parts)


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
    public: NDArray[np.float64] | None = None,
) -> ProtocolResult:
    """Run the protocol of ``settings`` end to end.

    ``settings.protocol == "moment"``: every client of both populations releases once
    (:func:`release`) and the server fits the moment classifier on all releases
    (:func:`fit_moment`); the result's ``method`` is ``"moment"``. ``"mrma"``:
    privatize, train, evaluate, reverse, select, average. ``"label"`` (the label-only
    mechanisms): :func:`~ldpfda.server.labeldp_engine.run_label_protocol`.

    Parameters
    ----------
    train, evaluation : ClientPopulation
        Training and evaluation clients (disjoint ids); in a ``moment`` run both
        simply release.
    settings : Settings
    seed : int
        Run seed that keys every client's noise.
    server_rng : Generator
        The server's own randomness (subsamples, group assignment; unused by a
        ``moment`` run).
    test : (features, labels), optional
        Clean scaled test features; test errors of every method are then reported.
    clean_train : (features, labels), optional
        Clean scaled features, for the non-private reference model only.
    ledger : PrivacyLedger, optional
        Ledger over all clients; one is created with budget ``settings.epsilon``.
    public : array of shape (m, p), optional
        Public, unlabeled scaled features (:func:`public_features`). The moment
        classifier takes its feature second moment from them when
        ``settings.public_features`` is True, and then needs them.
    """
    if settings.protocol == "label":
        # Label-only modes (issue 5): public features, randomized labels.
        from ldpfda.server.labeldp_engine import run_label_protocol

        return run_label_protocol(
            train,
            evaluation,
            settings,
            seed=seed,
            server_rng=server_rng,
            test=test,
            clean_train=clean_train,
            chunk_size=chunk_size,
            ledger=ledger,
            keep_payload=keep_payload,
        )
    timings: dict[str, float] = {}
    if ledger is None:
        ids = np.concatenate([_all_ids(train), _all_ids(evaluation)])
        ledger = PrivacyLedger(budget=settings.epsilon, client_ids=ids)

    if settings.protocol == "moment":
        t0 = time.perf_counter()
        payload = _concatenate(
            [
                release(p, settings, seed=seed, ledger=ledger, chunk_size=chunk_size)
                for p in (train, evaluation)
            ]
        )
        timings["clients_privatize_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        result = moment_result(
            payload,
            settings,
            public=public,
            clean_train=clean_train,
            privacy=ledger.summary(),
            keep_payload=keep_payload,
        )
        timings["server_train_s"] = time.perf_counter() - t0
        result.timings = timings
        if test is not None:
            score(result, *test)
        return result

    t0 = time.perf_counter()
    payload = release(train, settings, seed=seed, ledger=ledger, chunk_size=chunk_size)
    timings["clients_privatize_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    weak = train_weak(payload, settings, server_rng, public=public)
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
        public=public,
    )
    timings["server_aggregate_s"] = time.perf_counter() - t0
    result.timings = timings
    if test is not None:
        score(result, *test)
    return result


def public_gram(public: ArrayLike) -> NDArray[np.float64]:
    r""":math:`\frac1m \sum_i (1, x_i)(1, x_i)^\top` over public features ``(m, p)``."""
    x = np.asarray(public, dtype=float)
    w = np.hstack([np.ones((x.shape[0], 1)), x])
    return w.T @ w / w.shape[0]


def make_learner(
    payload: Payload,
    settings: Settings,
    public: NDArray[np.float64] | None = None,
    *,
    learner: str | None = None,
) -> Any:
    """The estimator that learns from ``payload`` (``settings.learner`` by default).

    None for the string learners of :func:`~ldpfda.server.mrma.fit_linear`
    (``"logistic"``, ``"svm"``). The moment classifier knows the release mechanism,
    to remove its noise from the feature second moment, and takes that moment from
    the ``public`` features instead when ``settings.public_features`` is True; for the
    reference release it also corrects the randomized-response flip rate, as does
    ``"natarajan"`` (:class:`~ldpfda.server.learners.NoisyLabelLogisticRegression`).

    Raises
    ------
    ValueError
        For a joint payload with a learner other than ``"moment"``, or when
        ``settings.public_features`` asks for public features that are not given.
    """
    name = learner or settings.learner
    if isinstance(payload, JointPayload) and name != "moment":
        raise ValueError(f"joint releases need the 'moment' learner, got {name!r}")
    if name in ("logistic", "svm"):
        return None
    gram = None
    if settings.public_features and name == "moment":
        if public is None:
            raise ValueError(
                "settings.public_features is True but no public features were given "
                "(pass public=..., see public_features(), or set public_features=False)"
            )
        gram = public_gram(public)
    if isinstance(payload, JointPayload):
        return MomentLinearClassifier(
            joint=True, gram=gram, mechanism=payload.release_mechanism().inner
        )
    rho = 1.0 - rr_keep_probability(epsilon=payload.label_epsilon)
    if name == "natarajan":
        return NoisyLabelLogisticRegression(alpha=NATARAJAN_ALPHA, flip_rate=rho)
    features = LaplaceMechanism(
        epsilon=payload.feature_epsilon, dimension=payload.features.shape[1]
    )
    return MomentLinearClassifier(mechanism=features, gram=gram, label_flip_rate=rho)


def _fit(payload: Payload, estimator: Any) -> LinearModels:
    if isinstance(payload, JointPayload):
        return estimator.fit(payload.releases).to_linear_models()
    return estimator.fit(payload.features, payload.labels).to_linear_models()


def fit_moment(
    payload: Payload,
    settings: Settings,
    public: NDArray[np.float64] | None = None,
) -> LinearModels:
    """The server of a ``moment`` run: one moment classifier on every release.

    Payloads must be ordered by client id (the Flower server sorts them the same way);
    the fit itself does not depend on the order.
    """
    return _fit(payload, make_learner(payload, settings, public, learner="moment"))


def single_model_result(
    final: LinearModels,
    *,
    method: str,
    payload: Any,
    clean_train: tuple[NDArray[np.float64], NDArray[np.int8]] | None,
    privacy: dict[str, Any],
) -> ProtocolResult:
    """The result of a one-model server (no weak models, estimates or weights).

    Its one model is also its ``weak`` and ``reversed_models``; the non-private
    reference is fitted when ``clean_train`` is given.
    """
    baselines = {}
    if clean_train is not None:
        baselines["non_private"] = fit_linear(*clean_train)
    return ProtocolResult(
        final=final,
        weak=final,
        reversed_models=final,
        reversed=np.zeros(1, dtype=bool),
        estimated_errors=np.full(1, np.nan),
        weights=np.ones(1),
        kept=np.ones(1, dtype=bool),
        selection_rule="none",
        payload=payload,
        baselines=baselines,
        privacy=privacy,
        method=method,
    )


def moment_result(
    payload: Payload,
    settings: Settings,
    *,
    public: NDArray[np.float64] | None = None,
    clean_train: tuple[NDArray[np.float64], NDArray[np.int8]] | None = None,
    privacy: dict[str, Any] | None = None,
    keep_payload: bool = True,
) -> ProtocolResult:
    """The server of a ``moment`` run, from every client's release.

    :func:`fit_moment`, and the non-private reference when ``clean_train`` is given.
    The result has ``method = "moment"``; its one model is also its ``weak`` and
    ``reversed_models`` (there are no weak models, estimates or weights).
    """
    final = fit_moment(payload, settings, public)
    return single_model_result(
        final,
        method="moment",
        payload=payload if keep_payload else _head(payload),
        clean_train=clean_train,
        privacy=privacy or {},
    )


def train_weak(
    payload: Payload,
    settings: Settings,
    server_rng: np.random.Generator,
    *,
    public: NDArray[np.float64] | None = None,
) -> LinearModels:
    """Server step 1 of MRMA: M weak classifiers on random subsamples of the payloads.

    The weak learner is ``settings.learner`` (:func:`make_learner`). Payloads must be
    ordered by client id so that a run does not depend on the order in which clients
    answered (the Flower server sorts them the same way).
    """
    estimator = make_learner(payload, settings, public)
    if estimator is None:
        assert isinstance(payload, TrainingPayload)
        return fit_weak_models(
            payload.features,
            payload.labels,
            n_models=settings.num_weak_models,
            subsample_size=settings.subsample_size,
            learner=settings.learner,
            rng=server_rng,
        )
    if isinstance(payload, JointPayload):
        features, labels = payload.releases, None
    else:
        features, labels = payload.features, payload.labels
    return fit_weak_models_with(
        features,
        labels,
        learner=as_weak_learner(estimator),
        n_models=settings.num_weak_models,
        subsample_size=settings.subsample_size,
        rng=server_rng,
    )


def aggregate(
    weak: LinearModels,
    bits: NDArray[np.int8],
    groups: NDArray[np.int64],
    payload: Payload,
    settings: Settings,
    *,
    clean_train: tuple[NDArray[np.float64], NDArray[np.int8]] | None = None,
    privacy: dict[str, Any] | None = None,
    keep_payload: bool = True,
    public: NDArray[np.float64] | None = None,
) -> ProtocolResult:
    """Server steps 3-6 of MRMA and the baselines, from the evaluation bits.

    ``bits[i]`` is the feedback of the evaluator in subgroup ``groups[i]``. The naive
    baseline is one model of the run's weak learner on all training payloads.
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
        "naive": _naive(payload, settings, public),
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


def _naive(
    payload: Payload, settings: Settings, public: NDArray[np.float64] | None
) -> LinearModels:
    estimator = make_learner(payload, settings, public)
    if estimator is None:
        assert isinstance(payload, TrainingPayload)
        return fit_linear(payload.features, payload.labels)
    return _fit(payload, estimator)


def _head(payload: Payload) -> Payload:
    if isinstance(payload, JointPayload):
        return JointPayload(
            payload.client_ids[:0],
            payload.releases[:0],
            payload.epsilon,
            payload.mechanism,
        )
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
    errors = {result.method: float(result.final.errors(x, y)[0])}
    if result.method == "mrma":
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

    The vector design lives in [-1, 1]^4 already. For curves, the projection is fitted
    to the known sampling grid and the rescaling bounds to ``calibration_size`` public
    calibration curves drawn independently of every client.
    """
    if not design.is_functional:
        return VectorFeaturizer(CoefficientScaler(-1.0, 1.0), design.n_features)
    public, _ = design.sample(settings.calibration_size, rng)
    return CurveFeaturizer.calibrated(
        public, design.grid_points, n_basis=settings.n_basis, order=settings.order
    )


def _public_sample(
    design: VectorDesign | FunctionalDesign, settings: Settings, repeat: int
) -> Any:
    if design.is_functional:
        # The very curves make_featurizer calibrates on: the first draws of the data
        # stream of the repeat.
        rng = np.random.default_rng(derive_seed(settings.seed, "data", repeat))
    else:
        rng = np.random.default_rng(derive_seed(settings.seed, "public", repeat))
    raw, _ = design.sample(settings.calibration_size, rng)
    return raw


def public_features(
    settings: Settings, repeat: int = 0, *, featurizer: Featurizer | None = None
) -> NDArray[np.float64]:
    """Public, unlabeled scaled features of a repeat on an embedded design.

    The functional design's ``calibration_size`` public calibration curves (those that
    fix the rescaling bounds, see :func:`make_featurizer`); for the vector design,
    ``calibration_size`` unlabeled vectors from a stream of their own
    (``(seed, "public", repeat)``). Both are independent of every client and carry no
    label, so the server may use them freely: the moment classifier takes its feature
    second moment from them (``settings.public_features``). ``featurizer`` defaults to
    the repeat's own.
    """
    design = make_design(settings.dataset)
    if featurizer is None:
        rng = np.random.default_rng(derive_seed(settings.seed, "data", repeat))
        featurizer = make_featurizer(design, settings, rng)
    return featurizer.transform(_public_sample(design, settings, repeat))


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
    ``n_eval`` ids (in a ``moment`` run all of them release alike). Data, the run seed
    and the server's randomness are derived from ``(settings.seed, repeat)``, public
    features by :func:`public_features`. The non-private reference is a logistic
    regression on the clean data of the clients the server learns from: the training
    clients of an ``mrma`` run, every client of a ``moment`` run.
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
    clean = (train.features(), y_train)
    if settings.protocol in ("moment", "label"):
        clean = (
            np.vstack([clean[0], evaluation.features()]),
            np.concatenate([y_train, y_eval]).astype(np.int8),
        )
    public = (
        public_features(settings, repeat, featurizer=featurizer)
        if settings.public_features
        else None
    )
    return run_protocol(
        train,
        evaluation,
        settings,
        seed=derive_seed(settings.seed, "clients", repeat),
        server_rng=np.random.default_rng(derive_seed(settings.seed, "server", repeat)),
        test=(featurizer.transform(x_test), y_test),
        clean_train=clean,
        chunk_size=chunk_size,
        public=public,
    )
