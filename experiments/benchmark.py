"""Benchmark of the whole in-process protocol for 10^4 to 10^7 clients, both protocols.

Every size runs in a fresh Python process, so its peak resident memory
(``ru_maxrss``) is its own. A run calibrates the featurizer on 1000 public curves (10
cubic B-splines; not protocol time), serves the clients from a
:class:`~ldpfda.experiments.population.LazyCurvePopulation` of 100-point curves of the
functional design, and runs :func:`ldpfda.engine.run_protocol`: the reference MRMA
(M = 50) and the default (one joint hybrid release per client, moment classifier with
the releases' second moment pooled with the public calibration features'). The
default is also run by :func:`default_twin`, a minimal numpy twin of it (the same
keyed Philox streams and arithmetic, only the uniforms a release needs, no queries,
checks or ledgers, the server's own fit), and the table gives the ratio of the two
wall times. Throughput is clients / protocol wall
time. ``--profile`` writes the top functions by cumulative time of each run.
``--flower MODULE:FUNC`` times Flower simulations: ``FUNC(n_clients: int, settings:
Settings)`` returns a dict with at least ``wall_s``, called in a fresh process per size.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import json
import math
import os
import platform
import pstats
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_SIZES",
    "PROTOCOLS",
    "default_twin",
    "main",
    "markdown_table",
    "run_flower",
    "run_one",
]

DEFAULT_SIZES = (10_000, 100_000, 1_000_000, 10_000_000)
#: What a run times: the reference MRMA protocol, the default protocol, its twin.
PROTOCOLS = ("mrma", "default", "twin")
DEFAULT_OUT = Path("experiments") / "results" / "benchmark"


def _peak_rss_mb() -> float:
    # ru_maxrss is in kilobytes on Linux (bytes on macOS).
    scale = 1.0 / 1024**2 if sys.platform == "darwin" else 1.0 / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def run_one(
    n_clients: int,
    *,
    protocol: str = "mrma",
    train_fraction: float = 1.0 / 6.0,
    epsilon: float = 5.0,
    seed: int = 0,
    chunk_size: int = 100_000,
    n_test: int = 10_000,
    profile: str | None = None,
    blas_threads: int | None = 1,
) -> dict[str, Any]:
    """One benchmark run of ``protocol`` (one of :data:`PROTOCOLS`) in this process;
    returns timings, throughput, peak memory, the model and its test error.

    ``train_fraction`` of the clients train (the reference protocol's 500 : 2500
    split), the rest evaluate (in the default protocol both simply release).
    ``blas_threads`` caps the BLAS/OpenMP thread pools (None: the library defaults);
    one thread is faster here, because the server fits 50 tiny logistic regressions
    whose BLAS calls only pay for thread hand-offs.
    """
    import numpy as np

    from ldpfda.config import Settings
    from ldpfda.datasets.population import make_featurizer
    from ldpfda.datasets.synthetic import FunctionalDesign
    from ldpfda.engine.runner import run_keyed
    from ldpfda.experiments.common import limit_blas_threads, reference_settings
    from ldpfda.experiments.population import LazyCurvePopulation
    from ldpfda.privacy.random import derive_seed
    from ldpfda.schema.payloads import LinearModels
    from ldpfda.server.fitting import model_error

    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if blas_threads is not None:
        limit_blas_threads(blas_threads)

    rss_start = _peak_rss_mb()
    n_train = max(50, int(round(train_fraction * n_clients)))
    n_eval = n_clients - n_train
    sizes: dict[str, Any] = {"n_train": n_train, "n_eval": n_eval, "n_test": n_test}
    sizes["seed"] = seed
    # The defaults: 10 cubic B-splines; MRMA: M = 50 weak models on 50 payloads each.
    if protocol == "mrma":
        settings = reference_settings(dataset="functional", epsilon=epsilon, **sizes)
    else:
        settings = Settings(dataset="functional", epsilon=epsilon, **sizes)
    design = FunctionalDesign()
    t0 = time.perf_counter()
    public_rng = np.random.default_rng(derive_seed(seed, "public"))
    featurizer = make_featurizer(design, settings, public_rng)
    public = featurizer.transform(
        design.sample(settings.calibration_size, public_rng)[0]
    )
    setup_s = time.perf_counter() - t0
    train = LazyCurvePopulation(n_train, 0, featurizer, seed, "train", design)
    evaluation = LazyCurvePopulation(n_eval, n_train, featurizer, seed, "eval", design)
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    if protocol == "twin":
        final = default_twin(
            [train, evaluation], settings, derive_seed(seed, "clients"), public
        )
    else:
        result = run_keyed(
            train,
            evaluation,
            settings,
            seed,
            chunk_size=chunk_size,
            keep_payload=False,
            public=public if settings.public_features else None,
        )
        final, timings = result.final, result.timings
    wall = time.perf_counter() - t0
    if profile and profiler is not None:
        profiler.disable()
        with open(profile, "w") as fh:
            pstats.Stats(profiler, stream=fh).sort_stats("cumulative").print_stats(30)
    peak = _peak_rss_mb()
    x_test, y_test = design.sample(
        n_test, np.random.default_rng(derive_seed(seed, "test"))
    )
    assert isinstance(final, LinearModels)
    return {
        "protocol": protocol,
        "n_clients": n_clients,
        "n_train": n_train,
        "n_eval": n_eval,
        "epsilon": epsilon,
        "n_basis": settings.n_basis,
        "n_points": design.n_points,
        "chunk_size": chunk_size,
        "setup_s": setup_s,
        "protocol_wall_s": wall,
        "clients_per_s": n_clients / wall,
        "timings": timings,
        "peak_rss_mb": peak,
        "rss_after_imports_mb": rss_start,
        "blas_threads": blas_threads,
        "coef": final.coef[0].tolist(),
        "intercept": float(final.intercept[0]),
        "test_error": model_error(final, featurizer.transform(x_test), y_test),
    }


def default_twin(populations: list[Any], settings: Any, seed: int, public: Any) -> Any:
    """The default protocol (binary, public features) in a few lines of numpy: every
    client's hybrid release of :math:`\tilde y (1, x)` from its keyed stream, k + 3k
    uniforms each, summed in the server's blocks of ids
    (:class:`~ldpfda.server.learners.ReleaseMoments`), and the server's own moment fit
    from them (``fit_moments``).

    A yardstick for the protocol's overhead, not a second implementation: no queries,
    reply checks, ledgers or accounting. Returns the model (the protocol's, bit for
    bit).
    """
    import math

    import numpy as np

    from ldpfda.client.protocol import JOINT_STREAM
    from ldpfda.privacy.random import KeyedUniform, client_keys
    from ldpfda.privacy.vector_mechanisms import HybridMechanism, piecewise_bound
    from ldpfda.server.fitting import MOMENT_BLOCK
    from ldpfda.server.learners import MomentLinearClassifier, ReleaseMoments

    d = public.shape[1] + 1
    mech = HybridMechanism(epsilon=settings.epsilon, dimension=d)
    eps1, k, scale = mech.coordinate_epsilon, mech.n_sampled, mech.scale
    alpha, b1 = mech.piecewise_probability, mech.duchi_bound_1d
    c = piecewise_bound(epsilon=eps1)
    keep, step = math.exp(eps1 / 2) / (math.exp(eps1 / 2) + 1), 2 * c / 2**20

    def moments(rows: Any) -> ReleaseMoments:
        return ReleaseMoments.of(rows, np.zeros(len(rows), np.int64), 1)

    total, rest, first = moments(np.zeros((0, d))), np.zeros((0, d)), 0
    for population in populations:
        for ids, x, y in population.batches(100_000):
            m = ids.size
            stream = KeyedUniform(client_keys(seed, ids), f"{JOINT_STREAM}#0")
            u = stream.uniform((m, 4 * k))
            w = (2.0 * y - 1.0)[:, None] * np.hstack([np.ones((m, 1)), x])
            picks = np.empty((m, k), dtype=np.int64)
            for i, j in enumerate(range(d - k, d)):
                t = np.minimum((u[:, i] * (j + 1)).astype(np.int64), j)
                taken = (picks[:, :i] == t[:, None]).any(axis=1)
                picks[:, i] = np.where(taken, j, t)
            t = np.take_along_axis(w, picks, axis=1)
            v = u[:, k:].reshape(m, k, 3)
            duchi = np.where(v[..., 1] < 0.5 + t / (2.0 * b1), b1, -b1)
            left = (c + 1.0) / 2.0 * t - (c - 1.0) / 2.0
            pos = v[..., 2] * (c + 1.0)
            right, below = left + c - 1.0, left + c
            out = np.where(pos < below, -c + pos, right + (pos - below))
            pm = np.where(v[..., 1] < keep, left + v[..., 2] * (c - 1.0), out)
            pm = -c + np.round((pm + c) / step) * step
            z = np.zeros((m, d))
            np.put_along_axis(
                z, picks, scale * np.where(v[..., 0] < alpha, pm, duchi), 1
            )
            # The server's sums: blocks of MOMENT_BLOCK ids, merged in order.
            rest = np.vstack([rest, z])
            cut = (first + len(rest)) // MOMENT_BLOCK * MOMENT_BLOCK - first
            for s in range(0, cut, MOMENT_BLOCK):
                total.merge(moments(rest[s : s + MOMENT_BLOCK]))
            rest, first = rest[cut:], first + cut
    total.merge(moments(rest))
    learner = MomentLinearClassifier(joint=True, mechanism=mech, public=public)
    return learner.fit_moments(total).to_linear_models()


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
    """The README table of the in-process runs: each protocol's wall time, throughput
    and peak memory, and the default's ratio to its twin."""
    head = (
        "| clients | protocol | privatize s | server s | protocol s | clients/s "
        "| peak RSS MB | test error | x twin |"
    )
    lines = [head, "|" + "---|" * 9]
    twins = {r["n_clients"]: r for r in rows if r["protocol"] == "twin"}
    for r in rows:
        t = r["timings"]
        server = sum(t.get(k, 0.0) for k in ("server_train_s", "server_aggregate_s"))
        twin = twins.get(r["n_clients"]) if r["protocol"] == "default" else None
        ratio = f"{r['protocol_wall_s'] / twin['protocol_wall_s']:.2f}" if twin else ""
        lines.append(
            f"| {r['n_clients']:,} | {r['protocol']} "
            f"| {t.get('clients_privatize_s', float('nan')):.2f} | {server:.2f} "
            f"| {r['protocol_wall_s']:.2f} | {r['clients_per_s']:,.0f} "
            f"| {r['peak_rss_mb']:,.0f} | {r['test_error']:.3f} | {ratio} |"
        )
    return "\n".join(lines) + "\n"


def _count(text: str, flag: str, parser: argparse.ArgumentParser) -> int:
    """A client count >= 1, also in an exponent spelling (``1e6``)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value == int(value) and value >= 1):
        parser.error(f"{flag}: a client count must be an integer >= 1, got {text!r}")
    return int(value)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        allow_abbrev=False, prog="ldpfda-benchmark", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES))
    parser.add_argument(
        "--protocols",
        default=",".join(PROTOCOLS),
        help=f"what to time, of {','.join(PROTOCOLS)}",
    )
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--epsilon", type=float, default=5.0)
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs of each protocol and size (interleaved); the fastest is reported",
    )
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
    parser.add_argument("--protocol", default="mrma", help=argparse.SUPPRESS)
    parser.add_argument("--flower-one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--profile-file", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.one is not None:  # child: one size, JSON on the last line of stdout
        row = run_one(
            args.one,
            protocol=args.protocol,
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

    # Checked here, not in the child runs (which would fail one by one, after others).
    protocols = args.protocols.split(",")
    unknown = [p for p in protocols if p not in PROTOCOLS]
    if unknown:
        parser.error(
            f"--protocols: {', '.join(unknown)} not one of {', '.join(PROTOCOLS)}"
        )
    sizes = [_count(text, "--sizes", parser) for text in args.sizes.split(",")]
    flower_sizes = [
        _count(t, "--flower-sizes", parser) for t in args.flower_sizes.split(",")
    ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, flower_rows = [], []
    epsilon = ["--epsilon", str(args.epsilon)]
    for n in sizes:
        # Protocols interleaved, each run --repeats times: the fastest run counts
        # (the least disturbed on a shared machine), the largest peak memory.
        runs: dict[str, list[dict[str, Any]]] = {}
        for _ in range(args.repeats):
            for protocol in protocols:
                child = ["--one", str(n), "--protocol", protocol, *epsilon]
                child += ["--chunk-size", str(args.chunk_size)]
                child += ["--blas-threads", str(args.blas_threads)]
                if args.profile:
                    name = f"profile_{protocol}_{n}.txt"
                    child += ["--profile-file", str(out / name)]
                runs.setdefault(protocol, []).append(_child(child))
        for protocol, done in runs.items():
            row = min(done, key=lambda r: r["protocol_wall_s"])
            row["peak_rss_mb"] = max(r["peak_rss_mb"] for r in done)
            row["repeats"] = len(done)
            rows.append(row)
            print(
                f"{n:>10,} clients {protocol:>7}: {row['protocol_wall_s']:6.2f} s, "
                f"{row['clients_per_s']:>10,.0f} clients/s, "
                f"peak {row['peak_rss_mb']:,.0f} MB, "
                f"test error {row['test_error']:.4f}",
                flush=True,
            )
    import numpy as np

    for n in sorted({r["n_clients"] for r in rows}):
        pair = [r for r in rows if r["n_clients"] == n and r["protocol"] != "mrma"]
        if len(pair) == 2:  # the twin is a yardstick only if it fits the same model
            a, b = (np.asarray(r["coef"]) for r in pair)
            diff = float(np.abs(a - b).max())
            print(f"{n:>10,} clients: default and twin coef differ by {diff:.1e}")
    for n in flower_sizes if args.flower else ():
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
