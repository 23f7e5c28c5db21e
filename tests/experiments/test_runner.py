"""The study runner, drivers, plots and benchmark, on tiny configurations."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from ldpfda.engine import run_repeat
from ldpfda.experiments import plot, runner
from ldpfda.experiments.common import reference_settings
from ldpfda.experiments.synthetic import run_point

TINY = """
[study]
name = "tiny"
driver = "synthetic"
repeats = 2
seed = 7
baselines = ["histogram", "gaussian"]

[grid]
dataset = ["vector"]
epsilon = [2.0, 10.0]

[settings]
mrma.num-weak-models = 5
mrma.subsample-size = 20
data.n-train = 60
data.n-eval = 100
data.n-test = 300

[baselines.gaussian]
delta = 1e-5

[quick]
study.repeats = 1
grid.epsilon = [5.0]
"""


@pytest.fixture
def tiny_conf(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return path


def _lines(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short, as an interruption leaves it
    return out


def test_quick_run_writes_the_expected_files(tiny_conf, tmp_path):
    out = tmp_path / "out"
    assert (
        runner.main(
            [
                str(tiny_conf),
                "--quick",
                "--out",
                str(out),
                "--workers",
                "1",
                "--no-progress",
            ]
        )
        == 0
    )
    folder = out / "tiny-quick"
    for name in ("runs.jsonl", "summary.csv", "summary.json", "meta.json"):
        assert (folder / name).is_file()
    records = _lines(folder / "runs.jsonl")
    assert len(records) == 1 and records[0]["point"]["epsilon"] == 5.0
    with open(folder / "summary.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    methods = {r["method"] for r in rows}
    assert {
        "mrma",
        "voting",
        "averaging",
        "histogram",
        "gaussian",
        "non_private",
    } <= methods
    for r in rows:
        assert 0.0 <= float(r["mean"]) <= 1.0 and r["n"] == "1"


def test_interrupted_run_resumes_from_cache(tiny_conf, tmp_path):
    out = tmp_path / "out"
    folder = runner.run_study(tiny_conf, out=out, workers=1, progress=False)
    first = _lines(folder / "runs.jsonl")
    assert len(first) == 4  # 2 epsilons x 2 repeats
    # Simulate an interruption: drop the last record and cut the line before it short.
    lines = (folder / "runs.jsonl").read_text().splitlines()
    (folder / "runs.jsonl").write_text("\n".join(lines[:2]) + "\n" + lines[2][:30])
    runner.run_study(tiny_conf, out=out, workers=1, progress=False)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["sessions"][-1]["ran"] == 2 and meta["sessions"][-1]["cached"] == 2
    again = {r["key"]: r["errors"] for r in _lines(folder / "runs.jsonl")}
    assert {r["key"]: r["errors"] for r in first} == again
    runner.run_study(tiny_conf, out=out, workers=1, progress=False)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["sessions"][-1]["ran"] == 0


def test_two_workers_give_the_same_numbers(tiny_conf, tmp_path):
    one = runner.run_study(tiny_conf, out=tmp_path / "a", workers=1, progress=False)
    two = runner.run_study(tiny_conf, out=tmp_path / "b", workers=2, progress=False)

    def by_key(folder: Path) -> dict:
        return {r["key"]: r["errors"] for r in _lines(folder / "runs.jsonl")}

    assert by_key(one) == by_key(two)


def test_changed_settings_do_not_reuse_cached_runs(tiny_conf, tmp_path):
    conf = runner.load_config(tiny_conf)
    keys = {t["key"] for t in runner.plan(conf)}
    conf["settings"]["mrma"]["cutoff"] = 0.3
    assert keys.isdisjoint({t["key"] for t in runner.plan(conf)})


def test_set_overrides_a_setting_of_the_study_and_its_runs(tiny_conf, tmp_path):
    plain = runner.plan(runner.load_config(tiny_conf))
    changed = runner.load_config(
        tiny_conf, settings={"mrma.cutoff": 0.3, "server.threshold": "refit"}
    )
    assert changed["settings"]["mrma"] == {
        "num-weak-models": 5,
        "subsample-size": 20,
        "cutoff": 0.3,
    }
    tasks = runner.plan(changed)
    assert {t["key"] for t in tasks}.isdisjoint({t["key"] for t in plain})
    assert {t["settings"]["server.threshold"] for t in tasks} == {"refit"}
    # From the command line: TOML values, bare strings, and a malformed pair refused.
    with pytest.raises(SystemExit):
        runner.main([str(tiny_conf), "--set", "mrma.cutoff", "--out", str(tmp_path)])
    assert not (tmp_path / "tiny").exists(), "nothing runs on a malformed --set"
    assert runner._setting_pair("mrma.cutoff=0.3") == ("mrma.cutoff", 0.3)
    assert runner._setting_pair("server.threshold=refit") == (
        "server.threshold",
        "refit",
    )


def test_bad_config_is_refused(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[study]\nname = "x"\ndriver = "magic"\n')
    with pytest.raises(ValueError, match="driver"):
        runner.load_config(path)
    path.write_text('[study]\nname = "x"\n[settings]\nprivacy.epsilon = 0\n')
    with pytest.raises(ValueError, match="epsilon"):
        runner.plan(runner.load_config(path))


def test_driver_reproduces_the_engines_run_repeat():
    settings = reference_settings(
        dataset="functional",
        epsilon=5.0,
        n_basis=6,
        n_train=80,
        n_eval=150,
        n_test=400,
        num_weak_models=6,
        subsample_size=30,
        calibration_size=50,
        seed=3,
    )
    errors, extra = run_point(settings, 1, {"histogram": {}, "gaussian": {}})
    reference = run_repeat(settings, 1).test_errors
    for method in ("mrma", "mr", "ma", "weak", "voting", "averaging", "naive"):
        assert errors[method] == reference[method]
    assert extra["n_features"] == 6 and extra["gaussian_sigma"] > 0


def test_real_driver_on_basic_motions(no_network):
    pytest.importorskip("aeon")
    from ldpfda.experiments.realdata import SplitRule
    from ldpfda.experiments.realdata import run_point as run_real

    settings = reference_settings(
        epsilon=5.0,
        n_basis=2,
        order=2,
        num_weak_models=5,
        subsample_size=2,
        n_train=2,
        n_eval=5,
    )
    errors, extra = run_real(settings, 0, {"histogram": {}}, dataset="BasicMotions")
    assert extra["n_features"] == 12  # 6 channels x 2 basis functions
    assert (
        extra["n_calibration"] + extra["n_train"] + extra["n_eval"] + extra["n_test"]
        == 80
    )
    assert set(errors) >= {"mrma", "histogram", "non_private"}
    assert SplitRule().mrma(230, 173) == {"num_weak_models": 8, "subsample_size": 50}


def test_plot_makes_figures_and_tables(tiny_conf, tmp_path):
    runner.run_study(tiny_conf, out=tmp_path / "res", workers=1, progress=False)
    figs = tmp_path / "figs"
    assert plot.main(["--results", str(tmp_path / "res"), "--out", str(figs)]) == 0
    png = figs / "tiny.png"
    assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"
    table = (figs / "tables.md").read_text()
    assert "| vector | 2 |" in table and "Flower-style Gaussian" in table


def test_lazy_population_does_not_depend_on_chunk_size():
    from ldpfda.datasets.population import make_featurizer
    from ldpfda.datasets.synthetic import FunctionalDesign
    from ldpfda.experiments.population import LazyCurvePopulation

    design = FunctionalDesign()
    settings = reference_settings(dataset="functional", calibration_size=50)
    feat = make_featurizer(design, settings, np.random.default_rng(0))
    pop = LazyCurvePopulation(
        250, 1000, feat, seed=5, tag="t", design=design, block_size=100
    )

    def collect(chunk: int) -> tuple:
        parts = list(pop.batches(chunk))
        return tuple(np.concatenate([p[k] for p in parts]) for k in range(3))

    a, b = collect(7), collect(1000)
    assert np.array_equal(a[0], pop.client_ids) and a[0][0] == 1000
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[2], b[2])
    # Same curves; projections of batches of other sizes may differ in the last bit.
    assert np.allclose(a[1], b[1], rtol=0, atol=1e-12)


def test_benchmark_runs_one_small_size():
    from ldpfda.experiments.benchmark import markdown_table, run_one

    rows = [run_one(3000, protocol=p, n_test=500) for p in ("mrma", "default", "twin")]
    for row in rows:
        assert row["n_train"] + row["n_eval"] == 3000
        assert row["clients_per_s"] > 0 and row["peak_rss_mb"] > 0
    # The twin is a yardstick of the default protocol: the same releases, the same
    # block sums and the server's own fit from them, so the same model bit for bit.
    np.testing.assert_array_equal(rows[2]["coef"], rows[1]["coef"])
    table = markdown_table(rows)
    assert "3,000 | default" in table and table.count("3,000") == 3
    with pytest.raises(ValueError, match="protocol"):
        run_one(3000, protocol="fast")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--protocols", "default,reference"], "--protocols: reference not one of"),
        (["--sizes", "1e4,abc"], "--sizes: a client count must be an integer >= 1"),
        (["--sizes", "0"], "--sizes: a client count must be an integer >= 1"),
        (["--flower-sizes", "1.5"], "--flower-sizes: a client count must be"),
    ],
)
def test_benchmark_refuses_bad_options_before_it_runs_anything(
    argv, message, tmp_path, capsys
):
    from ldpfda.experiments.benchmark import main

    with pytest.raises(SystemExit) as info:
        main([*argv, "--out", str(tmp_path / "bench")])
    assert info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "bench").exists()  # nothing ran, nothing was written


def test_records_of_other_code_are_stale(tiny_conf, tmp_path):
    out = tmp_path / "out"
    folder = runner.run_study(tiny_conf, out=out, workers=1, progress=False)
    records = _lines(folder / "runs.jsonl")
    assert {r["code"] for r in records} == {runner.code_fingerprint()}
    for r in records:
        r["code"] = "older-code"
    (folder / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    runner.run_study(tiny_conf, out=out, workers=1, progress=False, allow_stale=True)
    assert json.loads((folder / "meta.json").read_text())["sessions"][-1]["ran"] == 0
    runner.run_study(tiny_conf, out=out, workers=1, progress=False)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["sessions"][-1]["ran"] == 4
    assert meta["code"] == [runner.code_fingerprint()]


def test_majority_reference_comes_from_the_clients_labels():
    from ldpfda.engine.inprocess import ArrayClients
    from ldpfda.experiments.common import evaluate
    from ldpfda.fda.features import VectorFeaturizer
    from ldpfda.fda.scaling import CoefficientScaler

    rng = np.random.default_rng(0)
    featurizer = VectorFeaturizer(CoefficientScaler(-1.0, 1.0), 2)
    x = rng.uniform(-1, 1, (200, 2))
    y = (np.arange(200) % 4 != 0).astype(np.int8)  # 3 in 4 clients hold label 1
    train = ArrayClients(np.arange(50), x[:50], y[:50], featurizer)
    evaluation = ArrayClients(50 + np.arange(150), x[50:], y[50:], featurizer)
    y_test = (np.arange(40) % 5 == 0).astype(np.int8)  # the test set's majority is 0
    settings = reference_settings(
        epsilon=5.0, n_train=50, n_eval=150, num_weak_models=5, subsample_size=10
    )
    errors, extra = evaluate(
        train,
        evaluation,
        (rng.uniform(-1, 1, (40, 2)), y_test),
        settings,
        seed=1,
        server_rng=np.random.default_rng(2),
        baselines={"majority": {}},
    )
    assert extra["majority_class"] == 1
    assert errors["majority"] == np.mean(y_test != 1) == 0.8


def test_public_features_false_reaches_the_default_baseline():
    # A study run with --set data.public-features=false must fit the default without
    # the public rows it was given (it was silently ignored): the same errors as with
    # no public rows at all, and other errors than with them.
    from ldpfda.engine.inprocess import ArrayClients
    from ldpfda.experiments.common import evaluate
    from ldpfda.fda.features import VectorFeaturizer
    from ldpfda.fda.scaling import CoefficientScaler

    rng = np.random.default_rng(3)
    featurizer = VectorFeaturizer(CoefficientScaler(-1.0, 1.0), 3)
    x = rng.uniform(-1, 1, (600, 3))
    y = (x @ np.array([1.0, -1.0, 0.5]) + 0.3 * rng.normal(size=600) > 0).astype(
        np.int8
    )
    train = ArrayClients(np.arange(100), x[:100], y[:100], featurizer)
    evaluation = ArrayClients(100 + np.arange(500), x[100:], y[100:], featurizer)
    x_test = rng.uniform(-1, 1, (2000, 3))
    test = (x_test, (x_test @ np.array([1.0, -1.0, 0.5]) > 0).astype(np.int8))
    # A public second moment far from the clients' (features in [-0.2, 0.2]^3).
    public = rng.uniform(-0.2, 0.2, (200, 3))

    def default_error(public_features, rows):
        settings = reference_settings(
            epsilon=2.0,
            n_train=100,
            n_eval=500,
            num_weak_models=5,
            subsample_size=10,
            public_features=public_features,
        )
        errors, _ = evaluate(
            train,
            evaluation,
            test,
            settings,
            seed=1,
            server_rng=np.random.default_rng(2),
            baselines={"default": {}, "noiseless": {}},
            public=rows,
        )
        return errors["default"], errors["noiseless"]

    without = default_error(True, None)
    assert default_error(False, public) == without
    assert default_error(True, public) != without


def test_a_grid_over_the_number_of_clients_splits_each_federation(tmp_path):
    path = tmp_path / "clients.toml"
    path.write_text(
        '[study]\nname = "n"\nbaselines = ["default"]\n'
        '[grid]\ndataset = ["vector"]\nn-clients = [20, 3000]\n'
        "[clients]\ntrain-fraction = 0.16667\n"
    )
    tasks = runner.plan(runner.load_config(path), repeats=1)
    sizes = [
        {
            k: t["settings"][f"{g}.{k}"]
            for g, k in (
                ("data", "n-train"),
                ("data", "n-eval"),
                ("mrma", "num-weak-models"),
                ("mrma", "subsample-size"),
            )
        }
        for t in tasks
    ]
    assert [t["point"]["n_clients"] for t in tasks] == [20, 3000]
    # The shipped MRMA sizes at 3000 clients; the smallest ensemble at 20.
    assert sizes[1] == {
        "n-train": 500,
        "n-eval": 2500,
        "num-weak-models": 50,
        "subsample-size": 50,
    }
    assert sizes[0] == {
        "n-train": 3,
        "n-eval": 17,
        "num-weak-models": 5,
        "subsample-size": 2,
    }


def test_sample_size_table_needs_the_criterion_from_that_size_on():
    def row(n, method, mean, se=0.01):
        return {
            "dataset": "d",
            "epsilon": 1.0,
            "n_clients": n,
            "method": method,
            "mean": mean,
            "se": se,
        }

    rows = []
    for n, default, mrma in ((20, 0.40, 0.50), (50, 0.49, 0.49), (100, 0.30, 0.45)):
        rows += [row(n, "majority", 0.5, 0.0), row(n, "non_private", 0.2)]
        rows += [row(n, "default", default), row(n, "mrma", mrma)]
    rows.append(row(200, "majority", 0.5, 0.0))
    rows += [row(200, "non_private", 0.2), row(200, "default", 0.24)]
    rows.append(row(200, "mrma", 0.40))
    table = plot.sample_size_table(rows)
    # default: signal at 20 but not at 50, so from 100 on; within 0.05 from 200 on.
    # MRMA: 0.49 at 50 is within 2 s.e. of 0.5, signal from 100; never within 0.05.
    assert "| d | 1 | 100 | 200 | 100 | > 200 |" in table
    rows = [r for r in rows if r["n_clients"] != 50]
    assert "| d | 1 | ≤ 20 | 200 | 100 | > 200 |" in plot.sample_size_table(rows)


def _rows(methods: tuple[str, ...], datasets: tuple[str, ...]) -> list[dict]:
    """Summary rows in which every method has the same mean at every epsilon (the
    overlap near chance that the figures must keep readable)."""
    return [
        {
            "dataset": d,
            "method": m,
            "epsilon": e,
            "mean": 0.5,
            "se": 0.01,
            "n": 3,
            "n_basis": 5,
            "order": 4,
            "cutoff": 0.2,
            "n_clients": None,
        }
        for d in datasets
        for m in methods
        for e in (0.5, 1.0, 5.0)
    ]


@pytest.mark.parametrize("datasets", [("vector",), ("GunPoint", "Pima")])
def test_figures_keep_colours_legend_inside_and_apart(datasets, tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    # Every method of the vector study: its long legend once overflowed one panel.
    compared = ("mrma", "voting", "averaging", "naive", "histogram", "gaussian")
    methods = (*compared, "default", "noiseless", "non_private", "majority")
    plot.plot_study("s", _rows(methods, datasets), tmp_path)
    (fig,) = figures
    fig.canvas.draw()
    legend = fig.legends[0].get_window_extent()
    # Inside the figure's own canvas (nothing cut at its edges) and outside every
    # panel (no line hidden under it).
    canvas = fig.bbox
    assert canvas.x0 <= legend.x0 and legend.x1 <= canvas.x1
    assert canvas.y0 <= legend.y0 and legend.y1 <= canvas.y1
    for ax in fig.axes[: len(datasets)]:
        assert not legend.overlaps(ax.get_window_extent())
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == [plot.LABELS[m] for m in methods]  # once each, in order
    for ax in fig.axes[: len(datasets)]:
        xs = {}
        for bars in ax.containers:  # one errorbar container per method
            line = bars.lines[0]
            method = next(m for m in methods if plot.LABELS[m] == bars.get_label())
            assert to_rgba(line.get_color()) == to_rgba(plot.STYLES[method][0])
            xs[method] = tuple(line.get_xdata())
        # equal means: the compared methods sit side by side, references do not move
        at_one = [xs[m][1] for m in (*compared, "default", "noiseless")]
        assert len(set(at_one)) == 8 and min(at_one) < 1.0 < max(at_one)
        assert xs["non_private"][1] == 1.0 and xs["majority"][1] == 1.0


def test_paired_table_differences_each_repeat_once_and_marks_wins(tmp_path):
    from ldpfda.experiments.plot import paired_table

    def record(key, dataset, eps, repeat, a, b):
        return {
            "key": key,
            "point": {"dataset": dataset, "epsilon": eps},
            "repeat": repeat,
            "errors": {"one_vs_rest": a, "default": b},
            # The balanced errors: the default's, and a uniform guess of 10 classes.
            "extra": {"balanced": {"default": b + 0.5, "guess": 0.9}},
        }

    runs = [
        record("k0", "set", 1.0, 0, 0.50, 0.40),
        record("k1", "set", 1.0, 1, 0.52, 0.40),
        record("k2", "set", 1.0, 2, 0.54, 0.40),
        # A study run twice appends its records again: one difference per key.
        record("k0", "set", 1.0, 0, 0.50, 0.40),
        record("k3", "set", 2.0, 0, 0.40, 0.41),
        record("k4", "set", 2.0, 1, 0.40, 0.39),
    ]
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs), encoding="utf-8")
    table = paired_table(path, (("one_vs_rest", "default", "error"),), (1.0, 2.0))
    # eps 1: differences 0.10, 0.12, 0.14: mean 0.12, s.e. 0.02 / sqrt(3) = 0.012.
    # eps 2: -0.01 and +0.01: mean 0, s.e. 0.01: a tie.
    assert "| set | +0.120 ± 0.012 **win** | +0.000 ± 0.010 |" in table
    # The balanced metric reads the records' extra: 0.9 - (0.9, 0.9, 0.9) at eps 1,
    # 0.9 - (0.91, 0.89) at eps 2; a pair a record lacks (one-vs-rest) is left out.
    table = paired_table(
        path,
        (("guess", "default", "balanced"), ("one_vs_rest", "default", "balanced")),
        (1.0, 2.0),
    )
    assert "a uniform guess minus ldpfda default" in table
    assert "in balanced error" in table
    assert "| set | +0.000 ± 0.000 | +0.000 ± 0.010 |" in table
    assert "| set |  |  |" in table
