"""Command line: ``ldpfda simulate`` and the experiment, plot and benchmark drivers."""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np

from ldpfda import __version__
from ldpfda.config import DATASETS, Settings, settings_table

__all__ = ["main", "simulate"]


def _epsilon(text: str) -> float:
    value = float(text)
    if math.isnan(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"epsilon must be in (0, inf], got {text}")
    return value


_OWN_FLAGS = ("epsilon", "normalize_models", "public_features")
_MULTISERVER_KEYS = ("server_id", "feature_shift", "label_shift")
#: The settings ``ldpfda simulate`` takes as flags (``--n-train``, ...): all but those
#: with flags of their own and the multi-server keys.
SIMULATE_FLAGS = tuple(
    f.name for f in fields(Settings) if f.name not in _OWN_FLAGS + _MULTISERVER_KEYS
)


def add_setting_flags(parser: argparse.ArgumentParser, names: tuple[str, ...]) -> None:
    """One ``--kebab-name`` flag per setting, typed, with its default, choices, help."""
    types = {"int": int, "float": float, "str": str}
    defaults = Settings()
    for row in settings_table():
        if row["name"] not in names:
            continue
        parser.add_argument(
            "--" + row["name"].replace("_", "-"),
            type=types[row["type"]],
            choices=row["choices"] or None,
            default=getattr(defaults, row["name"]),
            help=f"{row['help']} (default: {row['default']})",
        )


def _simulate_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        allow_abbrev=False,
        help="run the protocol in-process on an embedded dataset",
        description="Run the whole protocol in-process on an embedded dataset, for "
        "one or more privacy budgets, and print the test error of every method that "
        "ran (mean +- std over repeats). By default every client releases y~(1, x) "
        "once with the hybrid mechanism and the server fits the moment classifier; "
        "--reference runs the reference MRMA protocol, its ablations and baselines.",
    )
    p.add_argument(
        "--epsilon",
        type=_epsilon,
        nargs="+",
        default=[2.0, 5.0, 10.0],
        help="per-client budget(s); 'inf' for the non-private protocol",
    )
    add_setting_flags(p, SIMULATE_FLAGS)
    p.add_argument(
        "--reference",
        action="store_true",
        help="the reference MRMA protocol (same as --mechanism reference)",
    )
    p.add_argument(
        "--no-public-features",
        action="store_true",
        help="estimate the feature second moment from the releases, not from public "
        "unlabeled features",
    )
    p.add_argument(
        "--raw-average",
        action="store_true",
        help="average raw coefficients instead of unit-norm models",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="JSON output (default: results/simulate-<dataset>.json)",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _settings(args: argparse.Namespace, epsilon: float) -> Settings:
    values = {name: getattr(args, name) for name in SIMULATE_FLAGS}
    values["epsilon"] = epsilon
    values["normalize_models"] = not args.raw_average
    values["public_features"] = not args.no_public_features
    if args.reference:
        if args.mechanism not in (Settings().mechanism, "reference"):
            raise ValueError(
                f"--reference contradicts --mechanism {args.mechanism}; give one"
            )
        values["mechanism"] = "reference"
    return Settings(**values)


def simulate(
    settings_list: list[Settings], *, progress: bool = True
) -> list[dict[str, Any]]:
    """Run every settings object for its repeats; return one summary per settings."""
    from tqdm import tqdm

    from ldpfda.engine import run_repeat
    from ldpfda.server.fitting import METHODS

    summaries = []
    total = sum(s.repeats for s in settings_list)
    with tqdm(
        total=total, disable=not progress, desc="repeats", unit="run", file=sys.stderr
    ) as bar:
        for settings in settings_list:
            runs = []
            for repeat in range(settings.repeats):
                bar.set_postfix(epsilon=settings.epsilon)
                t0 = time.perf_counter()
                report = run_repeat(settings, repeat).report()
                runs.append(
                    {**report, "repeat": repeat, "wall_s": time.perf_counter() - t0}
                )
                bar.update()
            errors = {
                m: np.array([r["test_errors"][m] for r in runs])
                for m in METHODS
                if all(m in r["test_errors"] for r in runs)
            }
            summaries.append(
                {
                    "settings": settings.to_mapping(),
                    "test_error": {m: _mean_std_se(e) for m, e in errors.items()},
                    "epsilon_spent_per_client": {
                        "max": max(r["privacy"]["max_spent"] for r in runs),
                        "budget": settings.epsilon,
                    },
                    "runs": runs,
                }
            )
    return summaries


def _mean_std_se(e: np.ndarray) -> dict[str, float]:
    std = float(e.std(ddof=1)) if e.size > 1 else 0.0
    return {"mean": float(e.mean()), "std": std, "se": std / math.sqrt(e.size)}


def format_table(summaries: list[dict[str, Any]]) -> str:
    """Test error (mean +- std) per method (rows) and epsilon (columns).

    Only methods that every summary reports are shown.
    """
    from ldpfda.server.fitting import METHODS

    labels = {
        "moment": "joint moment",
        "label": "label-only",
        "mrma": "MRMA",
        "mr": "MR only",
        "ma": "MA only",
        "weak": "weak (mean)",
        "voting": "majority voting",
        "averaging": "simple averaging",
        "naive": "naive (one model)",
        "non_private": "non-private",
    }
    heads = [f"eps={s['settings']['privacy.epsilon']:g}" for s in summaries]
    width = 17
    lines = ["method".ljust(20) + "".join(h.rjust(width) for h in heads)]
    for m in (m for m in METHODS if all(m in s["test_error"] for s in summaries)):
        cells = [
            f"{s['test_error'][m]['mean']:.3f} +- {s['test_error'][m]['std']:.3f}"
            for s in summaries
        ]
        lines.append(labels[m].ljust(20) + "".join(c.rjust(width) for c in cells))
    spent = ", ".join(f"{s['epsilon_spent_per_client']['max']:g}" for s in summaries)
    lines.append(f"epsilon spent per client (max over clients and repeats): {spent}")
    return "\n".join(lines)


def _run_simulate(args: argparse.Namespace) -> int:
    try:
        settings_list = [_settings(args, eps) for eps in args.epsilon]
    except (TypeError, ValueError) as exc:
        print(f"ldpfda simulate: error: {exc}", file=sys.stderr)
        return 2
    first = settings_list[0]
    if first.protocol == "label":
        print(
            f"Label-only {first.mechanism} on the {first.dataset} design: "
            f"{first.n_train + first.n_eval} clients, each sending public features and "
            f"one randomized label; {first.correction}-corrected logistic regression; "
            f"{first.n_test} test points, {first.repeats} repeats, seed {first.seed}"
        )
    elif first.protocol == "moment":
        release = (
            f"y~(1, x) with the {first.vector_mechanism} mechanism"
            if first.joint_release
            else "the reference release"
        )
        gram = "public" if first.public_features else "released"
        print(
            f"Moment classifier on the {first.dataset} design: "
            f"{first.n_train + first.n_eval} clients, each releasing {release} once; "
            f"feature second moment from {gram} features; {first.n_test} test "
            f"points, {first.repeats} repeats, seed {first.seed} "
            "(--reference: the reference MRMA)"
        )
    else:
        print(
            f"MRMA on the {first.dataset} design ({first.mechanism} release): "
            f"{first.n_train} training + {first.n_eval} evaluation clients, "
            f"M={first.num_weak_models} {first.learner} weak models on "
            f"{first.subsample_size} payloads each, c={first.cutoff}, {first.n_test} "
            f"test points, {first.repeats} repeats, seed {first.seed}"
        )
    t0 = time.perf_counter()
    summaries = simulate(settings_list, progress=not args.no_progress)
    print(format_table(summaries))
    out = args.out or Path("results") / f"simulate-{first.dataset}.json"
    _write(out, {"summaries": summaries})
    print(f"wrote {out} ({time.perf_counter() - t0:.1f} s)")
    return 0


DEFAULT_SERVERS = ("500,2500,5,0,0", "500,2500,5,0.2,0.5", "100,600,5,0,-0.5")


def _multiserver_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "multiserver",
        allow_abbrev=False,
        help="servers with different populations evaluate each other's models",
        description="Multi-server MRMA in-process: per-server and global test error "
        "against single-server MRMA and voting across servers (mean +- SE). With "
        "--flower, one repeat as a Flower session: every server its own simulated "
        "SuperLink and SuperNodes, a train and an evaluate run per server, models and "
        "estimates exchanged as artifacts, then the combine step.",
    )
    p.add_argument(
        "--server",
        action="append",
        default=None,
        metavar="SPEC",
        help="n_train,n_eval,epsilon,feature_shift,label_shift (repeat per "
        f"server; default: {' '.join(DEFAULT_SERVERS)})",
    )
    p.add_argument("--dataset", choices=DATASETS, default="vector")
    p.add_argument("--num-weak-models", type=int, default=50)
    p.add_argument("--subsample-size", type=int, default=50)
    p.add_argument(
        "--heterogeneity",
        type=float,
        default=0.05,
        help="assumed spread of a model's error across populations (tau)",
    )
    p.add_argument("--n-test", type=int, default=20_000)
    p.add_argument(
        "--repeats", type=int, default=None, help="default 10 (--flower: one)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("results") / "multiserver.json")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--flower",
        action="store_true",
        help="run the session on Flower's simulation runtime (needs a source "
        "checkout); the report goes to --out",
    )
    p.add_argument(
        "--workdir",
        type=Path,
        default=Path("results") / "multiserver-flower",
        help="--flower: artifacts, Flower homes and phase reports",
    )
    p.add_argument("--session", default=None, help="--flower: session name")


def _run_multiserver(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ldpfda.engine.multiserver import run_multiserver_repeat, summarize
    from ldpfda.server.multiserver import ServerSpec

    try:
        specs = []
        for text in args.server or DEFAULT_SERVERS:
            parts = text.split(",")
            if len(parts) != 5:
                raise ValueError(f"server spec must have 5 fields, got {text!r}")
            specs.append(
                ServerSpec(int(parts[0]), int(parts[1]), *map(float, parts[2:]))
            )
        # Cross-evaluation of weak models is an MRMA concept: the reference protocol.
        base = Settings.reference(
            dataset=args.dataset,
            num_weak_models=args.num_weak_models,
            subsample_size=min(args.subsample_size, min(s.n_train for s in specs)),
            n_test=args.n_test,
            seed=args.seed,
            repeats=args.repeats or 10,
        )
        if args.flower and args.repeats not in (None, 1):
            raise ValueError("--flower runs one repeat; leave out --repeats")
    except (TypeError, ValueError) as exc:
        print(f"ldpfda multiserver: error: {exc}", file=sys.stderr)
        return 2
    if args.flower:
        return _run_multiserver_flower(args, specs, base)
    results = [
        run_multiserver_repeat(tuple(specs), base, r, heterogeneity=args.heterogeneity)
        for r in tqdm(
            range(base.repeats),
            disable=args.no_progress,
            file=sys.stderr,
            desc="repeats",
        )
    ]
    table = summarize(results)
    _server_table(
        specs,
        table,
        ("multi_server", "global", "single_server", "voting_all"),
        lambda v: f"{v['mean']:.3f} +- {v['se']:.3f}",
        17,
    )
    _write(
        args.out,
        {
            "servers": [asdict(s) for s in specs],
            "settings": base.to_mapping(),
            "heterogeneity": args.heterogeneity,
            "test_error": table,
            "max_spent_over_budget": max(
                r.privacy["max_spent_over_budget"] for r in results
            ),
        },
    )
    print(f"wrote {args.out}")
    return 0


def _server_table(
    specs: list[Any],
    rows: dict[str, Any],
    methods: tuple[str, ...],
    cell: Callable[[Any], str],
    width: int,
) -> None:
    """One line per server: its name and sizes, then every method's cell."""
    print("server".ljust(30) + "".join(m.rjust(width) for m in methods))
    for (name, row), spec in zip(rows.items(), specs, strict=True):
        label = f"{name} ({spec.n_train}+{spec.n_eval}, eps={spec.epsilon:g})"
        print(label.ljust(30) + "".join(cell(row[m]).rjust(width) for m in methods))


def _write(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1))


def _deploy_module(name: str) -> Any:
    """A module of the checkout's ``deploy/`` folder (commands above the library)."""
    deploy = Path(__file__).resolve().parents[1] / "deploy"
    if not (deploy / f"{name}.py").exists():
        raise RuntimeError(f"this command needs a source checkout of ldpfda: {deploy}")
    if str(deploy) not in sys.path:
        sys.path.insert(0, str(deploy))
    return importlib.import_module(name)


def _run_multiserver_flower(
    args: argparse.Namespace, specs: list[Any], base: Settings
) -> int:
    try:
        report = _deploy_module("simulation").run_simulation(
            specs,
            base,
            args.workdir,
            session=args.session,
            heterogeneity=args.heterogeneity,
        )
    except (RuntimeError, ValueError) as exc:
        print(f"ldpfda multiserver --flower: error: {exc}", file=sys.stderr)
        return 1
    methods = ("multi_server", "global", "voting_all")
    _server_table(specs, report["test_errors"], methods, lambda v: f"{v:.3f}", 14)
    for path, reason in report["rejected_artifacts"].items():
        print(f"rejected {path}: {reason}")
    _write(args.out, report)
    print(
        f"wrote {args.out} (session {report['session']}, {report['wall_time_s']:.0f} s)"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    delegated = {
        "experiment": "ldpfda.experiments.runner",
        "plot": "ldpfda.experiments.plot",
        "benchmark": "ldpfda.experiments.benchmark",
    }
    if argv and argv[0] in delegated:
        return int(importlib.import_module(delegated[argv[0]]).main(argv[1:]) or 0)
    parser = argparse.ArgumentParser(
        prog="ldpfda",
        allow_abbrev=False,
        description="Federated classification of functional data under local DP.",
    )
    parser.add_argument("--version", action="version", version=f"ldpfda {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _simulate_parser(sub)
    _multiserver_parser(sub)
    for name, text in (
        ("experiment", "run an experiment study from a TOML config"),
        ("plot", "make figures from saved experiment results"),
        ("benchmark", "clients/s and peak memory of the engine"),
    ):
        sub.add_parser(name, help=text, add_help=False)
    args = parser.parse_args(argv)
    if args.command == "multiserver":
        return _run_multiserver(args)
    return _run_simulate(args)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
