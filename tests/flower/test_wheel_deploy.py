"""``flwr run flower-app`` runs the installed package, not a bundle of the checkout."""

from __future__ import annotations

import io
import zipfile

import pytest
from flwr.cli.build import build_fab_from_disk
from flwr.cli.config_utils import load_and_validate

from .support import ROOT

FLOWER_APP = ROOT / "flower-app"


# flwr 1.42 builds its path patterns with a pathspec style that pathspec 1.x deprecates.
@pytest.mark.filterwarnings("ignore:GitWildMatchPattern:DeprecationWarning")
def test_flower_app_bundle_holds_no_code():
    config, warnings = load_and_validate(FLOWER_APP / "pyproject.toml")
    assert warnings == []
    assert config["tool"]["flwr"]["app"]["components"]["clientapp"] == (
        "ldpfda.client.client_app:app"
    )
    names = zipfile.ZipFile(io.BytesIO(build_fab_from_disk(FLOWER_APP))).namelist()
    # Nothing to put ahead of the installed ldpfda on the app processes' sys.path.
    assert sorted(names) == [".info/CONTENT", "pyproject.toml"]
