"""Starting the local simulation SuperLink: Flower's command line, a wait that ends on
readiness (not after Flower's fixed 15 s), and clear failures.

A stand-in ``flower-superlink`` on ``PATH`` records its arguments and, as told by its
environment, answers ``/health`` after a delay, exits at once or never answers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ldpfda.deploy.local_superlink import (
    find_local_superlinks,
    start_local_superlink,
    stop_pid,
)
from ldpfda.deploy.loopback import flower_env, free_port

from .support import alive

STAND_IN = """\
import http.server, json, os, pathlib, sys, time
args = sys.argv[1:]
pathlib.Path(os.environ["STAND_IN_ARGV"]).write_text(json.dumps(args))
log = pathlib.Path(args[args.index("--log-file") + 1])
mode = os.environ.get("STAND_IN_MODE", "serve")
if mode == "exit":
    log.write_text("stand-in: cannot open the state database\\n")
    sys.exit(3)
time.sleep(300 if mode == "hang" else float(os.environ.get("STAND_IN_DELAY", "0")))
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
port = int(args[args.index("--port") + 1])
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def _env(tmp_path: Path, mode: str, delay: float = 0.0) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "flower-superlink"
    script.write_text(f"#!{sys.executable}\n{STAND_IN}", encoding="utf-8")
    script.chmod(0o755)
    env = flower_env(tmp_path / "flwr-home")
    return env | {
        "PATH": f"{bin_dir}:{env['PATH']}",
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port()),
        "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()),
        "STAND_IN_ARGV": str(tmp_path / f"argv-{mode}.json"),
        "STAND_IN_MODE": mode,
        "STAND_IN_DELAY": str(delay),
    }


def test_a_slow_superlink_is_waited_for_until_it_answers(tmp_path):
    # The wait ends on the health check, not at a fixed time (Flower's is 15 s): a
    # SuperLink that answers after 3 s is waited for, and found; the timeout only
    # bounds a SuperLink that never answers (the last test).
    env = _env(tmp_path, "serve", delay=3.0)
    port = int(env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"])
    started = time.monotonic()
    pid = start_local_superlink(env, cwd=tmp_path, timeout=120)
    try:
        assert pid is not None and time.monotonic() - started >= 3.0
        assert find_local_superlinks(port) == [pid]
        # A second start finds it answering and starts nothing.
        assert start_local_superlink(env, cwd=tmp_path) is None
        assert find_local_superlinks(port) == [pid]
    finally:
        if pid is not None:
            stop_pid(pid)
    assert find_local_superlinks(port) == []


def test_a_stopped_superlink_is_reaped_and_let_go(tmp_path):
    # The start keeps the Popen of the SuperLink it leaves running; once stopped by
    # its PID that Popen must know it ended, or the interpreter warns at exit that the
    # subprocess "is still running" (it did, in the test suite's workers).
    import ldpfda.deploy.local_superlink as local_superlink

    pid = start_local_superlink(_env(tmp_path, "serve"), cwd=tmp_path, timeout=120)
    (popen,) = [p for p in local_superlink._STARTED if p.pid == pid]
    stop_pid(pid)
    assert popen.returncode is not None
    assert popen not in local_superlink._STARTED


def test_the_command_line_is_the_one_flwr_run_uses(tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir(), theirs.mkdir()
    env = _env(ours, "serve")
    pid = start_local_superlink(env, cwd=ours)
    assert pid is not None
    stop_pid(pid)
    # Flower's own start (what `flwr run` calls) against the same stand-in, same
    # FLWR_HOME and ports: it reads the ports from the environment when imported.
    env["STAND_IN_ARGV"] = str(theirs / "argv.json")
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from flwr.cli.local_superlink import _start_local_superlink as start; "
            "start()",
        ],
        env=env,
        check=True,
        timeout=120,
    )
    stop_pid(find_local_superlinks(int(env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"]))[0])
    recorded = json.loads((ours / "argv-serve.json").read_text())
    assert recorded == json.loads((theirs / "argv.json").read_text())
    assert "--simulation" in recorded


def test_a_superlink_that_exits_is_named_with_its_code_and_log(tmp_path):
    env = _env(tmp_path, "exit")
    port = env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"]
    with pytest.raises(RuntimeError, match=f"port {port} exited with code 3") as error:
        start_local_superlink(env, cwd=tmp_path, timeout=60)
    assert "cannot open the state database" in str(error.value)


def test_a_superlink_that_never_answers_is_stopped_after_the_timeout(tmp_path):
    env = _env(tmp_path, "hang")
    port = int(env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"])
    deadline = time.monotonic() + 30
    with pytest.raises(TimeoutError, match="did not answer its health check within 2"):
        start_local_superlink(env, cwd=tmp_path, timeout=2.0)
    assert time.monotonic() < deadline
    pids = find_local_superlinks(port)
    assert not [pid for pid in pids if alive(pid)], "the stalled SuperLink was left"
