"""Command line: ``ldpfda simulate``, ``fit`` and ``predict`` on own curve files,
``spec``, ``deploy`` (the operator's commands of ``deploy/operate.py``), and the
experiment, plot and benchmark drivers."""

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
from ldpfda.config import (
    SettingError,
    Settings,
    settings_table,
)

__all__ = ["main", "simulate"]


def _epsilon(text: str) -> float:
    """An epsilon in (0, inf]; argparse prefixes the flag (``argument --epsilon:``)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if math.isnan(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"epsilon must be a number in (0, inf], got {text!r}"
        )
    return value


def _finite_epsilon(text: str) -> float:
    value = _epsilon(text)
    if math.isinf(value):
        raise argparse.ArgumentTypeError(
            "epsilon must be finite here (inf, no noise, is for simulations only), "
            f"got {text!r}"
        )
    return value


def _integer(text: str) -> int:
    """An integer, also in an exponent spelling (``1e6``) when its value is integral."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value != int(value):
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}")
    return int(value)


def _real(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None


def _fraction(text: str) -> float:
    value = _real(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text!r}")
    return value


def _seed(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


_OWN_FLAGS = ("epsilon", "normalize_models", "public_features")
_MULTISERVER_KEYS = ("server_id", "feature_shift", "label_shift")
#: The settings ``ldpfda simulate`` takes as flags (``--n-train``, ...): all but those
#: with flags of their own and the multi-server keys.
SIMULATE_FLAGS = tuple(
    f.name for f in fields(Settings) if f.name not in _OWN_FLAGS + _MULTISERVER_KEYS
)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_setting_flags(
    parser: argparse._ActionsContainer, names: tuple[str, ...]
) -> None:
    """One ``--kebab-name`` flag per setting, typed, with its default, choices, help:
    the help and the default are the setting's own (``ldpfda.config.Settings``)."""
    types: dict[str, Callable[[str], Any]] = {
        "int": _integer,
        "float": _real,
        "str": str,
    }
    defaults = Settings()
    for row in settings_table():
        if row["name"] not in names:
            continue
        parser.add_argument(
            _flag(row["name"]),
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
        "--reference runs the reference MRMA protocol, its ablations and baselines. "
        "--dataset wearable runs it on daily heart-rate curves of the embedded "
        "wearable generator, featurized by the spec the package ships.",
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


#: Row names of the tables of test errors.
_METHOD_LABELS = {
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
    "majority": "majority class",
}


def format_table(summaries: list[dict[str, Any]]) -> str:
    """Test error (mean +- std) per method (rows) and epsilon (columns).

    Only methods that every summary reports are shown.
    """
    from ldpfda.server.fitting import METHODS

    heads = [f"eps={s['settings']['privacy.epsilon']:g}" for s in summaries]
    width = 17
    lines = ["method".ljust(20) + "".join(h.rjust(width) for h in heads)]
    for m in (m for m in METHODS if all(m in s["test_error"] for s in summaries)):
        cells = [
            f"{s['test_error'][m]['mean']:.3f} +- {s['test_error'][m]['std']:.3f}"
            for s in summaries
        ]
        lines.append(
            _METHOD_LABELS[m].ljust(20) + "".join(c.rjust(width) for c in cells)
        )
    spent = ", ".join(f"{s['epsilon_spent_per_client']['max']:g}" for s in summaries)
    lines.append(f"epsilon spent per client (max over clients and repeats): {spent}")
    return "\n".join(lines)


#: Settings whose simulate flag is not ``--<kebab name>``.
_OWN_FLAG_NAMES = {
    "public_features": "--no-public-features",
    "normalize_models": "--raw-average",
    "epsilon": "--epsilon",
}


def _setting_error(command: str, exc: Exception, flags: dict[str, str]) -> str:
    """``ldpfda <command>: error: argument --flag: message``, as argparse words its
    own errors, when the setting at fault has a flag in ``flags``."""
    name = getattr(exc, "name", None)
    where = f"argument {flags[name]}: " if name in flags else ""
    return f"ldpfda {command}: error: {where}{exc}"


def _run_simulate(args: argparse.Namespace) -> int:
    try:
        settings_list = [_settings(args, eps) for eps in args.epsilon]
    except (TypeError, ValueError) as exc:
        flags = {n: _flag(n) for n in SIMULATE_FLAGS}
        print(
            _setting_error("simulate", exc, {**flags, **_OWN_FLAG_NAMES}),
            file=sys.stderr,
        )
        return 2
    first = settings_list[0]
    design = f"the {first.dataset} design" + (
        f" with K = {first.n_classes} classes" if first.n_classes > 2 else ""
    )
    if first.protocol == "label":
        print(
            f"Label-only {first.mechanism} on {design}: "
            f"{first.n_train + first.n_eval} clients, each sending public features and "
            f"one randomized label; {first.correction}-corrected logistic regression; "
            f"{first.n_test} test points, {first.repeats} repeats, seed {first.seed}"
        )
    elif first.protocol == "moment":
        signed = (
            "y~(1, x)" if first.n_classes == 2 else "a drawn class j and y~_j(1, x)"
        )
        release = (
            f"{signed} with the {first.vector_mechanism} mechanism"
            if first.joint_release
            else "the reference release"
        )
        gram = "public" if first.public_features else "released"
        print(
            f"Moment classifier on {design}: "
            f"{first.n_train + first.n_eval} clients, each releasing {release} once; "
            f"feature second moment from {gram} features; {first.n_test} test "
            f"points, {first.repeats} repeats, seed {first.seed} "
            "(--reference: the reference MRMA)"
        )
    else:
        print(
            f"MRMA on {design} ({first.mechanism} release): "
            f"{first.n_train} training + {first.n_eval} evaluation clients, "
            f"M={first.num_weak_models} {first.learner} weak models on "
            f"{first.subsample_size} payloads each, c={first.cutoff}, {first.n_test} "
            f"test points, {first.repeats} repeats, seed {first.seed}"
        )
    if first.dataset == "wearable":
        print(_wearable_line(first))
    t0 = time.perf_counter()
    summaries = simulate(settings_list, progress=not args.no_progress)
    print(format_table(summaries))
    for line in _no_signal_lines(summaries):
        print(line)
    out = args.out or Path("results") / f"simulate-{first.dataset}.json"
    _write(out, {"summaries": summaries})
    print(f"wrote {out} ({time.perf_counter() - t0:.1f} s)")
    return 0


def _releasing(settings: Settings) -> int:
    """Clients whose releases the model is fit on: MRMA's training group, else all."""
    n_eval = 0 if settings.protocol == "mrma" else settings.n_eval
    return settings.n_train + n_eval


def _no_signal_lines(summaries: list[dict[str, Any]]) -> list[str]:
    """A warning per budget at which a repeat's model carried no signal."""
    from ldpfda.server.fitting import no_signal_warning

    lines = []
    for summary in summaries:
        runs = summary["runs"]
        hit = [r for r in runs if r["signal"].get("no_signal")]
        if not hit:
            continue
        settings = Settings.from_mapping(summary["settings"])
        warning = no_signal_warning(
            hit[0]["signal"],
            n_clients=_releasing(settings),
            epsilon=settings.epsilon,
            n_features=len(hit[0]["final_model"]["coef"]),
        )
        lines.append(
            f"warning: in {len(hit)} of {len(runs)} repeats at epsilon "
            f"{settings.epsilon:g} {warning}"
        )
    return lines


def _wearable_line(settings: Settings) -> str:
    from ldpfda.datasets.wearable_spec import wearable_spec

    spec = wearable_spec(settings.n_basis, settings.order, settings.n_classes)
    return (
        f"wearable: a day of heart rate per subject (make_wearable), featurized by the "
        f"wearable spec {spec.short_hash} ({spec.n_features} B-splines of order "
        f"{settings.order}); public calibration subjects from the public seed range; "
        f"the {settings.n_test} test subjects are drawn once and shared by the repeats"
    )


DEFAULT_SERVERS = ("500,2500,5,0,0", "500,2500,5,0.2,0.5", "100,600,5,0,-0.5")
#: The settings ``ldpfda multiserver`` takes as flags of their own name.
_MULTISERVER_SETTINGS = (
    "dataset",
    "n_classes",
    "num_weak_models",
    "subsample_size",
    "seed",
)


def _multiserver_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "multiserver",
        allow_abbrev=False,
        help="servers with different populations evaluate each other's models",
        description="Multi-server MRMA in-process: per-server and global test error "
        "against single-server MRMA and voting across servers (mean +- SE). With "
        "--flower, one repeat as a Flower session: every server its own simulated "
        "SuperLink and SuperNodes, a train and an evaluate run per server, models and "
        "estimates exchanged as artifacts, then the combine step. With --dataset "
        "wearable every server draws its own subjects, unshifted (give --server).",
    )
    p.add_argument(
        "--server",
        action="append",
        default=None,
        metavar="SPEC",
        help="n_train,n_eval,epsilon,feature_shift,label_shift (repeat per "
        f"server; default: {' '.join(DEFAULT_SERVERS)})",
    )
    add_setting_flags(p, _MULTISERVER_SETTINGS)
    p.add_argument(
        "--heterogeneity",
        type=_real,
        default=0.05,
        help="assumed spread of a model's error across populations (tau)",
    )
    p.add_argument(
        "--n-test", type=_integer, default=20_000, help="clean test points per server"
    )
    p.add_argument(
        "--repeats", type=_integer, default=None, help="default 10 (--flower: one)"
    )
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
            n_classes=args.n_classes,
            num_weak_models=args.num_weak_models,
            subsample_size=min(args.subsample_size, min(s.n_train for s in specs)),
            n_test=args.n_test,
            seed=args.seed,
            repeats=args.repeats or 10,
        )
        if args.flower and args.repeats not in (None, 1):
            raise ValueError("--flower runs one repeat; leave out --repeats")
        for s, spec in enumerate(specs):  # each server's population is valid
            spec.settings(base, s)
    except (TypeError, ValueError) as exc:
        flags = {n: _flag(n) for n in (*_MULTISERVER_SETTINGS, "n_test", "repeats")}
        print(_setting_error("multiserver", exc, flags), file=sys.stderr)
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
    """A module of :mod:`ldpfda.deploy` (commands above the library), loaded only by
    the commands that use it."""
    return importlib.import_module(f"ldpfda.deploy.{name}")


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


# -- fit and predict on own curve files ------------------------------------------------

#: What the spec-less flags of ``ldpfda fit`` describe, to name them in errors.
_SPEC_OPTIONS = {
    "domain": "--domain START END",
    "value_range": "--value-range LOW HIGH",
    "labels": "--labels A,B",
    "n_basis": "--n-basis N",
    "order": "--order K",
    "penalty": "--penalty LAMBDA",
    "min_points": "--min-points N",
    "unit": "--unit UNIT",
}
_REQUIRED_SPEC_OPTIONS = ("domain", "value_range", "labels")
#: The spec-less options that default to ``options_spec``'s defaults.
_BASIS_OPTIONS = ("n_basis", "order", "penalty", "min_points", "unit")
#: The settings ``ldpfda fit`` takes as flags of their own name, by protocol.
_FIT_DEFAULT_FLAGS = (
    "threshold",
    "no_signal_fit",
    "multiclass_rule",
    "multiclass_release",
)
_FIT_REFERENCE_FLAGS = ("num_weak_models", "subsample_size")
_FIT_FLAGS = {
    "epsilon": "--epsilon",
    **{n: _flag(n) for n in _FIT_DEFAULT_FLAGS + _FIT_REFERENCE_FLAGS},
}


class _UsageError(ValueError):
    """Options that do not fit together: exit status 2, as argparse's own."""


def _fit_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fit",
        allow_abbrev=False,
        help="run a protocol in process on a file of own curves and write the model",
        description="Read a curve file (wide or long CSV, NPZ; every subject is one "
        "client), featurize it with a federation spec, hold out a stratified test "
        "share of the subjects, run the protocol in process on the others (every "
        "subject releases once and spends at most epsilon) and report the test error "
        "next to the engine's baselines, the non-private model and the majority "
        "class. Writes DIR/model.json (the model and its spec) and DIR/report.json. "
        "Exit status 1 for an unusable data or spec file, 2 for bad options.",
    )
    p.add_argument("--data", required=True, type=Path, metavar="FILE")
    p.add_argument(
        "--spec",
        type=Path,
        metavar="SPEC",
        help="federation spec (ldpfda spec init / check); without it, give "
        "--domain, --value-range and --labels to build one",
    )
    p.add_argument(
        "--public",
        type=Path,
        metavar="CALIBRATION_FILE",
        help="public calibration curves (never the private data; labels unused): the "
        "default protocol's feature second moment. Without it, the moment is "
        "estimated from the releases",
    )
    p.add_argument(
        "--epsilon",
        type=_finite_epsilon,
        default=None,
        help="each client's budget (default: the spec's release.epsilon; required "
        "without --spec)",
    )
    p.add_argument(
        "--protocol",
        choices=("default", "reference"),
        default=None,
        help="default: the joint release and the moment classifier; reference: MRMA "
        "(default: the spec's release.protocol)",
    )
    p.add_argument(
        "--test-fraction",
        type=_fraction,
        default=0.25,
        help="share of the subjects of every label held out for testing "
        "(default: 0.25)",
    )
    p.add_argument(
        "--seed",
        type=_seed,
        default=None,
        help="seed of the split and the noise, for a reproducible study (default: OS "
        "entropy, recorded nowhere)",
    )
    p.add_argument("--out", required=True, type=Path, metavar="DIR")
    p.add_argument("--force", action="store_true", help="overwrite DIR/model.json")
    p.add_argument(
        "--layout",
        choices=("wide", "long"),
        help="layout of a CSV file (default: long if it has a time column)",
    )
    p.add_argument(
        "--drop-unusable",
        action="store_true",
        help="leave out subjects without a usable curve (else an error)",
    )
    add_setting_flags(
        p.add_argument_group("default protocol (the server's moment classifier)"),
        _FIT_DEFAULT_FLAGS,
    )
    add_setting_flags(p.add_argument_group("reference protocol"), _FIT_REFERENCE_FLAGS)
    own = p.add_argument_group(
        "a spec from options (without --spec; fixed before the data are read)"
    )
    own.add_argument(
        "--domain", nargs=2, type=_real, default=None, metavar=("START", "END")
    )
    own.add_argument(
        "--value-range",
        nargs=2,
        type=_real,
        default=None,
        metavar=("LOW", "HIGH"),
        help="data-independent bounds of every channel's values",
    )
    own.add_argument(
        "--labels", default=None, help="the labels (two or more), comma-separated"
    )
    own.add_argument("--n-basis", type=_integer, default=None, help="default: 10")
    own.add_argument("--order", type=_integer, default=None, help="default: 4")
    own.add_argument("--penalty", type=_real, default=None, help="default: 0")
    own.add_argument("--min-points", type=_integer, default=None)
    own.add_argument("--unit", default=None, help="unit of the time domain")


def _predict_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict",
        allow_abbrev=False,
        help="classify new curves with a model of ldpfda fit",
        description="Featurize the curves of a file with the spec stored in the "
        "model and classify every subject: subject, predicted label, its "
        "probability (CSV on stdout, or --out). Labels in the file, if any, must "
        "be the model's; they give the error on the file.",
    )
    p.add_argument("--model", required=True, type=Path, metavar="MODEL_JSON")
    p.add_argument("--data", required=True, type=Path, metavar="FILE")
    p.add_argument("--out", type=Path, default=None, metavar="CSV")
    p.add_argument("--layout", choices=("wide", "long"))
    p.add_argument("--drop-unusable", action="store_true")


def _layout(path: Path, layout: str | None) -> str:
    if path.suffix.lower() == ".npz":
        return "NPZ"
    if layout is None:
        from ldpfda.datasets.readers import csv_header

        layout = "long" if "time" in csv_header(path) else "wide"
    return f"{layout} CSV"


def _spec_labels(args: argparse.Namespace) -> list[str]:
    """The spec-less options checked: the two labels they declare."""
    given = [k for k in _SPEC_OPTIONS if getattr(args, k) is not None]
    if args.spec is not None:
        if given:
            raise _UsageError(
                f"{', '.join(_SPEC_OPTIONS[k].split()[0] for k in given)} describe a "
                f"spec; with --spec the spec file {args.spec} fixes them"
            )
        return []
    missing = [_SPEC_OPTIONS[k] for k in _REQUIRED_SPEC_OPTIONS if k not in given]
    if args.epsilon is None:
        missing.append("--epsilon E")
    if missing:
        raise _UsageError(
            "without --spec, a spec is built from explicit, data-independent options "
            f"(never from the data); missing {', '.join(missing)}. Or write one from "
            "public calibration curves: ldpfda spec init --calibration PUBLIC ..."
        )
    labels = [s.strip() for s in args.labels.split(",")]
    if len(labels) < 2 or len(set(labels)) != len(labels):
        raise _UsageError(
            f"--labels must name two labels or more, all different, got {args.labels!r}"
        )
    return labels


def _options_spec(args: argparse.Namespace, curves: Any, labels: list[str]) -> Any:
    """The spec of the spec-less options, one channel per channel of the file."""
    from ldpfda.engine.own_data import options_spec

    if curves.n_channels > 1:
        raise _UsageError(
            f"{args.data.name} holds {curves.n_channels} channels {curves.channels}; "
            "a spec for several channels needs a --spec file"
        )
    return options_spec(
        curves.channels,
        domain=tuple(args.domain),
        value_range=tuple(args.value_range),
        labels=labels,
        epsilon=args.epsilon,
        protocol=args.protocol or "default",
        # options_spec's own defaults for what is not given (the flags' help names them)
        **{k: getattr(args, k) for k in _BASIS_OPTIONS if getattr(args, k) is not None},
    )


def _run_fit(args: argparse.Namespace) -> int:
    try:
        return _fit(args)
    except _UsageError as exc:
        print(f"ldpfda fit: error: {exc}", file=sys.stderr)
        return 2
    except SettingError as exc:
        if exc.name in ("n_train", "n_eval"):
            print(
                f"ldpfda fit: error: --data has too few training subjects after the "
                f"test split: {exc}",
                file=sys.stderr,
            )
        else:
            print(_setting_error("fit", exc, _FIT_FLAGS), file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"ldpfda fit: error: {exc}", file=sys.stderr)
        return 1


def _fit(args: argparse.Namespace) -> int:
    from ldpfda.engine.own_data import featurize_own, fit_own, read_own_curves
    from ldpfda.privacy.random import run_seed

    t_start = time.perf_counter()
    model_path = args.out / "model.json"
    if model_path.exists() and not args.force:
        raise _UsageError(f"{model_path} exists; pass --force to overwrite it")
    if not args.data.is_file():
        raise FileNotFoundError(f"--data {args.data}: no such file")
    labels = _spec_labels(args)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    if args.spec is not None:
        from ldpfda.schema.spec import FederationSpec

        spec = FederationSpec.load(args.spec)
        spec_text, spec_source = args.spec.read_text(encoding="utf-8"), str(args.spec)
        curves, _ = read_own_curves(args.data, spec, layout=args.layout)
    else:
        from ldpfda.datasets.readers import read_curves

        curves = read_curves(args.data, layout=args.layout, spec_labels=labels)
        spec = _options_spec(args, curves, labels)
        spec_text, spec_source = spec.dumps(), "built from the options"
    timings["read_s"] = time.perf_counter() - t0
    protocol = args.protocol or spec.release.protocol
    epsilon = spec.release.epsilon if args.epsilon is None else args.epsilon
    t0 = time.perf_counter()
    features, dropped = featurize_own(
        spec, curves, source=args.data.name, drop_unusable=args.drop_unusable
    )
    timings["featurize_s"] = time.perf_counter() - t0
    counts = np.bincount(features.labels, minlength=len(spec.labels))
    print(
        f"read {args.data.name}: {curves.n_subjects} subjects "
        f"({_layout(args.data, args.layout)}), channel(s) "
        f"{', '.join(curves.channels)}; labels "
        + ", ".join(
            f"{n} {c}" for n, c in zip(spec.labels, counts.tolist(), strict=True)
        )
    )
    for reason in dropped:
        print(f"  left out (--drop-unusable): {reason}")
    print(
        f"spec: {spec_source}, hash {spec.short_hash}: p = {spec.n_features} features; "
        f"{100 * features.clipped.mean():.1f} % of the coefficients clipped to its "
        "bounds"
    )
    public = None
    public_note = ""
    if args.public is not None:
        pub_curves, _ = read_own_curves(args.public, spec, labelled=False)
        pub, _ = featurize_own(spec, pub_curves, source=args.public.name)
        if protocol == "default":
            public = pub.features
            public_note = (
                f"feature second moment from {public.shape[0]} public calibration "
                f"subjects ({args.public.name})"
            )
        else:
            public_note = (
                "--public is not used: the reference protocol's weak models are "
                "logistic regressions on the releases"
            )
    elif protocol == "default":
        public_note = (
            "no --public calibration curves: the feature second moment is estimated "
            "from the releases instead (public_features=False)"
        )
    seed = run_seed(args.seed)
    t0 = time.perf_counter()
    fit = fit_own(
        features,
        spec,
        epsilon=epsilon,
        protocol=protocol,
        seed=seed,
        test_fraction=args.test_fraction,
        public=public,
        num_weak_models=args.num_weak_models,
        subsample_size=args.subsample_size,
        threshold=args.threshold,
        no_signal_fit=args.no_signal_fit,
        multiclass_rule=args.multiclass_rule,
        multiclass_release=args.multiclass_release,
        record_seed=args.seed is not None,
        spec_text=spec_text,
    )
    timings["protocol_s"] = time.perf_counter() - t0
    seed_text = (
        f"seed {args.seed}"
        if args.seed is not None
        else "seed from OS entropy, recorded nowhere"
    )
    n = features.features.shape[0]
    print(
        f"held-out test set: {fit.n_test} of {n} subjects "
        f"({100 * args.test_fraction:g} % of every label, stratified, {seed_text}); "
        f"the protocol runs on the other {fit.train_idx.size}"
    )
    _print_release(fit, spec, protocol, epsilon)
    if public_note:
        print(public_note)
    print(f"test error on the {fit.n_test} held-out subjects (binomial s.e.):")
    chosen = fit.result.method
    for name, error in fit.test_errors.items():
        note = {
            chosen: "the model written",
            "non_private": "clean training features: a reference, not a release",
            "majority": f"always {spec.labels[fit.majority]!r}",
        }.get(name, "")
        se = fit.standard_error(error)
        line = f"  {_METHOD_LABELS[name]:<19} {error:.3f} ({se:.3f})"
        print(line + (f"   {note}" if note else ""))
    print(
        f"epsilon spent per client (max): {fit.result.privacy['max_spent']:g} "
        f"(budget {epsilon:g})"
    )
    from ldpfda.server.fitting import no_signal_warning

    warning = no_signal_warning(
        fit.result.signal,
        n_clients=_releasing(fit.settings),
        epsilon=epsilon,
        n_features=spec.n_features,
    )
    if warning:
        print(f"warning: {warning}")
    _write_fit(args, fit, spec_source, dropped, timings, t_start)
    return 0


def _print_release(fit: Any, spec: Any, protocol: str, epsilon: float) -> None:
    s, default = fit.settings, Settings()
    clients = f"{s.n_train + s.n_eval} clients ({s.n_train} + {s.n_eval})"
    if protocol == "default":
        k = len(spec.labels)
        release = "y~(1, x)" if k == 2 else f"a drawn class j of {k} and y~_j(1, x)"
        from ldpfda.schema.releases import joint_mechanism

        mech = joint_mechanism(
            epsilon, spec.n_features, "hybrid", k, s.multiclass_release
        )
        share = getattr(mech, "label_share", None)  # the split release's
        if share is not None:
            release = (
                f"its label of {k} by randomized response (share {share} of epsilon) "
                "and x,"
            )
        rules = [f"{s.threshold} threshold"] if s.threshold != default.threshold else []
        if s.no_signal_fit != default.no_signal_fit:
            rules.append(f"{s.no_signal_fit} where no signal")
        if k > 2:
            rules.append(f"{s.multiclass_rule} rule")
        how = f" ({', '.join(rules)})" if rules else ""
        print(
            f"default protocol, epsilon {epsilon:g}: {clients}, each releasing "
            f"{release} once with the hybrid mechanism; the moment classifier{how}"
        )
        for name in ("multiclass_rule", "multiclass_release"):
            if k == 2 and getattr(s, name) != getattr(default, name):
                flag = _FIT_FLAGS[name]
                print(f"  ({flag} applies to three or more labels: not used)")
    else:
        print(
            f"reference MRMA, epsilon {epsilon:g}: {s.n_train} training clients "
            f"release x and y, M={s.num_weak_models} logistic weak models on "
            f"{s.subsample_size} payloads each, {s.n_eval} evaluation clients answer "
            "one bit"
        )
        options = ("threshold", "no_signal_fit", "multiclass_rule")
        if any(getattr(s, name) != getattr(default, name) for name in options):
            print(
                "  (--threshold, --no-signal-fit and --multiclass-rule are the default "
                "protocol's moment classifier's: not used by MRMA)"
            )
        if s.multiclass_release != default.multiclass_release:
            print(
                "  (--multiclass-release is the default protocol's: not used by MRMA)"
            )
    if (protocol, epsilon) != (spec.release.protocol, spec.release.epsilon):
        print(
            f"  (the spec declares {spec.release.protocol}, epsilon "
            f"{spec.release.epsilon:g}; --protocol / --epsilon chose this run's)"
        )


def _write_fit(
    args: argparse.Namespace,
    fit: Any,
    spec_source: str,
    dropped: list[str],
    timings: dict[str, float],
    t_start: float,
) -> None:
    import hashlib

    record = fit.model_record(spec_source=spec_source, data=args.data.name)
    args.out.mkdir(parents=True, exist_ok=True)
    _write(args.out / "model.json", record)
    digest = hashlib.sha256(args.data.read_bytes()).hexdigest()
    keep: tuple[str, ...] = ("privacy.", "server.", "data.public-features", "seed")
    if fit.settings.protocol == "mrma":
        keep = (*keep, "mrma.")
    report = {
        "model": record,
        "run": fit.result.report(),
        "settings": {
            k: v
            for k, v in fit.settings.to_mapping().items()
            if k.startswith(keep) and (k != "seed" or fit.seed is not None)
        },
        "data": {
            "file": str(args.data),
            "sha256": digest,
            "layout": _layout(args.data, args.layout),
            "left_out": dropped,
        },
        "public": None if args.public is None else str(args.public),
        "test_subjects": [fit.features.subject_ids[i] for i in fit.test_idx.tolist()],
        "clipped_fraction": {
            "mean": float(fit.features.clipped.mean()),
            "max": float(fit.features.clipped.max()),
        },
        "timings": {**timings, "total_s": time.perf_counter() - t_start},
    }
    _write(args.out / "report.json", report)
    print(f"wrote {args.out / 'model.json'} and {args.out / 'report.json'}")


def _run_predict(args: argparse.Namespace) -> int:
    from ldpfda.engine.own_data import OwnModel, featurize_own, read_own_curves

    try:
        model = OwnModel.load(args.model)
        if not args.data.is_file():
            raise FileNotFoundError(f"--data {args.data}: no such file")
        curves, labelled = read_own_curves(
            args.data, model.spec, layout=args.layout, labelled=False
        )
        features, dropped = featurize_own(
            model.spec, curves, source=args.data.name, drop_unusable=args.drop_unusable
        )
    except (OSError, ValueError) as exc:
        print(f"ldpfda predict: error: {exc}", file=sys.stderr)
        return 1
    predictions = model.predict_features(features, labelled=labelled)
    log = sys.stdout if args.out is not None else sys.stderr
    if args.out is not None:
        predictions.write_csv(args.out)
    else:
        import csv

        writer = csv.writer(sys.stdout)
        try:
            writer.writerow(["subject", "label", "probability"])
            for subject, label, p in predictions.rows():
                writer.writerow([subject, label, f"{p:.6f}"])
            sys.stdout.flush()
        except BrokenPipeError:  # the reader (``| head``) stopped: nothing to do
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
    for reason in dropped:
        print(f"left out (--drop-unusable): {reason}", file=log)
    summary = (
        f"{len(predictions.subject_ids)} subjects of {args.data.name} classified with "
        f"{args.model} (spec {model.spec.short_hash}, {model.protocol} protocol, "
        f"epsilon {model.epsilon:g})"
    )
    if predictions.true_labels is not None:
        error = float(np.mean(predictions.labels != predictions.true_labels))
        summary += f"; error on the file's labels: {error:.3f}"
    print(summary, file=log)
    if args.out is not None:
        print(f"wrote {args.out}", file=log)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    delegated = {
        "experiment": "ldpfda.experiments.runner",
        "plot": "ldpfda.experiments.plot",
        "benchmark": "ldpfda.experiments.benchmark",
        "spec": "ldpfda.schema.spec",
        "node": "ldpfda.client.check",
    }
    if argv and argv[0] in delegated:
        return int(importlib.import_module(delegated[argv[0]]).main(argv[1:]) or 0)
    if argv and argv[0] == "deploy":
        return int(_deploy_module("operate").main(argv[1:]))
    parser = argparse.ArgumentParser(
        prog="ldpfda",
        allow_abbrev=False,
        description="Federated classification of functional data under local DP.",
    )
    parser.add_argument("--version", action="version", version=f"ldpfda {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _simulate_parser(sub)
    _fit_parser(sub)
    _predict_parser(sub)
    _multiserver_parser(sub)
    for name, text in (
        ("spec", "write (spec init) or check (spec check) a federation spec"),
        ("deploy", "operate a Flower deployment: certs, keys, nodes, runs"),
        (
            "node",
            "check a node's data file (node check), or its spending (node ledger)",
        ),
        ("experiment", "run an experiment study from a TOML config"),
        ("plot", "make figures from saved experiment results"),
        ("benchmark", "clients/s and peak memory of the engine"),
    ):
        sub.add_parser(name, help=text, add_help=False)
    args = parser.parse_args(argv)
    if args.command == "multiserver":
        return _run_multiserver(args)
    if args.command == "fit":
        return _run_fit(args)
    if args.command == "predict":
        return _run_predict(args)
    return _run_simulate(args)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
