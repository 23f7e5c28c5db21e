"""Tables and figures of the label-DP study, from ``points.jsonl`` only (no training).

    python -m ldpfda.experiments.labeldp.plot [--quick] [--results-dir DIR] [--export]

Writes ``summary.csv`` / ``summary.json`` (normalized accuracy, mean and sd over
trials) and ``figures/*.png`` into the results folder; ``--export`` also copies
:data:`EXPORTED_FIGURES` and the tables (``results.md``) beside this file.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

#: Curves of the accuracy figure and rows of the table: (method, learner, label, style).
CURVES = (
    ("cluster_rr", "chosen", "ClusterRR (chosen by the rule)", "o-"),
    ("cluster_rr_fixed", "plain", "ClusterRR fixed 10% floor, plain", "s--"),
    ("uniform_rr", "best", "UniformRR, best learner", "^-"),
    ("uniform_rr", "forward", "UniformRR, forward", "v:"),
    ("uniform_rr", "plain", "UniformRR, plain", "<:"),
    ("dp_sgd", "dp_sgd", "DP-SGD", "d-."),
)
#: Curves of the ablation: (method, learner, table label, figure label, style).
ABLATION = (
    ("cluster_rr", "chosen", "ClusterRR (rule)", CURVES[0][2], "o-"),
    ("cluster_rr_fixed", "plain", *["ClusterRR fixed 10% floor"] * 2, "s--"),
)
#: What identifies a point of the summary.
FIELDS = ("dataset", "study", "method", "learner", "epsilon", "n_clusters")


def load_points(path: Path) -> list[dict[str, Any]]:
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def summarise(results_dir: Path) -> dict[str, Any]:
    """Normalized accuracies (mean, sd over trials) per curve point; writes CSV/JSON."""
    rows = load_points(results_dir / "points.jsonl")
    nonprivate = {
        r["dataset"]: r["accuracy"] for r in rows if r["method"] == "nonprivate"
    }
    groups: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        if r["method"] == "nonprivate" or r["dataset"] not in nonprivate:
            continue
        learner = "chosen" if r["method"] == "cluster_rr" else r["learner"]
        key = tuple(learner if field == "learner" else r[field] for field in FIELDS)
        groups[key].append(r["accuracy"] / nonprivate[r["dataset"]])
    # "best" learner of UniformRR: the learner with the highest mean over trials.
    means = {key: float(np.mean(v)) for key, v in groups.items()}
    for key in means:
        if key[2] == "uniform_rr":
            rivals = [k for k in means if k[:3] == key[:3] and k[4:] == key[4:]]
            best = max(rivals, key=means.__getitem__)
            groups[(*key[:3], "best", *key[4:])] = groups[best]
    table = [
        {
            **dict(zip(FIELDS, key, strict=True)),
            "normalized_mean": float(np.mean(values)),
            "normalized_sd": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
            "trials": len(values),
        }
        for key, values in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0])))
    ]
    with open(results_dir / "summary.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    summary = {"nonprivate_accuracy": nonprivate, "points": table}
    with open(results_dir / "summary.json", "w") as handle:
        json.dump(summary, handle, indent=1)
    return summary


def _lookup(table: list[dict], **match: Any) -> list[dict]:
    return [r for r in table if all(r[k] == v for k, v in match.items())]


def _markdown(columns: list[str], rows: list[tuple[str, list[str]]]) -> list[str]:
    """A Markdown table with a ``method`` column, then ``columns``."""
    return [
        "| method | " + " | ".join(columns) + " |",
        "|---" * (len(columns) + 1) + "|",
        *(f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows),
    ]


def _cell(table: list[dict], sd: bool = False, **match: Any) -> str:
    """Normalized mean (± sd) of the first point of ``table`` matching, or a dash."""
    if not (hits := _lookup(table, **match)):
        return "–"
    mean = f"{hits[0]['normalized_mean']:.3f}"
    return f"{mean} ± {hits[0]['normalized_sd']:.3f}" if sd else mean


def markdown_tables(summary: dict[str, Any]) -> str:
    """Normalized-accuracy tables (mean ± sd) for the experiments page."""
    table = summary["points"]
    lines: list[str] = []
    for dataset, acc in summary["nonprivate_accuracy"].items():
        main = _lookup(table, dataset=dataset, study="main")
        eps = sorted({r["epsilon"] for r in main})
        lines.append(
            f"\n**{dataset}** (non-private test accuracy {acc:.4f}); normalized "
            "accuracy, mean ± sd over trials\n"
        )
        curves = (*CURVES, ("uniform_rr", "backward", "UniformRR, backward", ""))
        rows = [
            (label, [_cell(main, True, method=m, learner=ln, epsilon=e) for e in eps])
            for m, ln, label, _ in curves
        ]
        lines += _markdown([f"ε={e:g}" for e in eps], rows)
        abl = _lookup(table, dataset=dataset, study="ablation")
        if abl:
            ns = sorted({r["n_clusters"] for r in abl})
            lines.append(f"\nCluster-count ablation at ε={abl[0]['epsilon']:g}\n")
            rows = [
                (label, [_cell(abl, method=m, learner=ln, n_clusters=c) for c in ns])
                for m, ln, label, *_ in ABLATION
            ]
            lines += _markdown([str(c) for c in ns], rows)
    return "\n".join(lines) + "\n"


def _errorbar(ax: Any, points: list[dict], x: str, label: str, style: str) -> None:
    points = sorted(points, key=lambda r: r[x])
    ax.errorbar(
        [r[x] for r in points],
        [r["normalized_mean"] for r in points],
        yerr=[r["normalized_sd"] for r in points],
        fmt=style,
        capsize=2,
        label=label,
        markersize=4,
    )


def _save(
    fig: Any, ax: Any, path: Path, labels: tuple[str, str, str], **legend: Any
) -> Path:
    """Log x axis, axis labels and title, legend and grid; write ``path``."""
    import matplotlib.pyplot as plt

    ax.set(xscale="log", xlabel=labels[0], ylabel=labels[1], title=labels[2])
    ax.legend(**legend)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot(summary: dict[str, Any], figures: Path) -> list[Path]:
    """One accuracy-vs-epsilon figure and one ablation figure per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures.mkdir(parents=True, exist_ok=True)
    table = summary["points"]
    written = []
    for dataset in summary["nonprivate_accuracy"]:
        main = _lookup(table, dataset=dataset, study="main")
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for method, learner, label, style in CURVES:
            if pts := _lookup(main, method=method, learner=learner):
                _errorbar(ax, pts, "epsilon", label, style)
        ax.axhline(1.0, color="grey", lw=0.6)
        labels = (
            "label-DP epsilon (log scale)",
            "normalized test accuracy (private / non-private)",
            f"{dataset}: logistic regression under label DP",
        )
        path = figures / f"{dataset}_accuracy_vs_epsilon.png"
        written.append(_save(fig, ax, path, labels, fontsize=7, loc="lower right"))

        abl = _lookup(table, dataset=dataset, study="ablation")
        if not abl:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for method, learner, _, label, style in ABLATION:
            pts = _lookup(abl, method=method, learner=learner)
            _errorbar(ax, pts, "n_clusters", label, style)
        eps_abl = abl[0]["epsilon"]
        uniform = _lookup(main, method="uniform_rr", epsilon=eps_abl, learner="forward")
        if uniform:
            ax.axhline(
                uniform[0]["normalized_mean"],
                color="tab:green",
                ls=":",
                label="UniformRR, forward (no clusters)",
            )
        labels = (
            "number of k-means clusters (log scale)",
            "normalized test accuracy",
            f"{dataset}: cluster-count ablation at epsilon {eps_abl:g}",
        )
        path = figures / f"{dataset}_cluster_ablation.png"
        written.append(_save(fig, ax, path, labels, fontsize=8))
    return written


#: The figures the experiments page shows (the only generated images kept in git).
EXPORTED_FIGURES = (
    "fashion_mnist_accuracy_vs_epsilon.png",
    "fashion_mnist_cluster_ablation.png",
    "digits_accuracy_vs_epsilon.png",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--results-dir", type=Path)
    parser.add_argument(
        "--export",
        action="store_true",
        help="copy the figures of EXPORTED_FIGURES and the tables into "
        "experiments/labeldp/",
    )
    args = parser.parse_args(argv)
    results = args.results_dir or (
        ROOT / "experiments/results/labeldp" / ("quick" if args.quick else "")
    )
    summary = summarise(results)
    paths = plot(summary, results / "figures")
    text = markdown_tables(summary)
    (results / "tables.md").write_text(text)
    print(text)
    for path in paths:
        print("wrote", path)
    if args.export:
        for name in EXPORTED_FIGURES:
            source = results / "figures" / name
            if source.exists():
                shutil.copy(source, HERE / name)
            else:  # a study run on fewer datasets: keep the page's older figure
                print("not exported (no such figure in this run):", name)
        n_points = len({r["key"] for r in load_points(results / "points.jsonl")})
        header = (
            "# Label-DP study: measured results\n\n"
            f"{n_points} points from `{results.name}/points.jsonl`, written by "
            "`python -m ldpfda.experiments.labeldp.plot --export`. Normalized "
            "accuracy = test accuracy / non-private test accuracy of the same learner; "
            "UniformRR 'best learner' is picked in hindsight (highest mean).\n"
        )
        (HERE / "results.md").write_text(header + text)
        print("exported the figures and results.md to", HERE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
