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
        (["--subsample-size", "500"], "subsample_size"),
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
