"""``ldpfda node check --data FILE --spec SPEC``: a pre-flight check of a host's data
file before its node joins a federation; ``ldpfda node ledger --state-dir DIR``: what
the node's clients have spent.

It reads the file as the node will (the spec's reader and featurizer, numpy and scipy
only) and says which subject and curves it holds, how many points each channel
observed, what the node will release under which spec hash, and how much of the curve
clips against the spec's bounds. Exit status 0: the node would accept the file; 1: it
would refuse it (the reason names the file and, where it lies there, the row and
column); 2: the spec cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["check_file", "ledger_lines", "main"]


def _release(spec: Any) -> str:
    release, p = spec.release, spec.n_features
    if release.protocol == "default":
        what = (
            f"y~(1, x), {p + 1} values, once per run through the hybrid mechanism at "
            f"epsilon {release.epsilon:g}"
        )
    else:
        what = (
            f"x ({p} values) with Laplace noise and its label by randomized response, "
            f"epsilon {release.epsilon:g} split between them (reference MRMA; an "
            "evaluation client instead answers one randomized bit)"
        )
    return (
        f"release: {release.protocol} protocol: {what}; under spec {spec.short_hash} "
        "only, charged to the node's own lifetime budget (privacy-budget)"
    )


def check_file(data: str, spec: Any) -> tuple[list[str], bool]:
    """What the node would make of file ``data`` under ``spec``: the report's lines
    and whether it would accept the file (``ValueError``/``OSError`` from reading it
    propagate, naming file, row and column)."""
    from ldpfda.schema.spec import CLIP_WARNING

    curves, got = spec.featurize_file(data)
    lines = [f"spec: hash {spec.hash}, p = {spec.n_features} features"]
    names = spec.channel_names
    for i, subject in enumerate(got.subject_ids):
        points = ", ".join(
            f"{name} {int(n)}" for name, n in zip(names, got.n_points[i], strict=True)
        )
        lines.append(
            f"subject {subject!r}, label {spec.labels[int(got.labels[i])]!r}: "
            f"{int(got.n_curves[i].sum())} curve(s) used, "
            f"{int(got.n_dropped[i].sum())} dropped (too few points or a gap); "
            f"observed points per channel: {points}; "
            f"{100 * float(got.clipped[i]):.0f} % of the {spec.n_features} "
            "coordinates clipped to the spec's bounds"
        )
    outside = spec.outside_range(curves)
    if outside:
        shares = ", ".join(f"{k} {100 * v:.0f} %" for k, v in outside.items())
        lines.append(f"values outside the spec's value range: {shares}")
    lines.append(_release(spec))
    units = ", ".join(f"{c.name} in {c.unit}" for c in spec.channels)
    if float(got.clipped.max()) > CLIP_WARNING or any(
        v > CLIP_WARNING for v in outside.values()
    ):
        lines.append(
            f"warning: more than {100 * CLIP_WARNING:.0f} % of the curve lies outside "
            f"the spec's bounds, so the release carries little of it: check the data's "
            f"unit and scale against the spec's ({units})"
        )
    if len(got.subject_ids) != 1:
        lines.append(
            f"refused: a node holds one client's data; {data} has "
            f"{len(got.subject_ids)} subjects"
        )
        return lines, False
    lines.append("ok: the node would accept this file")
    return lines, True


def ledger_lines(state_dir: str, budget: float | None = None) -> list[str]:
    """What every client of the node's ``state_dir`` has spent, a line per client
    and one per record (version of its data file); with ``budget`` (the node's
    ``privacy-budget``) what is left. Raises
    :class:`~ldpfda.client.ledger.LedgerError` for a ledger it cannot trust."""
    import time
    from pathlib import Path

    from ldpfda.client.ledger import spending

    def when(at: float | None) -> str:
        if at is None:
            return "no release yet"
        return time.strftime("last release %Y-%m-%d %H:%M UTC", time.gmtime(at))

    if not Path(state_dir).is_dir():
        raise FileNotFoundError(f"no state directory {state_dir}")
    clients = spending(Path(state_dir))
    lines = [f"state directory {state_dir}"]
    if not clients:
        lines.append("no client has released anything yet")
    for client in clients:
        left = (
            ""
            if budget is None
            else f", {budget - client.spent:.6g} left of {budget:g}"
        )
        lines.append(
            f"client {client.client_id}: spent {client.spent:.6g} in "
            f"{client.releases} release(s), {len(client.records)} version(s) of its "
            f"data file{left}; {when(client.last)}"
        )
        for r in client.records:
            lines.append(
                f"  {r.record}: {r.releases} release(s), epsilon {r.epsilon:.6g}; "
                f"{when(r.last)}"
            )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ldpfda node",
        allow_abbrev=False,
        description="Check a node's data file on its host before the node joins, or "
        "say what its clients have spent.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser(
        "check",
        allow_abbrev=False,
        help="what the node would make of its data file, and whether it accepts it",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    check.add_argument("--data", required=True, help="the node's curve file")
    check.add_argument("--spec", required=True, help="the federation spec (TOML)")
    ledger = sub.add_parser(
        "ledger",
        allow_abbrev=False,
        help="what the node's clients have spent, over every version of their data",
        description="Read the node's ledgers (its state-dir; changes nothing) and say "
        "what each client has spent, in all and per version of its data file. Exit "
        "status 1 if a ledger cannot be trusted (the node would refuse every query).",
    )
    ledger.add_argument(
        "--state-dir", required=True, help="the node's state-dir (node config)"
    )
    ledger.add_argument(
        "--privacy-budget",
        type=float,
        default=None,
        help="the node's privacy-budget, to say what is left",
    )
    args = parser.parse_args(argv)
    if args.command == "ledger":
        from ldpfda.client.ledger import LedgerError

        try:
            print("\n".join(ledger_lines(args.state_dir, args.privacy_budget)))
        except LedgerError as exc:
            print(f"ldpfda node ledger: {exc}: {exc.reason}", file=sys.stderr)
            return 1
        except FileNotFoundError as exc:
            print(f"ldpfda node ledger: error: {exc}", file=sys.stderr)
            return 1
        return 0
    from ldpfda.schema.spec import FederationSpec

    try:
        spec = FederationSpec.load(args.spec)
    except (OSError, ValueError) as exc:
        print(f"ldpfda node check: error: the spec: {exc}", file=sys.stderr)
        return 2
    try:
        lines, ok = check_file(args.data, spec)
    except (OSError, ValueError) as exc:
        print(f"refused: {exc}")
        return 1
    print("\n".join(lines))
    return 0 if ok else 1
