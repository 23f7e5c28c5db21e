"""``ldpfda deploy``: the commands of a deployment's operator.

* ``certs OUTDIR [--hosts ...] [--supernodes N]``: a test CA, the SuperLink's TLS
  certificate and SuperNode key pairs (``gen_certs.py``; for tests and pilots);
* ``example-data OUTDIR [--nodes N]``: a small wearable file set to try a federation
  on: ``nodes/client-<i>`` in turn a wide CSV, a long CSV and an NPZ, each one subject
  on its device's own irregular timestamps, and the server's ``public.csv``
  (calibration curves) and ``test.csv``;
* ``register KEYS SUPERLINK``: ``flwr supernode register`` every ``*.pub`` of the
  folder, one key per command and one at a time;
* ``nodes --superlink HOST:PORT --data DIR ...``: one ``flower-supernode`` per file
  ``client-<i>.*`` of ``DIR``, each started again with a back-off while it exits with
  Flower's code 305; returns once every node is ready, leaving them running, with
  their PIDs in a file;
* ``run APP SUPERLINK --report-dir DIR``: ``flwr run``, then wait for the run's
  ``status.json``: exit status 0 with a summary once it is ``done``, 1 with the
  ServerApp's reason once it is ``failed`` (``flwr run`` itself exits 0 then).

Every wait polls a condition up to a deadline; ``FLWR_HOME`` is the environment's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ldpfda.deploy.loopback import (
    _executable,
    _Process,
    free_port,
    join_with_backoff,
    register_keys,
    run_config_arg,
)

__all__ = ["RunFailed", "main", "run_and_wait", "start_nodes", "write_example_data"]

_CLIENT_FILE = re.compile(r"client-(\d+)\.(csv|npz)")
_RUN_ID = re.compile(r"started run (\d+)")


def write_example_data(
    outdir: Path, nodes: int, *, seed: int = 0, public: int = 300, test: int = 300
) -> dict[str, Path]:
    """A wearable file set: one subject per node file, public and test curves.

    Returns the paths of the ``nodes`` folder, ``public.csv`` and ``test.csv``.
    """
    from ldpfda.datasets.readers import write_long_csv, write_npz, write_wide_csv
    from ldpfda.datasets.wearable import make_wearable

    folder = Path(outdir) / "nodes"
    folder.mkdir(parents=True, exist_ok=True)
    subjects = make_wearable(nodes, seed=seed)
    for i in range(nodes):
        own = subjects.subject(i)
        kind = i % 3
        if kind == 0:  # the spec matches channels by name: a wide CSV names it
            write_wide_csv(folder / f"client-{i}.csv", own, channel_column=True)
        elif kind == 1:
            write_long_csv(folder / f"client-{i}.csv", own)
        else:
            write_npz(folder / f"client-{i}.npz", own)
    # Other subjects of the same kind, never a node's: public and test cohorts.
    return {
        "nodes": folder,
        "public": write_long_csv(
            Path(outdir) / "public.csv",
            make_wearable(public, first_subject=10**6, seed=seed + 1),
        ),
        "test": write_long_csv(
            Path(outdir) / "test.csv",
            make_wearable(test, first_subject=2 * 10**6, seed=seed + 2),
        ),
    }


def client_files(folder: Path) -> dict[int, Path]:
    """The files ``client-<i>.csv`` / ``.npz`` of ``folder``, by client id."""
    found: dict[int, Path] = {}
    for path in sorted(Path(folder).iterdir()):
        match = _CLIENT_FILE.fullmatch(path.name)
        if match is None:
            continue
        i = int(match.group(1))
        if i in found:
            raise ValueError(
                f"{folder}: client {i} has two files, {found[i]} and {path}"
            )
        found[i] = path.resolve()
    if not found:
        raise ValueError(f"{folder} holds no client-<i>.csv or client-<i>.npz file")
    return dict(sorted(found.items()))


def start_nodes(
    args: argparse.Namespace, env: Mapping[str, str]
) -> list[tuple[int, _Process, int]]:
    """Start one SuperNode per client file of ``args.data``, side by side, each with
    :func:`~loopback.join_with_backoff`; (client id, process, node id) of each."""
    # The data folder is checked before anything is written.
    files = client_files(Path(args.data))
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    security = (
        ["--insecure"]
        if args.insecure
        else ["--root-certificates", str(Path(args.root_certificates).resolve())]
    )

    def start(item: tuple[int, Path]) -> tuple[int, _Process, int]:
        i, data = item
        config = {
            "client-id": i,
            "data-path": str(data),
            "privacy-budget": args.privacy_budget,
            "state-dir": str((Path(args.state) / f"client-{i}").resolve()),
        }
        if args.spec:
            config["spec-path"] = str(Path(args.spec).resolve())
        command = [
            _executable("flower-supernode"),
            "--superlink",
            args.superlink,
            "--port",
            str(free_port()),
            "--node-config",
            run_config_arg(config),
            *security,
        ]
        if args.keys:
            key = Path(args.keys).resolve() / f"supernode-{i}"
            command += ["--auth-supernode-private-key", str(key)]
        attempt = 0

        def spawn() -> _Process:
            nonlocal attempt
            attempt += 1
            log = logs / f"supernode-{i}.log"
            with log.open("wb") as handle:  # the last start's log
                popen = subprocess.Popen(
                    command,
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=dict(env),
                    # The node outlives this command, as under a supervisor.
                    start_new_session=True,
                )
            return _Process(f"supernode-{i} (start {attempt})", popen, log)

        process, node_id = join_with_backoff(spawn, args.timeout)
        return i, process, node_id

    with ThreadPoolExecutor(max_workers=len(files)) as pool:
        return list(pool.map(start, files.items()))


def _run_status(run_dir: Path) -> dict[str, Any]:
    """``status.json`` of a run ({} before the ServerApp writes it)."""
    try:
        return dict(json.loads((run_dir / "status.json").read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError):  # not there yet, or being replaced
        return {}


def merged_run_config(items: Sequence[str]) -> dict[str, Any]:
    """The run config of ``items``, each a TOML file or ``key=value`` pairs as
    ``flwr run --run-config`` takes them; a later item overrides an earlier one."""
    from flwr.common.config import parse_config_args

    merged: dict[str, Any] = {}
    for item in items:
        merged.update(parse_config_args([item]))
    return merged


class RunFailed(RuntimeError):
    """The run ended ``failed`` (the message is the ServerApp's reason) or never
    reported within the timeout."""


def run_and_wait(
    app: Path,
    superlink: str,
    report_dir: Path,
    run_config: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """Submit ``app`` to ``superlink`` writing into ``report_dir``, with the
    :func:`merged_run_config` of ``run_config``; its run id and report once the run
    is ``done``. Raises :class:`RunFailed` otherwise."""
    report_dir = Path(report_dir).resolve()
    config = run_config_arg(
        {**merged_run_config(run_config), "flower.report-dir": str(report_dir)}
    )
    done = subprocess.run(
        [_executable("flwr"), "run", str(app), superlink, "--run-config", config],
        env=dict(env or os.environ),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    found = _RUN_ID.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise RunFailed(f"flwr run did not start the run:\n{done.stdout}{done.stderr}")
    run_id = int(found.group(1))
    run_dir = report_dir / f"run-{run_id}"
    deadline = time.monotonic() + timeout
    while (stage := (status := _run_status(run_dir)).get("stage")) != "done":
        if stage == "failed":
            raise RunFailed(f"run {run_id} failed: {status.get('error')}")
        if time.monotonic() >= deadline:
            raise RunFailed(
                f"run {run_id} is at stage {stage!r} after {timeout:g} s "
                f"(see flwr log {run_id} {superlink})"
            )
        time.sleep(0.5)
    report = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
    return run_id, dict(report)


def _summary(run_id: int, report: Mapping[str, Any], report_dir: Path) -> str:
    part = report.get("participation", {})
    lines = [
        f"run {run_id} done: {part.get('connected_nodes')} nodes connected, "
        f"report {Path(report_dir).resolve() / f'run-{run_id}' / 'report.json'}"
    ]
    for stage in ("privatize", "evaluate"):
        if stage in part:
            lines.append(
                f"{stage}: {part[stage]['answered']} answered, missing "
                f"{part[stage]['missing']}, rejected {sorted(part[stage]['rejected'])}"
            )
    for method, error in sorted(report.get("test_errors", {}).items()):
        lines.append(f"test error {method}: {error:.3f}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ldpfda deploy",
        allow_abbrev=False,
        description="Operate a Flower deployment of ldpfda (docs/walkthrough.md).",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    certs = sub.add_parser("certs", allow_abbrev=False, help="test CA, certs, keys")
    certs.add_argument("outdir", type=Path)
    certs.add_argument("--hosts", nargs="*", default=[])
    certs.add_argument("--supernodes", type=int, default=0)
    data = sub.add_parser(
        "example-data", allow_abbrev=False, help="a small wearable file set"
    )
    data.add_argument("outdir", type=Path)
    data.add_argument("--nodes", type=int, default=4)
    data.add_argument("--seed", type=int, default=0)
    data.add_argument("--public", type=int, default=300)
    data.add_argument("--test", type=int, default=300)
    register = sub.add_parser(
        "register", allow_abbrev=False, help="register a folder of public keys"
    )
    register.add_argument("keys", type=Path, help="folder of *.pub keys")
    register.add_argument("superlink", help="SuperLink connection of config.toml")
    register.add_argument("--timeout", type=float, default=60.0)
    nodes = sub.add_parser(
        "nodes", allow_abbrev=False, help="start a SuperNode per data file"
    )
    nodes.add_argument("--superlink", required=True, metavar="HOST:PORT")
    nodes.add_argument("--data", required=True, type=Path, help="client-<i> files")
    nodes.add_argument("--spec", type=Path, help="the federation spec")
    nodes.add_argument("--keys", type=Path, help="folder of supernode-<i> keys")
    nodes.add_argument("--root-certificates", type=Path, metavar="CA")
    nodes.add_argument("--insecure", action="store_true", help="no TLS (tests only)")
    nodes.add_argument("--privacy-budget", type=float, required=True)
    nodes.add_argument("--state", type=Path, default=Path("state"))
    nodes.add_argument("--logs", type=Path, default=Path("logs"))
    nodes.add_argument("--pids", type=Path, default=Path("nodes.pid"))
    nodes.add_argument("--timeout", type=float, default=120.0)
    run = sub.add_parser("run", allow_abbrev=False, help="run and wait for the end")
    run.add_argument("app", type=Path)
    run.add_argument("superlink", help="SuperLink connection of config.toml")
    run.add_argument("--report-dir", type=Path, required=True)
    run.add_argument(
        "--run-config",
        action="append",
        default=[],
        help="a TOML file or 'key=value ...' pairs (repeat: later ones override)",
    )
    run.add_argument("--timeout", type=float, default=900.0)
    return parser


def _nodes(args: argparse.Namespace) -> str:
    if args.insecure == (args.root_certificates is not None):
        raise ValueError("give either --root-certificates CA (TLS) or --insecure")
    started = start_nodes(args, os.environ)
    args.pids.write_text("".join(f"{p.pid}\n" for _, p, _ in started))
    return "\n".join(
        f"client {i}: pid {p.pid}, node id {node}, log {p.log}"
        for i, p, node in started
    ) + (f"\n{len(started)} SuperNodes ready; their PIDs are in {args.pids}")


def main(argv: Sequence[str] | None = None) -> int:
    """``ldpfda deploy ACTION ...``; the exit status (1 with the reason on stderr)."""
    args = _parser().parse_args(None if argv is None else list(argv))
    try:
        if args.action == "certs":
            from ldpfda.deploy.gen_certs import generate

            out = generate(args.outdir, hosts=args.hosts, supernodes=args.supernodes)
            print(f"certificates and keys written to {out}")
        elif args.action == "example-data":
            paths = write_example_data(
                args.outdir,
                args.nodes,
                seed=args.seed,
                public=args.public,
                test=args.test,
            )
            print("\n".join(f"{name}: {path}" for name, path in paths.items()))
        elif args.action == "register":
            keys = sorted(Path(args.keys).glob("*.pub"))
            if not keys:
                raise ValueError(f"{args.keys} holds no *.pub key")
            env = os.environ
            print(
                "\n".join(
                    register_keys(
                        keys, args.superlink, env, Path.cwd(), timeout=args.timeout
                    )
                )
            )
        elif args.action == "nodes":
            print(_nodes(args))
        else:
            run_id, report = run_and_wait(
                args.app,
                args.superlink,
                args.report_dir,
                args.run_config,
                timeout=args.timeout,
            )
            print(_summary(run_id, report, args.report_dir))
    except (RunFailed, RuntimeError, TimeoutError, ValueError, OSError) as exc:
        print(f"ldpfda deploy {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
