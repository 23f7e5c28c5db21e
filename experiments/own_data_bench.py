"""How long ``ldpfda fit`` takes on a wide CSV of 10^4 subjects x 288 points.

Usage::

    python -m ldpfda.experiments.own_data_bench [--subjects 10000] [--runs 3]
        [--workdir results/own-data-bench] [--protocol default]

Writes a wide CSV of ``--subjects`` days of heart rate from
:func:`~ldpfda.datasets.wearable.make_wearable` on the regular 5-minute grid (288
columns, empty cells at the gaps), 1000 public calibration subjects from the public
seed range (a long NPZ without labels) and the shipped wearable spec, then runs
``python -m ldpfda fit --data ... --spec ... --public ... --epsilon 5 --seed 0`` as a
separate process ``--runs`` times and prints the wall and CPU time of each run
(interpreter start and imports included) with the phases ``report.json`` records:
reading, featurizing, the protocol. CPU time shows what a run costs when other work
shares the cores (the load average is printed). The goal is at most 10 s on a 2-core
machine. A benchmark, not a test: its numbers depend on the machine and on what else
runs on it.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["main", "write_grid_csv"]


def write_grid_csv(path: Path, n_subjects: int, *, seed: int = 0) -> Path:
    """A wide CSV of ``n_subjects`` subject-days on the 288-slot grid: columns
    subject, label and one per slot (its minute), an empty cell where the device
    recorded nothing."""
    from ldpfda.datasets.wearable import wearable_grid

    grid = wearable_grid(n_subjects, seed=seed)
    hr = grid.heart_rate[:, 0, :]  # (subjects, 288)
    cells = np.where(np.isnan(hr), "", np.char.mod("%.0f", np.nan_to_num(hr)))
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["subject", "label", *(f"{t:g}" for t in grid.times)])
        for i, row in enumerate(cells.tolist()):
            label = grid.label_names[int(grid.labels[i])]
            writer.writerow([grid.subject_ids[i], label, *row])
    return path


def _public_npz(path: Path, n_subjects: int) -> Path:
    """Public calibration subjects on their own timestamps, long NPZ, no labels."""
    from ldpfda.datasets.wearable import make_wearable
    from ldpfda.datasets.wearable_spec import PUBLIC_SEED_BASE

    curves = make_wearable(n_subjects, seed=PUBLIC_SEED_BASE + 1)
    np.savez(
        path,
        times=curves.times,
        values=curves.values,
        subjects=curves.subjects,
        channels=np.array(curves.channels),
    )
    return path


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ldpfda.experiments.own_data_bench",
        allow_abbrev=False,
        description="Wall time of ldpfda fit on a generated wide CSV.",
    )
    parser.add_argument("--subjects", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--protocol", choices=("default", "reference"), default="default"
    )
    parser.add_argument(
        "--workdir", type=Path, default=Path("results") / "own-data-bench"
    )
    args = parser.parse_args(argv)

    from ldpfda.datasets.wearable_spec import WEARABLE_SPEC

    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    data = write_grid_csv(work / "wearable-wide.csv", args.subjects)
    public = _public_npz(work / "public.npz", 1000)
    spec = work / "wearable.toml"
    spec.write_text(WEARABLE_SPEC, encoding="utf-8")
    size = data.stat().st_size / 2**20
    print(
        f"wrote {data} ({args.subjects} subjects x 288 points, {size:.1f} MB), "
        f"{public} (1000 public subjects) and {spec} in "
        f"{time.perf_counter() - t0:.1f} s"
    )
    command = [
        sys.executable,
        "-m",
        "ldpfda",
        "fit",
        "--data",
        str(data),
        "--spec",
        str(spec),
        "--public",
        str(public),
        "--epsilon",
        "5",
        "--protocol",
        args.protocol,
        "--seed",
        "0",
        "--out",
        str(work / "fit"),
        "--force",
    ]
    print("$ " + " ".join(["ldpfda", *command[3:]]))
    walls: list[float] = []
    cpus: list[float] = []
    for run in range(args.runs):
        t0, cpu0 = time.perf_counter(), _children_cpu()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
        if done.returncode != 0:
            print(done.stdout + done.stderr, file=sys.stderr)
            return done.returncode
        if run == 0:
            print(done.stdout.rstrip())
        walls.append(wall)
        cpus.append(cpu)
        phases = json.loads((work / "fit" / "report.json").read_text())["timings"]
        print(
            f"run {run + 1}: {wall:.2f} s wall, {cpu:.2f} s CPU (read "
            f"{phases['read_s']:.2f} s, "
            f"featurize {phases['featurize_s']:.2f} s, protocol "
            f"{phases['protocol_s']:.2f} s, in the command {phases['total_s']:.2f} s)"
        )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"ldpfda fit end to end: best {min(walls):.2f} s wall ({min(cpus):.2f} s "
        f"CPU), median {float(np.median(walls)):.2f} s over {len(walls)} runs on "
        f"{os.cpu_count()} cores (load average {load:.1f}); goal <= 10 s"
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
