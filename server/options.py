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
    """Flower-only settings of a run (run-config keys ``flower.<kebab-name>``, each
    described in ``docs/flower.md``)."""

    repeat: int = 0
    min_nodes: int = 0
    wait_timeout: float = 60.0
    reply_timeout: float = 300.0
    #: Seconds to wait for an unavailable node to come back before it is asked once
    #: more; negative: as long as ``reply_timeout``.
    rejoin_timeout: float = -1.0
    min_reply_fraction: float = 0.8
    report_dir: str = "results/flower"
    test_data: str = "design"
    phase: str = "single"
    session: str = ""
    artifact_dir: str = "results/flower/artifacts"
    spec: str = ""
    public_data: str = ""
    node_data: str = ""
    clients_per_node: int = 1

    def __post_init__(self) -> None:
        def checked(name: str, check: Any, **bounds: Any) -> None:
            object.__setattr__(self, name, check(getattr(self, name), name, **bounds))

        checked("repeat", check_int, minimum=0)
        checked("min_nodes", check_int, minimum=0)
        checked("wait_timeout", check_real, low=0.0)
        checked("reply_timeout", check_real, low=0.0, low_open=True)
        checked("rejoin_timeout", check_real)
        checked("min_reply_fraction", check_real, low=0.0, high=1.0)
        checked("clients_per_node", check_int, minimum=1)
        for name in ("report_dir", "artifact_dir"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty path, got {value!r}")
        for name in ("spec", "public_data", "node_data"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"{name} must be a path (str)")
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

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> FlowerOptions:
        """Options from kebab-case keys without the ``flower.`` prefix."""
        names = {f.name for f in dataclasses.fields(cls)}
        changes = {k.replace("-", "_"): v for k, v in mapping.items()}
        unknown = sorted(
            f"flower.{k}" for k in mapping if k.replace("-", "_") not in names
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
