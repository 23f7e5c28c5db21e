"""docs/walkthrough.md, run as written: its shell blocks, in order, in one shell.

The blocks run in a fresh working directory with ``PORT`` a free port and ``APP`` the
project's ``flower-app`` folder; a marker line before each block splits the output by
block. Whatever the script leaves running (the PIDs it wrote to ``nodes.pid`` and
``superlink.pid``) is stopped by PID afterwards. The loopback tests
(:mod:`tests.flower.test_loopback`) run it in a thread beside their other deployments.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .support import ROOT, alive, still_running

WALKTHROUGH = ROOT / "docs" / "walkthrough.md"
_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)
_MARK = "@@ walkthrough block"

#: Until ``ldpfda node check`` is on this branch, its lines print a note instead.
_NODE_CHECK_STAND_IN = """\
if ! ldpfda node check --help > /dev/null 2>&1; then
    ldpfda() {
        if [ "$1 $2" = "node check" ]; then echo "ldpfda node check: not available";
        else command ldpfda "$@"; fi
    }
fi
"""


def walkthrough_blocks() -> list[str]:
    """The shell blocks of the walkthrough, in order."""
    return _BLOCK.findall(WALKTHROUGH.read_text(encoding="utf-8"))


@dataclass
class WalkthroughRun:
    """What running the walkthrough left: its exit status, each block's output, the
    working directory, the wall time and the processes left running."""

    returncode: int
    outputs: list[str]
    workdir: Path
    wall_time_s: float
    pids: set[int]
    left_running: set[int]
    node_check_available: bool


def _pids(workdir: Path) -> set[int]:
    pids: set[int] = set()
    for name in ("nodes.pid", "superlink.pid"):
        path = workdir / name
        if path.exists():
            pids |= {int(p) for p in path.read_text().split()}
    return pids


def run_walkthrough(workdir: Path, timeout: float = 600.0) -> WalkthroughRun:
    """Run every block of the walkthrough in ``workdir``; stop what it left."""
    from ldpfda.deploy.loopback import flower_env, free_port

    workdir.mkdir(parents=True, exist_ok=True)
    blocks = walkthrough_blocks()
    script = "set -euo pipefail\n" + _NODE_CHECK_STAND_IN
    script += "".join(f"echo '{_MARK} {i}'\n{b}" for i, b in enumerate(blocks))
    env = flower_env(workdir / "flwr-home") | {
        "PORT": str(free_port()),
        "APP": str(ROOT / "flower-app"),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    }
    started = time.perf_counter()
    log = workdir / "walkthrough.out"
    try:
        with log.open("w") as handle:
            done = subprocess.run(
                ["bash", "-c", script],
                cwd=workdir,
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout,
            )
        code = done.returncode
    except subprocess.TimeoutExpired:
        code = -1
    finally:
        wall = time.perf_counter() - started
        pids = _pids(workdir)
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGTERM)
    output = log.read_text(errors="replace")
    parts = re.split(rf"^{_MARK} \d+\n", output, flags=re.M)
    available = subprocess.run(
        ["ldpfda", "node", "check", "--help"], capture_output=True, env=env
    )
    return WalkthroughRun(
        code,
        parts[1:],
        workdir,
        wall,
        pids,
        still_running(pids),
        available.returncode == 0,
    )


class Walkthrough(threading.Thread):
    """:func:`run_walkthrough` in the background; :meth:`result` waits for it."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(name="walkthrough", daemon=True)
        self.workdir = workdir
        self.outcome: WalkthroughRun | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.outcome = run_walkthrough(self.workdir)
        except BaseException as exc:  # raised again by result()
            self.error = exc

    def result(self) -> WalkthroughRun:
        self.join(timeout=900)
        if self.is_alive():
            raise TimeoutError("the walkthrough did not end within 900 s")
        if self.error is not None:
            raise RuntimeError(f"the walkthrough failed: {self.error!r}")
        assert self.outcome is not None
        return self.outcome
