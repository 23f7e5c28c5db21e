"""Multi-server phases on the in-memory Grid: equal to the in-process engine, one
release per client over the session, bad artifacts left out and reported."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from ldpfda.client.client_app import ERROR_BUDGET, ERROR_REQUEST
from ldpfda.client.client_app import app as client_app
from ldpfda.config import Settings
from ldpfda.engine.multiserver import run_multiserver_repeat
from ldpfda.schema.blocks import FIRST_RECORD, in_runs
from ldpfda.server.artifacts import (
    estimates_path,
    models_path,
    read_models,
    session_fingerprint,
    write_models,
)
from ldpfda.server.mrma import LinearModels
from ldpfda.server.multiserver import ServerSpec
from ldpfda.server.multiserver_app import run_phase
from ldpfda.server.multiserver_flower import (
    combine_session,
    phase_run_config,
    server_settings,
)
from ldpfda.server.options import FlowerOptions
from ldpfda.server.server_app import parse_run_config

from .support import FakeGrid, app_config, partitions

BASE = Settings.reference(
    dataset="functional",
    num_weak_models=3,
    subsample_size=8,
    n_test=2000,
    seed=4,
)
SPECS = (ServerSpec(20, 12, 5.0), ServerSpec(12, 10, 2.0, 0.2, 0.5))
SESSION = "s-test"


@pytest.fixture(autouse=True)
def _task_identity():
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 7, 1, 1


def _run(tmp_path, cfg, phase, *, node_extra=None, run_id=7, repeat=1):
    """One server's run of ``phase`` on a FakeGrid; (report, grid)."""
    config = app_config() | phase_run_config(
        cfg,
        phase=phase,
        session=SESSION,
        artifact_dir=tmp_path / "artifacts",
        report_dir=tmp_path / f"server{cfg.server_id}" / phase,
        repeat=repeat,
    )
    settings, options = parse_run_config(config)
    grid = FakeGrid(
        client_app,
        config,
        partitions(cfg.n_train + cfg.n_eval, **(node_extra or {})),
        run_id=run_id,
    )
    return run_phase(grid, settings, options, run_id=run_id), grid


def _session(tmp_path, configs, *, ledgers=None, **kwargs):
    """Every server's train run, then every server's evaluate run. With ``ledgers``,
    the nodes of server s keep their ledgers in ``ledgers / "server<s>"``."""
    reports = {}
    for phase in ("train", "evaluate"):
        for cfg in configs:
            extra = (
                {"ledger-dir": str(ledgers / f"server{cfg.server_id}")}
                if ledgers
                else None
            )
            reports[cfg.server_id, phase] = _run(
                tmp_path, cfg, phase, node_extra=extra, **kwargs
            )
    return reports


def test_flower_phases_equal_the_in_process_multiserver(tmp_path):
    configs = server_settings(SPECS, BASE)
    reports = _session(tmp_path, configs)
    combined = combine_session(
        tmp_path / "artifacts", configs, session=SESSION, repeat=1, heterogeneity=0.05
    )
    reference = run_multiserver_repeat(SPECS, BASE, 1, heterogeneity=0.05)

    assert combined["rejected_artifacts"] == {}
    assert combined["model_servers"] == [0, 1]
    np.testing.assert_allclose(
        np.array(combined["estimates"]), reference.estimates, rtol=0, atol=1e-12
    )
    assert set(combined["models"]) == {"global", "server0", "server1"}
    for name, model in combined["models"].items():
        np.testing.assert_allclose(
            model["coef"], reference.models[name].coef[0], rtol=0, atol=1e-10
        )
        assert model["intercept"] == pytest.approx(reference.models[name].intercept[0])
    for name, errors in combined["test_errors"].items():
        for method, value in errors.items():
            assert value == pytest.approx(reference.test_errors[name][method])
    # Both servers' estimates were used for both servers' models.
    assert combined["estimates_used"] == {
        "server0": ["server0", "server1"],
        "server1": ["server0", "server1"],
    }
    # Every evaluation client answered for exactly one of the S*M = 6 models.
    for cfg in configs:
        report, _ = reports[cfg.server_id, "evaluate"]
        counts = [c for m in report["models_evaluated"].values() for c in m["counts"]]
        assert sum(counts) == cfg.n_eval and len(counts) == 6 and min(counts) >= 1


def test_each_client_releases_once_over_the_session(tmp_path):
    configs = server_settings(SPECS, BASE)
    ledgers = tmp_path / "ledgers"
    reports = _session(tmp_path, configs, ledgers=ledgers, repeat=0)
    for cfg in configs:
        asked = Counter()
        for phase in ("train", "evaluate"):
            _, grid = reports[cfg.server_id, phase]
            for message in grid.sent:
                kind = message.metadata.message_type
                client = message.metadata.dst_node_id - 1000
                # A first query goes to every node with the clients it asks: the
                # others only say who they are.
                first = message.content.array_records.get(FIRST_RECORD)
                if first is not None:
                    runs = first["asked"].numpy()
                    if not in_runs(np.array([client]), runs)[0]:
                        continue
                if kind != "query.identify":
                    asked[client, kind] += 1
        train = set(range(cfg.n_train))
        assert {c for c, k in asked if k == "query.privatize"} == train
        assert {c for c, k in asked if k == "query.evaluate"} == set(
            range(cfg.n_train, cfg.n_train + cfg.n_eval)
        )
        assert set(asked.values()) == {1}
        report, _ = reports[cfg.server_id, "evaluate"]
        assert report["session"] == SESSION and report["server"] == cfg.server_id
        # Each client's session ledger (kept over both runs) holds its one release,
        # at its whole budget.
        files = sorted(
            (ledgers / f"server{cfg.server_id}" / f"session-{SESSION}").glob("*.json")
        )
        assert len(files) == cfg.n_train + cfg.n_eval
        for file in files:
            events = json.loads(file.read_text())
            assert sum(e["epsilon"] for e in events) == pytest.approx(cfg.epsilon)
            assert len({e["mechanism"] for e in events}) == len(events)


def test_ledger_is_kept_per_session_across_runs(run_config, tmp_path):
    config = run_config(
        {"privacy.mechanism": "reference", "data.n-train": 30, "data.n-eval": 20},
        {"flower.session": "abc"},
    )
    node = {"partition-id": 2, "num-partitions": 50}
    context = Context(
        run_id=3, node_id=99, node_config=node, state=RecordDict(), run_config=config
    )

    def ask(kind):
        return client_app(Message(RecordDict(), 99, f"query.{kind}"), context)

    assert not ask("privatize").has_error()
    context.run_id = 4  # the session's next run: the state carries the ledger over
    assert ask("privatize").error.code == ERROR_BUDGET
    context.run_config = config | {"flower.session": "other"}
    assert not ask("privatize").has_error()
    context.run_config = config | {"flower.session": "../x"}
    reply = ask("identify")
    assert reply.error.code == ERROR_REQUEST and "flower.session" in reply.error.reason
    # With a ledger directory the session's ledger also survives a fresh Context.
    node_dir = node | {"ledger-dir": str(tmp_path / "l")}
    for run_id, expect_error in ((5, False), (6, True)):
        context = Context(
            run_id=run_id,
            node_id=99,
            node_config=node_dir,
            state=RecordDict(),
            run_config=config,
        )
        assert ask("privatize").has_error() is expect_error
    assert (tmp_path / "l" / "session-abc" / "client-2.json").exists()


def test_a_bad_artifact_is_left_out_and_reported(tmp_path):
    configs = server_settings(SPECS, BASE)
    for cfg in configs:
        _run(tmp_path, cfg, "train")
    bad = models_path(tmp_path / "artifacts", 1)
    data = json.loads(bad.read_text())
    data["models"][0]["coef"][0] = float("nan")
    bad.write_text(json.dumps(data))
    report, _ = _run(tmp_path, configs[0], "evaluate")
    assert list(report["rejected_artifacts"]) == [str(bad)]
    assert "NaN" in report["rejected_artifacts"][str(bad)]
    assert list(report["models_evaluated"]) == ["0"]
    assert sum(report["models_evaluated"]["0"]["counts"]) == configs[0].n_eval
    _run(tmp_path, configs[1], "evaluate")
    combined = combine_session(
        tmp_path / "artifacts", configs, session=SESSION, repeat=1
    )
    assert combined["model_servers"] == [0]
    assert str(bad) in combined["rejected_artifacts"]
    assert combined["estimates_used"] == {
        "server0": ["server0"],
        "server1": ["server0"],
    }
    assert set(combined["test_errors"]) == {"server0", "server1"}


def test_estimates_of_other_models_are_rejected_at_combine(tmp_path):
    configs = server_settings(SPECS, BASE)
    _session(tmp_path, configs)
    # Server 1 re-exports different models after the evaluation phase.
    path = models_path(tmp_path / "artifacts", 1)
    old = read_models(
        path,
        dimension=BASE.n_basis,
        fingerprint=session_fingerprint(BASE, 1),
        session=SESSION,
    )
    write_models(
        path,
        LinearModels(-old.models.coef, old.models.intercept),
        server=1,
        session=SESSION,
        fingerprint=session_fingerprint(BASE, 1),
    )
    combined = combine_session(
        tmp_path / "artifacts", configs, session=SESSION, repeat=1
    )
    rejected = {k: v for k, v in combined["rejected_artifacts"].items()}
    for r in (0, 1):
        key = f"{estimates_path(tmp_path / 'artifacts', r)}#server1"
        assert "are of models" in rejected[key]
    assert combined["estimates_used"] == {
        "server0": ["server0"],
        "server1": ["server0"],
    }
    # Nobody's estimates of server 1's models are usable: they get the error 1/2.
    assert combined["estimates"][0][3:] == [None, None, None]


def test_phase_options_and_settings_are_validated(tmp_path):
    with pytest.raises(ValueError, match="phase must be one of"):
        FlowerOptions(phase="combine")
    with pytest.raises(ValueError, match="needs a session"):
        FlowerOptions(phase="train")
    with pytest.raises(ValueError, match="session must be empty or a name"):
        FlowerOptions(session="a/b")
    with pytest.raises(ValueError, match="artifact_dir"):
        FlowerOptions(artifact_dir="")
    assert {k for k in app_config() if k.startswith("flower.")} == set(
        FlowerOptions().to_mapping()
    )
    cfg = server_settings(SPECS, BASE)[0]
    with pytest.raises(ValueError, match="server-id"):
        _run(tmp_path, cfg.replace(server_id=-1), "train")
    with pytest.raises(ValueError, match=r"Settings\.reference"):
        _run(tmp_path, cfg.replace(mechanism="joint-hybrid"), "train")
    with pytest.raises(RuntimeError, match="no usable models artifact"):
        _run(tmp_path, cfg, "evaluate")
    status = json.loads(
        (tmp_path / "server0" / "evaluate" / "run-7" / "status.json").read_text()
    )
    assert status["stage"] == "failed"
    with pytest.raises(ValueError, match="n_eval=12"):
        server_settings(
            (ServerSpec(20, 12), ServerSpec(20, 12)), BASE.replace(num_weak_models=7)
        )
    with pytest.raises(ValueError, match="needs server_id >= 0"):
        Settings.reference(feature_shift=0.5)


def test_three_class_flower_phases_equal_the_in_process_multiserver(tmp_path):
    # Two servers of wearable subjects with three conditions: 3-row weak models in the
    # artifacts, one feedback bit per evaluator, the same estimates and final models.
    base = Settings.reference(
        dataset="wearable",
        n_classes=3,
        num_weak_models=3,
        subsample_size=20,
        n_test=300,
        seed=4,
        calibration_size=200,
    )
    specs = (ServerSpec(60, 30, 5.0), ServerSpec(40, 20, 2.0))
    configs = server_settings(specs, base)
    reports = _session(tmp_path, configs)
    combined = combine_session(
        tmp_path / "artifacts", configs, session=SESSION, repeat=1, heterogeneity=0.05
    )
    reference = run_multiserver_repeat(specs, base, 1, heterogeneity=0.05)

    assert combined["rejected_artifacts"] == {}
    np.testing.assert_array_equal(np.array(combined["estimates"]), reference.estimates)
    assert reference.estimates.shape == (2, 6)
    for name, model in combined["models"].items():
        assert np.shape(model["coef"]) == reference.models[name].coef.shape == (3, 10)
        np.testing.assert_array_equal(model["coef"], reference.models[name].coef)
    for name, errors in combined["test_errors"].items():
        for method, value in errors.items():
            assert value == reference.test_errors[name][method]
    for cfg in configs:
        report, _ = reports[cfg.server_id, "evaluate"]
        counts = [c for m in report["models_evaluated"].values() for c in m["counts"]]
        assert sum(counts) == cfg.n_eval and len(counts) == 6
