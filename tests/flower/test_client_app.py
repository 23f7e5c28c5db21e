"""The ClientApp's query handlers, called directly with Flower messages."""

from __future__ import annotations

import time

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from ldpfda.client.client_app import ERROR_BUDGET, ERROR_REQUEST, app
from ldpfda.client.faults import app as faulty_app
from ldpfda.client.protocol import answer_evaluation, privatize, privatize_joint
from ldpfda.config import run_settings
from ldpfda.datasets.files import save_node_data
from ldpfda.datasets.population import simulated_partition
from ldpfda.privacy.random import derive_seed
from ldpfda.schema.queries import ERROR_DATA
from ldpfda.schema.releases import joint_mechanism, training_mechanisms

from .support import REFERENCE, SMALL


@pytest.fixture(autouse=True)
def _task_identity():
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 3, 1, 1


def _context(run_config, node_config, run_id=3):
    return Context(
        run_id=run_id,
        node_id=99,
        node_config=node_config,
        state=RecordDict(),
        run_config=run_config,
    )


def _ask(context, kind, content=None, client_app=app):
    message = Message(content or RecordDict(), 99, f"query.{kind}")
    return client_app(message, context)


def _faulty(context, kind, content=None):
    """Ask the test app with the fault-injection mod (``test-misbehave``)."""
    return _ask(context, kind, content, client_app=faulty_app)


def _released(reply):
    """The released numbers of a privatize reply (joint or reference)."""
    payload = reply.content.array_records["payload"]
    key = "releases" if "releases" in payload else "features"
    return payload[key].numpy()


def _model(coef, intercept):
    return RecordDict(
        {
            "model": ArrayRecord(
                {
                    "coef": Array(np.asarray(coef, dtype=float)),
                    "intercept": Array(np.asarray([intercept], dtype=float)),
                }
            )
        }
    )


def test_identify_reports_identity_and_budget(run_config):
    context = _context(run_config(SMALL), {"partition-id": 4, "num-partitions": 50})
    reply = _ask(context, "identify")
    record = reply.content.config_records["identity"]
    assert record["client-id"] == 4 and record["spent"] == 0.0
    assert record["budget"] == 5.0


def test_default_privatize_is_one_joint_release_and_refuses_a_second_ask(run_config):
    config = run_config(SMALL)
    settings, _ = run_settings(config)
    context = _context(config, {"partition-id": 42, "num-partitions": 50})
    reply = _ask(context, "privatize")
    payload = reply.content.array_records["payload"]
    assert set(payload) == {"releases"}  # no separate label
    x, y = simulated_partition(settings, 0, 42)
    expected = privatize_joint(
        x,
        y,
        client_ids=[42],
        seed=derive_seed(0, "clients", 0),
        epsilon=settings.epsilon,
        mechanism=settings.vector_mechanism,
    )
    np.testing.assert_array_equal(payload["releases"].numpy(), expected.releases)
    low, high = joint_mechanism(settings.epsilon, 4).output_range()
    assert np.all((low <= expected.releases) & (expected.releases <= high))
    assert reply.content.config_records["ledger"]["spent"] == pytest.approx(5.0)

    again = _ask(context, "privatize")
    assert again.has_error() and again.error.code == ERROR_BUDGET
    spent = _ask(context, "identify").content.config_records["identity"]["spent"]
    assert spent == pytest.approx(5.0)


def test_reference_privatize_matches_the_engine_and_refuses_a_second_ask(run_config):
    config = run_config(SMALL, REFERENCE)
    settings, _ = run_settings(config)
    context = _context(config, {"partition-id": 7, "num-partitions": 50})
    reply = _ask(context, "privatize")
    payload = reply.content.array_records["payload"]
    x, y = simulated_partition(settings, 0, 7)
    expected = privatize(
        x,
        y,
        client_ids=[7],
        seed=derive_seed(0, "clients", 0),
        epsilon=settings.epsilon,
    )
    np.testing.assert_array_equal(payload["features"].numpy(), expected.features)
    np.testing.assert_array_equal(payload["labels"].numpy(), expected.labels)
    assert reply.content.config_records["ledger"]["spent"] == pytest.approx(5.0)

    again = _ask(context, "privatize")
    assert again.has_error() and again.error.code == ERROR_BUDGET
    assert "exceed the budget" in again.error.reason
    # A refused release leaves nothing spent beyond the first.
    spent = _ask(context, "identify").content.config_records["identity"]["spent"]
    assert spent == pytest.approx(5.0)


def test_evaluate_answers_one_bit_once(run_config):
    config = run_config(SMALL)
    settings, _ = run_settings(config)
    context = _context(config, {"partition-id": 40, "num-partitions": 50})
    coef, intercept = np.linspace(-1, 1, 4), 0.25
    reply = _ask(context, "evaluate", _model(coef, intercept))
    bit = reply.content.array_records["feedback"]["bit"].numpy()
    x, y = simulated_partition(settings, 0, 40)
    expected = answer_evaluation(
        coef,
        [intercept],
        x,
        y,
        client_ids=[40],
        seed=derive_seed(0, "clients", 0),
        epsilon=5.0,
    )
    np.testing.assert_array_equal(bit, expected)
    assert _ask(context, "evaluate", _model(coef, intercept)).error.code == ERROR_BUDGET


def test_evaluate_refuses_a_malformed_model(run_config):
    context = _context(run_config(SMALL), {"partition-id": 40, "num-partitions": 50})
    reply = _ask(context, "evaluate", _model(np.ones(3), 0.0))
    assert reply.error.code == ERROR_REQUEST and "shape (4,)" in reply.error.reason
    reply = _ask(context, "evaluate", RecordDict())
    assert reply.error.code == ERROR_REQUEST
    reply = _ask(context, "evaluate", _model([np.nan, 0, 0, 0], 0.0))
    assert reply.error.code == ERROR_REQUEST
    # None of these released anything.
    spent = _ask(context, "identify").content.config_records["identity"]["spent"]
    assert spent == 0.0


def test_node_budget_caps_the_run_epsilon(run_config):
    context = _context(
        run_config(SMALL),
        {"partition-id": 1, "num-partitions": 50, "privacy-budget": 1.0},
    )
    reply = _ask(context, "privatize")
    assert reply.error.code == ERROR_BUDGET


def test_a_second_allowed_release_draws_fresh_noise(run_config):
    node = {"partition-id": 3, "num-partitions": 50, "privacy-budget": 10.0}
    context = _context(run_config(SMALL), node)
    first, second = (_released(_ask(context, "privatize")) for _ in range(2))
    assert not np.array_equal(first, second)
    assert _ask(context, "privatize").error.code == ERROR_BUDGET  # 15 > 10


def test_state_ledger_is_kept_per_run(run_config):
    context = _context(run_config(SMALL), {"partition-id": 2, "num-partitions": 50})
    assert not _ask(context, "privatize").has_error()
    assert _ask(context, "privatize").error.code == ERROR_BUDGET
    # Flower carries Context.state over to the next run of a run series.
    context.run_id = 4
    assert not _ask(context, "privatize").has_error()


def test_ledger_dir_survives_a_restart(run_config, tmp_path):
    node = {"partition-id": 2, "num-partitions": 50, "ledger-dir": str(tmp_path / "l")}
    config = run_config(SMALL)
    assert not _ask(_context(config, node), "privatize").has_error()
    # A restarted SuperNode has a fresh Context but the same ledger directory.
    again = _ask(_context(config, node), "privatize")
    assert again.error.code == ERROR_BUDGET
    assert (tmp_path / "l" / "run-3" / "client-2.json").exists()
    # Another run starts with a fresh budget.
    assert not _ask(_context(config, node, run_id=4), "privatize").has_error()


def _host(path, tmp_path, name="state", **extra):
    """The node config of a host holding ``path``, with a lifetime budget of 10."""
    return {
        "client-id": 0,
        "data-path": str(path),
        "privacy-budget": 10.0,
        "state-dir": str(tmp_path / name),
        **extra,
    }


def test_data_file_node_uses_private_noise(run_config, tmp_path):
    config = run_config(SMALL, {"data.dataset": "vector"})
    path = save_node_data(tmp_path / "c.npz", [[0.5, -0.5, 0.25, 0.0]], [1])
    # Two hosts with the same data: fresh OS entropy each, so the server cannot
    # recompute (and remove) the noise.
    releases = [
        _released(_ask(_context(config, _host(path, tmp_path, f"s{i}")), "privatize"))
        for i in range(2)
    ]
    assert not np.array_equal(releases[0], releases[1])
    # An operator's noise-seed makes the host's noise reproducible for its operator,
    # keyed by its own release counter, never by anything the server sends.
    seeded = [
        _released(
            _ask(
                _context(config, _host(path, tmp_path, f"n{i}", **{"noise-seed": 11})),
                "privatize",
            )
        )
        for i in range(2)
    ]
    np.testing.assert_array_equal(seeded[0], seeded[1])
    other_run = run_config(SMALL, {"data.dataset": "vector", "seed": 99})
    reseeded = _released(
        _ask(
            _context(other_run, _host(path, tmp_path, "n9", **{"noise-seed": 11})),
            "privatize",
        )
    )
    np.testing.assert_array_equal(reseeded, seeded[0])  # the run seed changes nothing


def test_data_file_must_hold_one_client(run_config, tmp_path, caplog):
    path = save_node_data(tmp_path / "two.npz", np.zeros((2, 4)), [0, 1])
    context = _context(run_config(SMALL), _host(path, tmp_path))
    reply = _ask(context, "privatize")
    # The reply says only that the data cannot be used; the node's log says why.
    assert reply.error.code == ERROR_DATA and "rows" not in reply.error.reason
    assert "2 rows" in caplog.text


def test_node_without_identity_or_data_is_refused(run_config, caplog):
    assert _ask(_context(run_config(SMALL), {}), "identify").error.code == ERROR_REQUEST
    context = _context(run_config(SMALL), {"partition-id": 60, "num-partitions": 61})
    assert _ask(context, "privatize").error.code == ERROR_DATA
    assert "has no data" in caplog.text


@pytest.mark.parametrize(
    ("protocol", "flag", "check"),
    [
        (REFERENCE, "nan", lambda p: np.isnan(p["features"].numpy()).any()),
        (REFERENCE, "shape", lambda p: p["features"].numpy().shape == (1, 3)),
        (REFERENCE, "range", lambda p: p["features"].numpy()[0, 0] > 1e100),
        (REFERENCE, "label", lambda p: p["labels"].numpy()[0] == 2),
        ({}, "nan", lambda p: np.isnan(p["releases"].numpy()).any()),
        ({}, "shape", lambda p: p["releases"].numpy().shape == (1, 4)),
        ({}, "range", lambda p: p["releases"].numpy()[0, 0] > 1e100),
    ],
)
def test_misbehaving_test_node_corrupts_its_payload(run_config, protocol, flag, check):
    context = _context(
        run_config(SMALL, protocol),
        {"partition-id": 0, "num-partitions": 50, "test-misbehave": flag},
    )
    assert check(_faulty(context, "privatize").content.array_records["payload"])


def test_misbehaving_test_node_sends_a_non_bit(run_config):
    context = _context(
        run_config(SMALL),
        {"partition-id": 40, "num-partitions": 50, "test-misbehave": "bit"},
    )
    reply = _faulty(context, "evaluate", _model(np.ones(4), 0.0))
    assert reply.content.array_records["feedback"]["bit"].numpy()[0] == 3


@pytest.mark.parametrize("protocol", [{}, REFERENCE], ids=["default", "reference"])
def test_extreme_test_node_sends_the_edge_of_the_declared_range(run_config, protocol):
    config = run_config(SMALL, protocol)
    settings, _ = run_settings(config)
    node = {"partition-id": 5, "num-partitions": 50, "test-misbehave": "extreme"}
    released = _released(_faulty(_context(config, node), "privatize"))
    x, y = simulated_partition(settings, 0, 5)
    if settings.joint_release:
        mechanism = joint_mechanism(settings.epsilon, 4, settings.vector_mechanism)
        low, high = mechanism.output_range()
        truth = (2.0 * y[:, None] - 1.0) * np.hstack([np.ones((1, 1)), x])
    else:
        low, high = training_mechanisms(settings.epsilon, 4, None)[0].output_range()
        truth = x
    # Every coordinate at the end of the range that pulls against the node's truth.
    np.testing.assert_array_equal(released, np.where(truth >= 0, low, high))
    assert set(np.unique(released)) == {low, high}


@pytest.mark.parametrize(
    ("kind", "content"),
    [("privatize", None), ("evaluate", _model(np.ones(4), 0.0))],
)
def test_hanging_test_node_answers_honestly_but_late(run_config, kind, content):
    config = run_config(SMALL)
    honest = _ask(
        _context(config, {"partition-id": 41, "num-partitions": 50}), kind, content
    )
    node = {
        "partition-id": 41,
        "num-partitions": 50,
        "test-misbehave": "hang",
        "test-hang-seconds": 0.3,
    }
    context = _context(config, node)
    started = time.monotonic()
    assert not _faulty(context, "identify").has_error()
    assert time.monotonic() - started < 0.3, "identify is answered at once"
    started = time.monotonic()
    late = _faulty(context, kind, content)
    assert time.monotonic() - started >= 0.3
    for name, record in honest.content.array_records.items():
        for key, array in record.items():
            np.testing.assert_array_equal(
                late.content.array_records[name][key].numpy(), array.numpy()
            )


@pytest.mark.parametrize("seconds", [-1.0, float("nan"), "soon"])
def test_hang_seconds_must_be_a_duration(run_config, seconds):
    node = {"partition-id": 1, "num-partitions": 50, "test-hang-seconds": seconds}
    reply = _faulty(_context(run_config(SMALL), node), "identify")
    assert (
        reply.error.code == ERROR_REQUEST and "test-hang-seconds" in reply.error.reason
    )


@pytest.mark.parametrize("flag", ["nan", "range", "extreme", "hang"])
def test_the_hosts_app_has_no_fault_hook(run_config, flag):
    # A host runs ldpfda.client.client_app:app; a node config that asks it to
    # misbehave changes nothing: its release equals an honest node's, at once.
    config = run_config(SMALL)
    honest = _ask(
        _context(config, {"partition-id": 3, "num-partitions": 50}), "privatize"
    )
    node = {"partition-id": 3, "num-partitions": 50, "test-misbehave": flag}
    started = time.monotonic()
    reply = _ask(_context(config, node), "privatize")
    assert time.monotonic() - started < 5.0
    np.testing.assert_array_equal(_released(reply), _released(honest))
