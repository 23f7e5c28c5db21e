"""The ``models`` and ``estimates`` artifacts (UTF-8 JSON, schema version 2 in
``docs/flower.md``) the servers of a multi-server session exchange. A bad artifact
raises :class:`ArtifactError` naming the file and the problem, so that the caller can
leave it out, say why, and go on with the others.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda.config import Settings
from ldpfda.server.mrma import LinearModels

__all__ = [
    "ARTIFACT_FORMAT",
    "ARTIFACT_VERSION",
    "ArtifactError",
    "ArtifactSet",
    "EstimatesArtifact",
    "ModelEstimates",
    "ModelsArtifact",
    "estimates_path",
    "featurizer_fingerprint",
    "load_directory",
    "models_path",
    "read_estimates",
    "read_models",
    "session_fingerprint",
    "write_estimates",
    "write_models",
]

ARTIFACT_FORMAT = "ldpfda-artifact"
ARTIFACT_VERSION = 2

_HEADER = ("format", "version", "kind", "server", "session", "dimension", "featurizer")
_ESTIMATE_KEYS = {"models", "errors", "counts", "epsilon"}


class ArtifactError(ValueError):
    """An artifact that cannot be used: unreadable, wrong version, schema or values."""


@dataclass(frozen=True)
class ModelsArtifact:
    """A validated ``models`` artifact; ``digest``: the file's SHA-256 (16 hex)."""

    server: int
    session: str
    models: LinearModels
    digest: str
    path: Path


@dataclass(frozen=True)
class ModelEstimates:
    """One evaluating server's estimates of one model server's models."""

    models: str
    errors: NDArray[np.float64]
    counts: NDArray[np.int64]
    epsilon: float


@dataclass(frozen=True)
class EstimatesArtifact:
    """A validated ``estimates`` artifact: estimates by model server."""

    server: int
    session: str
    estimates: dict[int, ModelEstimates]
    path: Path


def featurizer_fingerprint(description: dict[str, Any]) -> str:
    """A short stable hash of a featurizer's public description."""
    text = json.dumps(
        description, sort_keys=True, default=lambda a: np.asarray(a).tolist()
    )
    return _digest(text.encode())


def session_fingerprint(settings: Settings, repeat: int) -> str:
    """Fingerprint of the session's feature space: the public settings that fix the
    featurizer (design, basis, calibration size, seed and repeat), and K for K > 2
    classes (a model is K rows; binary fingerprints are unchanged)."""
    classes = {} if settings.n_classes == 2 else {"n_classes": settings.n_classes}
    return featurizer_fingerprint(
        {
            "dataset": settings.dataset,
            "n_basis": settings.n_basis,
            "order": settings.order,
            "calibration_size": settings.calibration_size,
            "seed": settings.seed,
            "repeat": int(repeat),
            "stream": "public",
            **classes,
        }
    )


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _write(path: str | Path, data: dict[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, allow_nan=False), encoding="utf-8")
    tmp.replace(path)
    return path


def _header(
    kind: str, server: int, session: str, dimension: int, fingerprint: str
) -> dict[str, Any]:
    values = (ARTIFACT_FORMAT, ARTIFACT_VERSION, kind, int(server), str(session))
    return dict(zip(_HEADER, (*values, int(dimension), fingerprint), strict=True))


def write_models(
    path: str | Path,
    models: LinearModels,
    *,
    server: int,
    session: str,
    fingerprint: str,
) -> Path:
    """Export ``models`` as a ``models`` artifact (written atomically)."""
    if not (np.all(np.isfinite(models.coef)) and np.all(np.isfinite(models.intercept))):
        raise ArtifactError(
            f"{path}: refusing to export models with NaN or infinite coefficients"
        )
    data = _header("models", server, session, models.coef.shape[1], fingerprint)
    data["models"] = [
        {"coef": c.tolist(), "intercept": float(b)}
        for c, b in zip(models.coef, models.intercept, strict=True)
    ]
    return _write(path, data)


def write_estimates(
    path: str | Path,
    estimates: dict[int, ModelEstimates],
    *,
    server: int,
    session: str,
    dimension: int,
    fingerprint: str,
) -> Path:
    """Export estimates of the models of each model server (key) as an artifact."""
    data = _header("estimates", server, session, dimension, fingerprint)
    data["estimates"] = {
        str(r): {
            "models": e.models,
            "errors": np.asarray(e.errors, dtype=float).tolist(),
            "counts": np.asarray(e.counts, dtype=np.int64).tolist(),
            "epsilon": float(e.epsilon) if math.isfinite(e.epsilon) else "inf",
        }
        for r, e in sorted(estimates.items())
    }
    return _write(path, data)


def _load(
    path: str | Path, kind: str, *, dimension: int, fingerprint: str, session: str
) -> tuple[dict[str, Any], bytes]:
    """The parsed, header-checked artifact at ``path`` and its bytes."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot read the artifact: {exc}") from exc
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(
            f"{path}: not readable JSON (truncated or corrupt): {exc}"
        ) from exc
    if not isinstance(data, dict) or data.get("format") != ARTIFACT_FORMAT:
        raise ArtifactError(f"{path}: not an {ARTIFACT_FORMAT} file")
    if data.get("version") != ARTIFACT_VERSION:
        raise ArtifactError(
            f"{path}: artifact version {data.get('version')!r} is not supported "
            f"(this reader knows version {ARTIFACT_VERSION})"
        )
    expected = {*_HEADER, kind}
    if data.get("kind") != kind:
        raise ArtifactError(
            f"{path}: expected a {kind!r} artifact, got kind {data.get('kind')!r}"
        )
    if set(data) != expected:
        missing, extra = sorted(expected - set(data)), sorted(set(data) - expected)
        raise ArtifactError(
            f"{path}: does not follow the {kind!r} schema (missing keys {missing}, "
            f"unknown keys {extra})"
        )
    server = data["server"]
    if isinstance(server, bool) or not isinstance(server, int) or server < 0:
        raise ArtifactError(f"{path}: server must be an int >= 0, got {server!r}")
    if data["session"] != session:
        raise ArtifactError(
            f"{path}: belongs to session {data['session']!r}, not {session!r}"
        )
    if data["dimension"] != dimension:
        raise ArtifactError(
            f"{path}: dimension {data['dimension']!r} does not match this session's "
            f"{dimension}"
        )
    if data["featurizer"] != fingerprint:
        raise ArtifactError(
            f"{path}: featurizer fingerprint {data['featurizer']!r} differs from this "
            f"session's {fingerprint!r}: the models live in another feature space"
        )
    return data, raw


def _numbers(path: Path, value: Any, what: str, shape: tuple[int, ...]) -> NDArray:
    """``value`` as a finite float array of ``shape``, or an ArtifactError."""
    try:
        array = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ArtifactError(
            f"{path}: {what} must be numbers of shape {shape}: {exc}"
        ) from exc
    if array.shape != shape:
        raise ArtifactError(f"{path}: {what} has shape {array.shape}, expected {shape}")
    if not np.all(np.isfinite(array)):
        raise ArtifactError(f"{path}: {what} contains NaN or infinite values")
    return array


def read_models(
    path: str | Path, *, dimension: int, fingerprint: str, session: str
) -> ModelsArtifact:
    """Import and validate a ``models`` artifact (:class:`ArtifactError` if bad)."""
    path = Path(path)
    data, raw = _load(
        path, "models", dimension=dimension, fingerprint=fingerprint, session=session
    )
    items = data["models"]
    if not isinstance(items, list) or not items:
        raise ArtifactError(f"{path}: 'models' must be a non-empty list")
    if not all(isinstance(m, dict) and set(m) == {"coef", "intercept"} for m in items):
        raise ArtifactError(
            f"{path}: every model must be an object with exactly 'coef' and 'intercept'"
        )
    m = len(items)
    coef = _numbers(path, [i["coef"] for i in items], "coef", (m, dimension))
    intercept = _numbers(path, [i["intercept"] for i in items], "intercept", (m,))
    models = LinearModels(coef, intercept)
    return ModelsArtifact(data["server"], data["session"], models, _digest(raw), path)


def read_estimates(
    path: str | Path, *, dimension: int, fingerprint: str, session: str
) -> EstimatesArtifact:
    """Import and validate an ``estimates`` artifact (:class:`ArtifactError` naming
    the model server whose entry is bad)."""
    path = Path(path)
    data, _ = _load(
        path, "estimates", dimension=dimension, fingerprint=fingerprint, session=session
    )
    raw = data["estimates"]
    if not isinstance(raw, dict):
        raise ArtifactError(f"{path}: 'estimates' must be an object")
    out: dict[int, ModelEstimates] = {}
    for key, item in raw.items():
        where = f"estimates of server {key!r}"
        if not (key.isascii() and key.isdigit()):
            raise ArtifactError(f"{path}: {where}: the key must be a server id")
        if not isinstance(item, dict) or set(item) != _ESTIMATE_KEYS:
            raise ArtifactError(
                f"{path}: {where} must have exactly 'models', 'errors', 'counts' and "
                "'epsilon'"
            )
        if not isinstance(item["models"], str) or not item["models"]:
            raise ArtifactError(f"{path}: {where}: 'models' must name a digest")
        counts = item["counts"]
        if not isinstance(counts, list) or not all(
            isinstance(c, int) and not isinstance(c, bool) and 0 <= c < 2**62
            for c in counts
        ):
            raise ArtifactError(
                f"{path}: {where}: counts must be a list of integers >= 0"
            )
        errors = _numbers(path, item["errors"], f"{where}: errors", (len(counts),))
        epsilon = math.inf if item["epsilon"] == "inf" else item["epsilon"]
        number = isinstance(epsilon, (int, float)) and not isinstance(epsilon, bool)
        if not number or not epsilon > 0:
            raise ArtifactError(
                f"{path}: {where}: epsilon must be a number > 0 or 'inf', got "
                f"{item['epsilon']!r}"
            )
        out[int(key)] = ModelEstimates(
            item["models"], errors, np.asarray(counts, dtype=np.int64), float(epsilon)
        )
    return EstimatesArtifact(data["server"], data["session"], out, path)


def models_path(directory: str | Path, server: int) -> Path:
    """Where server ``server`` exports its models in a session's artifact directory."""
    return Path(directory) / f"models-server{int(server)}.json"


def estimates_path(directory: str | Path, server: int) -> Path:
    """Where server ``server`` exports its estimates in the artifact directory."""
    return Path(directory) / f"estimates-server{int(server)}.json"


@dataclass
class ArtifactSet:
    """The usable artifacts of ``directory`` by server; ``rejected``: path -> reason."""

    directory: Path
    models: dict[int, ModelsArtifact]
    estimates: dict[int, EstimatesArtifact]
    rejected: dict[str, str]

    def stacked(self) -> tuple[dict[int, slice], LinearModels]:
        """All models, servers by id, and the rows of each server's models
        (``RuntimeError`` if no models artifact is usable)."""
        if not self.models:
            raise RuntimeError(
                f"no usable models artifact in {self.directory}; rejected: "
                f"{self.rejected}"
            )
        rows: dict[int, slice] = {}
        stop = 0
        for r in sorted(self.models):
            start, stop = stop, stop + len(self.models[r].models)
            rows[r] = slice(start, stop)
        parts = [self.models[r].models for r in rows]
        return rows, LinearModels(
            np.vstack([m.coef for m in parts]),
            np.concatenate([m.intercept for m in parts]),
        )


def load_directory(
    directory: str | Path,
    *,
    dimension: int,
    fingerprint: str,
    session: str,
    estimates: bool = True,
) -> ArtifactSet:
    """Read every ``models-*.json`` (and ``estimates-*.json``) file of ``directory``.

    A file that fails validation, or that claims a server another file (earlier in
    name order) already speaks for, is recorded in :attr:`ArtifactSet.rejected` with
    the reason, and the others are used.
    """
    directory = Path(directory)
    found = ArtifactSet(directory, {}, {}, {})
    kinds: list[tuple[str, Any, dict[int, Any]]] = [
        ("models", read_models, found.models)
    ]
    if estimates:
        kinds.append(("estimates", read_estimates, found.estimates))
    for kind, read, into in kinds:
        for path in sorted(directory.glob(f"{kind}-*.json")):
            try:
                artifact = read(
                    path, dimension=dimension, fingerprint=fingerprint, session=session
                )
            except ArtifactError as exc:
                found.rejected[str(path)] = str(exc)
                continue
            if artifact.server in into:
                found.rejected[str(path)] = (
                    f"{path}: server {artifact.server} already has {kind} in "
                    f"{into[artifact.server].path}"
                )
                continue
            into[artifact.server] = artifact
    return found
