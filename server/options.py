"""Flower-only settings of a run: the run-config keys ``flower.<kebab-name>``."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ldpfda._validation import check_int, check_real
from ldpfda.config import Settings, run_settings

__all__ = ["PHASES", "FlowerOptions", "parse_run_config"]


#: Values of ``flower.phase``: the one-server protocol, or a multi-server phase.
PHASES = ("single", "train", "evaluate")


@dataclass(frozen=True)
class FlowerOptions:
    """Flower-only settings of a run (run-config keys ``flower.<kebab-name>``).

    Attributes
    ----------
    repeat : int
        Which repeat's derived seeds (data, clients, server) the run uses.
    min_nodes : int
        Start with this many connected nodes once ``wait_timeout`` has passed;
        0 means every configured client (``n_train + n_eval``).
    wait_timeout : float
        Seconds to wait for the nodes to connect.
    reply_timeout : float
        Seconds to wait for the replies of each query round.
    min_reply_fraction : float
        Smallest share of the asked training clients, and of the asked evaluation
        clients, that must give a valid reply for the run to go on.
    report_dir : str
        Directory for ``run-<run id>/report.json`` and the model; relative paths are
        taken from the ServerApp process's working directory.
    test_data : str
        ``"design"``: score on the embedded design's test set of this repeat (the one
        :func:`~ldpfda.server.engine.run_repeat` uses); ``""``: no test set; otherwise
        the path of a data file (:mod:`ldpfda.client.data` format) with test rows.
    phase : str
        ``"single"``: the one-server protocol above. ``"train"`` or ``"evaluate"``: one
        phase of a multi-server session (:mod:`ldpfda.server.multiserver_app`).
    session : str
        Name of the multi-server session the run belongs to; nodes keep their ledger
        per session (``""``: per run).
    artifact_dir : str
        Directory of the session's model and estimate artifacts
        (:mod:`ldpfda.server.artifacts`), shared by its servers.
    """

    repeat: int = 0
    min_nodes: int = 0
    wait_timeout: float = 60.0
    reply_timeout: float = 300.0
    min_reply_fraction: float = 0.8
    report_dir: str = "results/flower"
    test_data: str = "design"
    phase: str = "single"
    session: str = ""
    artifact_dir: str = "results/flower/artifacts"

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "repeat", check_int(self.repeat, "repeat", minimum=0))
        set_(self, "min_nodes", check_int(self.min_nodes, "min_nodes", minimum=0))
        set_(
            self, "wait_timeout", check_real(self.wait_timeout, "wait_timeout", low=0.0)
        )
        set_(
            self,
            "reply_timeout",
            check_real(self.reply_timeout, "reply_timeout", low=0.0, low_open=True),
        )
        set_(
            self,
            "min_reply_fraction",
            check_real(
                self.min_reply_fraction, "min_reply_fraction", low=0.0, high=1.0
            ),
        )
        if not isinstance(self.report_dir, str) or not self.report_dir:
            raise ValueError(
                f"report_dir must be a non-empty path, got {self.report_dir!r}"
            )
        if not isinstance(self.test_data, str):
            raise TypeError(
                f"test_data must be a str, got {type(self.test_data).__name__}"
            )
        if self.phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {self.phase!r}")
        if not isinstance(self.session, str) or not re.fullmatch(
            r"([A-Za-z0-9][A-Za-z0-9._-]{0,63})?", self.session
        ):
            raise ValueError(
                "session must be empty or a name of letters, digits, '.', '_' and "
                f"'-' (at most 64), got {self.session!r}"
            )
        if self.phase != "single" and not self.session:
            raise ValueError(f"phase {self.phase!r} needs a session name")
        if not isinstance(self.artifact_dir, str) or not self.artifact_dir:
            raise ValueError(
                f"artifact_dir must be a non-empty path, got {self.artifact_dir!r}"
            )

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> FlowerOptions:
        """Options from kebab-case keys without the ``flower.`` prefix."""
        names = {f.name for f in dataclasses.fields(cls)}
        changes = {k.replace("-", "_"): v for k, v in mapping.items()}
        unknown = sorted(
            f"flower.{k}"
            for k, n in zip(mapping, changes, strict=True)
            if n not in names
        )
        if unknown:
            raise ValueError(f"unknown setting(s): {', '.join(unknown)}")
        return cls(**changes)

    def to_mapping(self) -> dict[str, Any]:
        return {
            f"flower.{f.name.replace('_', '-')}": getattr(self, f.name)
            for f in dataclasses.fields(self)
        }


def parse_run_config(run_config: Mapping[str, Any]) -> tuple[Settings, FlowerOptions]:
    """Validated settings and Flower options from a run config (both refuse typos)."""
    settings, flower = run_settings(run_config)
    return settings, FlowerOptions.from_mapping(flower)
