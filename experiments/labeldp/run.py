"""Driver of the label-DP study: normalized accuracy vs epsilon, and a cluster ablation.

    python -m ldpfda.experiments.labeldp.run [--quick] [--workers N] [--fashion-dir DIR]

Every finished point is appended to ``<results-dir>/points.jsonl`` at once, so a rerun
skips it and an interrupted run resumes; clusterings are cached in
``<results-dir>/cache``. Nothing is downloaded. The methods are described in this
folder's README, the settings in ``config.toml``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tomllib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

# One BLAS thread per worker: the study runs points in parallel processes instead.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEFAULT_CONFIG = HERE / "config.toml"
#: What identifies a point besides its key; every result row starts with them.
TASK_FIELDS = ("dataset", "study", "method", "epsilon", "n_clusters", "trial")
#: What the rows of ``cluster_rr`` report of the rule's choices.
REPORTED_CHOICES = ("histogram_share", "majority_share", "choice")

Task = dict[str, Any]


def _table(raw: dict[str, Any], convert: Callable[[Any], Any] = lambda v: v) -> dict:
    return {key.replace("-", "_"): convert(value) for key, value in raw.items()}


def load_config(path: Path, quick: bool) -> dict[str, Any]:
    """Read the TOML file and resolve the quick overrides into one settings dict."""
    with open(path, "rb") as handle:
        raw = tomllib.load(handle)
    # The quick table overrides datasets, epsilons, trials and ablation-clusters.
    study = raw["study"] | (raw["quick"] if quick else {})
    results = ROOT / study["results-dir"]
    settings: dict[str, Any] = {
        "seed": int(study["seed"]),
        "results_dir": results / study["results-subdir"] if quick else results,
        "datasets": list(study["datasets"]),
        "epsilons": [float(e) for e in study["epsilons"]],
        "trials": int(study["trials"]),
        "ablation_epsilon": float(study["ablation-epsilon"]),
        "ablation_clusters": [int(c) for c in study["ablation-clusters"]],
        "learner_cs": [float(c) for c in study["learner-cs"]],
        "workers": int(study.get("workers", 1)),
        "fixed": _table(raw["fixed-cluster-rr"], float),
        "dpsgd": _table(raw["dpsgd"], float),
        "data": {name: _table(table) for name, table in raw["data"].items()},
    }
    if quick:
        fashion = settings["data"].setdefault("fashion_mnist", {})
        fashion["train_size"] = int(study["fashion-train-size"])
        fashion["test_size"] = int(study["fashion-test-size"])
    return settings


# --------------------------------------------------------------------------- workers
_DATA: dict[str, Any] = {}


def _dataset(name: str, settings: dict[str, Any]) -> Any:
    from ldpfda.experiments.labeldp.data import load_dataset

    if name not in _DATA:
        cfg = settings["data"].get(name, {})
        _DATA[name] = load_dataset(
            name,
            n_components=int(cfg.get("n_components", 50)),
            fashion_dir=cfg.get("fashion_dir"),
            train_size=cfg.get("train_size"),
            test_size=cfg.get("test_size"),
            seed=settings["seed"],
        )
    return _DATA[name]


def _clusters(name: str, n_clusters: int, trial: int, settings: dict[str, Any]) -> Any:
    """k-means clusters of the training features (public), cached on disk."""
    from ldpfda.labeldp import assign_clusters
    from ldpfda.privacy import derive_seed

    cache = settings["results_dir"] / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"clusters_{name}_{n_clusters}_{trial}.npy"
    if path.exists():
        return np.load(path)
    data = _dataset(name, settings)
    seed = derive_seed(settings["seed"], "kmeans", name, n_clusters, trial)
    labels = assign_clusters(data.cluster_train, n_clusters=n_clusters, rng=seed)
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
    np.save(tmp, labels)
    os.replace(tmp, path)
    return labels


def run_task(task: Task, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """Run one point (one release, possibly several learners); return result rows."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    from ldpfda.labeldp import (
        AutoClusterRR,
        BackwardCorrectedLogisticRegression,
        ClusterRR,
        DPSGDLogisticRegression,
        ForwardCorrectedLogisticRegression,
        NoisyLabelLogisticRegression,
        UniformRR,
        histogram_sigma,
    )
    from ldpfda.privacy import derive_seed

    start = time.perf_counter()
    name, method, eps = task["dataset"], task["method"], task["epsilon"]
    data = _dataset(name, settings)
    k = data.n_classes
    seed = derive_seed(settings["seed"], task["key"])
    rng = np.random.default_rng(seed)
    common = {"Cs": settings["learner_cs"], "random_state": seed % (2**31)}
    rows: list[dict[str, Any]] = []

    def add(learner: str, model: Any, spent: float, **extra: Any) -> None:
        rows.append(
            {
                **{key: task[key] for key in TASK_FIELDS},
                "learner": learner,
                "accuracy": float(np.mean(model.predict(data.x_test) == data.y_test)),
                "epsilon_spent": spent,
                "C": getattr(model, "C_", None),
                **extra,
            }
        )

    def plain() -> Any:
        return NoisyLabelLogisticRegression(n_classes=k, **common)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        if method in ("cluster_rr", "cluster_rr_fixed"):
            clusters = _clusters(name, task["n_clusters"], task["trial"], settings)
        if method == "nonprivate":
            add("plain", plain().fit(data.x_train, data.y_train), float("inf"))
        elif method == "uniform_rr":
            release = UniformRR(epsilon=eps, n_classes=k).release(data.y_train, rng=rng)
            for learner, model in (
                ("plain", plain()),
                ("forward", ForwardCorrectedLogisticRegression(**common)),
                ("backward", BackwardCorrectedLogisticRegression(**common)),
            ):
                add(learner, model.fit_release(data.x_train, release), release.epsilon)
        elif method == "cluster_rr":
            auto = AutoClusterRR(
                epsilon=eps, n_classes=k, n_parameters=(data.x_train.shape[1] + 1) * k
            )
            release = auto.release(data.y_train, clusters=clusters, rng=rng)
            model = ForwardCorrectedLogisticRegression(**common)
            params = dict(release.parameters)
            add(
                "plain" if release.beta == 0.0 else "forward",
                model.fit_release(data.x_train, release),
                release.epsilon,
                beta=release.beta,
                resample_probability=release.resample_probability,
                **{key: params.get(key) for key in REPORTED_CHOICES},
            )
        elif method == "cluster_rr_fixed":
            fixed = settings["fixed"]
            share = fixed["histogram_share"]
            release = ClusterRR(
                n_classes=k,
                sigma=histogram_sigma(epsilon=share * eps),
                tau=fixed["tau"],
                floor=fixed["floor"],
                epsilon_resample=(1.0 - share) * eps,
            ).release(data.y_train, clusters=clusters, rng=rng)
            add(
                "plain",
                plain().fit_release(data.x_train, release),
                release.epsilon,
                resample_probability=release.resample_probability,
            )
        elif method == "dp_sgd":
            batch = int(settings["data"].get(name, {}).get("dpsgd_batch_size", 256))
            model = DPSGDLogisticRegression(
                epsilon=eps,
                batch_size=batch,
                n_classes=k,
                random_state=seed % (2**31),
                **settings["dpsgd"],  # clip_norm, epochs and learning_rate
            ).fit(data.x_train, data.y_train)
            add(
                "dp_sgd",
                model,
                model.epsilon_,
                delta=model.delta_,
                noise_multiplier=model.noise_multiplier_,
            )
        else:
            raise ValueError(f"unknown method {method!r}")
    elapsed = time.perf_counter() - start
    n_warn = sum(issubclass(w.category, ConvergenceWarning) for w in caught)
    for row in rows:
        row["seconds"] = elapsed
        row["convergence_warnings"] = n_warn
    return rows


# --------------------------------------------------------------------------- planning
def make_task(*values: Any) -> Task:
    """The point of ``TASK_FIELDS`` = ``values``, with its key."""
    dataset, study, method, eps, n_clusters, trial = values
    key = f"{dataset}|{study}|{method}|{eps:g}|{n_clusters}|{trial}"
    return {"key": key, **dict(zip(TASK_FIELDS, values, strict=True))}


def make_tasks(settings: dict[str, Any]) -> list[Task]:
    """Every point of the study, Fashion-MNIST's main curves first."""
    tasks: list[Task] = []

    def add(*values: Any) -> None:
        tasks.append(make_task(*values))

    eps_abl = settings["ablation_epsilon"]
    for dataset in settings["datasets"]:
        n_clusters = int(settings["data"].get(dataset, {}).get("n_clusters", 100))
        add(dataset, "main", "nonprivate", float("inf"), None, 0)
        for trial in range(settings["trials"]):
            for eps in settings["epsilons"]:
                add(dataset, "main", "uniform_rr", eps, None, trial)
                add(dataset, "main", "cluster_rr", eps, n_clusters, trial)
                add(dataset, "main", "cluster_rr_fixed", eps, n_clusters, trial)
                add(dataset, "main", "dp_sgd", eps, None, trial)
        for trial in range(settings["trials"]):
            for n_c in settings["ablation_clusters"]:
                for method in ("cluster_rr", "cluster_rr_fixed"):
                    add(dataset, "ablation", method, eps_abl, n_c, trial)
    return tasks


def _done_keys(points: Path) -> set[str]:
    if not points.exists():
        return set()
    with open(points) as handle:
        return {json.loads(line)["key"] for line in handle if line.strip()}


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _run_all(
    function: Callable[..., Any], jobs: Iterable[tuple], workers: int
) -> Iterator[tuple[tuple, Any]]:
    """Yield ``(job, function(*job))`` as jobs finish, in ``workers`` processes."""
    if workers <= 1:
        for job in jobs:
            yield job, function(*job)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        pending: dict[Future[Any], tuple] = {}
        queue = list(jobs)
        while queue or pending:
            while queue and len(pending) < 2 * workers:
                job = queue.pop(0)
                pending[pool.submit(function, *job)] = job
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                yield pending.pop(future), future.result()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="small run (~2 min)")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument(
        "--fashion-dir", type=Path, help="folder with the Fashion-MNIST IDX(.gz) files"
    )
    parser.add_argument("--workers", type=int)
    parser.add_argument("--results-dir", type=Path)
    args = parser.parse_args(argv)

    settings = load_config(args.config, args.quick)
    if args.fashion_dir is not None:
        fashion = settings["data"].setdefault("fashion_mnist", {})
        fashion["fashion_dir"] = args.fashion_dir
    if args.results_dir is not None:
        settings["results_dir"] = args.results_dir
    workers = args.workers or settings["workers"]
    out: Path = settings["results_dir"]
    out.mkdir(parents=True, exist_ok=True)
    points = out / "points.jsonl"
    done = _done_keys(points)
    tasks = [t for t in make_tasks(settings) if t["key"] not in done]
    print(
        f"{len(done)} points cached in {points}, {len(tasks)} to run "
        f"with {workers} worker(s)",
        flush=True,
    )
    started = time.perf_counter()
    needed = sorted(
        {
            (t["dataset"], t["n_clusters"], t["trial"])
            for t in tasks
            if t["n_clusters"] is not None
        }
    )
    if needed:
        print(
            f"clustering: {len(needed)} k-means fits (cached after the first run)",
            flush=True,
        )
        jobs = [(*key, settings) for key in needed]
        fits = _run_all(_clusters, jobs, workers)
        for _ in tqdm(fits, total=len(jobs), unit="fit", file=sys.stdout):
            pass
    with (
        open(points, "a") as sink,
        tqdm(total=len(tasks), unit="pt", file=sys.stdout) as bar,
    ):
        runs = [(task, settings) for task in tasks]
        for (task, _), rows in _run_all(run_task, runs, workers):
            sink.writelines(
                json.dumps({"key": task["key"], **row}, default=_json_default) + "\n"
                for row in rows
            )
            sink.flush()
            bar.set_postfix_str(task["key"][:48])
            bar.update(1)
    print(f"done in {time.perf_counter() - started:.0f} s; results in {points}")
    from ldpfda.experiments.labeldp.plot import summarise

    summarise(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
