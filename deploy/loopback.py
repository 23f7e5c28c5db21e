"""Run ldpfda as a real deployment on one machine: 1 SuperLink, N SuperNodes, loopback.

Every part is its own process, as on separate hosts, on free ports of 127.0.0.1. The
script writes one data file per client (the row :func:`ldpfda.engine.run_repeat` gives
it), starts ``flower-superlink`` (``--tls``: certificates from ``gen_certs.py`` and
SuperNode authentication) and one ``flower-supernode`` per file, waits until every node
is ready, submits the app with ``flwr run <app> loopback``, waits for ``report.json``
and stops every process by PID. Every wait polls a condition up to a deadline.

Usage::

    python -m ldpfda.deploy.loopback WORKDIR [--nodes 4] [--tls]
        [--run-config 'data.dataset="functional" data.n-train=3 data.n-eval=1 ...']

``--run-config`` must give ``data.n-train + data.n-eval`` equal to ``--nodes``; the
defaults below fit 4 nodes. ``FLWR_HOME`` is ``WORKDIR/flwr-home``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ldpfda.deploy.local_superlink import stop_pids

__all__ = [
    "CHECKOUT_APP",
    "LoopbackFederation",
    "flower_env",
    "free_port",
    "join_with_backoff",
    "make_node_files",
    "node_ready",
    "register_keys",
    "run_config_arg",
    "run_stage",
    "wait_for_report",
    "wait_for_stage",
]

#: The checkout's thin Flower app folder: its bundle is one ``pyproject.toml`` naming
#: the installed components, where ``flwr run .`` would bundle the whole checkout (about
#: 160 files) for every run and every node to unpack.
CHECKOUT_APP = Path(__file__).resolve().parents[1] / "flower-app"

#: Settings for a 4-node run (3 training clients, 1 evaluation client).
DEFAULT_RUN_CONFIG: dict[str, Any] = {
    "data.dataset": "functional",
    "data.n-train": 3,
    "data.n-eval": 1,
    "data.n-test": 2000,
    "mrma.num-weak-models": 1,
    "mrma.subsample-size": 2,
    "flower.reply-timeout": 60.0,
    "flower.min-reply-fraction": 0.5,
}

#: Printed whenever a federation is started without TLS and SuperNode authentication.
INSECURE_WARNING = (
    "WARNING: ldpfda loopback federation WITHOUT TLS or SuperNode authentication: "
    "releases and models cross the network in clear and any process can join as a "
    "SuperNode. Use --tls for anything but a local test (see docs/flower.md)."
)


#: Ports :func:`free_port` handed out in this process (never handed out twice).
_HANDED_OUT: set[int] = set()
_PORT_LOCK = threading.Lock()


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 if it cannot be read)."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now, below the ephemeral range.

    A port the kernel picks for a bind to port 0 comes from the ephemeral range, from
    which every outgoing connection takes its own port too: between this call and the
    moment a SuperNode binds the port, one of the many connections of the Flower
    processes around could take it (a loopback run failed so, "address already in
    use"). Ports below that range are never given to outgoing connections; this picks
    one at random, checks that it binds, and never hands out the same one twice in a
    process. Where the range starts too low to leave room, it falls back to port 0.
    """
    low = _ephemeral_low()
    rng = random.SystemRandom()
    with _PORT_LOCK:
        for _ in range(200 if low > 11024 else 0):
            port = rng.randrange(max(1024, low - 20000), low)
            if port in _HANDED_OUT:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _HANDED_OUT.add(port)
            return port
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])


def _executable(name: str) -> str:
    # Prefer the tools installed next to this interpreter (the same environment).
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed (pip install 'flwr>=1.42')")
    return found


def flower_env(home: Path) -> dict[str, str]:
    """Environment for Flower processes: own ``FLWR_HOME``, offline, no telemetry."""
    env = dict(os.environ)
    # Flower processes start helpers (flower-superexec, flwr-serverapp, ...) by name.
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
    env.update(
        {
            "FLWR_HOME": str(home),
            "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            # The hosts have ldpfda installed: do not rebuild it from a registry.
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        }
    )
    return env


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))


def run_config_arg(config: Mapping[str, Any]) -> str:
    """``--run-config`` argument (``k=v`` pairs, TOML values) for ``flwr run``."""
    return " ".join(f"{key}={_toml_value(value)}" for key, value in config.items())


def flwr_run(
    app_dir: Path,
    args: Sequence[str],
    run_config: Mapping[str, Any],
    env: Mapping[str, str],
    cwd: Path,
    timeout: float = 300.0,
    what: str = "flwr run",
) -> str:
    """``flwr run <app_dir> <args> --run-config ...``; its output (``RuntimeError``,
    naming it ``what``, with the output of a failed run)."""
    done = subprocess.run(
        [_executable("flwr"), "run", str(app_dir), *args]
        + ["--run-config", run_config_arg(run_config)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def make_node_files(settings: Any, outdir: Path, *, suffix: str = ".npz") -> list[Path]:
    """One data file (``.npz`` or ``.csv``) per client of ``settings``' population.

    File ``i`` holds the raw row of client ``i`` (training clients first) of
    :func:`ldpfda.datasets.population.population_data`: for a single-server run the
    row ``run_repeat`` gives it, for server ``s`` of a session the row
    ``run_multiserver_repeat`` gives it.
    """
    from ldpfda.config import DESIGNS
    from ldpfda.datasets.files import save_node_data
    from ldpfda.datasets.population import population_data
    from ldpfda.datasets.synthetic import make_design

    if settings.dataset not in DESIGNS:
        raise ValueError(
            f"make_node_files writes the embedded designs {DESIGNS}; for "
            f"{settings.dataset!r} write each host's own file under a federation spec "
            "(ldpfda.datasets.readers, docs/spec.md)"
        )
    data = population_data(settings, 0, with_test=False)
    raw = np.vstack([data.train[0], data.evaluation[0]])
    labels = np.concatenate([data.train[1], data.evaluation[1]])
    design = make_design(settings.dataset)
    grid = design.grid_points if design.is_functional else None
    return [
        save_node_data(
            outdir / f"client-{i}{suffix}", raw[i : i + 1], labels[i : i + 1], grid
        )
        for i in range(raw.shape[0])
    ]


def _status(report_dir: Path) -> dict[str, Any]:
    """``status.json`` of the run writing into ``report_dir`` ({} before it starts)."""
    for status_file in Path(report_dir).glob("run-*/status.json"):
        try:
            return dict(json.loads(status_file.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError):
            return {}  # being replaced right now
    return {}


def run_stage(report_dir: Path) -> str | None:
    """The stage of the run writing into ``report_dir`` (None before it starts)."""
    stage = _status(report_dir).get("stage")
    return None if stage is None else str(stage)


def wait_for_stage(report_dir: Path, stages: Sequence[str], timeout: float) -> str:
    """The stage of the run writing into ``report_dir`` once it is one of ``stages``.

    Raises ``RuntimeError`` if the run fails first, ``TimeoutError`` if it reaches none
    of ``stages`` within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while (stage := (status := _status(report_dir)).get("stage")) not in stages:
        if stage == "failed":
            raise RuntimeError(
                f"the run in {report_dir} failed before {stages}: {status.get('error')}"
            )
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"the run in {report_dir} is at stage {stage!r}, not in {stages}, "
                f"after {timeout:g} s"
            )
        time.sleep(0.2)
    return str(stage)


def wait_for_report(report_dir: Path, timeout: float) -> dict[str, Any]:
    """The report of the (single) run writing into ``report_dir``, once it is done."""
    wait_for_stage(report_dir, ("done",), timeout)
    report = next(Path(report_dir).glob("run-*/report.json"))
    return dict(json.loads(report.read_text(encoding="utf-8")))


#: What a SuperNode logs once the SuperLink has registered it (with its node id), and
#: what its SuperExec (which starts a ClientApp process per message) logs once it runs.
#: A node that has logged both answers a message without a start-up delay.
_NODE_ID = re.compile(r"SuperNode ID: (\d+)")
_SUPEREXEC_UP = "Starting Flower SuperExec"


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    #: Sent SIGTERM already: a second one would cut its graceful shutdown short.
    terminated: bool = False

    @property
    def pid(self) -> int:
        return int(self.popen.pid)

    def terminate(self) -> None:
        """SIGTERM this process (by PID), once, without waiting for it to end."""
        if self.popen.poll() is None and not self.terminated:
            self.popen.send_signal(signal.SIGTERM)
            self.terminated = True

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM unless done, wait for the end, SIGKILL after ``grace`` seconds; then
        the same for every process it had started that outlived it (a ClientApp still
        at work on a message when its SuperNode was stopped)."""
        if self.popen.poll() is None:
            below = descendants([self.pid])
            self.terminate()
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.kill()
            stop_pids(below, grace)

    def kill(self) -> None:
        """SIGKILL: the node vanishes without a goodbye, like a crashed host."""
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(timeout=15)


def descendants(pids: Iterable[int]) -> list[int]:
    """The processes below ``pids``, parents first (from ``/proc``; none where there is
    no ``/proc``)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text(encoding="utf-8")
        except OSError:
            continue
        # The command name (field 2) may hold spaces; the parent is the 2nd field after.
        parent[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: list[int] = []
    frontier = set(pids)
    while frontier:
        frontier = {child for child, ppid in parent.items() if ppid in frontier}
        found.extend(sorted(frontier))
    return found


#: What a SuperNode logs when it exits with Flower's code 305 (it could not join: its
#: key is not registered yet, or the SuperLink still holds its old self online). The
#: process itself exits with status 1, as for every Flower error.
CONNECTION_ERROR = "Exit Code: 305"


def node_ready(log: str) -> int | None:
    """The node id a SuperNode's log names once the node is ready, else None."""
    found = _NODE_ID.search(log)
    return int(found.group(1)) if found and _SUPEREXEC_UP in log else None


def join_with_backoff(
    spawn: Callable[[], _Process],
    timeout: float = 120.0,
    *,
    first_delay: float = 1.0,
    max_delay: float = 8.0,
) -> tuple[_Process, int]:
    """Start a SuperNode with ``spawn()`` until it is ready; it and its node id.

    ``spawn`` starts the node with a log of its own. A start that exits with Flower's
    code 305 (:data:`CONNECTION_ERROR` in its log) is tried again after a back-off that
    doubles from ``first_delay`` up to ``max_delay`` seconds: many nodes starting
    at once, or a node restarted before the SuperLink has seen its old self go, get
    it. Any other exit is a ``RuntimeError`` naming the log; ``TimeoutError`` if the
    node is not ready within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    delay = first_delay
    while True:
        process = spawn()
        while (code := process.popen.poll()) is None:
            node_id = node_ready(process.log.read_text(errors="replace"))
            if node_id is not None:
                return process, node_id
            if time.monotonic() >= deadline:
                process.stop()
                raise TimeoutError(f"{process.name} did not join in {timeout:g} s")
            time.sleep(0.2)
        if CONNECTION_ERROR not in process.log.read_text(errors="replace"):
            raise RuntimeError(
                f"{process.name} exited with status {code}; see {process.log}"
            )
        if time.monotonic() + delay >= deadline:
            raise TimeoutError(
                f"{process.name} did not join in {timeout:g} s (exit code 305 each "
                f"time: is its public key registered? see {process.log})"
            )
        time.sleep(delay)
        delay = min(2 * delay, max_delay)


#: Run by one interpreter for a list of keys: Flower's ``flwr supernode register`` for
#: each (argv: the SuperLink connection, then the keys), one JSON line per key with
#: its exit code and Flower's output. One process imports Flower's CLI once, where a
#: command per key costs about a second of CPU each.
_REGISTER_MANY = """
import contextlib, io, json, logging, sys
from flwr.cli.app import app
superlink = sys.argv[1]
# Flower's log handlers hold the stderr of the import: point them at each key's output.
handlers = [h for h in logging.getLogger("flwr").handlers if hasattr(h, "setStream")]
for key in sys.argv[2:]:
    out, code = io.StringIO(), 0
    streams = [h.setStream(out) for h in handlers]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            app(["supernode", "register", key, superlink], standalone_mode=False)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except Exception as exc:
            code = 1
            print(f"{type(exc).__name__}: {exc}")
    for h, stream in zip(handlers, streams):
        h.setStream(stream)
    print(json.dumps({"key": key, "code": code, "output": out.getvalue()}), flush=True)
"""


def register_keys(
    keys: Sequence[Path],
    superlink: str,
    env: Mapping[str, str],
    cwd: Path,
    *,
    timeout: float = 60.0,
) -> list[str]:
    """``flwr supernode register KEY superlink`` for every public key of ``keys``.

    One process registers every key in turn (Flower's command, one key at a time).
    Keys the SuperLink refuses for another reason than being registered already are
    tried again, in a new process, until ``timeout`` seconds have passed (the
    SuperLink may still be starting). Returns one line per key, in the order of
    ``keys``; ``RuntimeError`` with Flower's output for a key that could not be
    registered.
    """
    deadline = time.monotonic() + timeout
    lines: dict[Path, str] = {}
    pending = list(keys)
    while pending:
        done = subprocess.run(
            [sys.executable, "-c", _REGISTER_MANY, superlink, *map(str, pending)],
            env=dict(env),
            cwd=cwd,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=max(timeout, 60.0),
        )
        replies = {
            Path(r["key"]): r
            for r in map(json.loads, re.findall(r'^\{"key": .*$', done.stdout, re.M))
        }
        refused = []
        for key in pending:
            reply = replies.get(key)
            if reply is not None and reply["code"] == 0:
                lines[key] = f"{key.name}: registered"
            elif reply is not None and "already in use" in reply["output"]:
                lines[key] = f"{key.name}: registered already"
            else:
                refused.append((key, reply))
        if refused and time.monotonic() >= deadline:
            key, reply = refused[0]
            said = done.stderr if reply is None else reply["output"]
            raise RuntimeError(f"flwr supernode register {key}:\n{said}")
        pending = [key for key, _ in refused]
        if pending:
            time.sleep(1.0)
    return [lines[key] for key in keys]


@dataclass
class LoopbackFederation:
    """A SuperLink and one SuperNode per data file, all on 127.0.0.1.

    A context manager; every process is stopped by PID on exit. Logs, ``flwr-home``
    (``FLWR_HOME``), certificates and databases go to ``workdir``; SuperNode ``i``
    serves client ``i`` with ``data_files[i]`` and the extra entries
    ``node_config[i]``, with a lifetime budget of ``privacy_budget`` kept in
    ``<workdir>/state-<i>``. ``tls``: TLS with self-signed certificates and SuperNode
    authentication.
    """

    workdir: Path
    data_files: Sequence[Path]
    node_config: Sequence[Mapping[str, Any]] = ()
    tls: bool = False
    privacy_budget: float = 10.0
    superlink: _Process | None = None
    supernodes: list[_Process] = field(default_factory=list)
    port: int = 0
    #: The command line and the node config of each SuperNode (to start it again).
    commands: list[list[str]] = field(default_factory=list)
    node_settings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def home(self) -> Path:
        return Path(self.workdir) / "flwr-home"

    @property
    def certs(self) -> Path:
        return Path(self.workdir) / "certs"

    @property
    def env(self) -> dict[str, str]:
        return flower_env(self.home)

    def _spawn(self, name: str, command: list[str]) -> _Process:
        log = Path(self.workdir) / f"{name}.log"
        with log.open("wb") as handle:
            popen = subprocess.Popen(
                command,
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.workdir,
            )
        return _Process(name, popen, log)

    def _wait_for_port(self, timeout: float = 60.0) -> None:
        assert self.superlink is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.superlink.popen.poll() is not None:
                raise RuntimeError(f"flower-superlink exited; see {self.superlink.log}")
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.25)
        raise TimeoutError(f"the SuperLink did not listen on port {self.port}")

    def _write_connection(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        security = (
            f'root-certificates = "{self.certs / "ca.crt"}"'
            if self.tls
            else "insecure = true"
        )
        (self.home / "config.toml").write_text(
            '[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\n'
            f'address = "127.0.0.1:{self.port}"\n{security}\n',
            encoding="utf-8",
        )

    def start(self) -> LoopbackFederation:
        """Start the SuperLink, register keys (TLS), start the SuperNodes."""
        Path(self.workdir).mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        command = [
            _executable("flower-superlink"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--database",
            str(Path(self.workdir) / "superlink.db"),
        ]
        if self.tls:
            from ldpfda.deploy.gen_certs import generate

            generate(self.certs, supernodes=len(self.data_files))
            command += [
                "--ssl-ca-certfile",
                str(self.certs / "ca.crt"),
                "--ssl-certfile",
                str(self.certs / "server.crt"),
                "--ssl-keyfile",
                str(self.certs / "server.key"),
                "--enable-supernode-auth",
            ]
        else:
            command.append("--insecure")
            print(INSECURE_WARNING, file=sys.stderr, flush=True)
        self._write_connection()
        self.superlink = self._spawn("superlink", command)
        self._wait_for_port()
        if self.tls:
            self._register_keys()
        for i, data in enumerate(self.data_files):
            config = {
                "client-id": i,
                "data-path": str(Path(data).resolve()),
                "privacy-budget": float(self.privacy_budget),
                "state-dir": str((self.workdir / f"state-{i}").resolve()),
                **(self.node_config[i] if i < len(self.node_config) else {}),
            }
            command = [
                _executable("flower-supernode"),
                "--superlink",
                f"127.0.0.1:{self.port}",
                "--port",
                str(free_port()),
                "--node-config",
                run_config_arg(config),
            ]
            if self.tls:
                command += [
                    "--root-certificates",
                    str(self.certs / "ca.crt"),
                    "--auth-supernode-private-key",
                    str(self.certs / f"supernode-{i}"),
                ]
            else:
                command.append("--insecure")
            self.commands.append(command)
            self.node_settings.append(config)
            self.supernodes.append(self._spawn(f"supernode-{i}", command))
        return self

    def restart(
        self,
        i: int,
        *,
        crash: bool = False,
        node_config: Mapping[str, Any] | None = None,
        timeout: float = 120.0,
    ) -> None:
        """Stop SuperNode ``i`` (SIGTERM, or SIGKILL as a crash) and start it again with
        the same key and state directory, as a supervisor would; its new log is
        ``supernode-<i>-<n>.log``.

        Under SuperNode authentication the node keeps its node id (the SuperLink knows
        it by its key), but it can join only once the SuperLink holds its old self
        offline (at once after a SIGTERM, up to two heartbeats after a crash): until
        then a start exits with code 305 and is tried again (:func:`join_with_backoff`).
        ``node_config`` replaces entries of the node's config for the new start.

        Raises
        ------
        TimeoutError
            If the node has not joined again within ``timeout`` seconds.
        """
        if crash:
            self.supernodes[i].kill()
        else:
            self.supernodes[i].stop()
        command = list(self.commands[i])
        if node_config:
            at = command.index("--node-config") + 1
            config = dict(self.node_settings[i], **node_config)
            command[at] = run_config_arg(config)

        def spawn() -> _Process:
            n = sum(1 for _ in Path(self.workdir).glob(f"supernode-{i}-*.log")) + 1
            return self._spawn(f"supernode-{i}-{n}", command)

        self.supernodes[i], _ = join_with_backoff(spawn, timeout, max_delay=2.0)

    def _register_keys(self, timeout: float = 120.0) -> None:
        """Register every SuperNode's public key."""
        n = len(self.data_files)
        keys = [self.certs / f"supernode-{i}.pub" for i in range(n)]
        register_keys(keys, "loopback", self.env, self.workdir, timeout=timeout)

    def _watch(
        self,
        indices: Sequence[int],
        found: Callable[[str], Any],
        timeout: float,
        what: str,
    ) -> dict[int, Any]:
        """``found(log)`` of each SuperNode of ``indices``, polled until none is None.

        Raises ``RuntimeError`` if one of them exits first, ``TimeoutError`` (naming
        the SuperNodes that ``what``) after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        seen: dict[int, Any] = {}
        while late := [i for i in indices if i not in seen]:
            for i in late:
                process = self.supernodes[i]
                value = found(process.log.read_text(errors="replace"))
                if value is not None:
                    seen[i] = value
                elif process.popen.poll() is not None:
                    raise RuntimeError(f"{process.name} exited; see {process.log}")
            if len(seen) < len(indices):
                if time.monotonic() >= deadline:
                    late = [i for i in indices if i not in seen]
                    raise TimeoutError(f"SuperNodes {late} {what} within {timeout:g} s")
                time.sleep(0.2)
        return seen

    def node_ids(self, timeout: float = 120.0) -> list[int]:
        """The SuperLink's node id of each SuperNode, once every one is ready.

        Ready: it has logged its ``SuperNode ID: <id>`` and its SuperExec (which runs
        the ClientApp of every message) has started. The SuperLink lists a node as soon
        as it connects, before its SuperExec runs: a run submitted then starts its
        reply timeouts while the nodes are still starting. Submit a run after this.
        """

        n = len(self.supernodes)
        ids = self._watch(range(n), node_ready, timeout, "were not ready")
        return [ids[i] for i in range(n)]

    def wait_for_replies(
        self, indices: Sequence[int], message_type: str, timeout: float
    ) -> None:
        """Until each SuperNode of ``indices`` has logged that its reply to
        ``message_type`` has reached the SuperLink (its ``Sending: <message_type>
        message`` line, then ``Sent successfully``): a node killed after the first line
        alone may take its reply with it."""
        line = f"Sending: {message_type} message"
        sent = f"sent no {message_type} reply"

        def delivered(log: str) -> bool | None:
            at = log.find(line)
            return (at >= 0 and "Sent successfully" in log[at:]) or None

        self._watch(sorted(set(indices)), delivered, timeout, sent)

    def submit(self, app_dir: Path, run_config: Mapping[str, Any]) -> str:
        """``flwr run <app_dir> loopback --run-config ...``; returns its output."""
        return flwr_run(app_dir, ["loopback"], run_config, self.env, self.workdir)

    def processes(self) -> list[_Process]:
        """Every SuperNode, then the SuperLink."""
        return [*self.supernodes, *([self.superlink] if self.superlink else [])]

    def stop(self) -> None:
        """Stop every SuperNode, then the SuperLink, by PID.

        The SuperNodes shut down side by side (each says goodbye to the SuperLink,
        which stays up until they have ended). A ClientApp still at work on a message
        (a node that hangs on a query) can outlive its SuperNode: it is stopped too,
        not left to end by itself.
        """
        running = [p.pid for p in self.processes() if p.popen.poll() is None]
        below = descendants(running)
        for process in self.supernodes:
            process.terminate()
        for process in self.processes():
            process.stop()
        stop_pids(below)  # at once where they have ended with their nodes

    def __enter__(self) -> LoopbackFederation:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument(
        "--tls",
        action="store_true",
        help="TLS + SuperNode authentication with self-signed certs",
    )
    parser.add_argument(
        "--run-config", default="", help="extra run-config overrides, as for flwr run"
    )
    parser.add_argument("--app", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args(argv)

    from flwr.common.config import parse_config_args

    from ldpfda.server.server_app import parse_run_config

    workdir = args.workdir.resolve()
    run_config: dict[str, Any] = dict(DEFAULT_RUN_CONFIG)
    run_config.update(parse_config_args([args.run_config] if args.run_config else None))
    run_config["flower.report-dir"] = str(workdir / "reports")
    settings, _ = parse_run_config(run_config)
    if settings.n_train + settings.n_eval != args.nodes:
        parser.error(
            f"data.n-train + data.n-eval = {settings.n_train + settings.n_eval} "
            f"but --nodes {args.nodes}"
        )
    files = make_node_files(settings, workdir / "data")
    started = time.perf_counter()
    with LoopbackFederation(workdir, files, tls=args.tls) as federation:
        assert federation.superlink is not None  # started on entering
        print(
            f"SuperLink on 127.0.0.1:{federation.port} (pid {federation.superlink.pid})"
        )
        federation.node_ids()  # every node takes part in the run
        federation.submit(args.app, run_config)
        report = wait_for_report(workdir / "reports", args.timeout)
    print(
        json.dumps(
            {
                "wall_time_s": time.perf_counter() - started,
                "final_model": report["final_model"],
                "test_errors": report["test_errors"],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
