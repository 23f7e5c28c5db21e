"""``ldpfda fit`` and ``ldpfda predict`` on generated wearable files, wide and long."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from ldpfda.cli import main
from ldpfda.datasets.readers import write_long_csv, write_npz, write_wide_csv
from ldpfda.datasets.wearable import make_wearable
from ldpfda.datasets.wearable_spec import PUBLIC_SEED_BASE, WEARABLE_SPEC

N = 800


def _drop_column(source: Path, target: Path, column: str) -> Path:
    with source.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    j = rows[0].index(column)
    with target.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([r[:j] + r[j + 1 :] for r in rows])
    return target


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("own")
    spec = root / "wearable.toml"
    spec.write_text(WEARABLE_SPEC, encoding="utf-8")
    wide = write_wide_csv(root / "wide.csv", make_wearable(N, seed=0, irregular=False))
    # irregular timestamps: every device samples on its own clock
    long = write_long_csv(root / "long.csv", make_wearable(N, seed=1))
    new = write_long_csv(root / "new.csv", make_wearable(150, seed=2))
    public = _drop_column(
        write_long_csv(root / "p.csv", make_wearable(300, seed=PUBLIC_SEED_BASE + 3)),
        root / "public.csv",
        "label",
    )
    return {
        "root": root,
        "spec": spec,
        "wide": wide,
        "long": long,
        "new": new,
        "public": public,
    }


def _fit(files, out, *extra):
    args = ["fit", "--spec", str(files["spec"]), "--seed", "0", "--out", str(out)]
    return main([*args, *extra])


@pytest.mark.parametrize("layout", ["wide", "long"])
def test_fit_writes_the_model_and_the_report(files, layout, tmp_path, capsys):
    out = tmp_path / "run"
    data = files[layout]
    assert _fit(files, out, "--data", str(data), "--public", str(files["public"])) == 0
    printed = capsys.readouterr().out
    assert f"read {layout}.csv: {N} subjects ({layout} CSV)" in printed
    assert "held-out test set: 200 of 800 subjects" in printed
    assert "stratified, seed 0" in printed
    assert "feature second moment from 300 public calibration subjects" in printed
    for label in ("joint moment", "non-private", "majority class"):
        assert label in printed
    model = json.loads((out / "model.json").read_text())
    assert model["format"] == "ldpfda-model" and model["protocol"] == "default"
    assert model["labels"] == ["healthy", "blunted"] and len(model["coef"]) == 10
    assert model["spec"]["text"] == WEARABLE_SPEC
    assert model["epsilon"] == 5.0
    measured = model["measured"]
    assert measured["test_subjects"] == 200 and measured["training_subjects"] == 600
    assert set(measured["test_error"]) == {"moment", "non_private", "majority"}
    report = json.loads((out / "report.json").read_text())
    assert len(report["test_subjects"]) == 200
    assert report["run"]["privacy"]["max_spent"] == pytest.approx(5.0)
    assert len(report["data"]["sha256"]) == 64


def test_predict_gives_the_fitted_models_labels(files, tmp_path, capsys):
    from ldpfda.engine.own_data import fit_own, read_own_curves
    from ldpfda.schema.spec import FederationSpec

    out = tmp_path / "run"
    assert _fit(files, out, "--data", str(files["long"]), "--epsilon", "2") == 0
    preds = tmp_path / "preds.csv"
    args = ["predict", "--model", str(out / "model.json"), "--data", str(files["new"])]
    assert main([*args, "--out", str(preds)]) == 0
    assert "error on the file's labels" in capsys.readouterr().out
    with preds.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["subject"] for r in rows] == [str(i) for i in range(150)]
    # The same fit in process: same seed, same model, same labels.
    spec = FederationSpec.loads(WEARABLE_SPEC)
    curves, _ = read_own_curves(files["long"], spec)
    fit = fit_own(
        spec.featurizer().featurize(curves),
        spec,
        epsilon=2.0,
        protocol="default",
        seed=0,
    )
    new, _ = read_own_curves(files["new"], spec)
    expected = fit.model.predict(spec.featurizer().transform(new))[:, 0]
    assert [r["label"] for r in rows] == [spec.labels[k] for k in expected]
    p = np.array([float(r["probability"]) for r in rows])
    assert np.all((p >= 0.5) & (p <= 1.0))


def test_predict_classifies_unlabelled_curves_to_stdout(files, tmp_path, capsys):
    out = tmp_path / "run"
    assert _fit(files, out, "--data", str(files["wide"])) == 0
    capsys.readouterr()
    bare = _drop_column(files["new"], tmp_path / "bare.csv", "label")
    args = ["predict", "--model", str(out / "model.json"), "--data", str(bare)]
    assert main(args) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0] == "subject,label,probability" and len(lines) == 151
    assert "error on the file's labels" not in captured.err
    labelled = ["predict", "--model", str(out / "model.json"), "--data"]
    assert main([*labelled, str(files["new"])]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == lines
    assert "error on the file's labels" in captured.err
    # The same file as a spreadsheet with a decimal comma writes it: ';' between cells.
    semi = tmp_path / "semi.csv"
    text = files["new"].read_text(encoding="utf-8")
    semi.write_text(text.replace(",", ";"), encoding="utf-8")
    assert main([*labelled, str(semi)]) == 0
    again = capsys.readouterr()
    assert again.out == captured.out
    assert again.err == captured.err.replace("new.csv", "semi.csv")


def test_fit_reads_npz_too(files, tmp_path, capsys):
    data = write_npz(tmp_path / "hr.npz", make_wearable(200, seed=5))
    assert _fit(files, tmp_path / "run", "--data", str(data)) == 0
    assert "200 subjects (NPZ)" in capsys.readouterr().out


def test_without_public_curves_it_says_the_moment_comes_from_the_releases(
    files, tmp_path, capsys
):
    assert _fit(files, tmp_path / "run", "--data", str(files["wide"])) == 0
    printed = capsys.readouterr().out
    assert "no --public calibration curves" in printed
    assert "public_features=False" in printed


def test_the_reference_protocol_prints_its_baselines(files, tmp_path, capsys):
    extra = ["--data", str(files["wide"]), "--protocol", "reference"]
    assert _fit(files, tmp_path / "run", *extra, "--num-weak-models", "10") == 0
    printed = capsys.readouterr().out
    for label in ("MRMA", "MR only", "majority voting", "non-private", "majority"):
        assert label in printed
    assert "the spec declares default" in printed
    model = json.loads((tmp_path / "run" / "model.json").read_text())
    assert model["protocol"] == "reference" and model["server-method"] == "mrma"


def test_without_a_seed_none_is_recorded(files, tmp_path, capsys):
    args = ["fit", "--spec", str(files["spec"]), "--data", str(files["wide"])]
    assert main([*args, "--out", str(tmp_path / "run")]) == 0
    assert "seed from OS entropy, recorded nowhere" in capsys.readouterr().out
    model = json.loads((tmp_path / "run" / "model.json").read_text())
    assert model["measured"]["split"]["seed"] is None
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert "seed" not in report["settings"]


def test_a_spec_from_explicit_options(files, tmp_path, capsys):
    args = ["fit", "--data", str(files["wide"]), "--out", str(tmp_path / "run")]
    options = ["--domain", "0", "1440", "--value-range", "40", "200", "--seed", "0"]
    labels = ["--labels", "healthy,blunted", "--epsilon", "5", "--penalty", "1e4"]
    assert main([*args, *options, *labels]) == 0
    assert "spec: built from the options" in capsys.readouterr().out
    model = json.loads((tmp_path / "run" / "model.json").read_text())
    assert "value-low = 40.0" in model["spec"]["text"]
    # What is not given takes the defaults the flags' help names: 10 cubic B-splines,
    # min_points 2 with a penalty.
    assert "n-basis = 10" in model["spec"]["text"]
    assert "order = 4" in model["spec"]["text"]
    assert "min-points = 2" in model["spec"]["text"]


def test_three_labels_take_the_lda_rule_on_the_same_releases(files, tmp_path, capsys):
    three = '["healthy", "blunted", "delayed"]'
    spec = tmp_path / "three.toml"
    spec.write_text(
        WEARABLE_SPEC.replace('["healthy", "blunted"]', three), encoding="utf-8"
    )
    data = write_long_csv(
        tmp_path / "three.csv", make_wearable(600, n_classes=3, seed=5)
    )
    fits = {}
    for rule in ("least-squares", "lda"):
        out = tmp_path / rule
        argv = ["fit", "--spec", str(spec), "--data", str(data), "--out", str(out)]
        argv += ["--public", str(files["public"]), "--epsilon", "10", "--seed", "0"]
        assert main([*argv, "--multiclass-rule", rule]) == 0
        assert f"the moment classifier ({rule} rule)" in capsys.readouterr().out
        report = json.loads((out / "report.json").read_text())
        assert report["settings"]["server.multiclass-rule"] == rule
        fits[rule] = report
    model = fits["lda"]["model"]
    assert model["labels"] == ["healthy", "blunted", "delayed"]
    assert np.asarray(model["coef"]).shape == (3, 10)
    # The same subjects release the same values: only the rule differs.
    assert fits["lda"]["test_subjects"] == fits["least-squares"]["test_subjects"]
    assert model["coef"] != fits["least-squares"]["model"]["coef"]
    assert fits["lda"]["run"]["signal"]["fallback"] == ""


def test_three_labels_take_the_split_release_by_flag(files, tmp_path, capsys):
    spec = tmp_path / "three.toml"
    spec.write_text(
        WEARABLE_SPEC.replace(
            '["healthy", "blunted"]', '["healthy", "blunted", "delayed"]'
        ),
        encoding="utf-8",
    )
    data = write_long_csv(
        tmp_path / "three.csv", make_wearable(600, n_classes=3, seed=5)
    )
    out = tmp_path / "split"
    argv = ["fit", "--spec", str(spec), "--data", str(data), "--out", str(out)]
    argv += ["--public", str(files["public"]), "--epsilon", "10", "--seed", "0"]
    assert main([*argv, "--multiclass-release", "split"]) == 0
    said = capsys.readouterr().out
    # At epsilon 10 the share on the label that minimises the stated variance.
    assert "its label of 3 by randomized response (share 0.35 of epsilon) and x" in said
    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["privacy.multiclass-release"] == "split"
    assert list(report["run"]["privacy"]["releases"]) == ["class_split_features"]
    assert np.asarray(report["model"]["coef"]).shape == (3, 10)
    assert _code(["fit", "--multiclass-release", "sample"]) == 2


def test_no_signal_fit_is_recorded_and_named_in_the_run_line(files, tmp_path, capsys):
    argv = ["--data", str(files["wide"]), "--public", str(files["public"])]
    for rule, named in (("average", ""), ("fallback", " (fallback where no signal)")):
        out = tmp_path / rule
        extra = ["--no-signal-fit", rule] if rule == "fallback" else []
        assert _fit(files, out, *argv, *extra) == 0
        said = capsys.readouterr().out
        assert f"hybrid mechanism; the moment classifier{named}\n" in said
        report = json.loads((out / "report.json").read_text())
        assert report["settings"]["server.no-signal-fit"] == rule
    assert _code(["fit", "--no-signal-fit", "zero"]) == 2


def test_default_protocol_options_with_mrma_are_named_as_unused(
    files, tmp_path, capsys
):
    argv = ["--data", str(files["wide"]), "--protocol", "reference"]
    assert _fit(files, tmp_path / "r", *argv, "--multiclass-rule", "lda") == 0
    assert "not used by MRMA" in capsys.readouterr().out


# -- errors ----------------------------------------------------------------------------


def _code(argv):
    try:
        return main(argv)
    except SystemExit as exc:  # argparse refuses the usage itself
        return exc.code


def test_without_a_spec_it_says_what_it_needs(files, tmp_path, capsys):
    args = ["fit", "--data", str(files["wide"]), "--out", str(tmp_path / "x")]
    assert _code(args) == 2
    err = capsys.readouterr().err
    for flag in ("--domain", "--value-range", "--labels", "--epsilon", "never from"):
        assert flag in err
    assert _code([*args, "--spec", str(files["spec"]), "--n-basis", "6"]) == 2
    assert "--n-basis" in capsys.readouterr().err


def _bad_csv(tmp_path, replace):
    rows = ["subject,curve,time,label,heart_rate"]
    for s in range(12):
        for t in range(30):
            rows.append(f"s{s},0,{t * 40.0},{'healthy' if s % 2 else 'blunted'},70")
    body = "\n".join(rows) + "\n"
    path = tmp_path / "bad.csv"
    path.write_text(replace(body), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("replace", "needles"),
    [
        (
            lambda b: b.replace("s3,0,80.0,healthy", "s3,0,80.0,sick"),
            ["bad.csv row", "label 'sick' is not in the spec's labels"],
        ),
        (
            lambda b: b.replace("label,heart_rate", "label,hr"),
            ["bad.csv", "'hr'", "missing 'heart_rate'"],
        ),
        (
            lambda b: b.replace("s5,0,400.0,healthy,70", "s5,0,400.0,healthy,abc"),
            ["bad.csv row", "column 'heart_rate'", "'abc' is not a number"],
        ),
        (
            lambda b: (
                "\n".join(
                    r
                    for r in b.splitlines()
                    if not r.startswith("s4,") or "0,0.0," in r
                )
                + "\n"
            ),
            [
                "bad.csv",
                "subject 's4'",
                "fewer than min_points (24)",
                "--drop-unusable",
            ],
        ),
        (
            lambda b: b.replace("s2,0,40.0,", "s2,0,2000.0,"),
            ["bad.csv", "subject 's2'", "outside the spec's domain"],
        ),
    ],
    ids=["unknown-label", "wrong-channel", "not-a-number", "too-few-points", "time"],
)
def test_bad_data_files_fail_naming_file_row_and_column(
    files, tmp_path, capsys, replace, needles
):
    data = _bad_csv(tmp_path, replace)
    assert _fit(files, tmp_path / "run", "--data", str(data)) == 1
    err = capsys.readouterr().err
    assert err.startswith("ldpfda fit: error: ")
    for needle in needles:
        assert needle in err, (needle, err)
    assert not (tmp_path / "run" / "model.json").exists()


def test_a_missing_file_is_named(files, tmp_path, capsys):
    assert _fit(files, tmp_path / "run", "--data", str(tmp_path / "nope.csv")) == 1
    assert "nope.csv: no such file" in capsys.readouterr().err
    args = ["--data", str(files["wide"]), "--public", str(tmp_path / "pub.csv")]
    assert _fit(files, tmp_path / "run", *args) == 1
    assert "pub.csv: no such file" in capsys.readouterr().err
    args = ["fit", "--spec", str(tmp_path / "s.toml"), "--data", str(files["wide"])]
    assert main([*args, "--out", str(tmp_path / "r")]) == 1
    assert "s.toml: no such spec file" in capsys.readouterr().err


def test_too_few_subjects_point_at_the_flag(files, tmp_path, capsys):
    extra = ["--data", str(files["wide"]), "--protocol", "reference"]
    assert _fit(files, tmp_path / "run", *extra, "--subsample-size", "500") == 2
    err = capsys.readouterr().err
    assert "argument --subsample-size: subsample_size must be <= n_train (100)" in err


def test_an_existing_model_is_not_overwritten(files, tmp_path, capsys):
    out = tmp_path / "run"
    assert _fit(files, out, "--data", str(files["wide"])) == 0
    assert _fit(files, out, "--data", str(files["wide"])) == 2
    assert "pass --force" in capsys.readouterr().err
    assert _fit(files, out, "--data", str(files["wide"]), "--force") == 0


def test_predict_refuses_curves_the_model_was_not_made_for(files, tmp_path, capsys):
    out = tmp_path / "run"
    assert _fit(files, out, "--data", str(files["wide"])) == 0
    capsys.readouterr()
    model = ["predict", "--model", str(out / "model.json"), "--data"]
    wrong = _bad_csv(tmp_path, lambda b: b.replace("label,heart_rate", "label,spo2"))
    assert _code([*model, str(wrong)]) == 1
    assert "'spo2'" in capsys.readouterr().err
    sick = _bad_csv(tmp_path, lambda b: b.replace("s3,0,80.0,healthy", "s3,0,80.0,x"))
    assert _code([*model, str(sick)]) == 1
    assert "label 'x' is not in the spec's labels" in capsys.readouterr().err
    assert _code([*model, str(tmp_path / "none.csv")]) == 1
    assert "none.csv: no such file" in capsys.readouterr().err
    record = json.loads((out / "model.json").read_text())
    record["spec"]["text"] = record["spec"]["text"].replace("24", "25")
    (out / "changed.json").write_text(json.dumps(record))
    args = ["predict", "--model", str(out / "changed.json"), "--data", str(wrong)]
    assert _code(args) == 1
    assert "changed.json: key 'spec'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["fit", "--dat", "x.csv", "--out", "o"],
        ["predict", "--mod", "m.json", "--data", "x.csv"],
        ["fit", "--data", "x.csv", "--out", "o", "--test-fraction", "1.5"],
        ["fit", "--data", "x.csv", "--out", "o", "--epsilon", "inf"],
        ["fit", "--data", "x.csv", "--out", "o", "--seed", "-1"],
    ],
)
def test_bad_usage_exits_2(argv, capsys):
    assert _code(argv) == 2
    assert "ldpfda" in capsys.readouterr().err


def test_spec_less_labels_are_checked_against_the_file(files, tmp_path, capsys):
    args = ["fit", "--data", str(files["wide"]), "--out", str(tmp_path / "run")]
    options = ["--domain", "0", "1440", "--value-range", "40", "200"]
    assert _code([*args, *options, "--labels", "a,b", "--epsilon", "5"]) == 1
    err = capsys.readouterr().err
    assert "wide.csv row 2: label" in err and "('a', 'b')" in err
    assert _code([*args, *options, "--labels", "a", "--epsilon", "5"]) == 2
    assert "--labels must name two labels or more" in capsys.readouterr().err


def test_a_tiny_file_says_it_has_too_few_training_subjects(files, tmp_path, capsys):
    rows = ["subject,curve,time,label,heart_rate"]
    for s in range(6):
        label = "healthy" if s % 2 else "blunted"
        rows += [f"s{s},0,{t * 40.0},{label},{70 + s}" for t in range(30)]
    data = tmp_path / "tiny.csv"
    data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    assert _fit(files, tmp_path / "run", "--data", str(data)) == 2
    assert "--data has too few training subjects" in capsys.readouterr().err
