"""What a Flower run writes to ``<report-dir>/run-<run id>/``: ``status.json`` (the
current stage, or ``failed`` with the error), then ``report.json``, ``model.npz`` and
``payload.npz``."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from ldpfda.config import Settings
from ldpfda.datasets.files import load_node_data
from ldpfda.datasets.population import design_test_set, public_featurizer
from ldpfda.schema import catalog
from ldpfda.server.options import FlowerOptions
from ldpfda.server.session import QuorumError, Round, Session, logger, reason_kind

__all__ = [
    "Status",
    "jsonable",
    "privacy_section",
    "rejections",
    "test_set",
    "write_report",
    "write_run",
]


class Status:
    """Writes ``status.json`` (the current stage) next to the report."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started = time.time()

    def __call__(self, stage: str, **extra: Any) -> None:
        logger.info("ldpfda: %s", stage)
        self.directory.mkdir(parents=True, exist_ok=True)
        body = {"stage": stage, "elapsed_s": time.time() - self.started, **extra}
        tmp = self.directory / "status.json.tmp"
        tmp.write_text(json.dumps(body), encoding="utf-8")
        tmp.replace(self.directory / "status.json")

    def failed(self, exc: BaseException) -> None:
        """Mark the run ``failed`` with the error; a failed quorum also names its
        round and the clients the run asked for and lost by then (``missing``)."""
        extra = {}
        if isinstance(exc, QuorumError):
            extra = {"round": exc.round, "missing": exc.missing}
        self("failed", error=f"{type(exc).__name__}: {exc}", **extra)


def jsonable(value: Any) -> Any:
    """``value`` with non-finite floats as strings ("inf"), for strict JSON."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def rejections(
    rounds: Mapping[str, Round], node_of: Mapping[int, int], claimed: Mapping[int, int]
) -> list[dict[str, Any]]:
    """Every reply the run did not use, and every one that never came, with the reason.

    One entry per round and node: ``stage``, ``client_id`` (None when a node never
    said who it is), ``node_id``, ``kind`` and ``reason``. ``claimed`` is the client id
    each node gave in the identify round.
    """
    return [
        {
            "stage": stage,
            "client_id": claimed.get(key) if stage == catalog.IDENTIFY else key,
            "node_id": key if stage == catalog.IDENTIFY else node_of.get(key),
            "kind": reason_kind(reason),
            "reason": reason,
        }
        for stage, round_ in rounds.items()
        for key, reason in sorted({**round_.missing, **round_.rejected}.items())
    ]


def test_set(
    settings: Settings, options: FlowerOptions
) -> tuple[NDArray[np.float64], NDArray[np.int8]] | None:
    if options.test_data == "":
        return None
    if options.test_data == "design":
        return design_test_set(settings, options.repeat)
    featurizer, grid = public_featurizer(settings, options.repeat)
    data = load_node_data(options.test_data)
    return data.features(featurizer, grid), data.labels


def privacy_section(
    session: Session, clients: list[int], *, budgets: bool = True
) -> dict[str, Any]:
    """The report's ``privacy`` block: the server's charges and each client's word
    (its spent budget, and with ``budgets`` its whole budget)."""
    charged = session.ledger.spent_all()
    keys = ("spent", "budget") if budgets else ("spent",)
    return {
        "budget_per_client": session.ledger.budget,
        "server_accounting": session.ledger.summary(),
        "clients": {
            str(c): {
                "charged_by_server": float(charged[c]),
                **{f"reported_{k}": session.reported.get(c, {}).get(k) for k in keys},
            }
            for c in clients
        },
    }


def write_run(
    report: Mapping[str, Any],
    final: Any,
    payload: Mapping[str, NDArray],
    status: Status,
) -> None:
    """Write ``model.npz`` (a K-class model: its K rows), ``payload.npz`` and the
    report (:func:`write_report`)."""
    out = status.directory
    out.mkdir(parents=True, exist_ok=True)
    coef = final.coef[0] if len(final) == 1 else final.coef
    np.savez(out / "model.npz", coef=coef, intercept=final.intercept)
    # savez would take a key "allow_pickle" as its flag; payload keys are array names.
    np.savez(out / "payload.npz", **cast(Mapping[str, Any], payload))
    write_report(report, status)


def write_report(report: Mapping[str, Any], status: Status) -> None:
    """Write ``report.json`` (strict JSON) by the status, then mark the run done."""
    status.directory.mkdir(parents=True, exist_ok=True)
    path = status.directory / "report.json"
    path.write_text(
        json.dumps(jsonable(report), indent=2, allow_nan=False), encoding="utf-8"
    )
    status("done", report=str(path.resolve()))
    logger.info("ldpfda: report written to %s", path.resolve())
