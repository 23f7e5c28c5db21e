"""``ldpfda simulate``: output table and JSON, and clear errors for bad settings."""

from __future__ import annotations

import json

import pytest

from ldpfda.cli import main
from ldpfda.server.fitting import METHODS

FAST = [
    "--repeats",
    "2",
    "--n-test",
    "1000",
    "--n-train",
    "200",
    "--n-eval",
    "400",
    "--num-weak-models",
    "8",
    "--subsample-size",
    "30",
    "--no-progress",
]


def test_simulate_reference_prints_every_method_and_writes_json(tmp_path, capsys):
    out = tmp_path / "sim.json"
    args = ["simulate", "--reference", "--epsilon", "2", "10", "--out", str(out)]
    assert main([*args, *FAST]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("MRMA on the vector design (reference release)")
    assert "joint moment" not in printed
    for label in (
        "MRMA",
        "MR only",
        "MA only",
        "weak (mean)",
        "majority voting",
        "simple averaging",
        "naive (one model)",
        "non-private",
    ):
        assert label in printed
    data = json.loads(out.read_text())
    assert [s["settings"]["privacy.epsilon"] for s in data["summaries"]] == [2.0, 10.0]
    for summary in data["summaries"]:
        assert set(summary["test_error"]) == set(METHODS) - {"moment", "label"}
        assert summary["settings"]["privacy.mechanism"] == "reference"
        assert len(summary["runs"]) == 2
        budget = summary["settings"]["privacy.epsilon"]
        assert summary["epsilon_spent_per_client"]["max"] == pytest.approx(budget)


def test_simulate_default_is_the_joint_release_and_moment_classifier(tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main(["simulate", "--epsilon", "1", "10", "--out", str(out), *FAST]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("Moment classifier on the vector design: 600 clients")
    assert "joint moment" in printed and "non-private" in printed
    assert "MRMA " not in printed and "weak (mean)" not in printed
    for summary in json.loads(out.read_text())["summaries"]:
        assert set(summary["test_error"]) == {"moment", "non_private"}
        assert summary["settings"]["privacy.mechanism"] == "joint-hybrid"
        assert summary["settings"]["server.method"] == "auto"
        budget = summary["settings"]["privacy.epsilon"]
        assert summary["epsilon_spent_per_client"]["max"] == pytest.approx(budget)
        assert summary["runs"][0]["method"] == "moment"


@pytest.mark.parametrize(
    ("args", "key", "value"),
    [
        (["--mechanism", "joint-duchi"], "privacy.mechanism", "joint-duchi"),
        (["--mechanism", "reference"], "privacy.mechanism", "reference"),
        (["--method", "mrma"], "server.method", "mrma"),
        (["--no-public-features"], "data.public-features", False),
        (["--reference", "--weak-learner", "svm"], "mrma.weak-learner", "svm"),
    ],
)
def test_simulate_options_reach_the_settings(args, key, value, tmp_path):
    out = tmp_path / "o.json"
    assert main(["simulate", "--epsilon", "5", *args, "--out", str(out), *FAST]) == 0
    assert json.loads(out.read_text())["summaries"][0]["settings"][key] == value


def test_simulate_functional_dataset(tmp_path):
    out = tmp_path / "f.json"
    args = [
        "simulate",
        "--dataset",
        "functional",
        "--epsilon",
        "5",
        "--n-basis",
        "6",
        "--out",
        str(out),
        *FAST,
    ]
    assert main(args) == 0
    assert json.loads(out.read_text())["summaries"][0]["settings"]["fda.n-basis"] == 6


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (["--epsilon", "0"], "epsilon"),
        (["--epsilon", "nan"], "epsilon"),
        (["--reference", "--subsample-size", "500"], "subsample-size"),
        (["--n-basis", "3", "--dataset", "functional"], "n_basis"),
        (["--cutoff", "0.7"], "cutoff"),
        (["--label-share", "0.5"], "label_share"),
        (["--method", "mrma", "--weak-learner", "logistic"], "weak_learner"),
        (["--reference", "--mechanism", "joint-duchi"], "--reference"),
    ],
)
def test_bad_settings_fail_with_the_parameter_named(args, name, tmp_path, capsys):
    argv = ["simulate", *FAST, *args, "--out", str(tmp_path / "x.json")]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refuses the value itself
        code = exc.code
    assert code == 2
    assert name in capsys.readouterr().err


def test_version_prints_the_package_version(capsys):
    import ldpfda

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"ldpfda {ldpfda.__version__}\n"


# -- a new user's errors: the flag and the limit, never an internal name -------------


def _exit_code(argv):
    try:
        return main(argv)
    except SystemExit as exc:  # argparse refuses the value itself
        return exc.code


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--epsilon", "abc"], ["argument --epsilon: epsilon must be a number"]),
        (["--n-train", "2.5"], ["argument --n-train: must be an integer, got '2.5'"]),
        (
            ["--n-train", "1e8"],
            ["argument --n-train: n_train must be <= 10000000", "got 100000000"],
        ),
        (
            ["--n-basis", "200", "--dataset", "functional"],
            ["argument --n-basis: n_basis must be <= 100", "grid points", "got 200"],
        ),
        (
            ["--n-basis", "200", "--dataset", "wearable"],
            ["argument --n-basis: n_basis must be <= 144", "got 200"],
        ),
        (
            ["--reference", "--n-train", "20"],
            ["argument --subsample-size: subsample_size must be <= n_train (20)"],
        ),
        (
            ["--reference", "--num-weak-models", "1000"],
            ["argument --num-weak-models: num_weak_models must be <= n_eval (400)"],
        ),
        (["--seed", "-1"], ["argument --seed: seed must be >= 0, got -1"]),
    ],
    ids=[
        "epsilon",
        "fractional-int",
        "n-train-limit",
        "n-basis-functional",
        "n-basis-wearable",
        "subsample",
        "weak-models",
        "seed",
    ],
)
def test_errors_name_the_flag_and_the_limit(args, needles, tmp_path, capsys):
    argv = ["simulate", *FAST, *args, "--out", str(tmp_path / "x.json")]
    assert _exit_code(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "_epsilon" not in err
    for needle in needles:
        assert needle in err, err


def test_the_default_protocol_takes_a_small_n_train(tmp_path):
    # subsample_size is MRMA's; the default protocol does not check it.
    out = tmp_path / "small.json"
    argv = ["simulate", *FAST, "--n-train", "20", "--epsilon", "5", "--out", str(out)]
    assert main(argv) == 0
    assert json.loads(out.read_text())["summaries"][0]["settings"]["data.n-train"] == 20


def test_an_integer_flag_takes_an_exponent_spelling(tmp_path):
    out = tmp_path / "e.json"
    argv = ["simulate", *FAST, "--n-test", "1e3", "--epsilon", "5", "--out", str(out)]
    assert main(argv) == 0
    assert (
        json.loads(out.read_text())["summaries"][0]["settings"]["data.n-test"] == 1000
    )


def test_simulate_wearable_dataset(tmp_path, capsys):
    out = tmp_path / "w.json"
    argv = ["simulate", "--dataset", "wearable", "--epsilon", "5", *FAST]
    assert main([*argv, "--calibration-size", "100", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("Moment classifier on the wearable design: 600 clients")
    assert "wearable: a day of heart rate per subject" in printed
    summary = json.loads(out.read_text())["summaries"][0]
    assert summary["settings"]["data.dataset"] == "wearable"
    assert set(summary["test_error"]) == {"moment", "non_private"}


@pytest.mark.parametrize(
    ("mechanism", "start"),
    [("reference", "MRMA on"), ("label-p2p", "Label-only label-p2p on")],
)
def test_simulate_names_k_classes(mechanism, start, tmp_path, capsys):
    out = tmp_path / "k.json"
    argv = ["simulate", "--dataset", "wearable", "--n-classes", "3", *FAST]
    argv += ["--mechanism", mechanism, "--repeats", "1", "--epsilon", "5"]
    assert main([*argv, "--calibration-size", "100", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"{start} the wearable design with K = 3 classes")
    summary = json.loads(out.read_text())["summaries"][0]
    assert summary["settings"]["data.n-classes"] == 3


def test_spec_delegates_to_the_spec_command(tmp_path, capsys):
    from ldpfda.datasets.wearable_spec import WEARABLE_SPEC, wearable_spec

    path = tmp_path / "w.toml"
    path.write_text(WEARABLE_SPEC, encoding="utf-8")
    assert main(["spec", "check", str(path)]) == 0
    assert wearable_spec().hash in capsys.readouterr().out
    assert _exit_code(["spec", "chec", str(path)]) == 2


def test_every_parser_refuses_abbreviations(capsys):
    for argv in (
        ["simulate", "--epsil", "5"],
        ["multiserver", "--serv", "1,2,3,4,5"],
        ["fit", "--dat", "x.csv", "--out", "o"],
        ["predict", "--mode", "m.json", "--data", "x.csv"],
        ["spec", "check", "--hel"],
    ):
        assert _exit_code(argv) == 2, argv
    capsys.readouterr()


def test_simulate_warns_when_the_model_carries_no_signal(tmp_path, capsys):
    # 20 clients at epsilon 5, seed 11: the one repeat's model puts every public
    # calibration vector in one class.
    argv = [
        *FAST,
        "--repeats",
        "1",
        "--n-train",
        "10",
        "--n-eval",
        "10",
        "--seed",
        "11",
    ]
    out = tmp_path / "s.json"
    assert main(["simulate", *argv, "--epsilon", "5", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "warning: in 1 of 1 repeats at epsilon 5 the fitted model carries no " in (
        printed
    )
    assert "20 clients at epsilon 5 are too few" in printed
    run = json.loads(out.read_text())["summaries"][0]["runs"][0]
    assert run["signal"]["no_signal"] is True


def test_multiserver_takes_k_wearable_classes(tmp_path, capsys):
    out = tmp_path / "ms.json"
    servers = ["--server", "60,40,5,0,0", "--server", "40,30,2,0,0"]
    argv = ["multiserver", "--dataset", "wearable", "--n-classes", "3", *servers]
    argv += ["--num-weak-models", "3", "--subsample-size", "20", "--n-test", "200"]
    assert main([*argv, "--repeats", "2", "--no-progress", "--out", str(out)]) == 0
    assert "server1 (40+30, eps=2)" in capsys.readouterr().out
    # A shift is refused for the wearable dataset, before anything runs.
    shifted = [*argv[:5], "--server", "60,40,5,0.2,0", *argv[9:], "--out", str(out)]
    assert main(shifted) == 2
    assert "no shifted populations" in capsys.readouterr().err
