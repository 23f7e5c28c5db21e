"""The label-DP study's summary step: normalization, the "best" learner, the export."""

from __future__ import annotations

import json

import pytest

from ldpfda.experiments.labeldp import plot

NONPRIVATE = 0.8


def _row(method, learner, accuracy, trial, *, eps=0.5, study="main", n_clusters=100):
    return {
        "key": f"digits|{study}|{method}|{eps}|{n_clusters}|{trial}",
        "dataset": "digits",
        "study": study,
        "method": method,
        "epsilon": eps,
        "n_clusters": n_clusters,
        "trial": trial,
        "learner": learner,
        "accuracy": accuracy,
    }


def _points():
    rows = [_row("nonprivate", "plain", NONPRIVATE, 0, eps=float("inf"))]
    for trial, (plain, forward, backward) in enumerate(
        [(0.70, 0.60, 0.2), (0.40, 0.64, 0.3)]
    ):
        for learner, acc in (
            ("plain", plain),
            ("forward", forward),
            ("backward", backward),
        ):
            rows.append(_row("uniform_rr", learner, acc, trial, n_clusters=None))
    # The rule's learner differs between trials; both count as "chosen".
    rows += [
        _row("cluster_rr", "plain", 0.72, 0),
        _row("cluster_rr", "forward", 0.76, 1),
    ]
    rows += [_row("cluster_rr_fixed", "plain", 0.70, t) for t in (0, 1)]
    rows += [_row("dp_sgd", "dp_sgd", 0.78, t, n_clusters=None) for t in (0, 1)]
    for n_clusters in (1, 10):
        for t in (0, 1):
            rows.append(
                _row(
                    "cluster_rr",
                    "plain",
                    0.5,
                    t,
                    study="ablation",
                    n_clusters=n_clusters,
                )
            )
            rows.append(
                _row(
                    "cluster_rr_fixed",
                    "plain",
                    0.4,
                    t,
                    study="ablation",
                    n_clusters=n_clusters,
                )
            )
    return rows


@pytest.fixture
def results(tmp_path, monkeypatch):
    folder = tmp_path / "results"
    folder.mkdir()
    with open(folder / "points.jsonl", "w") as sink:
        for row in _points():
            sink.write(json.dumps(row) + "\n")
    page = tmp_path / "page"
    page.mkdir()
    monkeypatch.setattr(plot, "HERE", page)
    monkeypatch.setattr(
        plot,
        "EXPORTED_FIGURES",
        (
            "digits_accuracy_vs_epsilon.png",
            "digits_cluster_ablation.png",
            "fashion_mnist_accuracy_vs_epsilon.png",  # not in this run: skipped
        ),
    )
    return folder, page


def _point(summary, **match):
    (hit,) = [p for p in summary["points"] if all(p[k] == v for k, v in match.items())]
    return hit


def test_normalized_means_and_the_best_learner(results):
    folder, _ = results
    summary = plot.summarise(folder)
    chosen = _point(summary, method="cluster_rr", learner="chosen", study="main")
    assert chosen["normalized_mean"] == pytest.approx((0.72 + 0.76) / 2 / NONPRIVATE)
    assert chosen["normalized_sd"] == pytest.approx(0.04 / NONPRIVATE / 2**0.5)
    assert chosen["trials"] == 2
    # "best" is the learner with the highest mean (forward: 0.62 against plain 0.55),
    # not the per-trial maximum (which would mix in plain's 0.70).
    best = _point(summary, method="uniform_rr", learner="best")
    assert best["normalized_mean"] == pytest.approx((0.60 + 0.64) / 2 / NONPRIVATE)


def test_export_writes_the_page_files(results):
    folder, page = results
    assert plot.main(["--results-dir", str(folder), "--export"]) == 0
    assert (page / "digits_accuracy_vs_epsilon.png").stat().st_size > 0
    assert (page / "digits_cluster_ablation.png").stat().st_size > 0
    assert not (page / "fashion_mnist_accuracy_vs_epsilon.png").exists()
    text = (page / "results.md").read_text()
    assert "0.925" in text  # the rule's normalized mean, (0.72 + 0.76) / 2 / 0.8
