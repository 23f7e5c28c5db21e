"""Start, find and stop the SuperLink that ``flwr run`` uses for local simulations.

``flwr run .`` with the default ``local`` connection starts a detached
``flower-superlink --simulation`` on 127.0.0.1 (port 39091, or
``$FLWR_LOCAL_SUPERLINK_HTTP_API_PORT``) and leaves it running. This script finds it by
its command line and stops it by PID; its ``flower-superexec`` helper exits with it.

Flower gives that SuperLink a fixed 15 s to answer its health check and otherwise kills
it and fails the run ("Failed to start local SuperLink within 15s"), which a loaded
machine can exceed. ``--start`` starts the same SuperLink, with the same command line,
and waits for its health check as long as ``--timeout`` says; a ``flwr run`` after it
finds it running and uses it.

Usage::

    python -m ldpfda.deploy.local_superlink --start [--port 39091] [--timeout 300]
    python -m ldpfda.deploy.local_superlink [--port 39091]          # stop it
    python -m ldpfda.deploy.local_superlink --list [--port 39091]   # only print the PID
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

__all__ = ["find_local_superlinks", "start_local_superlink", "stop_pid", "stop_pids"]

DEFAULT_PORT = int(os.environ.get("FLWR_LOCAL_SUPERLINK_HTTP_API_PORT", "39091"))

#: The SuperLinks this process started and left running, detached as ``flwr run``
#: leaves its own: held so that no ``Popen`` is collected (and warns) while it runs.
_STARTED: list[subprocess.Popen[bytes]] = []


def _is_serving(port: int) -> bool:
    """True if a SuperLink answers the health check on 127.0.0.1:``port``."""
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/health", timeout=0.4
        ) as response:
            return bool(200 <= response.status < 300)
    except (OSError, urllib.error.URLError):
        return False


def start_local_superlink(
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout: float = 300.0,
) -> int | None:
    """Start the local simulation SuperLink of ``env`` as ``flwr run`` would and wait
    until it answers its health check; its PID (``None`` if one already answers).

    The ports come from ``FLWR_LOCAL_SUPERLINK_HTTP_API_PORT`` and
    ``FLWR_LOCAL_CONTROL_API_PORT`` (Flower's defaults 39091 and 39093), the state
    database and log from ``$FLWR_HOME/local-superlink``, the executable from ``env``'s
    ``PATH``: the command line is Flower's own. Unlike ``flwr run``, which gives up
    after 15 s, the wait ends when the SuperLink answers, exits (``RuntimeError`` with
    its log's tail) or ``timeout`` seconds pass (it is killed, ``TimeoutError``).
    """
    env = dict(os.environ if env is None else env)
    port = int(env.get("FLWR_LOCAL_SUPERLINK_HTTP_API_PORT", "39091"))
    control = int(env.get("FLWR_LOCAL_CONTROL_API_PORT", "39093"))
    if _is_serving(port):
        return None
    home = Path(env.get("FLWR_HOME") or Path.home() / ".flwr")
    runtime = home / "local-superlink"
    runtime.mkdir(parents=True, exist_ok=True)
    log = runtime / "superlink.log"
    executable = shutil.which("flower-superlink", path=env.get("PATH"))
    if executable is None:
        raise FileNotFoundError("flower-superlink is not installed (flwr>=1.42)")
    command = [
        executable,
        "--insecure",
        "--simulation",
        "--isolation",
        "subprocess",
        "--control-api-address",
        f"127.0.0.1:{control}",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-file",
        str(log),
        "--log-rotation-interval-hours",
        "24",
        "--log-rotation-backup-count",
        "7",
        "--database",
        str(runtime / "state.db"),
    ]
    env["FLWR_DISABLE_UPDATE_CHECK"] = "1"
    process = subprocess.Popen(
        command,
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # detached, as flwr run leaves it
    )
    started = time.monotonic()
    while not _is_serving(port):
        if process.poll() is not None:
            raise RuntimeError(
                f"flower-superlink on port {port} exited with code "
                f"{process.returncode}; its log ends:\n{_tail(log)}"
            )
        if time.monotonic() - started > timeout:
            process.kill()
            process.wait()
            raise TimeoutError(
                f"flower-superlink on port {port} did not answer its health check "
                f"within {timeout:.0f} s; its log ends:\n{_tail(log)}"
            )
        time.sleep(0.2)
    _STARTED.append(process)
    return process.pid


def _tail(log: Path, chars: int = 3000) -> str:
    try:
        return log.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


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
    stop_pids([pid], grace)


def stop_pids(pids: Iterable[int], grace: float = 15.0) -> None:
    """SIGTERM every process of ``pids`` at once, wait up to ``grace`` seconds for all
    of them to end, then SIGKILL those still alive. A SuperLink this process started
    is reaped through its ``Popen`` and let go."""
    pids = list(pids)
    waiting = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            waiting.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while waiting and time.monotonic() < deadline:
        waiting = [pid for pid in waiting if not _ended(pid)]
        if waiting:
            time.sleep(0.2)
    for pid in waiting:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for popen in [p for p in _STARTED if p.pid in pids]:
        try:
            # Reaped above or about to be: its returncode is set either way.
            popen.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            continue
        _STARTED.remove(popen)


def _ended(pid: int) -> bool:
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)  # our child: reap it
        if finished:
            return True
    except ChildProcessError:
        pass  # not our child (detached): poll for its exit instead
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return _is_zombie(pid)


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
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--list", action="store_true", help="print PIDs, stop nothing")
    action.add_argument(
        "--start",
        action="store_true",
        help="start the SuperLink as flwr run would and wait until it answers",
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="--start: seconds to wait"
    )
    args = parser.parse_args(argv)
    if args.start:
        env = dict(os.environ) | {"FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(args.port)}
        pid = start_local_superlink(env, timeout=args.timeout)
        print(
            f"flower-superlink already answers on port {args.port}"
            if pid is None
            else f"started flower-superlink {pid} on port {args.port}"
        )
        return
    pids = find_local_superlinks(args.port)
    for pid in pids:
        print(pid if args.list else f"stopping flower-superlink {pid}")
        if not args.list:
            stop_pid(pid)
    if not pids:
        print(f"no flower-superlink on port {args.port}")


if __name__ == "__main__":
    main()
