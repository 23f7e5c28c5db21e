"""Screening of client replies: nothing malformed, out of range or duplicated is used.

The server never trusts a reply. A training reply must be one finite feature vector of
the right length inside the feature mechanism's declared output range, with a label in
{0, 1}; an evaluation reply must be one bit. A client that answers twice keeps its first
answer. Every rejected reply is recorded with its reason, and what was accepted before
is never discarded.

A reason reads ``"<kind>: <detail>"``; :func:`reason_kind` gives the kind. The
deployment's ServerApp (:mod:`ldpfda.server.server_app`) words its reasons the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["Rejection", "Screened", "reason_kind", "screen_bits", "screen_payloads"]


def reason_kind(reason: str) -> str:
    """The kind of a rejection reason ``"<kind>: <detail>"`` (e.g. ``"range"``)."""
    return reason.split(":", 1)[0]


@dataclass(frozen=True)
class Rejection:
    """A reply that was not used, and why."""

    client_id: int
    stage: str
    reason: str


@dataclass
class Screened:
    """Accepted replies (ordered by client id) and the rejections of one round."""

    client_ids: NDArray[np.int64]
    values: NDArray[np.float64]
    labels: NDArray[np.int8] | None
    rejected: list[Rejection] = field(default_factory=list)

    def reasons(self) -> dict[str, int]:
        """Number of rejections per reason kind (the text before the first colon)."""
        out: dict[str, int] = {}
        for r in self.rejected:
            kind = reason_kind(r.reason)
            out[kind] = out.get(kind, 0) + 1
        return out


def _as_array(value: Any) -> NDArray | None:
    try:
        return np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        return None


def screen_payloads(
    replies: Iterable[tuple[int, Any, Any]],
    *,
    n_features: int,
    feature_range: tuple[float, float],
    stage: str = "privatize",
) -> Screened:
    """Validate training replies ``(client id, features, label)``.

    Rejected: a second reply of the same client, features that are not a finite vector
    of length ``n_features`` inside ``feature_range``, a label that is not 0 or 1, and a
    missing reply (``features is None``: the client crashed or timed out).
    """
    low, high = feature_range
    seen: set[int] = set()
    ids, rows, labels, rejected = [], [], [], []
    for client_id, features, label in replies:
        cid = int(client_id)
        if cid in seen:
            rejected.append(Rejection(cid, stage, "duplicate: a second reply"))
            continue
        seen.add(cid)
        if features is None:
            rejected.append(Rejection(cid, stage, f"missing: {label or 'no reply'}"))
            continue
        x = _as_array(features)
        if x is None or x.shape not in ((n_features,), (1, n_features)):
            shape = None if x is None else x.shape
            rejected.append(
                Rejection(cid, stage, f"shape: expected ({n_features},), got {shape}")
            )
            continue
        x = x.reshape(-1)
        if not np.all(np.isfinite(x)):
            rejected.append(Rejection(cid, stage, "nan: non-finite features"))
            continue
        if np.any(x < low) or np.any(x > high):
            rejected.append(
                Rejection(
                    cid, stage, f"range: features outside [{low:.6g}, {high:.6g}]"
                )
            )
            continue
        y = _as_array(label)
        if y is None or y.size != 1 or float(y.reshape(-1)[0]) not in (0.0, 1.0):
            rejected.append(Rejection(cid, stage, f"label: not 0 or 1 ({label!r})"))
            continue
        ids.append(cid)
        rows.append(x)
        labels.append(int(y.reshape(-1)[0]))
    order = np.argsort(ids, kind="stable")
    return Screened(
        np.asarray(ids, dtype=np.int64)[order],
        np.asarray(rows, dtype=float).reshape(-1, n_features)[order],
        np.asarray(labels, dtype=np.int8)[order],
        rejected,
    )


def screen_bits(
    replies: Iterable[tuple[int, Any]], *, stage: str = "evaluate"
) -> Screened:
    """Validate evaluation replies ``(client id, bit)``; ``bit is None`` means
    missing."""
    seen: set[int] = set()
    ids, bits, rejected = [], [], []
    for client_id, bit in replies:
        cid = int(client_id)
        if cid in seen:
            rejected.append(Rejection(cid, stage, "duplicate: a second reply"))
            continue
        seen.add(cid)
        if bit is None:
            rejected.append(Rejection(cid, stage, "missing: no reply"))
            continue
        b = _as_array(bit)
        if (
            b is None
            or b.size != 1
            or not np.isfinite(b).all()
            or float(b.reshape(-1)[0]) not in (0.0, 1.0)
        ):
            rejected.append(Rejection(cid, stage, f"bit: not a bit ({bit!r})"))
            continue
        ids.append(cid)
        bits.append(float(b.reshape(-1)[0]))
    order = np.argsort(ids, kind="stable")
    return Screened(
        np.asarray(ids, dtype=np.int64)[order],
        np.asarray(bits, dtype=float)[order],
        None,
        rejected,
    )
