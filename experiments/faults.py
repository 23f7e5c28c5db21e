"""Damage of faulty and malicious clients to the reference MRMA protocol.

``python -m ldpfda.experiments.faults [--repeats 20] [--epsilon 5 10]`` prints the
test error (mean +- s.e.) with no faulty client, with 2% crashing and 2% hanging
clients, with 10% garbage senders (all rejected), and with 10% clients sending the
most damaging replies the output range allows, plus the rejection counts.
"""

from __future__ import annotations

import argparse
from typing import Any

from ldpfda.config import Settings
from ldpfda.engine.faults import run_with_faults
from ldpfda.experiments.common import mean_se

SCENARIOS: dict[str, dict[str, Any]] = {
    "no faults": {"malicious": 0.0},
    "2% crash + 2% hang": {"malicious": 0.0, "crash": 0.02, "hang": 0.02},
    "10% garbage (rejected)": {"malicious": 0.1, "attack": "garbage"},
    "10% extreme valid replies": {"malicious": 0.1, "attack": "extreme"},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        allow_abbrev=False, prog="ldpfda-faults", description=__doc__
    )
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--epsilon", type=float, nargs="+", default=[5.0, 10.0])
    parser.add_argument("--n-test", type=int, default=20_000)
    args = parser.parse_args(argv)
    print(f"reference MRMA, vector design, 500 + 2500 clients, {args.repeats} repeats")
    print("scenario".ljust(30) + "".join(f"eps={e:g}".rjust(18) for e in args.epsilon))
    for name, options in SCENARIOS.items():
        cells, counts = [], {}
        for eps in args.epsilon:
            settings = Settings.reference(epsilon=eps, n_test=args.n_test)
            runs = [
                run_with_faults(settings, r, **options) for r in range(args.repeats)
            ]
            errors = [run.test_errors["mrma"] for run in runs]
            cells.append("{:.3f} +- {:.3f}".format(*mean_se(errors)))
            counts = runs[0].rejection_counts()
        print(
            name.ljust(30)
            + "".join(c.rjust(18) for c in cells)
            + f"   rejected (one repeat): {counts or 'none'}"
        )
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
