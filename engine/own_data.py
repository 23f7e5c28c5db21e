r"""A protocol fitted on a file of own curves, and the model that classifies new ones.

``ldpfda fit`` and ``ldpfda predict`` are thin commands over this module:

1. :func:`read_own_curves` reads a curve file (wide or long CSV, NPZ;
   :func:`~ldpfda.datasets.readers.read_curves`): every subject is one client.
2. :func:`featurize_own` maps each subject's curves to its features in [-1, 1]^p with
   the federation spec (:class:`~ldpfda.schema.spec.SpecFeaturizer`), as its host
   would, before any noise.
3. :func:`stratified_split` holds out a test share of the subjects, the same share of
   every label, seeded.
4. :func:`fit_own` runs the protocol in process on the other subjects
   (:func:`~ldpfda.engine.runner.run_protocol`): the default joint release with the
   moment classifier, or the reference MRMA; every subject releases once and spends
   at most epsilon. The held-out subjects score the model, the baselines the engine
   reports, the non-private model (a logistic regression on the clean training
   features) and the majority class of the training subjects. The last two read the
   clean data: they are references for the analyst who holds the file, not releases.
5. :meth:`OwnFit.model_record` is what ``model.json`` holds; :class:`OwnModel` loads
   it and classifies new curves with the stored spec.

Noise and the split come from one run seed: a fixed seed makes them reproducible,
for studies and tests; without one, the seed is drawn from OS entropy and recorded
nowhere, because noise keyed by a seed someone knows protects nothing.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda import __version__
from ldpfda.config import Settings
from ldpfda.datasets.curves import LongCurves
from ldpfda.datasets.readers import csv_header, read_curves
from ldpfda.engine.inprocess import ArrayClients
from ldpfda.engine.runner import run_keyed
from ldpfda.fda.features import VectorFeaturizer
from ldpfda.fda.scaling import CoefficientScaler
from ldpfda.privacy.random import derive_seed
from ldpfda.schema.payloads import LinearModels
from ldpfda.schema.spec import (
    Basis,
    Bounds,
    Channel,
    Domain,
    FederationSpec,
    Release,
    SubjectFeatures,
)
from ldpfda.server.fitting import ProtocolResult

__all__ = [
    "EVAL_FRACTION",
    "MODEL_FORMAT",
    "MODEL_VERSION",
    "PROTOCOLS",
    "OwnDataError",
    "OwnFit",
    "OwnModel",
    "Predictions",
    "featurize_own",
    "fit_own",
    "options_spec",
    "read_own_curves",
    "stratified_split",
]

#: The ``format`` and ``format-version`` of ``model.json``.
MODEL_FORMAT = "ldpfda-model"
MODEL_VERSION = 1
#: A protocol's name in the spec and the CLI, and the mechanism its clients run.
PROTOCOLS = {"default": "joint-hybrid", "reference": "reference"}
#: Share of the training subjects in the evaluation group (the reference MRMA's 2500
#: of 3000). In the default protocol every client releases alike, so it changes
#: nothing there.
EVAL_FRACTION = 5 / 6


class OwnDataError(ValueError):
    """A data or spec file cannot be used; the message names the file."""


# -- reading ---------------------------------------------------------------------------


def _has_labels(path: Path) -> bool:
    """Whether a curve file carries labels (a ``label`` column or key)."""
    if path.suffix.lower() == ".npz":
        with np.load(path, allow_pickle=False) as archive:
            return "labels" in archive.files
    header = csv_header(path)
    return not header or "label" in header  # an empty file: the reader says so


def read_own_curves(
    path: str | Path,
    spec: FederationSpec,
    *,
    layout: str | None = None,
    labelled: bool = True,
) -> tuple[LongCurves, bool]:
    """The curves of ``path`` and whether the file carries labels.

    Labels must be the spec's; a single-channel file that does not name its channel
    gets the spec's channel name when the spec has one channel. With ``labelled``
    False, a file without labels is accepted (new curves, public calibration curves)
    and its subjects carry the spec's first label as a placeholder.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    channel = spec.channel_names[0] if len(spec.channels) == 1 else "value"
    options: dict[str, Any] = {"layout": layout, "spec_labels": spec.labels}
    if not labelled:
        options["unlabelled"] = spec.labels[0]
    return read_curves(path, channel=channel, **options), _has_labels(path)


def _subset(curves: LongCurves, keep: NDArray[np.bool_]) -> LongCurves:
    """The subjects where ``keep`` holds, renumbered in order."""
    rows = keep[curves.subjects]
    index = np.cumsum(keep) - 1
    return LongCurves(
        index[curves.subjects[rows]],
        curves.curves[rows],
        curves.times[rows],
        curves.values[rows],
        curves.labels[keep],
        tuple(s for s, k in zip(curves.subject_ids, keep.tolist(), strict=True) if k),
        curves.channels,
        curves.label_names,
    )


def _unusable(
    spec: FederationSpec, curves: LongCurves
) -> tuple[NDArray[np.bool_], list[str]]:
    """Which subjects have no usable curve in some channel, and why (one line each)."""
    bad = np.zeros(curves.n_subjects, dtype=bool)
    why: dict[int, str] = {}
    for c, name in enumerate(spec.channel_names):
        if name not in curves.channels:
            continue
        column = curves.channels.index(name)
        fit = spec.projection(c).fit_subjects(
            curves, column, min_points=spec.min_points
        )
        for i in np.flatnonzero(~fit.usable).tolist():
            bad[i] = True
            why.setdefault(
                i,
                f"subject {curves.subject_ids[i]!r}, channel {name!r}: "
                f"{fit.why_unusable(i, spec.min_points)}",
            )
    return bad, [why[i] for i in sorted(why)]


def featurize_own(
    spec: FederationSpec,
    curves: LongCurves,
    *,
    source: str,
    drop_unusable: bool = False,
) -> tuple[SubjectFeatures, list[str]]:
    """Every subject's features under ``spec``, and the reasons of subjects dropped.

    A subject without a usable curve in some channel (too few points, a gap that
    leaves a coefficient undetermined) cannot release: it is an error naming the
    file (``source``) and the subjects, unless ``drop_unusable``, which leaves them
    out and returns why.
    """
    featurizer = spec.featurizer()
    try:
        return featurizer.featurize(curves), []
    except ValueError as exc:
        error = exc
    try:
        bad, reasons = _unusable(spec, curves)
    except ValueError:  # the curves do not fit the spec at all: say why
        bad, reasons = np.zeros(curves.n_subjects, dtype=bool), []
    if not bad.any():
        raise OwnDataError(f"{source}: {error}") from None
    if not drop_unusable:
        shown = "; ".join(reasons[:3]) + ("; ..." if len(reasons) > 3 else "")
        raise OwnDataError(
            f"{source}: {len(reasons)} subject(s) without a usable curve, which "
            f"cannot release: {shown} (--drop-unusable leaves them out)"
        )
    if bad.all():
        raise OwnDataError(f"{source}: no subject has a usable curve: {reasons[0]}")
    try:
        return featurizer.featurize(_subset(curves, ~bad)), reasons
    except ValueError as exc:
        raise OwnDataError(f"{source}: {exc}") from None


# -- a spec from explicit options ------------------------------------------------------


def options_spec(
    channels: Sequence[str],
    *,
    domain: tuple[float, float],
    value_range: tuple[float, float],
    labels: Sequence[str],
    epsilon: float,
    protocol: str = "default",
    n_basis: int = 10,
    order: int = 4,
    penalty: float = 0.0,
    min_points: int | None = None,
    unit: str = "unit",
    channel_unit: str = "unit",
) -> FederationSpec:
    """A spec built from explicit, data-independent options, one channel per name of
    ``channels``, each with the value bounds ``value_range``.

    ``min_points`` defaults to ``n_basis`` (2 with a penalty), the least that
    determines every coefficient.
    """
    if min_points is None:
        min_points = n_basis if penalty == 0 else 2
    basis = Basis(order, n_basis, None, penalty)
    return FederationSpec(
        Domain(float(domain[0]), float(domain[1]), unit),
        tuple(
            Channel(name, channel_unit, basis, Bounds.values(*value_range))
            for name in channels
        ),
        tuple(labels),
        Release(protocol, epsilon),
        min_points,
    )


# -- the split -------------------------------------------------------------------------


def stratified_split(
    labels: NDArray[np.int64],
    test_fraction: float,
    seed: int,
    names: Sequence[str] | None = None,
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Training and test subjects (sorted indices): of the ``n_k`` subjects of label
    ``k``, ``round(test_fraction n_k)`` (at least 1, at most ``n_k - 1``) are drawn
    for the test set, with the stream ``(seed, "split")``. ``names`` name the labels
    in errors."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    rng = np.random.default_rng(derive_seed(seed, "split"))
    test: list[NDArray[np.int64]] = []
    count = np.bincount(labels)
    for k in range(count.size if names is None else len(names)):
        members = np.flatnonzero(labels == k)
        if members.size < 2:
            name = repr(names[k]) if names is not None else f"index {k}"
            raise ValueError(
                f"label {name} has {members.size} subject(s): a stratified test split "
                "needs at least 2 subjects of every label"
            )
        size = min(max(1, round(test_fraction * members.size)), members.size - 1)
        test.append(rng.permutation(members)[:size])
    test_idx = np.sort(np.concatenate(test))
    train_idx = np.setdiff1d(np.arange(labels.size), test_idx)
    return train_idx, test_idx


# -- fitting ---------------------------------------------------------------------------


@dataclass
class OwnFit:
    """One fit on a file: the spec, the split, the run and its test errors."""

    spec: FederationSpec
    spec_text: str
    features: SubjectFeatures
    train_idx: NDArray[np.int64]
    test_idx: NDArray[np.int64]
    settings: Settings
    protocol: str
    result: ProtocolResult
    n_public: int | None
    seed: int | None
    test_fraction: float
    test_errors: dict[str, float] = field(default_factory=dict)
    majority: int = 0

    @property
    def model(self) -> LinearModels:
        return self.result.final

    @property
    def n_test(self) -> int:
        return int(self.test_idx.size)

    def standard_error(self, error: float) -> float:
        """Binomial standard error of a test error on the held-out subjects."""
        return math.sqrt(error * (1.0 - error) / self.n_test)

    def measured(self) -> dict[str, Any]:
        """What was measured: sizes, split, privacy and every test error."""
        return {
            "subjects": int(self.features.features.shape[0]),
            "training_subjects": int(self.train_idx.size),
            "test_subjects": self.n_test,
            "split": {
                "test_fraction": self.test_fraction,
                "stratified_by": "label",
                "seed": self.seed,
            },
            "clients": {"train": self.settings.n_train, "eval": self.settings.n_eval},
            "public_features": self.n_public,
            "test_error": {
                name: {"error": error, "se": self.standard_error(error)}
                for name, error in self.test_errors.items()
            },
            "epsilon_spent_per_client_max": self.result.privacy.get("max_spent"),
            "clipped_fraction_mean": float(self.features.clipped.mean()),
        }

    def model_record(self, *, spec_source: str, data: str) -> dict[str, Any]:
        """The content of ``model.json``."""
        return {
            "format": MODEL_FORMAT,
            "format-version": MODEL_VERSION,
            "ldpfda-version": __version__,
            "protocol": self.protocol,
            "mechanism": self.settings.mechanism,
            "server-method": self.result.method,
            "epsilon": self.settings.epsilon,
            "labels": list(self.spec.labels),
            **self._coefficients(),
            "spec": {
                "text": self.spec_text,
                "hash": self.spec.hash,
                "source": spec_source,
            },
            "data": data,
            "measured": self.measured(),
        }

    def _coefficients(self) -> dict[str, Any]:
        """Two labels: one row (``coef``, ``intercept``); K labels: a row per label."""
        coef, intercept = self.model.coef, self.model.intercept
        x = "with x the spec's features of a subject in [-1, 1]^p"
        if len(self.spec.labels) == 2:
            return {
                "coef": [float(v) for v in coef[0]],
                "intercept": float(intercept[0]),
                "decision": "labels[1] if intercept + coef . x > 0 else labels[0], "
                + x,
                "probability": _PROBABILITY[self.result.method],
            }
        return {
            "coef": coef.tolist(),
            "intercept": intercept.tolist(),
            "decision": f"labels[k] of the largest intercept[k] + coef[k] . x, {x}",
            "probability": _PROBABILITY_K,
        }


_PROBABILITY_K = "softmax of the K scores: monotone in each score, not calibrated"
_PROBABILITY = {
    "moment": "(1 + score) / 2 clipped to [0, 1]: the moment classifier's "
    "least-squares estimate of P(labels[1] | x)",
    "mrma": "logistic(score) of the averaged unit-norm model: monotone in the score, "
    "not calibrated",
}


def fit_own(
    features: SubjectFeatures,
    spec: FederationSpec,
    *,
    epsilon: float,
    protocol: str,
    seed: int,
    test_fraction: float = 0.25,
    public: NDArray[np.float64] | None = None,
    num_weak_models: int = 50,
    subsample_size: int = 50,
    threshold: str = "posterior",
    no_signal_fit: str = "average",
    multiclass_rule: str = "least-squares",
    multiclass_release: str = "auto",
    record_seed: bool = True,
    spec_text: str | None = None,
) -> OwnFit:
    """Hold out the test subjects, run ``protocol`` on the others, score it.

    ``public`` holds the spec's features of public calibration subjects: the
    default protocol's feature second moment (without them it is estimated from the
    releases). ``num_weak_models`` and ``subsample_size`` are the reference MRMA's,
    ``threshold``, ``no_signal_fit`` and ``multiclass_rule`` the default protocol's
    moment classifier's, ``multiclass_release`` its K-class release
    (:class:`~ldpfda.config.Settings`).
    ``record_seed`` False keeps the seed out of the record (an OS-entropy seed).
    Raises a :class:`~ldpfda.config.SettingError` naming a setting the data are too
    small for.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(
            f"protocol must be one of {tuple(PROTOCOLS)}, got {protocol!r}"
        )
    n_classes = len(spec.labels)
    labels = features.labels
    train_idx, test_idx = stratified_split(labels, test_fraction, seed, spec.labels)
    groups = np.random.default_rng(derive_seed(seed, "groups"))
    order = groups.permutation(train_idx)
    n_eval = int(round(EVAL_FRACTION * train_idx.size))
    eval_idx, fit_idx = np.sort(order[:n_eval]), np.sort(order[n_eval:])
    settings = Settings(
        epsilon=epsilon,
        mechanism=PROTOCOLS[protocol],
        public_features=public is not None and protocol == "default",
        num_weak_models=num_weak_models,
        subsample_size=subsample_size,
        threshold=threshold,
        no_signal_fit=no_signal_fit,
        multiclass_rule=multiclass_rule,
        multiclass_release=multiclass_release,
        n_train=int(fit_idx.size),
        n_eval=int(eval_idx.size),
        n_test=int(test_idx.size),
        repeats=1,
        seed=seed,
    )
    settings.check_n_classes(n_classes)
    x = features.features
    y = labels.astype(np.int8)
    identity = VectorFeaturizer(CoefficientScaler(-1.0, 1.0), x.shape[1])
    train = ArrayClients(fit_idx, x[fit_idx], y[fit_idx], identity)
    evaluation = ArrayClients(eval_idx, x[eval_idx], y[eval_idx], identity)
    # The non-private reference learns from the clients the server learns from, as
    # in run_repeat: the training group of MRMA, every client of the default.
    clean_idx = fit_idx if settings.protocol == "mrma" else train_idx
    result = run_keyed(
        train,
        evaluation,
        settings,
        seed,
        test=(x[test_idx], y[test_idx]),
        clean_train=(x[clean_idx], y[clean_idx]),
        keep_payload=False,
        public=public if settings.public_features else None,
        n_classes=n_classes,
    )
    majority = int(np.argmax(np.bincount(y[train_idx], minlength=n_classes)))
    errors = dict(result.test_errors)
    errors["majority"] = float(np.mean(y[test_idx] != majority))
    return OwnFit(
        spec=spec,
        spec_text=spec.dumps() if spec_text is None else spec_text,
        features=features,
        train_idx=train_idx,
        test_idx=test_idx,
        settings=settings,
        protocol=protocol,
        result=result,
        n_public=None if public is None else int(public.shape[0]),
        seed=seed if record_seed else None,
        test_fraction=test_fraction,
        test_errors=errors,
        majority=majority,
    )


# -- the model -------------------------------------------------------------------------


@dataclass(frozen=True)
class Predictions:
    """Each subject's predicted label (an index into ``label_names``) and the
    probability of that label (see the model's ``probability``)."""

    subject_ids: tuple[str, ...]
    labels: NDArray[np.int64]
    probability: NDArray[np.float64]
    label_names: tuple[str, ...]
    true_labels: NDArray[np.int64] | None = None

    def rows(self) -> list[tuple[str, str, float]]:
        names = [self.label_names[k] for k in self.labels.tolist()]
        return list(
            zip(self.subject_ids, names, self.probability.tolist(), strict=True)
        )

    def write_csv(self, path: str | Path) -> Path:
        """Columns subject, label, probability; one row per subject."""
        path = Path(path)
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["subject", "label", "probability"])
            for subject, label, p in self.rows():
                writer.writerow([subject, label, f"{p:.6f}"])
        return path


_MODEL_KEYS = ("coef", "intercept", "labels", "spec", "server-method", "protocol")


@dataclass(frozen=True)
class OwnModel:
    """A fitted model as ``model.json`` holds it, with its spec."""

    spec: FederationSpec
    coef: NDArray[np.float64]
    #: A number for two labels, one per label for K > 2 (``coef`` then has K rows).
    intercept: NDArray[np.float64]
    method: str
    protocol: str
    epsilon: float
    record: dict[str, Any]

    @classmethod
    def load(cls, path: str | Path) -> OwnModel:
        """Read and check ``model.json``; errors name the file and the key."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such model file")
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise OwnDataError(f"{path.name}: not a JSON model file: {exc}") from None
        return cls.from_record(record, source=path.name)

    @classmethod
    def from_record(cls, record: Any, *, source: str = "model") -> OwnModel:
        if not isinstance(record, dict) or record.get("format") != MODEL_FORMAT:
            raise OwnDataError(f"{source}: not an ldpfda model (format {MODEL_FORMAT})")
        if record.get("format-version") != MODEL_VERSION:
            raise OwnDataError(
                f"{source}: format-version must be {MODEL_VERSION}, got "
                f"{record.get('format-version')!r}"
            )
        missing = [k for k in _MODEL_KEYS if k not in record]
        if missing:
            raise OwnDataError(f"{source}: missing key(s) {', '.join(missing)}")
        spec_part = record["spec"]
        try:
            spec = FederationSpec.loads(spec_part["text"])
        except (KeyError, TypeError, ValueError) as exc:
            raise OwnDataError(f"{source}: key 'spec': {exc}") from None
        if spec.hash != spec_part.get("hash"):
            raise OwnDataError(
                f"{source}: key 'spec': the spec text hashes to {spec.short_hash}, "
                f"not the recorded {str(spec_part.get('hash'))[:16]}; the file was "
                "changed"
            )
        k = len(spec.labels)
        shape = (spec.n_features,) if k == 2 else (k, spec.n_features)
        try:
            coef = np.asarray(record["coef"], dtype=float)
            intercept = np.asarray(record["intercept"], dtype=float)
        except (TypeError, ValueError):
            coef = intercept = np.full(0, np.nan)
        if coef.shape != shape or not np.all(np.isfinite(coef)):
            raise OwnDataError(
                f"{source}: key 'coef' must hold {' x '.join(map(str, shape))} finite "
                f"numbers (the spec's features, a row per label for K > 2), got shape "
                f"{coef.shape}"
            )
        if intercept.shape != shape[:-1] or not np.all(np.isfinite(intercept)):
            raise OwnDataError(
                f"{source}: key 'intercept' must hold {k if k > 2 else 1} finite "
                f"number(s), got shape {intercept.shape}"
            )
        if list(record["labels"]) != list(spec.labels):
            raise OwnDataError(
                f"{source}: key 'labels' {record['labels']} differs from the spec's "
                f"labels {list(spec.labels)}"
            )
        method = record["server-method"]
        if method not in _PROBABILITY:
            raise OwnDataError(
                f"{source}: key 'server-method' must be one of {tuple(_PROBABILITY)}, "
                f"got {method!r}"
            )
        return cls(
            spec=spec,
            coef=coef,
            intercept=intercept,
            method=method,
            protocol=str(record["protocol"]),
            epsilon=float(record.get("epsilon", math.nan)),
            record=record,
        )

    @property
    def label_names(self) -> tuple[str, ...]:
        return self.spec.labels

    def scores(self, features: NDArray[np.float64]) -> NDArray[np.float64]:
        """Two labels: the score of labels[1], shape (n,); K labels: (n, K)."""
        return np.asarray(features, dtype=float) @ self.coef.T + self.intercept

    def predict_features(
        self, features: SubjectFeatures, *, labelled: bool = True
    ) -> Predictions:
        from scipy.special import expit, softmax

        score = self.scores(features.features)
        if score.ndim == 2:  # K labels: the largest score, its softmax share
            label = score.argmax(axis=1)
            p = softmax(score, axis=1)[np.arange(label.size), label]
        else:
            p1 = np.clip((1.0 + score) / 2.0, 0.0, 1.0)
            p1 = p1 if self.method == "moment" else expit(score)
            label = (score > 0).astype(np.int64)
            p = np.where(label == 1, p1, 1.0 - p1)
        truth = features.labels if labelled else None
        return Predictions(features.subject_ids, label, p, self.label_names, truth)
