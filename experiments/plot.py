"""Figures and tables from saved study results; runs nothing.

For every study folder with a ``summary.csv`` (``--results``) this draws test error
against epsilon (log scale), one line per method with standard-error bars, one panel
per data set (and per basis size or cut-off where the study varies them), and writes
the Markdown tables of selected epsilons that ``experiments/README.md`` shows. A study
over the number of clients (several ``n_clients``) is drawn against that number, one
panel per data set and epsilon, and tabled with :func:`sample_size_table`.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path
from typing import Any

__all__ = [
    "LABELS",
    "load_summary",
    "main",
    "markdown_tables",
    "paired_table",
    "plot_study",
    "sample_size_table",
]

#: Legend labels of the methods.
LABELS = {
    "mrma": "MRMA",
    "mr": "MR only",
    "ma": "MA only",
    "weak": "weak (mean)",
    "voting": "voting",
    "averaging": "averaging",
    "naive": "naive (pooled payloads)",
    "histogram": "histogram (Berrett-Butucea)",
    "gaussian": "Flower-style Gaussian",
    "default": "ldpfda default (joint hybrid + moment)",
    "default_lda": "default's releases, LDA rule",
    "default_draw": "default, drawn-class release",
    "default_split": "default, split release (label RR + x)",
    "one_vs_rest": "one-vs-rest (K default releases at ε/K)",
    "noiseless": "default without noise (ε = ∞)",
    "non_private": "non-private",
    "majority": "majority class",
}
ABLATION_METHODS = ("weak", "mr", "ma")
#: Methods of the main figures and of the README tables, in legend order.
MAIN_METHODS = tuple(m for m in LABELS if m not in ABLATION_METHODS)
STYLES = {
    "mrma": ("C3", "o", "-"),
    "mr": ("C1", "v", "--"),
    "ma": ("C2", "^", "--"),
    "weak": ("C7", "x", ":"),
    "voting": ("C0", "s", "-"),
    "averaging": ("C9", "D", "-"),
    "naive": ("C5", "P", "-"),
    "histogram": ("C4", "*", "-"),
    "gaussian": ("C8", "X", "-"),
    "default": ("C6", "h", "-"),
    "default_lda": ("C6", "H", "--"),
    "default_draw": ("#8c510a", "v", ":"),
    "default_split": ("#006d2c", "p", ":"),
    "one_vs_rest": ("C1", "d", "-."),
    "noiseless": ("C6", "", ":"),
    "non_private": ("k", "", "--"),
    "majority": ("0.4", "", ":"),
}
#: MRMA at the cut-offs of an ablation: c = 0.2 (the reference) in MRMA's own
#: style, the others in shades of it, so that no colour means one method in one
#: figure and another in the next.
CUTOFF_STYLES = (("C3", "o", "-"), ("#8c1515", "s", "-"), ("#f4a3a3", "^", "-"))
#: Horizontal offset between the methods at one x, as a fraction of a decade on
#: the log axis: error bars of methods with equal means (many baselines sit near
#: 0.5 at small epsilon) are drawn side by side instead of on top of each other.
DODGE = 0.012
#: Protocols of the sample-size table, and its margin to the non-private error.
SAMPLE_SIZE_METHODS = ("default", "mrma")
MARGIN = 0.05
#: Methods of the figures and tables of a study over the number of clients.
CLIENTS_METHODS = (*SAMPLE_SIZE_METHODS, "non_private", "majority")


def load_summary(path: Path) -> list[dict[str, Any]]:
    """Rows of a ``summary.csv`` with numbers parsed."""
    rows = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            for key in ("epsilon", "cutoff", "mean", "se"):
                row[key] = float(row[key])
            for key in ("n_basis", "order", "n"):
                row[key] = int(row[key])
            row["n_clients"] = int(row["n_clients"]) if row.get("n_clients") else None
            rows.append(row)
    return rows


def _select(
    rows: list[dict[str, Any]],
    dataset: str | None = None,
    n_basis: int | None = None,
    cutoff: float | None = None,
    epsilon: float | None = None,
) -> list[dict[str, Any]]:
    return [
        r
        for r in rows
        if (dataset is None or r["dataset"] == dataset)
        and (n_basis is None or r["n_basis"] == n_basis)
        and (cutoff is None or math.isclose(r["cutoff"], cutoff))
        and (epsilon is None or math.isclose(r["epsilon"], epsilon))
    ]


def _over_clients(rows: list[dict[str, Any]]) -> bool:
    """True for a study over the number of clients."""
    return len({r.get("n_clients") for r in rows}) > 1


def _panels(study: str, rows: list[dict[str, Any]]) -> list[tuple[str, list[Any]]]:
    """(title, rows) of each panel: a data set, and its basis size in functional
    studies."""
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    if _over_clients(rows):
        return [
            (f"{d}, ε = {e:g}", _select(rows, d, epsilon=e))
            for d in datasets
            for e in sorted({r["epsilon"] for r in rows if r["dataset"] == d})
        ]
    if study.startswith("functional"):
        return [
            (f"{d}, p = {p} B-splines", _select(rows, d, p))
            for d in datasets
            for p in sorted({r["n_basis"] for r in rows if r["dataset"] == d})
        ]
    return [(d, _select(rows, d)) for d in datasets]


def _at_reference_cutoff(
    rows: list[dict[str, Any]], cutoffs: list[float]
) -> list[dict[str, Any]]:
    """The rows at c = 0.2 (or the smallest cut-off if 0.2 was not run)."""
    return _select(rows, cutoff=0.2 if 0.2 in cutoffs else cutoffs[0])


def _line(
    ax: Any,
    rows: list[dict[str, Any]],
    method: str,
    label: str,
    style: tuple[str, str, str] | None = None,
    x: str = "epsilon",
    slot: float = 0.0,
) -> None:
    pts = sorted((r[x], r["mean"], r["se"]) for r in rows if r["method"] == method)
    if not pts:
        return
    eps, mean, se = zip(*pts, strict=True)
    eps = tuple(e * 10 ** (DODGE * slot) for e in eps)
    color, marker, ls = style or STYLES.get(method, ("C7", "o", "-"))
    yerr = [0.0 if math.isnan(s) else s for s in se]
    ax.errorbar(
        eps,
        mean,
        yerr=yerr,
        label=label,
        color=color,
        marker=marker or None,
        linestyle=ls,
        capsize=3,
        markersize=5,
        linewidth=1.4,
    )


def _slots(methods: list[str]) -> dict[str, float]:
    """Dodge slot of each drawn method (references stay on their x): centred on 0."""
    drawn = [m for m in methods if m not in ("non_private", "majority")]
    return {m: k - (len(drawn) - 1) / 2 for k, m in enumerate(drawn)}


def _draw_panel(ax: Any, sel: list[dict[str, Any]], ablation: bool, x: str) -> None:
    """One panel's lines: the methods of the study, or an ablation's MRMA cut-offs."""
    if ablation:
        cutoffs = sorted({r["cutoff"] for r in sel})
        slots = _slots([*ABLATION_METHODS, *(f"c{c}" for c in cutoffs)])
        for m in ABLATION_METHODS:
            _line(ax, _at_reference_cutoff(sel, cutoffs), m, LABELS[m], slot=slots[m])
        shades = iter(CUTOFF_STYLES[1:] * len(cutoffs))
        for c in cutoffs:  # the reference cut-off in MRMA's colour, others in shades
            style = CUTOFF_STYLES[0] if math.isclose(c, 0.2) else next(shades)
            label = f"MRMA, c = {c:g}"
            _line(ax, _select(sel, cutoff=c), "mrma", label, style, slot=slots[f"c{c}"])
        return
    methods = CLIENTS_METHODS if x == "n_clients" else MAIN_METHODS
    present = [m for m in methods if any(r["method"] == m for r in sel)]
    slots = _slots(present)
    for m in present:
        _line(ax, sel, m, LABELS[m], x=x, slot=slots.get(m, 0.0))
    if "majority" not in present:  # chance on the balanced designs
        ax.axhline(0.5, color="0.6", linewidth=0.8, linestyle=":")


def plot_study(study: str, rows: list[dict[str, Any]], out: Path) -> Path:
    """Draw one study's figure into ``out/<study>.png``; returns the path.

    The legend sits below the panels, outside them, in a layout that makes room for
    it (nothing is cut at the edges); every method keeps one colour and marker in
    every figure (:data:`STYLES`).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ablation = study.startswith("ablation")
    x = "n_clients" if _over_clients(rows) else "epsilon"
    panels = _panels(study, rows)
    if not panels:
        raise ValueError(f"study {study!r} has no results to plot (empty summary)")
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(max(4.6 * ncols, 9.0), 3.7 * nrows + 0.9),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    for ax, (title, sel) in zip(axes.flat, panels, strict=False):
        _draw_panel(ax, sel, ablation, x)
        ax.set_xscale("log")
        ticks = sorted({r[x] for r in sel if math.isfinite(r[x])})
        ax.set_xticks(ticks, [f"{e:g}" for e in ticks])
        ax.minorticks_off()
        ax.set_title(title)
        ax.set_xlabel(
            "clients (log scale)"
            if x == "n_clients"
            else r"per-client privacy budget $\varepsilon$ (log scale)"
        )
        ax.set_ylabel("test error (mean ± s.e.)")
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    seen: dict[str, Any] = {}
    for ax in axes.flat:  # every method of every panel, once, in drawing order
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    fig.legend(
        list(seen.values()),
        list(seen),
        loc="outside lower center",
        ncol=min(3 if ncols == 1 else 4, len(seen)),
        frameon=False,
    )
    n = max((r["n"] for r in rows), default=0)
    against = "the number of clients" if x == "n_clients" else "epsilon"
    fig.suptitle(f"{study}: test error vs {against} ({n} repeats per point)")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{study}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def markdown_tables(
    study: str,
    rows: list[dict[str, Any]],
    epsilons: tuple[float, ...] = (1.0, 2.0, 5.0),
) -> str:
    """A Markdown table: one row per (panel, epsilon), one column per method.

    Ablation studies: weak, MR and MA at c = 0.2, and MRMA at every cut-off. A study
    over the number of clients: one row per (data set, epsilon, clients), then
    :func:`sample_size_table`.
    """
    if _over_clients(rows):
        return _clients_table(rows, epsilons) + "\n" + sample_size_table(rows)
    if study.startswith("ablation"):
        cutoffs = sorted({r["cutoff"] for r in rows})
        heads = [LABELS[m] for m in ABLATION_METHODS]
        heads += [f"MRMA c = {c:g}" for c in cutoffs]

        def cells(sel: list[dict[str, Any]], eps: float) -> list[str]:
            ref = _at_reference_cutoff(sel, cutoffs)
            return [_cell(ref, m, eps) for m in ABLATION_METHODS] + [
                _cell(_select(sel, cutoff=c), "mrma", eps) for c in cutoffs
            ]

    else:
        methods = [m for m in MAIN_METHODS if any(r["method"] == m for r in rows)]
        heads = [LABELS[m] for m in methods]

        def cells(sel: list[dict[str, Any]], eps: float) -> list[str]:
            return [_cell(sel, m, eps) for m in methods]

    lines = [
        "| " + " | ".join(["data", "ε", *heads]) + " |",
        "|" + "---|" * (2 + len(heads)),
    ]
    for title, sel in _panels(study, rows):
        for eps in epsilons:
            row = cells(sel, eps)
            if any(row):
                lines.append("| " + " | ".join([title, f"{eps:g}", *row]) + " |")
    return "\n".join(lines) + "\n"


def _clients_table(rows: list[dict[str, Any]], epsilons: tuple[float, ...]) -> str:
    """Test errors of the protocols and references, one row per (data set,
    epsilon, clients)."""
    methods = [m for m in CLIENTS_METHODS if any(r["method"] == m for r in rows)]
    lines = [
        "| " + " | ".join(["data", "ε", "clients", *(LABELS[m] for m in methods)]),
        "|" + "---|" * (3 + len(methods)),
    ]
    lines[0] += " |"
    for d in dict.fromkeys(r["dataset"] for r in rows):
        for eps in epsilons:
            sel = _select(rows, d, epsilon=eps)
            for n in sorted({r["n_clients"] for r in sel}):
                at_n = [r for r in sel if r["n_clients"] == n]
                cells = [_cell(at_n, m, eps) for m in methods]
                lines.append(
                    "| " + " | ".join([d, f"{eps:g}", f"{n:,}", *cells]) + " |"
                )
    return "\n".join(lines) + "\n"


def _size_cell(n: int | None, sizes: list[int]) -> str:
    if n is None:
        return f"> {max(sizes):,}"
    return f"≤ {n:,}" if n == min(sizes) else f"{n:,}"


def _smallest_n(holds: dict[int, bool]) -> int | None:
    """The smallest n from which on ``holds`` at every larger n too (None: not even
    at the largest)."""
    found = None
    for n in sorted(holds, reverse=True):
        if not holds[n]:
            break
        found = n
    return found


def sample_size_table(rows: list[dict[str, Any]], margin: float = MARGIN) -> str:
    """How many clients each protocol needs, per data set and epsilon.

    For each protocol of :data:`SAMPLE_SIZE_METHODS`, the smallest number of clients
    of the study from which on (at that number and every larger one) its mean test
    error is (a) below the majority-class error minus two of its standard errors (the
    model carries signal) and (b) at most ``margin`` above the non-private error on
    the same clients. "≤ n" when it holds from the smallest size of the study on,
    "> n" when not even at the largest.
    """
    missing = {*CLIENTS_METHODS} - {r["method"] for r in rows}
    if missing:
        raise ValueError(
            f"the sample-size table needs the methods {sorted(missing)}: give the "
            "study the baselines 'default' and 'majority'"
        )
    heads = [
        f"{LABELS[m]}: {what}"
        for m in SAMPLE_SIZE_METHODS
        for what in ("signal", f"within {margin:g} of non-private")
    ]
    lines = [
        "| " + " | ".join(["data", "ε", *heads]) + " |",
        "|" + "---|" * (2 + len(heads)),
    ]
    for d in dict.fromkeys(r["dataset"] for r in rows):
        for eps in sorted({r["epsilon"] for r in rows if r["dataset"] == d}):
            sel = _select(rows, d, epsilon=eps)

            def at(method: str, sel: list[dict[str, Any]] = sel) -> dict[int, Any]:
                return {r["n_clients"]: r for r in sel if r["method"] == method}

            majority, clean = at("majority"), at("non_private")
            cells = []
            for m in SAMPLE_SIZE_METHODS:
                runs = at(m)
                signal = {
                    n: r["mean"] < majority[n]["mean"] - 2 * r["se"]
                    for n, r in runs.items()
                }
                near = {
                    n: r["mean"] <= clean[n]["mean"] + margin for n, r in runs.items()
                }
                cells += [
                    _size_cell(_smallest_n(h), list(runs)) for h in (signal, near)
                ]
            lines.append("| " + " | ".join([d, f"{eps:g}", *cells]) + " |")
    return "\n".join(lines) + "\n"


#: Paired differences a study's tables add (runs.jsonl): (study, [(a, b, metric), ...])
#: for the per-repeat error of a minus that of b; metric "error" is the test error,
#: "balanced" the mean of the per-class errors (``extra["balanced"]``, where "guess" is
#: a uniform guess's 1 - 1/K: a column that beats it reads the curves).
PAIRS = {
    "kclass": (
        ("one_vs_rest", "default", "error"),
        ("default_lda", "default", "error"),
        ("default_draw", "default", "error"),
        ("default_split", "default", "error"),
        ("one_vs_rest", "default", "balanced"),
        ("guess", "default", "balanced"),
        ("guess", "one_vs_rest", "balanced"),
    )
}
#: What the paired tables call a test error and a balanced error.
METRICS = {"error": "", "balanced": " in balanced error (mean of the per-class errors)"}


def paired_table(
    runs_path: Path,
    pairs: tuple[tuple[str, str, str], ...],
    epsilons: tuple[float, ...],
) -> str:
    """Per-repeat differences of a metric (:data:`METRICS`), a's minus b's, for each
    pair: mean ± standard error over the repeats of every (data set, epsilon) of a
    study's ``runs.jsonl``; **win** for b where the mean is more than two standard
    errors above 0, loss below."""
    from ldpfda.experiments.common import mean_se

    # A resumed or repeated study appends: the last record of a run key stands.
    with open(runs_path, encoding="utf-8") as fh:
        records = {run["key"]: run for run in map(json.loads, fh)}
    diffs: dict[tuple[str, float, int], list[float]] = {}
    order: list[str] = []
    for run in records.values():
        point, errors = run["point"], run["errors"]
        if point["dataset"] not in order:
            order.append(point["dataset"])
        for i, (a, b, metric) in enumerate(pairs):
            values = errors if metric == "error" else run["extra"].get(metric, {})
            if a in values and b in values:
                key = (point["dataset"], float(point["epsilon"]), i)
                diffs.setdefault(key, []).append(values[a] - values[b])
    lines = []
    names = {**LABELS, "guess": "a uniform guess"}
    for i, (a, b, metric) in enumerate(pairs):
        heads = [f"ε = {eps:g}" for eps in epsilons]
        lines += [
            f"{names[a]} minus {names[b]}{METRICS[metric]}, paired (mean ± s.e. of the "
            f"per-repeat differences; **win** for {names[b]} beyond two standard "
            "errors):",
            "",
            "| " + " | ".join(["data", *heads]) + " |",
            "|" + "---|" * (1 + len(heads)),
        ]
        for dataset in order:
            cells = []
            for eps in epsilons:
                values = diffs.get((dataset, eps, i))
                if not values:
                    cells.append("")
                    continue
                mean, se = mean_se(values)
                mark = (
                    " **win**" if mean > 2 * se else " loss" if mean < -2 * se else ""
                )
                cells.append(f"{mean:+.3f} ± {se:.3f}{mark}")
            lines.append("| " + " | ".join([dataset, *cells]) + " |")
        lines.append("")
    return "\n".join(lines)


def _cell(rows: list[dict[str, Any]], method: str, eps: float) -> str:
    hit = [r for r in rows if r["method"] == method and math.isclose(r["epsilon"], eps)]
    return f"{hit[0]['mean']:.3f} ± {hit[0]['se']:.3f}" if hit else ""


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        allow_abbrev=False, prog="ldpfda-plot", description=__doc__.split("\n")[0]
    )
    parser.add_argument("studies", nargs="*", help="study names (default: all found)")
    parser.add_argument("--results", default="experiments/results")
    parser.add_argument("--out", default="experiments/figures")
    parser.add_argument("--quick", action="store_true", help="plot the -quick results")
    parser.add_argument(
        "--tables", default=None, help="Markdown tables file (default: OUT/tables.md)"
    )
    parser.add_argument("--epsilons", default="1,2,5", help="epsilons of the tables")
    args = parser.parse_args(argv)
    results, out = Path(args.results), Path(args.out)
    found = sorted(p.parent.name for p in results.glob("*/summary.csv"))
    found = [s for s in found if s.endswith("-quick") == args.quick]
    names = [s + ("-quick" if args.quick else "") for s in args.studies] or found
    missing = [s for s in names if s not in found]
    if missing:
        parser.error(f"no summary.csv under {results} for: {', '.join(missing)}")
    epsilons = tuple(float(e) for e in args.epsilons.split(","))
    tables: dict[str, str] = {}
    for name in names:
        rows = load_summary(results / name / "summary.csv")
        print(plot_study(name, rows, out))
        tables[name] = markdown_tables(name, rows, epsilons)
        runs = results / name / "runs.jsonl"
        pairs = PAIRS.get(name.removesuffix("-quick"))
        if pairs and runs.exists():
            tables[name] += "\n" + paired_table(runs, pairs, epsilons)
    table_path = Path(args.tables) if args.tables else out / "tables.md"
    table_path.parent.mkdir(parents=True, exist_ok=True)
    table_path.write_text("".join(f"### {k}\n\n{v}\n" for k, v in tables.items()))
    print(table_path)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
