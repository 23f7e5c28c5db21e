"""Tables and figures of the label-DP study, from ``points.jsonl`` only (no training).

    python -m ldpfda.experiments.labeldp.plot [--quick] [--results-dir DIR] [--export]

Writes ``summary.csv`` (mean and standard deviation of the normalized accuracy over
trials), ``summary.json`` and ``figures/*.png`` into the results folder. ``--export``
also copies the figures of :data:`EXPORTED_FIGURES` and the Markdown tables
(``results.md``) into ``experiments/labeldp/`` for the experiments page.
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

#: Curves of the accuracy figure: (method, learner or None for the best, label, style).
CURVES = (
    ("cluster_rr", None, "ClusterRR (chosen by the rule)", "o-"),
    ("cluster_rr_fixed", "plain", "ClusterRR fixed 10% floor, plain", "s--"),
    ("uniform_rr", "best", "UniformRR, best learner", "^-"),
    ("uniform_rr", "forward", "UniformRR, forward", "v:"),
    ("uniform_rr", "plain", "UniformRR, plain", "<:"),
    ("dp_sgd", "dp_sgd", "DP-SGD", "d-."),
)


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
        norm = r["accuracy"] / nonprivate[r["dataset"]]
        learner = "chosen" if r["method"] == "cluster_rr" else r["learner"]
        key = (
            r["dataset"],
            r["study"],
            r["method"],
            learner,
            r["epsilon"],
            r["n_clusters"],
        )
        groups[key].append(norm)
    # "best" learner of UniformRR: the learner with the highest mean over trials.
    means = {key: float(np.mean(v)) for key, v in groups.items()}
    for key in list(groups):
        dataset, study, method, learner, eps, n_c = key
        if method == "uniform_rr" and learner != "best":
            candidates = [
                k
                for k in groups
                if k[:3] == key[:3] and k[4:] == key[4:] and k[3] != "best"
            ]
            winner = max(candidates, key=lambda k: means[k])
            groups[(dataset, study, method, "best", eps, n_c)] = groups[winner]
    table = []
    for key, values in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        dataset, study, method, learner, eps, n_c = key
        table.append(
            {
                "dataset": dataset,
                "study": study,
                "method": method,
                "learner": learner,
                "epsilon": eps,
                "n_clusters": n_c,
                "normalized_mean": float(np.mean(values)),
                "normalized_sd": float(np.std(values, ddof=1))
                if len(values) > 1
                else 0.0,
                "trials": len(values),
            }
        )
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
        lines.append("| method | " + " | ".join(f"ε={e:g}" for e in eps) + " |")
        lines.append("|---" * (len(eps) + 1) + "|")
        for method, learner, label, _ in CURVES + (
            ("uniform_rr", "backward", "UniformRR, backward", ""),
        ):
            want = "chosen" if method == "cluster_rr" else learner
            cells = []
            for e in eps:
                hit = _lookup(main, method=method, learner=want, epsilon=e)
                cells.append(
                    f"{hit[0]['normalized_mean']:.3f} ± {hit[0]['normalized_sd']:.3f}"
                    if hit
                    else "–"
                )
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        abl = _lookup(table, dataset=dataset, study="ablation")
        if abl:
            counts = sorted({r["n_clusters"] for r in abl})
            e0 = abl[0]["epsilon"]
            lines.append(f"\nCluster-count ablation at ε={e0:g}\n")
            lines.append("| method | " + " | ".join(str(c) for c in counts) + " |")
            lines.append("|---" * (len(counts) + 1) + "|")
            for method, want, label in (
                ("cluster_rr", "chosen", "ClusterRR (rule)"),
                ("cluster_rr_fixed", "plain", "ClusterRR fixed 10% floor"),
            ):
                cells = []
                for c in counts:
                    hit = _lookup(abl, method=method, learner=want, n_clusters=c)
                    cells.append(f"{hit[0]['normalized_mean']:.3f}" if hit else "–")
                lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(summary: dict[str, Any], figures: Path) -> list[Path]:
    """One accuracy-vs-epsilon figure and one ablation figure per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures.mkdir(parents=True, exist_ok=True)
    table = summary["points"]
    written = []
    for dataset in summary["nonprivate_accuracy"]:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for method, learner, label, style in CURVES:
            want = "chosen" if method == "cluster_rr" else learner
            pts = sorted(
                _lookup(
                    table, dataset=dataset, study="main", method=method, learner=want
                ),
                key=lambda r: r["epsilon"],
            )
            if not pts:
                continue
            e = [r["epsilon"] for r in pts]
            m = np.array([r["normalized_mean"] for r in pts])
            s = np.array([r["normalized_sd"] for r in pts])
            ax.errorbar(e, m, yerr=s, fmt=style, capsize=2, label=label, markersize=4)
        ax.set_xscale("log")
        ax.set_xlabel("label-DP epsilon (log scale)")
        ax.set_ylabel("normalized test accuracy (private / non-private)")
        ax.set_title(f"{dataset}: logistic regression under label DP")
        ax.axhline(1.0, color="grey", lw=0.6)
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(alpha=0.3, which="both")
        path = figures / f"{dataset}_accuracy_vs_epsilon.png"
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)

        abl = _lookup(table, dataset=dataset, study="ablation")
        if abl:
            fig, ax = plt.subplots(figsize=(6.4, 4.2))
            for method, want, label, style in (
                ("cluster_rr", "chosen", "ClusterRR (chosen by the rule)", "o-"),
                ("cluster_rr_fixed", "plain", "ClusterRR fixed 10% floor", "s--"),
            ):
                pts = sorted(
                    _lookup(abl, method=method, learner=want),
                    key=lambda r: r["n_clusters"],
                )
                ax.errorbar(
                    [r["n_clusters"] for r in pts],
                    [r["normalized_mean"] for r in pts],
                    yerr=[r["normalized_sd"] for r in pts],
                    fmt=style,
                    capsize=2,
                    label=label,
                    markersize=4,
                )
            eps_abl = abl[0]["epsilon"]
            uniform = [
                r
                for r in _lookup(
                    table, dataset=dataset, study="main", method="uniform_rr"
                )
                if r["epsilon"] == eps_abl and r["learner"] == "forward"
            ]
            if uniform:
                ax.axhline(
                    uniform[0]["normalized_mean"],
                    color="tab:green",
                    ls=":",
                    label="UniformRR, forward (no clusters)",
                )
            ax.set_xscale("log")
            ax.set_xlabel("number of k-means clusters (log scale)")
            ax.set_ylabel("normalized test accuracy")
            ax.set_title(
                f"{dataset}: cluster-count ablation at epsilon {abl[0]['epsilon']:g}"
            )
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3, which="both")
            path = figures / f"{dataset}_cluster_ablation.png"
            fig.tight_layout()
            fig.savefig(path, dpi=120)
            plt.close(fig)
            written.append(path)
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
    parser.add_argument("--results-dir", type=Path, default=None)
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
        rows = load_points(results / "points.jsonl")
        header = (
            "# Label-DP study: measured results\n\n"
            f"{len({r['key'] for r in rows})} points from "
            f"`{results.name}/points.jsonl`, "
            "written by `python -m ldpfda.experiments.labeldp.plot --export`. "
            "Normalized "
            "accuracy = test accuracy / non-private test accuracy of the same learner; "
            "UniformRR 'best learner' is picked in hindsight (highest mean).\n"
        )
        (HERE / "results.md").write_text(header + text)
        print("exported the figures and results.md to", HERE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
