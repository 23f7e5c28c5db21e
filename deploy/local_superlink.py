"""Find and stop the SuperLink that ``flwr run`` starts for local simulations.

``flwr run .`` with the default ``local`` connection starts a detached
``flower-superlink --simulation`` on 127.0.0.1 (port 39091, or
``$FLWR_LOCAL_SUPERLINK_HTTP_API_PORT``) and leaves it running. This script finds it by
its command line and stops it by PID; its ``flower-superexec`` helper exits with it.

Usage::

    python -m ldpfda.deploy.local_superlink [--port 39091]          # stop it
    python -m ldpfda.deploy.local_superlink --list [--port 39091]   # only print the PID
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["find_local_superlinks", "stop_pid"]

DEFAULT_PORT = int(os.environ.get("FLWR_LOCAL_SUPERLINK_HTTP_API_PORT", "39091"))


def find_local_superlinks(port: int = DEFAULT_PORT) -> list[int]:
    """PIDs of ``flower-superlink`` processes serving ``--port port``."""
    return [
        pid
        for pid, words in _processes()
        if any(w.endswith("flower-superlink") for w in words[:2])
        and "--port" in words
        and words[words.index("--port") + 1 :][:1] == [str(port)]
    ]


def _processes() -> list[tuple[int, list[str]]]:
    """(pid, argv) of every process, from /proc where it exists, else from ps."""
    proc = Path("/proc")
    if proc.is_dir():
        found = []
        for entry in filter(lambda e: e.name.isdigit(), proc.iterdir()):
            try:
                raw = (entry / "cmdline").read_bytes()
            except OSError:
                continue  # exited meanwhile, or not ours to read
            words = [w.decode(errors="replace") for w in raw.split(b"\0") if w]
            found.append((int(entry.name), words))
        return found
    # -ww: never truncate the command line to the terminal width.
    listing = subprocess.run(
        ["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True, check=True
    ).stdout
    return [
        (int(pid), args.split())
        for pid, _, args in (
            line.strip().partition(" ") for line in listing.splitlines()
        )
    ]


def stop_pid(pid: int, grace: float = 15.0) -> None:
    """SIGTERM ``pid``, then SIGKILL it if it is still alive after ``grace`` seconds."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            finished, _ = os.waitpid(pid, os.WNOHANG)  # our child: reap it
            if finished:
                return
        except ChildProcessError:
            pass  # not our child (detached): poll for its exit instead
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        if _is_zombie(pid):
            return
        time.sleep(0.2)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _is_zombie(pid: int) -> bool:
    state = subprocess.run(
        ["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True
    ).stdout.strip()
    return state.startswith("Z")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--list", action="store_true", help="print PIDs, stop nothing")
    args = parser.parse_args(argv)
    pids = find_local_superlinks(args.port)
    for pid in pids:
        print(pid if args.list else f"stopping flower-superlink {pid}")
        if not args.list:
            stop_pid(pid)
    if not pids:
        print(f"no flower-superlink on port {args.port}")


if __name__ == "__main__":
    main()
