"""Benchmark of the whole in-process protocol for 10^4 to 10^6 clients.

Every size runs in a fresh Python process, so its peak resident memory
(``ru_maxrss``) is its own. A run calibrates the featurizer on 1000 public curves (10
cubic B-splines; not protocol time), serves the clients from a
:class:`~ldpfda.experiments.population.LazyCurvePopulation` of 100-point curves of the
functional design, and runs :func:`ldpfda.engine.run_protocol` (the reference MRMA,
M = 50). Throughput is clients / protocol wall time. ``--profile`` writes the top
functions by cumulative time of each run. ``--flower MODULE:FUNC`` times Flower
simulations: ``FUNC(n_clients: int, settings: Settings)`` returns a dict with at least
``wall_s``, called in a fresh process per size.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import json
import os
import platform
import pstats
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_SIZES", "main", "markdown_table", "run_flower", "run_one"]

DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
DEFAULT_OUT = Path("experiments") / "results" / "benchmark"


def _peak_rss_mb() -> float:
    # ru_maxrss is in kilobytes on Linux (bytes on macOS).
    scale = 1.0 / 1024**2 if sys.platform == "darwin" else 1.0 / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def run_one(
    n_clients: int,
    *,
    train_fraction: float = 1.0 / 6.0,
    epsilon: float = 5.0,
    seed: int = 0,
    chunk_size: int = 100_000,
    n_test: int = 10_000,
    profile: str | None = None,
    blas_threads: int | None = 1,
) -> dict[str, Any]:
    """One benchmark run in this process; returns timings, throughput and peak memory.

    ``train_fraction`` of the clients train (the reference protocol's 500 : 2500
    split), the rest evaluate. ``blas_threads`` caps the BLAS/OpenMP thread pools
    (None: the library defaults); one thread is faster here, because the server fits
    50 tiny logistic regressions whose BLAS calls only pay for thread hand-offs.
    """
    import numpy as np

    from ldpfda.datasets.population import make_featurizer
    from ldpfda.datasets.synthetic import FunctionalDesign
    from ldpfda.engine import run_protocol
    from ldpfda.experiments.common import limit_blas_threads, reference_settings
    from ldpfda.experiments.population import LazyCurvePopulation
    from ldpfda.privacy.random import derive_seed
    from ldpfda.server.fitting import score

    if blas_threads is not None:
        limit_blas_threads(blas_threads)

    rss_start = _peak_rss_mb()
    n_train = max(50, int(round(train_fraction * n_clients)))
    n_eval = n_clients - n_train
    # The defaults: 10 cubic B-splines, M = 50 weak models on 50 payloads each.
    settings = reference_settings(
        dataset="functional",
        epsilon=epsilon,
        n_train=n_train,
        n_eval=n_eval,
        n_test=n_test,
        seed=seed,
    )
    design = FunctionalDesign()
    t0 = time.perf_counter()
    featurizer = make_featurizer(
        design, settings, np.random.default_rng(derive_seed(seed, "public"))
    )
    setup_s = time.perf_counter() - t0
    train = LazyCurvePopulation(n_train, 0, featurizer, seed, "train", design)
    evaluation = LazyCurvePopulation(n_eval, n_train, featurizer, seed, "eval", design)
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    t0 = time.perf_counter()
    result = run_protocol(
        train,
        evaluation,
        settings,
        seed=derive_seed(seed, "clients"),
        server_rng=np.random.default_rng(derive_seed(seed, "server")),
        chunk_size=chunk_size,
        keep_payload=False,
    )
    wall = time.perf_counter() - t0
    if profile and profiler is not None:
        profiler.disable()
        with open(profile, "w") as fh:
            pstats.Stats(profiler, stream=fh).sort_stats("cumulative").print_stats(30)
    peak = _peak_rss_mb()
    x_test, y_test = design.sample(
        n_test, np.random.default_rng(derive_seed(seed, "test"))
    )
    score(result, featurizer.transform(x_test), y_test)
    return {
        "n_clients": n_clients,
        "n_train": n_train,
        "n_eval": n_eval,
        "epsilon": epsilon,
        "n_basis": settings.n_basis,
        "n_points": design.n_points,
        "num_weak_models": settings.num_weak_models,
        "chunk_size": chunk_size,
        "setup_s": setup_s,
        "protocol_wall_s": wall,
        "clients_per_s": n_clients / wall,
        "timings": result.timings,
        "peak_rss_mb": peak,
        "rss_after_imports_mb": rss_start,
        "blas_threads": blas_threads,
        "mrma_test_error": result.test_errors["mrma"],
        "naive_test_error": result.test_errors["naive"],
    }


def run_flower(spec: str, n_clients: int, epsilon: float = 5.0) -> dict[str, Any]:
    """Call the Flower timing hook ``MODULE:FUNC`` in this process."""
    from ldpfda.experiments.common import reference_settings

    module, _, func = spec.partition(":")
    hook = getattr(importlib.import_module(module), func)
    settings = reference_settings(dataset="functional", epsilon=epsilon, n_basis=10)
    t0 = time.perf_counter()
    out = dict(hook(n_clients, settings))
    out.setdefault("wall_s", time.perf_counter() - t0)
    out["peak_rss_mb"] = _peak_rss_mb()
    out["n_clients"] = n_clients
    return out


def _child(args: list[str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "ldpfda.experiments.benchmark", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark child failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The README table of the in-process runs."""
    head = (
        "| clients | train / eval | privatize s | train s | evaluate s "
        "| aggregate s | protocol s | clients/s | peak RSS MB | MRMA test error |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        t = r["timings"]
        lines.append(
            f"| {r['n_clients']:,} | {r['n_train']:,} / {r['n_eval']:,} "
            f"| {t['clients_privatize_s']:.2f} | {t['server_train_s']:.2f} "
            f"| {t['clients_evaluate_s']:.2f} | {t['server_aggregate_s']:.2f} "
            f"| {r['protocol_wall_s']:.2f} | {r['clients_per_s']:,.0f} "
            f"| {r['peak_rss_mb']:,.0f} | {r['mrma_test_error']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        allow_abbrev=False, prog="ldpfda-benchmark", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES))
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--epsilon", type=float, default=5.0)
    parser.add_argument("--chunk-size", type=int, default=100_000)
    parser.add_argument(
        "--blas-threads",
        type=int,
        default=1,
        help="BLAS threads per run (0: library default)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="write cProfile statistics of each run to OUT",
    )
    parser.add_argument(
        "--flower",
        default=None,
        metavar="MODULE:FUNC",
        help="hook that times a Flower simulation of n clients, e.g. "
        "ldpfda.experiments.flower_bench:simulate",
    )
    parser.add_argument(
        "--flower-sizes",
        default="100,1000",
        help="client counts of the Flower simulations",
    )
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--flower-one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--profile-file", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.one is not None:  # child: one size, JSON on the last line of stdout
        row = run_one(
            args.one,
            epsilon=args.epsilon,
            chunk_size=args.chunk_size,
            profile=args.profile_file,
            blas_threads=args.blas_threads or None,
        )
        print(json.dumps(row))
        return 0
    if args.flower_one is not None:
        print(json.dumps(run_flower(args.flower, args.flower_one, args.epsilon)))
        return 0

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, flower_rows = [], []
    epsilon = ["--epsilon", str(args.epsilon)]
    for n in (int(s) for s in args.sizes.split(",")):
        child = ["--one", str(n), *epsilon, "--chunk-size", str(args.chunk_size)]
        child += ["--blas-threads", str(args.blas_threads)]
        if args.profile:
            child += ["--profile-file", str(out / f"profile_{n}.txt")]
        row = _child(child)
        rows.append(row)
        print(
            f"{n:>9,} clients: {row['protocol_wall_s']:6.2f} s, "
            f"{row['clients_per_s']:>10,.0f} clients/s, "
            f"peak {row['peak_rss_mb']:,.0f} MB",
            flush=True,
        )
    for n in (int(s) for s in args.flower_sizes.split(",")) if args.flower else ():
        flower = _child(["--flower-one", str(n), "--flower", args.flower, *epsilon])
        flower_rows.append(flower)
        print(
            f"flower {n:>6,} clients: {flower['wall_s']:6.1f} s, peak "
            f"{flower.get('flower_peak_rss_mb', float('nan')):,.0f} MB (Flower and "
            "Ray processes)",
            flush=True,
        )
    report = {
        "machine": {
            "cpu_count": os.cpu_count(),
            "machine": platform.machine(),
            "python": platform.python_version(),
        },
        "runs": rows,
        "flower": flower_rows,
    }
    (out / "benchmark.json").write_text(json.dumps(report, indent=1))
    table = markdown_table(rows)
    if flower_rows:
        table += (
            "\n| Flower simulation, clients | wall s | peak RSS MB (Flower + Ray) |\n"
        )
        table += "|---|---|---|\n" + "".join(
            f"| {r['n_clients']:,} | {r['wall_s']:.1f} | "
            f"{r.get('flower_peak_rss_mb', float('nan')):,.0f} |\n"
            for r in flower_rows
        )
    (out / "benchmark.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
