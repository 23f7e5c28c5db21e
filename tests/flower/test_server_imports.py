"""The ServerApp of the default protocol imports no heavy package.

scikit-learn alone is 1.5 s of CPU to import, more than the rest of the ServerApp,
and a simulation's ServerApp starts beside Ray on the same cores. A child interpreter
that refuses the heavy packages (as :mod:`tests.test_light_imports` does for a host)
runs a whole default run on the in-memory grid; its model must equal the in-process
engine's, computed here with everything installed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np

from ldpfda.engine import run_repeat
from ldpfda.server.options import parse_run_config

from ..test_light_imports import PRELUDE
from .support import ROOT, SMALL, app_config

# The in-memory grid of the Flower tests, on the vector design of SMALL.
SERVER = """
import sys
import tempfile

import numpy as np

sys.path.insert(0, ROOT)
from tests.flower.support import SMALL, FakeGrid, app_config, partitions
from ldpfda.client.client_app import app as client_app
from ldpfda.server.options import parse_run_config
from ldpfda.server.server_app import run_server

config = app_config() | SMALL | {"flower.report-dir": tempfile.mkdtemp()}
settings, options = parse_run_config(config)
result, report = run_server(
    FakeGrid(client_app, config, partitions(50)), settings, options, run_id=7
)
loaded = sorted({name.split(".")[0] for name in sys.modules} & set(HEAVY))
if loaded:
    raise SystemExit(f"heavy packages loaded: {loaded}")
np.savez(OUT, coef=result.final.coef, intercept=result.final.intercept)
"""


def test_the_default_servers_run_imports_no_heavy_package(tmp_path):
    out = tmp_path / "server.npz"
    code = (
        PRELUDE
        + f"OUT = {str(out)!r}\nROOT = {str(ROOT)!r}\n"
        + textwrap.dedent(SERVER)
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = app_config() | SMALL | {"flower.report-dir": str(tmp_path)}
    settings, _ = parse_run_config(config)
    assert settings.protocol == "moment"
    reference = run_repeat(settings, 0).final
    with np.load(out) as fit:
        np.testing.assert_array_equal(fit["coef"], reference.coef)
        np.testing.assert_array_equal(fit["intercept"], reference.intercept)
