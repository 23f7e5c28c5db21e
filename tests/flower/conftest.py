"""Shared set-up of the Flower tests.

Importing flwr imports typer, which imports two helpers that click 8.2+ deprecates; with
``filterwarnings = error`` that import would fail. Exactly those two warnings are
ignored, once, while flwr is first imported here.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore",
        message=r"'click\.utils\.get_(binary|text)_stream' is deprecated",
        category=DeprecationWarning,
        module="typer",
    )
    import flwr.app  # noqa: F401
    import flwr.clientapp  # noqa: F401
    import flwr.serverapp  # noqa: F401

from .support import app_config  # noqa: E402


@pytest.fixture
def run_config(tmp_path: Path):
    """Build a run config: the project's defaults, a temp report dir, then updates."""

    def build(*updates: Mapping[str, Any]) -> dict[str, Any]:
        config = app_config()
        config["flower.report-dir"] = str(tmp_path / "reports")
        for update in updates:
            config.update(update)
        return config

    return build
