"""The wheel installs every folder under the one import package ``ldpfda``."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("client", "server", "fda", "privacy", "datasets", "experiments",
            "experiments/labeldp", "labeldp")


def test_wheel_contains_every_package_and_py_typed(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
    )
    (wheel,) = tmp_path.glob("ldpfda-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "ldpfda/py.typed" in names
    assert "ldpfda/__init__.py" in names
    assert "ldpfda/experiments/conf/vector.toml" in names
    for package in PACKAGES:
        assert f"ldpfda/{package}/__init__.py" in names
    # Never as bare top-level modules.
    tops = {n.split("/")[0] for n in names}
    assert not tops & {"client", "server", "fda", "privacy", "tests"}

    # Installed from the wheel alone (dependencies from this environment), it imports.
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
    )
    code = (
        "import ldpfda.client, ldpfda.server, ldpfda.fda, ldpfda.privacy, "
        "ldpfda.datasets, ldpfda.cli; import ldpfda; print(ldpfda.__file__)"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(target), "PATH": ""},
        cwd=tmp_path,
        check=True,
    )
    assert str(target) in run.stdout
