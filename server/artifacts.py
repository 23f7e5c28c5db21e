"""Model artifacts exchanged between servers in multi-server mode.

An artifact is a UTF-8 JSON file (schema below, version 1). A server exports its weak
models for the other servers to evaluate, and an evaluating server exports its error
estimates of foreign models. Every import is validated and a bad artifact raises
:class:`ArtifactError` naming the problem, so an orchestrator can skip it and go on.

Schema (version 1)::

    {
      "format": "ldpfda-artifact",
      "version": 1,
      "kind": "models" | "estimates",
      "server": "<name of the server that wrote it>",
      "dimension": p,                        # features per model
      "featurizer": "<fingerprint>",         # must match the reader's
      "models": [{"coef": [p floats], "intercept": float}, ...],   # kind = models
      "estimates": {"<model server>": {"errors": [...], "counts": [...],
                                       "epsilon": float}}            # kind = estimates
    }
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda.server.mrma import LinearModels

__all__ = [
    "ARTIFACT_FORMAT",
    "ARTIFACT_VERSION",
    "ArtifactError",
    "featurizer_fingerprint",
    "read_estimates",
    "read_models",
    "write_estimates",
    "write_models",
]

ARTIFACT_FORMAT = "ldpfda-artifact"
ARTIFACT_VERSION = 1


class ArtifactError(ValueError):
    """An artifact that cannot be used: unreadable, wrong version, shape or values."""


def featurizer_fingerprint(description: dict[str, Any]) -> str:
    """A short stable hash of the featurizer's public description (basis, grid,
    bounds)."""
    text = json.dumps(
        description, sort_keys=True, default=lambda a: np.asarray(a).tolist()
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _header(kind: str, server: str, dimension: int, fingerprint: str) -> dict[str, Any]:
    return {
        "format": ARTIFACT_FORMAT,
        "version": ARTIFACT_VERSION,
        "kind": kind,
        "server": server,
        "dimension": int(dimension),
        "featurizer": fingerprint,
    }


def write_models(
    path: str | Path, models: LinearModels, *, server: str, fingerprint: str
) -> Path:
    """Export ``models`` as a version-1 ``models`` artifact."""
    if not np.all(np.isfinite(models.coef)) or not np.all(
        np.isfinite(models.intercept)
    ):
        raise ArtifactError(
            "refusing to export models with NaN or infinite coefficients"
        )
    data = _header("models", server, models.coef.shape[1], fingerprint)
    data["models"] = [
        {"coef": c.tolist(), "intercept": float(b)}
        for c, b in zip(models.coef, models.intercept, strict=True)
    ]
    path = Path(path)
    path.write_text(json.dumps(data))
    return path


def _load(
    path: str | Path, kind: str, *, dimension: int, fingerprint: str
) -> dict[str, Any]:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ArtifactError(f"{path}: no such artifact") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(
            f"{path}: not a readable artifact (truncated or corrupt): {exc}"
        ) from exc
    if not isinstance(data, dict) or data.get("format") != ARTIFACT_FORMAT:
        raise ArtifactError(f"{path}: not an {ARTIFACT_FORMAT} file")
    if data.get("version") != ARTIFACT_VERSION:
        raise ArtifactError(
            f"{path}: artifact version {data.get('version')!r} is not "
            f"supported (this reader knows version {ARTIFACT_VERSION})"
        )
    if data.get("kind") != kind:
        raise ArtifactError(
            f"{path}: expected a {kind!r} artifact, got {data.get('kind')!r}"
        )
    if data.get("dimension") != dimension:
        raise ArtifactError(
            f"{path}: dimension {data.get('dimension')!r} does not match "
            f"this server's {dimension}"
        )
    if data.get("featurizer") != fingerprint:
        raise ArtifactError(
            f"{path}: featurizer fingerprint {data.get('featurizer')!r} "
            f"differs from this server's {fingerprint!r}: the models "
            "live in another feature space"
        )
    if not isinstance(data.get("server"), str) or not data["server"]:
        raise ArtifactError(f"{path}: missing server name")
    return data


def read_models(
    path: str | Path, *, dimension: int, fingerprint: str
) -> tuple[str, LinearModels]:
    """Import and validate a ``models`` artifact: (server name, models)."""
    data = _load(path, "models", dimension=dimension, fingerprint=fingerprint)
    items = data.get("models")
    if not isinstance(items, list) or not items:
        raise ArtifactError(f"{path}: no models")
    try:
        coef = np.array([m["coef"] for m in items], dtype=float)
        intercept = np.array([m["intercept"] for m in items], dtype=float)
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactError(f"{path}: malformed model entry: {exc}") from exc
    if coef.shape != (len(items), dimension):
        raise ArtifactError(
            f"{path}: coefficient array has shape {coef.shape}, expected "
            f"({len(items)}, {dimension})"
        )
    if not (np.all(np.isfinite(coef)) and np.all(np.isfinite(intercept))):
        raise ArtifactError(f"{path}: NaN or infinite coefficients")
    return data["server"], LinearModels(coef, intercept)


def write_estimates(
    path: str | Path,
    estimates: dict[str, dict[str, Any]],
    *,
    server: str,
    dimension: int,
    fingerprint: str,
) -> Path:
    """Export error estimates of other servers' models, keyed by model server."""
    data = _header("estimates", server, dimension, fingerprint)
    data["estimates"] = {
        name: {
            "errors": np.asarray(e["errors"], dtype=float).tolist(),
            "counts": np.asarray(e["counts"], dtype=int).tolist(),
            "epsilon": float(e["epsilon"]),
        }
        for name, e in estimates.items()
    }
    path = Path(path)
    path.write_text(json.dumps(data))
    return path


def read_estimates(
    path: str | Path, *, dimension: int, fingerprint: str
) -> tuple[str, dict[str, dict[str, NDArray]]]:
    """Import and validate an ``estimates`` artifact: (server name, estimates)."""
    data = _load(path, "estimates", dimension=dimension, fingerprint=fingerprint)
    raw = data.get("estimates")
    if not isinstance(raw, dict):
        raise ArtifactError(f"{path}: no estimates")
    out: dict[str, dict[str, NDArray]] = {}
    for name, item in raw.items():
        try:
            errors = np.asarray(item["errors"], dtype=float)
            counts = np.asarray(item["counts"], dtype=np.int64)
            epsilon = float(item["epsilon"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ArtifactError(
                f"{path}: malformed estimates for {name!r}: {exc}"
            ) from exc
        if errors.ndim != 1 or errors.shape != counts.shape:
            raise ArtifactError(
                f"{path}: estimates for {name!r} have mismatched shapes"
            )
        if not np.all(np.isfinite(errors)) or np.any(counts < 0):
            raise ArtifactError(
                f"{path}: estimates for {name!r} contain NaN or negative counts"
            )
        if not (epsilon > 0) or math.isnan(epsilon):
            raise ArtifactError(
                f"{path}: estimates for {name!r} have epsilon {epsilon}"
            )
        out[name] = {"errors": errors, "counts": counts, "epsilon": np.float64(epsilon)}
    return data["server"], out
