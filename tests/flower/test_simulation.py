"""``flwr run`` on the simulation runtime equals the in-process engine.

Both protocols: the default (every client releases once, the moment classifier) and the
reference MRMA, on the functional design; a run under the shipped wearable spec in
which every simulated node reads its own wearable file (wide CSV, long CSV or NPZ, each
on its device's own irregular timestamps) from ``flower.node-data``; and reference
MRMA for three classes. (Block mode, ``flower.clients-per-node``, runs from the
installed wheel: :mod:`tests.flower.test_wheel_deploy`.) The module fixture starts
the local SuperLink with :func:`ldpfda.deploy.local_superlink.start_local_superlink`
(Flower's own start gives up after 15 s, which the loaded test machine exceeded once)
and submits the runs to it, each once the one before has had its releases back; every
``flwr run`` finds it running. The first run is the README's ``flwr run .``, the others
run the thin app folder ``flower-app``.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpfda.config import Settings
from ldpfda.datasets.wearable_spec import WEARABLE_SPEC
from ldpfda.engine import run_repeat
from ldpfda.engine.inprocess import ArrayClients
from ldpfda.engine.runner import run_protocol
from ldpfda.fda.features import VectorFeaturizer
from ldpfda.fda.scaling import CoefficientScaler
from ldpfda.privacy.random import derive_seed
from ldpfda.schema.spec import FederationSpec

from .support import REFERENCE, ROOT

pytestmark = pytest.mark.slow

PROTOCOLS: dict[str, dict[str, Any]] = {
    "default-moment": {},
    "reference-mrma": REFERENCE,
}
#: The run on the hosts' own files: clients 0-7 train, 8-11 evaluate.
FILES_RUN, FILE_NODES = "wearable-files", 12
#: Reference MRMA for three wearable conditions: 24 clients train, 12 evaluate.
KCLASS_RUN, KCLASS_NODES = "three-class-mrma", 36
KCLASS_CONFIG: dict[str, Any] = {
    **REFERENCE,
    "data.dataset": "wearable",
    "data.n-classes": 3,
    "data.n-train": 24,
    "data.n-eval": 12,
    "mrma.num-weak-models": 4,
    "mrma.subsample-size": 6,
    "data.n-test": 300,
    "fda.calibration-size": 200,
}


def _own_files(folder: Path) -> dict[str, Any]:
    """The spec, one wearable subject's file per node (``ldpfda deploy
    example-data``), the server's public and test files; the run config on them."""
    from ldpfda.deploy.operate import write_example_data

    files = write_example_data(folder, FILE_NODES, seed=31, public=300, test=500)
    spec = folder / "wearable.toml"
    spec.write_text(WEARABLE_SPEC, encoding="utf-8")
    return {
        "data.dataset": "wearable",
        "data.n-train": 8,
        "data.n-eval": 4,
        "privacy.epsilon": 5.0,
        "flower.spec": str(spec),
        "flower.node-data": str(files["nodes"]),
        "flower.public-data": str(files["public"]),
        "flower.test-data": str(files["test"]),
    }


DESIGN_RUN: dict[str, Any] = {
    "data.dataset": "functional",
    "data.n-train": 12,
    "data.n-eval": 8,
    "mrma.num-weak-models": 4,
    "mrma.subsample-size": 6,
    "data.n-test": 2000,
}


def _run_log(submitted: str, env: dict[str, str], workdir: Path) -> str:
    """The tail of ``flwr log`` for the run ``flwr run`` printed it had started: the
    simulation's own log, Ray's messages included, for a failure message."""
    from ldpfda.deploy.loopback import _executable

    found = re.search(r"run (\d+)", submitted)
    if found is None:
        return f"(no run id in the output of flwr run: {submitted[-500:]!r})"
    shown = subprocess.run(
        [_executable("flwr"), "log", found.group(1), "--show"],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return (
        f"flwr log {found.group(1)} (last 6000 characters):\n"
        + (shown.stdout + shown.stderr)[-6000:]
    )


#: The stages of a run after its first query came back.
PAST_RELEASES = ("train", "fit", "evaluate", "aggregate", "done")


def _wait(
    report_dir: Path,
    stages: tuple[str, ...],
    submitted: str,
    env: dict[str, str],
    workdir: Path,
) -> None:
    """Wait until the run writing into ``report_dir`` is at one of ``stages``; if it
    fails first or takes over 10 minutes, raise with the run's own log."""
    from ldpfda.deploy.loopback import wait_for_stage

    try:
        wait_for_stage(report_dir, stages, timeout=600)
    except (RuntimeError, TimeoutError) as error:
        raise RuntimeError(f"{error}\n{_run_log(submitted, env, workdir)}") from error


@dataclass
class Simulations:
    """Every run: reports and run directories by name, and the SuperLinks."""

    reports: dict[str, dict[str, Any]]
    run_dirs: dict[str, Path]
    started: int | None
    superlinks: list[int]
    superlinks_left: list[int]


@pytest.fixture(scope="module")
def simulations(tmp_path_factory: pytest.TempPathFactory) -> Simulations:
    from ldpfda.deploy.local_superlink import (
        find_local_superlinks,
        start_local_superlink,
        stop_pid,
    )
    from ldpfda.deploy.loopback import (
        CHECKOUT_APP,
        _executable,
        flower_env,
        free_port,
        run_config_arg,
        wait_for_report,
    )

    workdir = tmp_path_factory.mktemp("simulation")
    http_port = free_port()
    env = flower_env(workdir / "flwr-home") | {
        # Own ports, so the test never talks to (or stops) anybody else's SuperLink.
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(http_port),
        "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()),
    }
    reports, run_dirs, submitted = {}, {}, {}
    started = None
    try:
        started = start_local_superlink(env, cwd=workdir)
        # One Ray start at a time: every simulation run starts its own Ray instance,
        # and four of them starting at once on a two-core machine that is also
        # running the rest of the suite left one run without a single reply for
        # minutes. A run is submitted once the one before has had its releases back
        # (its Ray is serving), so two runs overlap at most.
        runs = {
            name: (20, {**DESIGN_RUN, **protocol})
            for name, protocol in PROTOCOLS.items()
        }
        runs[FILES_RUN] = (FILE_NODES, _own_files(workdir / "own"))
        runs[KCLASS_RUN] = (KCLASS_NODES, KCLASS_CONFIG)
        for order, (name, (nodes, protocol)) in enumerate(runs.items()):
            # The first run bundles the checkout, as the README's `flwr run .`; the
            # others the thin app folder that loads the installed package (here the
            # editable checkout), which bundles one file instead of about 160.
            app = ROOT if order == 0 else CHECKOUT_APP
            config = {
                "flower.repeat": 2,
                "flower.report-dir": str(workdir / name),
                **protocol,
            }
            done = subprocess.run(
                [
                    _executable("flwr"),
                    "run",
                    str(app),
                    "--federation-config",
                    f"num-supernodes={nodes}",
                    "--run-config",
                    run_config_arg(config),
                ],
                env=env,
                cwd=workdir,
                capture_output=True,
                text=True,
                timeout=180,
            )
            if done.returncode != 0:
                raise RuntimeError(
                    f"flwr run ({name}) failed:\n{done.stdout}{done.stderr}"
                )
            submitted[name] = done.stdout
            _wait(workdir / name, PAST_RELEASES, done.stdout, env, workdir)
        for name in runs:
            _wait(workdir / name, ("done",), submitted[name], env, workdir)
            reports[name] = wait_for_report(workdir / name, timeout=60)
            run_dirs[name] = next((workdir / name).glob("run-*"))
    finally:
        pids = find_local_superlinks(http_port)
        for pid in pids:
            stop_pid(pid)
    return Simulations(
        reports=reports,
        run_dirs=run_dirs,
        started=started,
        superlinks=pids,
        superlinks_left=find_local_superlinks(http_port),
    )


def test_every_flwr_run_uses_the_started_local_superlink_which_is_stopped(
    simulations,
):
    assert simulations.started is not None
    assert simulations.superlinks == [simulations.started], (
        "flwr run should have found the started local SuperLink, not started another"
    )
    assert simulations.superlinks_left == []


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_flwr_run_simulation_equals_the_engine(simulations, protocol):
    report = simulations.reports[protocol]
    run_dir = simulations.run_dirs[protocol]
    settings = Settings.from_mapping(report["settings"])
    assert settings.mechanism == (
        "reference" if PROTOCOLS[protocol] else "joint-hybrid"
    )
    reference = run_repeat(settings, 2)
    assert report["method"] == reference.method
    payload = np.load(run_dir / "payload.npz")
    if settings.protocol == "moment":
        # Every client released, training and evaluation alike.
        np.testing.assert_array_equal(payload["client_ids"], np.arange(20))
        np.testing.assert_allclose(
            payload["releases"], reference.payload.releases, rtol=0, atol=1e-12
        )
        assert "evaluate" not in report["participation"]
    else:
        np.testing.assert_array_equal(payload["client_ids"], np.arange(12))
        np.testing.assert_allclose(
            payload["features"], reference.payload.features, rtol=0, atol=1e-12
        )
        np.testing.assert_array_equal(payload["labels"], reference.payload.labels)
    model = np.load(run_dir / "model.npz")
    np.testing.assert_allclose(model["coef"], reference.final.coef[0], atol=1e-10)
    np.testing.assert_allclose(
        model["intercept"], reference.final.intercept, atol=1e-10
    )
    for method, error in report["test_errors"].items():
        assert error == pytest.approx(reference.test_errors[method])
    assert report["participation"]["connected_nodes"] == 20
    spent = {c["reported_spent"] for c in report["privacy"]["clients"].values()}
    assert spent == {5.0}


def test_simulated_nodes_on_their_own_files_equal_the_engine_on_those_files(
    simulations,
):
    report = simulations.reports[FILES_RUN]
    run_dir = simulations.run_dirs[FILES_RUN]
    settings = Settings.from_mapping(report["settings"])
    flower = report["flower"]
    spec = FederationSpec.load(flower["flower.spec"])
    nodes = sorted(
        Path(flower["flower.node-data"]).glob("client-*"),
        key=lambda path: int(path.stem.split("-")[1]),
    )
    assert {path.suffix for path in nodes} == {".csv", ".npz"}
    # Each host on its own device clock: no two files share their timestamps.
    curves = [spec.featurize_file(path) for path in nodes]
    stamps = {tuple(np.unique(c.times).tolist()) for c, _ in curves}
    assert len(stamps) == FILE_NODES
    # The engine, in process, on what the spec makes of the very same files.
    test = spec.featurize_file(flower["flower.test-data"])[1]
    x = np.vstack([got.features for _, got in curves])
    y = np.concatenate([got.labels for _, got in curves]).astype(np.int8)
    identity = VectorFeaturizer(CoefficientScaler(-1.0, 1.0), spec.n_features)
    train, evaluation = (
        ArrayClients(ids, x[ids], y[ids], identity)
        for ids in (np.arange(8), np.arange(8, FILE_NODES))
    )
    reference = run_protocol(
        train,
        evaluation,
        settings,
        seed=derive_seed(settings.seed, "clients", 2),
        server_rng=np.random.default_rng(derive_seed(settings.seed, "server", 2)),
        test=(test.features, test.labels.astype(np.int8)),
        public=spec.featurize_file(flower["flower.public-data"])[1].features,
    )
    payload = np.load(run_dir / "payload.npz")
    np.testing.assert_array_equal(payload["client_ids"], np.arange(FILE_NODES))
    np.testing.assert_allclose(
        payload["releases"], reference.payload.releases, rtol=0, atol=1e-12
    )
    model = np.load(run_dir / "model.npz")
    np.testing.assert_allclose(model["coef"], reference.final.coef[0], atol=1e-10)
    np.testing.assert_allclose(
        model["intercept"], reference.final.intercept, atol=1e-10
    )
    for method, error in report["test_errors"].items():
        assert error == pytest.approx(reference.test_errors[method])


def test_a_three_class_mrma_simulation_equals_the_engine(simulations):
    """K = 3 on the simulation runtime: every request carries the number of classes,
    the nodes release K-ary randomized labels and answer the K-row weak models'
    feedback, and the payloads, the K-row model and the test errors are the engine's."""
    report = simulations.reports[KCLASS_RUN]
    run_dir = simulations.run_dirs[KCLASS_RUN]
    settings = Settings.from_mapping(report["settings"])
    assert report["n_classes"] == settings.n_classes == 3
    reference = run_repeat(settings, 2)
    assert report["method"] == reference.method == "mrma"
    payload = np.load(run_dir / "payload.npz")
    np.testing.assert_array_equal(payload["client_ids"], np.arange(24))
    np.testing.assert_allclose(
        payload["features"], reference.payload.features, rtol=0, atol=1e-12
    )
    np.testing.assert_array_equal(payload["labels"], reference.payload.labels)
    assert set(np.unique(payload["labels"])) <= {0, 1, 2}
    model = np.load(run_dir / "model.npz")
    assert model["coef"].shape == reference.final.coef.shape == (3, settings.n_basis)
    np.testing.assert_allclose(model["coef"], reference.final.coef, atol=1e-10)
    np.testing.assert_allclose(
        model["intercept"], reference.final.intercept, atol=1e-10
    )
    for method, error in report["test_errors"].items():
        assert error == pytest.approx(reference.test_errors[method])
    assert report["participation"]["connected_nodes"] == KCLASS_NODES
    spent = {c["reported_spent"] for c in report["privacy"]["clients"].values()}
    assert spent == {5.0}
