"""``ldpfda node check``: a host's pre-flight check of its data file (client side)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from ldpfda.cli import main
from ldpfda.datasets.readers import write_long_csv
from ldpfda.datasets.wearable import make_wearable
from ldpfda.datasets.wearable_spec import WEARABLE_SPEC
from ldpfda.schema.spec import FederationSpec


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    root = tmp_path_factory.mktemp("node")
    spec = root / "wearable.toml"
    spec.write_text(WEARABLE_SPEC, encoding="utf-8")
    return root, spec, write_long_csv(root / "one.csv", make_wearable(1, seed=5))


def _edited(source: Path, target: Path, edit) -> Path:
    with source.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    column = rows[0].index("heart_rate")
    for i, row in enumerate(rows[1:], start=2):
        row[column] = edit(i, row[column])
    with target.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    return target


def _check(data, spec, capsys):
    code = main(["node", "check", "--data", str(data), "--spec", str(spec)])
    return code, capsys.readouterr()


def test_a_good_file_says_what_the_node_holds_and_releases(host, capsys):
    _, spec, data = host
    code, out = _check(data, spec, capsys)
    assert code == 0, out
    short = FederationSpec.load(spec).short_hash
    text = out.out
    assert "subject '0', label 'healthy'" in text
    assert "observed points per channel: heart_rate " in text
    assert "y~(1, x), 11 values, once per run through the hybrid mechanism at " in text
    assert "epsilon 5" in text and f"under spec {short} only" in text
    assert "0 % of the 10 coordinates clipped" in text and "warning" not in text
    assert text.rstrip().endswith("ok: the node would accept this file")


def test_a_file_on_another_scale_warns_that_it_clips(host, capsys, tmp_path):
    # Heart rate in beats per 10 minutes: most of the curve lies beyond the bounds.
    root, spec, data = host
    scaled = _edited(data, tmp_path / "x10.csv", lambda _, v: str(10 * float(v)))
    code, out = _check(scaled, spec, capsys)
    assert code == 0
    assert "warning: more than 25 % of the curve lies outside the spec's bounds" in (
        out.out
    )
    assert "heart_rate in bpm" in out.out


def test_a_file_the_node_would_refuse_exits_non_zero_naming_the_place(
    host, capsys, tmp_path
):
    root, spec, data = host
    bad = _edited(data, tmp_path / "bad.csv", lambda i, v: "fast" if i == 4 else v)
    code, out = _check(bad, spec, capsys)
    assert code == 1
    assert out.out.startswith("refused: bad.csv row 4")
    assert "heart_rate" in out.out
    many = write_long_csv(tmp_path / "three.csv", make_wearable(3, seed=6))
    code, out = _check(many, spec, capsys)
    assert code == 1
    assert "refused: a node holds one client's data" in out.out
    assert out.out.count("subject '") == 3


def test_an_unreadable_spec_exits_2(host, capsys, tmp_path):
    _, _, data = host
    broken = tmp_path / "broken.toml"
    broken.write_text("format-version = 1\n", encoding="utf-8")
    code, out = _check(data, broken, capsys)
    assert code == 2 and "the spec" in out.err


def test_the_check_needs_neither_the_server_nor_flwr_nor_scikit_learn(host):
    _, spec, data = host
    script = f"""
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("sklearn", "flwr") or name.startswith(
            "ldpfda.server"
        ):
            raise ModuleNotFoundError(f"{{name}} refused", name=name)
sys.meta_path.insert(0, Refuse())
from ldpfda.client.check import main
raise SystemExit(main(["check", "--data", {str(data)!r}, "--spec", {str(spec)!r}]))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "ok: the node would accept this file" in done.stdout
