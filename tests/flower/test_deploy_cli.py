"""``ldpfda deploy``'s pieces that need no Flower process: the example file set, the
merged run config, the back-off on exit 305 and the errors of bad usage."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from ldpfda.cli import main
from ldpfda.datasets.wearable_spec import WEARABLE_SPEC
from ldpfda.schema.spec import FederationSpec


def test_example_data_gives_each_node_its_own_file_in_every_format(tmp_path, capsys):
    assert main(["deploy", "example-data", str(tmp_path), "--nodes", "6"]) == 0
    assert "public" in capsys.readouterr().out
    from ldpfda.deploy.operate import client_files

    files = client_files(tmp_path / "nodes")
    assert list(files) == list(range(6))
    assert [p.suffix for p in files.values()] == [".csv", ".csv", ".npz"] * 2
    spec = FederationSpec.loads(WEARABLE_SPEC)
    stamps = set()
    for path in files.values():
        curves, got = spec.featurize_file(path)
        assert curves.n_subjects == 1 and got.features.shape == (1, spec.n_features)
        stamps.add(tuple(np.unique(curves.times).tolist()))
    assert len(stamps) == 6, "every device has its own clock"
    for name in ("public", "test"):
        curves, _ = spec.featurize_file(tmp_path / f"{name}.csv")
        assert curves.n_subjects == 300


def test_run_configs_merge_in_order_from_files_and_pairs(tmp_path):
    from ldpfda.deploy.operate import merged_run_config

    toml = tmp_path / "run.toml"
    toml.write_text('[data]\nn-train = 3\nn-eval = 1\n[flower]\nspec = "a b.toml"\n')
    merged = merged_run_config([str(toml), "data.n-eval=2 flower.wait-timeout=5"])
    assert merged == {
        "data.n-train": 3,
        "data.n-eval": 2,
        "flower.spec": "a b.toml",
        "flower.wait-timeout": 5,
    }


def test_a_node_exiting_with_305_is_started_again_after_a_back_off(tmp_path):
    from ldpfda.deploy.loopback import _Process, join_with_backoff

    # Exits as Flower's code 305 does on its first two starts (status 1, the code in
    # its log), then logs what a ready node logs.
    script = (
        "import pathlib, sys, time\n"
        f"count = pathlib.Path({str(tmp_path / 'count')!r})\n"
        "n = int(count.read_text()) if count.exists() else 0\n"
        "count.write_text(str(n + 1))\n"
        "if n < 2: print('Exit Code: 305', flush=True); sys.exit(1)\n"
        "print('SuperNode ID: 42', flush=True)\n"
        "print('Starting Flower SuperExec', flush=True)\n"
        "time.sleep(60)\n"
    )
    starts = []

    def spawn():
        log = tmp_path / f"node-{len(starts)}.log"
        with log.open("w") as handle:
            popen = subprocess.Popen(
                [sys.executable, "-c", script], stdout=handle, stderr=handle
            )
        starts.append(popen)
        return _Process("node", popen, log)

    process, node_id = join_with_backoff(spawn, 60.0, first_delay=0.05)
    try:
        assert node_id == 42 and len(starts) == 3
        assert [p.returncode for p in starts[:2]] == [1, 1]
    finally:
        process.stop()


def test_a_node_exiting_with_another_code_is_not_started_again(tmp_path):
    from ldpfda.deploy.loopback import _Process, join_with_backoff

    log = tmp_path / "node.log"
    log.touch()

    def spawn():
        popen = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
        return _Process("node", popen, log)

    with pytest.raises(RuntimeError, match="exited with status 1"):
        join_with_backoff(spawn, 30.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["register", "{tmp}", "federation"], "holds no *.pub key"),
        (
            ["nodes", "--superlink", "127.0.0.1:1", "--data", "{tmp}"]
            + ["--privacy-budget", "1"],
            "--root-certificates CA (TLS) or --insecure",
        ),
        (
            ["nodes", "--superlink", "127.0.0.1:1", "--data", "{tmp}", "--insecure"]
            + ["--privacy-budget", "1"],
            "holds no client-<i>.csv or client-<i>.npz",
        ),
    ],
)
def test_bad_usage_exits_1_naming_what_is_wrong(
    tmp_path, capsys, monkeypatch, argv, message
):
    monkeypatch.chdir(tmp_path)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["deploy", *argv]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "logs").exists(), "nothing is written for a bad command"


def test_the_deploy_commands_are_listed_by_the_cli(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "deploy" in capsys.readouterr().out


def test_stopping_a_process_stops_what_it_left_running(tmp_path):
    # A SuperNode stopped while its ClientApp works on a message must not leave that
    # ClientApp behind: here a parent that ignores SIGTERM's effect on its child.
    from ldpfda.deploy.loopback import _Process, descendants
    from tests.flower.support import alive

    code = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        "time.sleep(300)\n"
    )
    popen = subprocess.Popen([sys.executable, "-c", code])
    process = _Process("parent", popen, tmp_path / "log")
    deadline = time.monotonic() + 30
    while not (below := descendants([process.pid])) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(below) == 1, below
    process.stop(grace=5.0)
    assert popen.poll() is not None
    assert not alive(below[0]), "the child outlived its stopped parent"


def test_a_process_that_exits_while_its_state_is_read_is_not_alive(monkeypatch):
    # /proc/<pid>/stat of a process that exits between the open and the read fails
    # with ESRCH on the read: the process has stopped, and the check must say so
    # rather than raise (it did once, at the end of the loopback deployment).
    import builtins
    import errno

    from tests.flower import support

    class Gone:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self):
            raise ProcessLookupError(errno.ESRCH, "No such process")

    real_open = builtins.open

    def fake_open(path, *args, **kwargs):
        if str(path).startswith("/proc/") and str(path).endswith("/stat"):
            return Gone()
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)
    assert support.alive(support.os.getpid()) is False


def test_keys_flower_refuses_are_named_with_flowers_own_message(tmp_path):
    # One process registers every key; a key Flower cannot read, or a connection
    # config.toml does not have, fails naming the key and what Flower said about it
    # (and only it), once the timeout has passed (0: after the first try).
    from ldpfda.deploy.gen_certs import generate
    from ldpfda.deploy.loopback import flower_env, register_keys

    home = tmp_path / "flwr-home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[superlink]\ndefault = "here"\n\n[superlink.here]\naddress = "127.0.0.1:1"\n'
        "insecure = true\n",
        encoding="utf-8",
    )
    certs = generate(tmp_path / "certs", supernodes=1)
    bad = tmp_path / "bad.pub"
    bad.write_text("not a key\n", encoding="utf-8")
    env = flower_env(home)
    with pytest.raises(RuntimeError, match=r"bad\.pub:\n(.|\n)*Unsupported key type"):
        register_keys([bad], "here", env, tmp_path, timeout=0.0)
    with pytest.raises(
        RuntimeError, match=r"supernode-0\.pub:\n(.|\n)*'elsewhere' not"
    ):
        register_keys(
            [certs / "supernode-0.pub"], "elsewhere", env, tmp_path, timeout=0
        )


def test_free_ports_lie_below_the_ephemeral_range_and_are_never_handed_out_twice():
    # Outgoing connections take their ports from the ephemeral range: a port from it
    # could be taken between free_port() and the bind of the process it is for.
    import socket

    from ldpfda.deploy.loopback import _ephemeral_low, free_port

    low = _ephemeral_low()
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= p < low for p in ports)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", ports[-1]))
