"""Run a study from its ``conf/*.toml``: every (point, repeat), cached, then summarised.

``python -m ldpfda.experiments.runner CONF.toml [--quick] [--out DIR]`` (or ``ldpfda
experiment``); the study files and the outputs are described in
``experiments/README.md``. Each finished repeat is appended to ``runs.jsonl`` under a
key that hashes everything that determines it, so an interrupted run resumes where it
stopped and a changed configuration never reuses a record. A record made by other code
(:func:`code_fingerprint`) is stale too and is run again unless ``--allow-stale`` is
given, so one summary never mixes two versions of the code.
"""

from __future__ import annotations

import argparse
import copy
import csv
import hashlib
import itertools
import json
import os
import platform
import sys
import time
import tomllib
from collections.abc import Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from ldpfda.config import Settings
from ldpfda.experiments.common import (
    ALL_METHODS,
    REFERENCE_PROTOCOL,
    limit_blas_threads,
    mean_se,
)

__all__ = ["code_fingerprint", "load_config", "main", "plan", "run_study"]

#: Default output folder (git-ignored).
DEFAULT_OUT = Path("experiments") / "results"
#: Point fields written to the summary, in column order (``n_clients``: training plus
#: evaluation clients; empty for the real driver, whose sizes follow its split rule).
POINT_FIELDS = ("dataset", "epsilon", "n_basis", "order", "cutoff", "n_clients")
#: A [grid] key of the synthetic driver that is no setting: the number of clients of
#: the federation, split and MRMA sized by the study's [clients] table (a SplitRule).
CLIENTS_KEY = "n-clients"
DRIVERS = ("synthetic", "real", "kclass")
#: Drivers whose [grid] datasets take per-data-set settings and the [split] rule.
SPLIT_DRIVERS = ("real", "kclass")
#: Methods a summary may hold: every study's, then the K-class study's one-vs-rest,
#: its default releases under the LDA rule and the default's two K-class releases.
SUMMARY_METHODS = (
    *ALL_METHODS,
    "one_vs_rest",
    "default_lda",
    "default_draw",
    "default_split",
)

Task = dict[str, Any]


def flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested TOML tables as dotted keys (``{"mrma": {"cutoff": .2}}``: mrma.cutoff)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_config(
    path: str | os.PathLike[str],
    *,
    quick: bool = False,
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Read a study file; with ``quick`` its ``[quick]`` table overrides the rest, and
    ``settings`` (dotted keys, e.g. ``{"server.threshold": "refit"}``) its
    ``[settings]``."""
    with open(path, "rb") as fh:
        conf = tomllib.load(fh)
    overrides = conf.pop("quick", {})
    if quick:
        conf = _merge(conf, overrides)
    for key, value in (settings or {}).items():
        nested: Any = value
        for part in reversed(["settings", *key.split(".")]):
            nested = {part: nested}
        conf = _merge(conf, nested)
    study = conf.get("study", {})
    if "name" not in study:
        raise ValueError(f"{path}: [study] needs a name")
    driver = study.get("driver", "synthetic")
    if driver not in DRIVERS:
        raise ValueError(f"{path}: driver must be one of {DRIVERS}, got {driver!r}")
    repeats = study.get("repeats", 20)
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"{path}: repeats must be an integer >= 1, got {repeats!r}")
    return conf


def _grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    keys = list(grid)
    values = [v if isinstance(v, list) else [v] for v in grid.values()]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*values)]


def _key(payload: dict[str, Any]) -> str:
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


#: Modules that run nothing of a study's numbers (left out of the fingerprint).
_NOT_FINGERPRINTED = (
    "ldpfda.experiments.runner",
    "ldpfda.experiments.plot",
    "ldpfda.experiments.benchmark",
    "ldpfda.cli",
)
_FINGERPRINT: str | None = None


def code_fingerprint() -> str:
    """Hash of the source of every ldpfda module the study drivers import.

    The drivers are imported first, so the set of modules is their import closure,
    the same in the main process and in every worker.
    """
    global _FINGERPRINT
    if _FINGERPRINT is None:
        import ldpfda.experiments.multiclass  # noqa: F401
        import ldpfda.experiments.realdata  # noqa: F401
        import ldpfda.experiments.synthetic  # noqa: F401

        digest = hashlib.sha1()
        for name in sorted(m for m in sys.modules if m.startswith("ldpfda")):
            path = getattr(sys.modules[name], "__file__", None)
            if name in _NOT_FINGERPRINTED or not path:
                continue
            digest.update(name.encode())
            digest.update(Path(path).read_bytes())
        _FINGERPRINT = digest.hexdigest()[:12]
    return _FINGERPRINT


def plan(conf: dict[str, Any], *, repeats: int | None = None) -> list[Task]:
    """Every (point, repeat) task of a study, in a fixed order."""
    study = conf["study"]
    driver = study.get("driver", "synthetic")
    repeats = study.get("repeats", 20) if repeats is None else repeats
    fixed = flatten(conf.get("settings", {}))
    # The studies are about the reference MRMA protocol, unless a study file chooses.
    for name, value in REFERENCE_PROTOCOL.items():
        if not any(k.rsplit(".", 1)[-1] == name for k in fixed):
            fixed[name] = value
    base = Settings.from_mapping(fixed)
    base = base.replace(seed=int(study.get("seed", base.seed)))
    baselines = {
        name: conf.get("baselines", {}).get(name, {})
        for name in study.get("baselines", [])
    }
    tasks: list[Task] = []
    for changes in _grid_points(conf.get("grid", {})):
        dataset = changes.pop("dataset", None)
        extra: dict[str, Any] = {}
        if CLIENTS_KEY in changes:
            from ldpfda.experiments.realdata import SplitRule

            if driver in SPLIT_DRIVERS:
                raise ValueError(f"{CLIENTS_KEY} is a grid key of the synthetic driver")
            rule = SplitRule.from_mapping(conf.get("clients"))
            sizes = rule.federation(changes.pop(CLIENTS_KEY))
            changes.update({k.replace("_", "-"): v for k, v in sizes.items()})
        if driver in SPLIT_DRIVERS:
            if dataset is None:
                raise ValueError(f"the {driver} driver needs a dataset in [grid]")
            changes = {**flatten(conf.get("datasets", {}).get(dataset, {})), **changes}
            extra = {"rule": conf.get("split", {})}
        elif dataset is not None:
            changes["dataset"] = dataset
        settings = Settings.from_mapping(changes, base=base)
        info = {k: getattr(settings, k) for k in POINT_FIELDS[:-1]}
        info["n_clients"] = (
            None if driver in SPLIT_DRIVERS else settings.n_train + settings.n_eval
        )
        if dataset is not None:
            info["dataset"] = dataset
        ident = {
            "study": study["name"],
            "driver": driver,
            "settings": settings.to_mapping(),
            "dataset": info["dataset"],
            "baselines": baselines,
            **extra,
        }
        tasks += [
            {
                "key": _key({**ident, "repeat": r}),
                "point_id": _key(ident),
                "study": study["name"],
                "driver": driver,
                "point": info,
                "settings": settings.to_mapping(),
                "baselines": baselines,
                "repeat": r,
                **extra,
            }
            for r in range(repeats)
        ]
    return tasks


def run_task(task: Task) -> dict[str, Any]:
    """Run one (point, repeat); return its JSON record."""
    settings = Settings.from_mapping(task["settings"])
    t0 = time.perf_counter()
    if task["driver"] in SPLIT_DRIVERS:
        from ldpfda.experiments.multiclass import run_point as run_kclass
        from ldpfda.experiments.realdata import SplitRule
        from ldpfda.experiments.realdata import run_point as run_real

        errors, extra = (run_real if task["driver"] == "real" else run_kclass)(
            settings,
            task["repeat"],
            task["baselines"],
            dataset=task["point"]["dataset"],
            rule=SplitRule.from_mapping(task.get("rule")),
        )
    else:
        from ldpfda.experiments.synthetic import run_point as run_synthetic

        errors, extra = run_synthetic(settings, task["repeat"], task["baselines"])
    return {
        "key": task["key"],
        "point_id": task["point_id"],
        "study": task["study"],
        "point": task["point"],
        "repeat": task["repeat"],
        "errors": errors,
        "extra": extra,
        "seconds": time.perf_counter() - t0,
        "code": code_fingerprint(),
    }


def _read_records(path: Path, code: str | None) -> dict[str, dict[str, Any]]:
    """The records of ``path`` by key; only those made by ``code`` unless it is None."""
    records: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return records
    with open(path) as fh:
        for line in fh:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by an interruption
            if code is None or record.get("code") == code:
                records[record["key"]] = record
    return records


def _init_worker() -> None:
    """One BLAS thread per worker process (the pool already uses every core)."""
    code_fingerprint()
    limit_blas_threads(1)


def _execute(
    todo: list[Task], workers: int, runs: Path, progress: bool, label: str
) -> None:
    from tqdm import tqdm

    bar = tqdm(
        total=len(todo), desc=label, unit="run", disable=not progress, file=sys.stderr
    )
    cut = False
    if runs.exists() and runs.stat().st_size:
        with open(runs, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            cut = fh.read(1) != b"\n"
    with open(runs, "a") as out:
        if cut:  # the last line was cut short by an interruption: end it
            out.write("\n")

        def write(record: dict[str, Any]) -> None:
            out.write(json.dumps(record) + "\n")
            out.flush()
            bar.update()

        if workers <= 1:
            _init_worker()
            for task in todo:
                write(run_task(task))
        else:
            with ProcessPoolExecutor(
                workers, mp_context=get_context("spawn"), initializer=_init_worker
            ) as pool:
                futures = [pool.submit(run_task, task) for task in todo]
                try:
                    for future in as_completed(futures):
                        write(future.result())
                except BaseException:
                    for future in futures:
                        future.cancel()
                    raise
    bar.close()


def summarise(
    tasks: Iterable[Task], records: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """Mean and standard error of each method's test error, per point."""
    groups: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for task in (t for t in tasks if t["key"] in records):
        point, runs = groups.setdefault(task["point_id"], (task["point"], []))
        runs.append(records[task["key"]])
    rows = []
    for point, runs in groups.values():
        present = (m for m in SUMMARY_METHODS if all(m in r["errors"] for r in runs))
        for method in present:
            mean, se = mean_se([r["errors"][method] for r in runs])
            rows.append(
                {
                    **{k: point[k] for k in POINT_FIELDS},
                    "method": method,
                    "mean": mean,
                    "se": se,
                    "n": len(runs),
                }
            )
    return rows


def _machine() -> dict[str, Any]:
    import sklearn

    return {
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "system": platform.system(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "sklearn": sklearn.__version__,
    }


def run_study(
    conf_path: str | os.PathLike[str],
    *,
    quick: bool = False,
    out: str | os.PathLike[str] = DEFAULT_OUT,
    workers: int = 2,
    repeats: int | None = None,
    progress: bool = True,
    allow_stale: bool = False,
    settings: Mapping[str, Any] | None = None,
) -> Path:
    """Run (or resume) one study and write its summary; returns its output folder.
    ``settings`` override the study file's ``[settings]`` (:func:`load_config`)."""
    conf = load_config(conf_path, quick=quick, settings=settings)
    name = conf["study"]["name"] + ("-quick" if quick else "")
    folder = Path(out) / name
    folder.mkdir(parents=True, exist_ok=True)
    runs = folder / "runs.jsonl"
    tasks = plan(conf, repeats=repeats)
    code = None if allow_stale else code_fingerprint()
    done = _read_records(runs, code)
    todo = [t for t in tasks if t["key"] not in done]
    t0 = time.perf_counter()
    if todo:
        _execute(todo, max(1, workers), runs, progress, name)
    wall = time.perf_counter() - t0
    records = _read_records(runs, code)
    rows = summarise(tasks, records)
    with open(folder / "summary.csv", "w", newline="") as fh:
        writer = csv.DictWriter(
            fh, fieldnames=[*POINT_FIELDS, "method", "mean", "se", "n"]
        )
        writer.writeheader()
        writer.writerows(rows)
    with open(folder / "summary.json", "w") as fh:
        json.dump(
            {"study": conf["study"]["name"], "quick": quick, "rows": rows}, fh, indent=1
        )
    meta_path = folder / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {"sessions": []}
    used = [records[t["key"]] for t in tasks if t["key"] in records]
    meta.update(
        config=conf,
        machine=_machine(),
        n_tasks=len(tasks),
        n_records=len(used),
        code=sorted({r.get("code") or "?" for r in used}),
    )
    meta["sessions"].append(
        {
            "ran": len(todo),
            "cached": len(tasks) - len(todo),
            "wall_seconds": wall,
            "workers": workers,
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
    )
    meta_path.write_text(json.dumps(meta, indent=1, default=str))
    return folder


def _setting_pair(pair: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--set``: the value as TOML (a number, bool, ...), else the
    bare string (``ValueError`` without a key and an ``=``)."""
    key, sep, text = pair.partition("=")
    if not sep or not key:
        raise ValueError(f"--set takes KEY=VALUE, got {pair!r}")
    try:
        return key, tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return key, text


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        allow_abbrev=False, prog="ldpfda experiment", description=__doc__.split("\n")[0]
    )
    parser.add_argument("configs", nargs="+", help="study files (conf/*.toml)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small version of each study (its [quick] table)",
    )
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="output folder")
    parser.add_argument(
        "--workers",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="worker processes (default: 2)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="override the study's number of repeats",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.add_argument(
        "--allow-stale",
        action="store_true",
        help="reuse cached runs made by other versions of the code",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a [settings] entry of every study (a TOML value, or a bare "
        "string), e.g. --set server.threshold=refit; repeatable. The results go to "
        "the study's folder under --out: give another --out than the plain run's",
    )
    args = parser.parse_args(argv)
    try:
        overrides = dict(_setting_pair(pair) for pair in args.set)
    except ValueError as error:
        parser.error(str(error))
    for conf in args.configs:
        t0 = time.perf_counter()
        folder = run_study(
            conf,
            quick=args.quick,
            out=args.out,
            workers=args.workers,
            repeats=args.repeats,
            progress=not args.no_progress,
            allow_stale=args.allow_stale,
            settings=overrides,
        )
        print(f"{conf}: {folder} ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
