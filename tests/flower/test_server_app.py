"""The ServerApp logic: reply validation, options, whole runs on an in-memory Grid.

Whole runs are tested for the default protocol (every client releases once, the moment
classifier) and for the reference MRMA (``REFERENCE``); MRMA-only behaviour (the
evaluation round) on the reference.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from ldpfda.client.client_app import app as client_app
from ldpfda.client.faults import app as faulty_app
from ldpfda.engine import run_repeat
from ldpfda.schema.releases import joint_mechanism, training_mechanisms
from ldpfda.server.grid import ReplyError, parse_identity, wait_for_nodes
from ldpfda.server.options import FlowerOptions, parse_run_config
from ldpfda.server.server_app import run_server
from ldpfda.server.session import QuorumError

from .support import (
    REFERENCE,
    SMALL,
    FakeGrid,
    app_config,
    parse_feedback,
    parse_joint_payload,
    parse_payload,
    partitions,
)

#: Run-config overrides of the two protocols: the default and the reference MRMA.
PROTOCOLS = pytest.mark.parametrize(
    "protocol", [{}, REFERENCE], ids=["default-moment", "reference-mrma"]
)


@pytest.fixture(autouse=True)
def _task_identity():
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 7, 1, 1


# -- reply validation ------------------------------------------------------------------


def _reply(records: dict) -> Message:
    request = Message(RecordDict(), 5, "query.privatize")
    return Message(RecordDict(records), reply_to=request)


def _ledger(client_id=3, spent=5.0, budget=5.0):
    return ConfigRecord({"client-id": client_id, "spent": spent, "budget": budget})


def _payload(features, labels, **ledger):
    return _reply(
        {
            "payload": ArrayRecord(
                {
                    "features": Array(np.asarray(features)),
                    "labels": Array(np.asarray(labels)),
                }
            ),
            "ledger": _ledger(**ledger),
        }
    )


def test_valid_payload_is_parsed():
    x, y, figures = parse_payload(
        _payload([[0.5, -3.0]], np.array([1], np.int8)),
        client_id=3,
        n_features=2,
        feature_range=(-50.0, 50.0),
    )
    np.testing.assert_array_equal(x, [0.5, -3.0])
    assert y == 1 and figures == {"spent": 5.0, "budget": 5.0}


@pytest.mark.parametrize(
    ("features", "labels", "ledger", "match"),
    [
        ([[0.5, 0.1, 0.2]], [1], {}, "shape"),
        ([0.5, 0.1], [1], {}, "shape"),
        ([[np.nan, 0.1]], [1], {}, "NaN"),
        ([[np.inf, 0.1]], [1], {}, "NaN"),
        ([[1e6, 0.1]], [1], {}, "range"),
        ([[0.5, 0.1]], [2], {}, "0 or 1"),
        ([[0.5, 0.1]], [0.5], {}, "0 or 1"),
        ([[0.5, 0.1]], [1, 0], {}, "shape"),
        ([[0.5, 0.1]], [1], {"client_id": 4}, "expected 3"),
        ([[0.5, 0.1]], [1], {"spent": float("nan")}, "ledger"),
    ],
)
def test_bad_payload_is_rejected(features, labels, ledger, match):
    with pytest.raises(ReplyError, match=match):
        parse_payload(
            _payload(features, labels, **ledger),
            client_id=3,
            n_features=2,
            feature_range=(-50.0, 50.0),
        )


def test_non_private_payload_must_stay_in_the_box():
    with pytest.raises(ReplyError, match="range"):
        parse_payload(
            _payload([[1.5, 0.0]], [1]),
            client_id=3,
            n_features=2,
            feature_range=(-1.0, 1.0),
        )


def test_error_reply_and_missing_records_are_rejected():
    request = Message(RecordDict(), 5, "query.privatize")
    with pytest.raises(ReplyError, match="code 4001"):
        parse_payload(
            Message(Error(4001, "refused"), reply_to=request),
            client_id=3,
            n_features=2,
            feature_range=(-50.0, 50.0),
        )
    with pytest.raises(ReplyError, match="payload.features"):
        parse_payload(
            _reply({"ledger": _ledger()}),
            client_id=3,
            n_features=2,
            feature_range=(-50.0, 50.0),
        )
    with pytest.raises(ReplyError, match="ledger"):
        parse_payload(
            _reply(
                {
                    "payload": ArrayRecord(
                        {
                            "features": Array(np.zeros((1, 2))),
                            "labels": Array(np.ones(1)),
                        }
                    )
                }
            ),
            client_id=3,
            n_features=2,
            feature_range=(-50.0, 50.0),
        )


def _joint(releases, **ledger):
    return _reply(
        {
            "payload": ArrayRecord({"releases": Array(np.asarray(releases))}),
            "ledger": _ledger(**ledger),
        }
    )


JOINT_RANGE = joint_mechanism(5.0, 2).output_range()


def test_valid_joint_payload_is_parsed():
    z, figures = parse_joint_payload(
        _joint([[-2.0, 0.0, 2.5]]), client_id=3, n_features=2, output_range=JOINT_RANGE
    )
    np.testing.assert_array_equal(z, [-2.0, 0.0, 2.5])
    assert figures == {"spent": 5.0, "budget": 5.0}


@pytest.mark.parametrize(
    ("releases", "ledger", "match"),
    [
        ([[0.5, 0.1]], {}, "shape"),
        ([0.5, 0.1, 0.2], {}, "shape"),
        ([[0.5, 0.1, 0.2, 0.3]], {}, "shape"),
        ([[np.nan, 0.1, 0.2]], {}, "NaN"),
        ([[0.5, -np.inf, 0.2]], {}, "NaN"),
        ([[0.5, 0.1, JOINT_RANGE[1] * 1.01]], {}, "range"),
        ([[JOINT_RANGE[0] * 1.01, 0.1, 0.2]], {}, "range"),
        ([[0.5, 0.1, 0.2]], {"client_id": 4}, "expected 3"),
        ([[0.5, 0.1, 0.2]], {"budget": -1.0}, "ledger"),
    ],
)
def test_bad_joint_payload_is_rejected(releases, ledger, match):
    with pytest.raises(ReplyError, match=match):
        parse_joint_payload(
            _joint(releases, **ledger),
            client_id=3,
            n_features=2,
            output_range=JOINT_RANGE,
        )
    # A reference payload is not a joint one.
    with pytest.raises(ReplyError, match="payload.releases"):
        parse_joint_payload(
            _payload([[0.5, 0.1]], [1]),
            client_id=3,
            n_features=2,
            output_range=JOINT_RANGE,
        )


@pytest.mark.parametrize("bit", [[2], [-1], [0.5], [np.nan], [0, 1]])
def test_feedback_that_is_not_a_bit_is_rejected(bit):
    reply = _reply(
        {"feedback": ArrayRecord({"bit": Array(np.asarray(bit))}), "ledger": _ledger()}
    )
    with pytest.raises(ReplyError):
        parse_feedback(reply, client_id=3)


def test_feedback_bit_and_identity_are_parsed():
    reply = _reply(
        {
            "feedback": ArrayRecord({"bit": Array(np.array([1], np.int8))}),
            "ledger": _ledger(),
        }
    )
    assert parse_feedback(reply, client_id=3) == (1, {"spent": 5.0, "budget": 5.0})
    identity = _reply({"identity": _ledger(client_id=9, spent=0.0)})
    assert parse_identity(identity) == (9, {"spent": 0.0, "budget": 5.0})
    with pytest.raises(ReplyError, match="client-id"):
        parse_identity(_reply({"identity": ConfigRecord({"client-id": "nine"})}))


# -- options ---------------------------------------------------------------------------


def test_options_parse_and_refuse_typos(run_config):
    settings, options = parse_run_config(run_config(SMALL))
    assert settings.n_train == 30 and options.min_reply_fraction == 0.8
    with pytest.raises(ValueError, match="flower.reply-timeoutt"):
        parse_run_config(run_config({"flower.reply-timeoutt": 1.0}))
    with pytest.raises(ValueError, match="min_reply_fraction"):
        FlowerOptions(min_reply_fraction=1.5)
    with pytest.raises(ValueError, match="reply_timeout"):
        FlowerOptions(reply_timeout=0.0)


def test_waiting_for_too_few_nodes_fails_clearly(run_config):
    grid = FakeGrid(client_app, run_config(SMALL), partitions(3))
    with pytest.raises(
        RuntimeError, match=r"only 3 node\(s\) connected.*num-supernodes=50"
    ):
        wait_for_nodes(grid, 50, 50, timeout=0.0)
    assert wait_for_nodes(grid, 50, 3, timeout=0.0) == grid.node_ids


# -- whole runs ------------------------------------------------------------------------


def _run(config, node_configs, *, app=client_app, **grid_kwargs):
    settings, options = parse_run_config(config)
    grid = FakeGrid(app, config, node_configs, **grid_kwargs)
    result, report = run_server(grid, settings, options, run_id=7)
    return grid, settings, result, report


@pytest.mark.parametrize("dataset", ["vector", "functional"])
def test_reference_run_equals_the_in_process_engine(run_config, dataset):
    config = run_config(SMALL, REFERENCE, {"data.dataset": dataset})
    grid, settings, result, report = _run(config, partitions(50))
    assert settings.protocol == "mrma"
    reference = run_repeat(settings, 0)
    np.testing.assert_array_equal(result.payload.client_ids, np.arange(30))
    np.testing.assert_allclose(
        result.payload.features, reference.payload.features, rtol=0, atol=1e-12
    )
    np.testing.assert_array_equal(result.payload.labels, reference.payload.labels)
    np.testing.assert_allclose(result.final.coef, reference.final.coef, atol=1e-10)
    np.testing.assert_allclose(
        result.final.intercept, reference.final.intercept, atol=1e-10
    )
    np.testing.assert_allclose(result.estimated_errors, reference.estimated_errors)
    for method, error in report["test_errors"].items():
        assert error == pytest.approx(reference.test_errors[method])
    # The report on disk has what the issue asks for.
    written = json.loads((grid_report_dir(config) / "report.json").read_text())
    assert written["method"] == "mrma"
    assert written["final_model"]["coef"] == pytest.approx(reference.final.coef[0])
    assert len(written["models"]) == 5
    assert {"estimated_error", "weight", "kept", "reversed", "test_error"} <= set(
        written["models"][0]
    )
    clients = written["privacy"]["clients"]
    assert len(clients) == 50
    for figures in clients.values():
        assert figures["reported_spent"] == pytest.approx(5.0)
        assert figures["charged_by_server"] == pytest.approx(5.0)
    assert written["privacy"]["server_accounting"]["max_spent"] == pytest.approx(5.0)
    model = np.load(grid_report_dir(config) / "model.npz")
    np.testing.assert_allclose(model["coef"], reference.final.coef[0], atol=1e-10)


@pytest.mark.parametrize("dataset", ["vector", "functional"])
def test_default_run_equals_the_in_process_engine(run_config, dataset):
    # Every client releases y~(1, x) once; no evaluation round; the same moment model.
    config = run_config(SMALL, {"data.dataset": dataset})
    grid, settings, result, report = _run(config, partitions(50))
    assert settings.protocol == "moment"
    reference = run_repeat(settings, 0)
    assert result.method == reference.method == "moment"
    np.testing.assert_array_equal(result.payload.client_ids, np.arange(50))
    np.testing.assert_array_equal(result.payload.releases, reference.payload.releases)
    np.testing.assert_allclose(result.final.coef, reference.final.coef, atol=1e-10)
    np.testing.assert_allclose(
        result.final.intercept, reference.final.intercept, atol=1e-10
    )
    assert set(report["test_errors"]) == {"moment"}  # no clean data on the server
    assert report["test_errors"]["moment"] == pytest.approx(
        reference.test_errors["moment"]
    )
    # The nodes say who they are with their release: no identify round.
    kinds = {m.metadata.message_type for m in grid.sent}
    assert kinds == {"query.privatize"}
    written = json.loads((grid_report_dir(config) / "report.json").read_text())
    assert written["method"] == "moment" and written["models"] == []
    assert "evaluate" not in written["participation"]
    assert written["participation"]["privatize"]["answered"] == 50
    clients = written["privacy"]["clients"]
    assert len(clients) == 50
    for figures in clients.values():
        assert figures["reported_spent"] == pytest.approx(5.0)
        assert figures["charged_by_server"] == pytest.approx(5.0)
    accounting = written["privacy"]["server_accounting"]
    assert set(accounting["releases"]) == {"signed_features"}
    assert accounting["releases"]["signed_features"]["clients"] == 50
    model = np.load(grid_report_dir(config) / "model.npz")
    np.testing.assert_allclose(model["coef"], reference.final.coef[0], atol=1e-10)
    payload = np.load(grid_report_dir(config) / "payload.npz")
    np.testing.assert_array_equal(payload["releases"], reference.payload.releases)


def test_mrma_on_joint_releases_equals_the_engine(run_config):
    config = run_config(SMALL, {"server.method": "mrma"})
    grid, settings, result, report = _run(config, partitions(50))
    reference = run_repeat(settings, 0)
    np.testing.assert_array_equal(result.payload.releases, reference.payload.releases)
    np.testing.assert_allclose(result.final.coef, reference.final.coef, atol=1e-10)
    np.testing.assert_allclose(result.estimated_errors, reference.estimated_errors)
    kinds = Counter(m.metadata.message_type for m in grid.sent)
    # The privatize query goes to every node: the 20 evaluators only say who they are.
    assert kinds == {"query.privatize": 50, "query.evaluate": 20}
    assert report["privacy"]["server_accounting"]["max_spent"] == pytest.approx(5.0)


def grid_report_dir(config):
    from pathlib import Path

    return Path(config["flower.report-dir"]) / "run-7"


@PROTOCOLS
def test_non_private_run_equals_the_engine_and_writes_strict_json(run_config, protocol):
    config = run_config(SMALL, protocol, {"privacy.epsilon": float("inf")})
    _, settings, result, _ = _run(config, partitions(50))
    reference = run_repeat(settings, 0)
    np.testing.assert_allclose(result.final.coef, reference.final.coef, atol=1e-10)
    text = (grid_report_dir(config) / "report.json").read_text()
    report = json.loads(text, parse_constant=lambda name: pytest.fail(name))
    assert report["settings"]["privacy.epsilon"] == "inf"


@PROTOCOLS
def test_each_client_is_asked_each_query_once(run_config, protocol):
    grid, settings, *_ = _run(run_config(SMALL, protocol), partitions(50))
    asked = Counter(
        (m.metadata.dst_node_id, m.metadata.message_type) for m in grid.sent
    )
    assert set(asked.values()) == {1}
    kinds = Counter(m.metadata.message_type for m in grid.sent)
    if settings.protocol == "moment":
        assert kinds == {"query.privatize": 50}
    else:
        assert kinds == {"query.privatize": 50, "query.evaluate": 20}


def test_silent_nodes_are_recorded_and_the_run_goes_on(run_config):
    # Nodes 2 and 3 train, 35 evaluates; their replies never arrive, from the first
    # query on: they never say who they are, and evaluator 35 is not asked again.
    grid, _, result, report = _run(
        run_config(SMALL, REFERENCE), partitions(50), silent=[2, 3, 35]
    )
    part = report["participation"]
    assert sorted(part["identify"]["missing"]) == [1002, 1003, 1035]
    assert part["absent_clients"] == [2, 3, 35]
    assert part["privatize"]["answered"] == 28
    assert part["evaluate"]["asked"] == 19 and part["evaluate"]["missing"] == []
    assert 2 not in result.payload.client_ids and len(result.payload) == 28
    # Asked but silent: the server counts the epsilon it asked for, nobody vouches for
    # what was spent.
    figures = report["privacy"]["clients"]["2"]
    assert figures["charged_by_server"] == pytest.approx(5.0)
    assert figures["reported_spent"] is None
    assert np.all(np.isfinite(result.final.coef))


def test_silent_nodes_of_a_default_run_are_recorded(run_config):
    _, _, result, report = _run(run_config(SMALL), partitions(50), silent=[2, 35])
    assert report["participation"]["absent_clients"] == [2, 35]
    assert len(result.payload) == 48
    assert not {2, 35} & set(result.payload.client_ids.tolist())
    assert report["privacy"]["clients"]["35"]["charged_by_server"] == pytest.approx(5.0)
    assert report["privacy"]["clients"]["35"]["reported_spent"] is None
    assert np.all(np.isfinite(result.final.coef))


@pytest.mark.parametrize(
    ("protocol", "match"),
    [
        # Silent from the first query on, they never say who they are.
        (REFERENCE, r"only 48 of 50 planned clients.*'identify'.*\[2, 3\]"),
        ({}, r"only 48 of 50 planned clients.*'identify'.*\[2, 3\]"),
    ],
    ids=["reference-mrma", "default-moment"],
)
def test_too_many_missing_replies_stop_the_run_with_a_reason(
    run_config, protocol, match
):
    config = run_config(SMALL, protocol, {"flower.min-reply-fraction": 0.97})
    with pytest.raises(RuntimeError, match=match):
        _run(config, partitions(50), silent=[2, 3])
    status = json.loads((grid_report_dir(config) / "status.json").read_text())
    assert status["stage"] == "failed"


@pytest.mark.parametrize(
    ("protocol", "flag", "node", "round_", "reason"),
    [
        (REFERENCE, "nan", 4, "privatize", "NaN"),
        (REFERENCE, "shape", 4, "privatize", "shape"),
        (REFERENCE, "range", 4, "privatize", "range"),
        (REFERENCE, "label", 4, "privatize", "0 or 1"),
        (REFERENCE, "bit", 33, "evaluate", "must be a bit"),
        ({}, "nan", 33, "privatize", "NaN"),
        ({}, "shape", 4, "privatize", "shape"),
        ({}, "range", 33, "privatize", "range"),
    ],
    ids=lambda v: ("reference" if v else "default") if isinstance(v, dict) else None,
)
def test_misbehaving_clients_are_rejected_and_never_used(
    run_config, protocol, flag, node, round_, reason
):
    nodes = partitions(50)
    nodes[node]["test-misbehave"] = flag
    _, _, result, report = _run(run_config(SMALL, protocol), nodes, app=faulty_app)
    rejected = report["participation"][round_]["rejected"]
    assert list(rejected) == [str(node)] and reason in rejected[str(node)]
    assert report["participation"]["rejections"] == [
        {
            "stage": round_,
            "client_id": node,
            "node_id": 1000 + node,
            "kind": flag,
            "reason": rejected[str(node)],
        }
    ]
    assert node not in result.payload.client_ids
    assert np.all(np.isfinite(result.final.coef))


@PROTOCOLS
def test_budget_refusals_and_duplicates_are_recorded(run_config, protocol):
    nodes = partitions(50)
    nodes[5]["privacy-budget"] = 1.0  # cannot afford the run's epsilon
    nodes.append({"partition-id": 6, "num-partitions": 50})  # a second client 6
    nodes.append({"partition-id": 77, "num-partitions": 50})  # not in this run
    _, settings, result, report = _run(run_config(SMALL, protocol), nodes)
    part = report["participation"]
    assert "refused" in part["privatize"]["rejected"]["5"]
    assert sorted(part["ignored_nodes"].values()) == [
        "duplicate: client 6 is already node 1006",
        "unknown: client 77 is not in this run",
    ]
    identify = [r for r in part["rejections"] if r["stage"] == "identify"]
    assert [(r["node_id"], r["client_id"], r["kind"]) for r in identify] == [
        (1050, 6, "duplicate"),
        (1051, 77, "unknown"),
    ]
    assert part["identify"]["answered"] == 50
    releasing = 50 if settings.protocol == "moment" else 30
    assert len(result.payload) == releasing - 1


@PROTOCOLS
def test_absent_clients_with_min_nodes(run_config, protocol):
    config = run_config(
        SMALL, protocol, {"flower.min-nodes": 45, "flower.wait-timeout": 0.0}
    )
    _, settings, result, report = _run(config, partitions(50)[:47])
    assert report["participation"]["absent_clients"] == [47, 48, 49]
    assert report["participation"]["eval_clients"] == list(range(30, 47))
    if settings.protocol == "moment":
        np.testing.assert_array_equal(result.payload.client_ids, np.arange(47))


@PROTOCOLS
def test_an_extreme_but_valid_reply_is_accepted_at_the_edge_of_the_range(
    run_config, protocol
):
    nodes = partitions(50)
    nodes[4]["test-misbehave"] = "extreme"
    _, settings, result, report = _run(
        run_config(SMALL, protocol), nodes, app=faulty_app
    )
    part = report["participation"]
    assert part["rejections"] == [] and 4 in result.payload.client_ids
    if settings.joint_release:
        declared = joint_mechanism(5.0, 4, settings.vector_mechanism).output_range()
        released = result.payload.releases
    else:
        declared = training_mechanisms(5.0, 4, None)[0].output_range()
        released = result.payload.features
    low, high = part["output_range"]
    assert (low, high) == declared
    row = released[result.payload.client_ids.tolist().index(4)]
    assert set(row) <= {low, high}  # clipped at the declared range, not beyond
    assert np.all((low <= released) & (released <= high))


class LateGrid(FakeGrid):
    """A FakeGrid with a deadline: a reply that takes longer than the round's timeout
    is held back and handed over with the next round's replies (which Flower, pulling
    replies by message id, never does)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.late: list[Message] = []
        self.handed_over_late = 0

    def send_and_receive(self, messages, *, timeout=None):
        stale, self.late = self.late, []
        on_time = []
        for message in messages:
            started = time.monotonic()
            replies = super().send_and_receive([message], timeout=timeout)
            late = time.monotonic() - started > timeout
            (self.late if late else on_time).extend(replies)
        self.handed_over_late += len(stale)
        return stale + on_time


def test_a_hanging_node_times_out_and_its_late_reply_is_not_used(run_config):
    # Client 3 trains; it answers 1.5 s after the privatize query, past the 1 s timeout.
    config = run_config(SMALL, REFERENCE, {"flower.reply-timeout": 1.0})
    nodes = partitions(50)
    nodes[3] |= {"test-misbehave": "hang", "test-hang-seconds": 1.5}
    settings, options = parse_run_config(config)
    grid = LateGrid(faulty_app, config, nodes)
    result, report = run_server(grid, settings, options, run_id=7)
    assert grid.handed_over_late == 1, "the late reply came during the evaluate round"
    part = report["participation"]
    assert part["privatize"]["answered"] == 29 and part["absent_clients"] == [3]
    # Its first reply lost, node 1003 never said who it is: client 3 is absent.
    (entry,) = part["rejections"]
    assert (entry["stage"], entry["client_id"], entry["node_id"]) == (
        "identify",
        None,
        1003,
    )
    assert entry["kind"] == "timeout"
    assert entry["reason"] == "timeout: no reply within flower.reply-timeout = 1 s"
    assert report["privacy"]["clients"]["3"]["reported_spent"] is None
    # Exactly the run in which client 3's reply never arrives.
    _, _, silent, _ = _run(config, partitions(50), silent=[3])
    np.testing.assert_array_equal(result.payload.client_ids, silent.payload.client_ids)
    np.testing.assert_array_equal(result.payload.features, silent.payload.features)
    np.testing.assert_allclose(result.final.coef, silent.final.coef, atol=0)


class ReplayGrid(FakeGrid):
    """Hands over the previous round's replies again, then every reply twice."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.previous: list[Message] = []

    def send_and_receive(self, messages, *, timeout=None):
        replies = super().send_and_receive(messages, timeout=timeout)
        stale, self.previous = self.previous, replies
        return stale + replies + replies


def test_stray_and_repeated_replies_are_ignored(run_config):
    config = run_config(SMALL)
    settings, options = parse_run_config(config)
    grid = ReplayGrid(client_app, config, partitions(50))
    result, report = run_server(grid, settings, options, run_id=7)
    # The identify replies, handed over again in the privatize round, answer no
    # privatize query; the second copy of a reply is not a second release.
    part = report["participation"]
    assert part["rejections"] == [] and part["privatize"]["answered"] == 50
    reference = run_repeat(settings, 0)
    np.testing.assert_array_equal(result.payload.releases, reference.payload.releases)


def test_a_failed_quorum_says_who_was_connected_identified_and_missing(run_config):
    # 25 of the 30 training clients die before their first reply: the run stops, and
    # the message names the round, the counts and the nodes the server knew of.
    config = run_config(SMALL, REFERENCE)
    settings, options = parse_run_config(config)
    grid = FakeGrid(client_app, config, partitions(50), silent=range(25))
    with pytest.raises(RuntimeError) as caught:
        run_server(grid, settings, options, run_id=7)
    message = str(caught.value)
    assert "only 25 of 50 planned clients gave a valid reply in round 'identify'" in (
        message
    )
    assert "Missing (25): [0, 1, 2, 3, 4, ... 20 more]" in message
    assert "connected nodes: 50, identified clients: 25" in message
    status = json.loads(
        (Path(options.report_dir) / "run-7" / "status.json").read_text()
    )
    assert status["stage"] == "failed" and "only 25 of 50" in status["error"]


def _failed(config, nodes, match, **grid_kwargs):
    """Run to a failed quorum matching ``match``; the run's status.json."""
    with pytest.raises(QuorumError, match=match):
        _run(config, nodes, **grid_kwargs)
    status = json.loads((grid_report_dir(config) / "status.json").read_text())
    assert status["stage"] == "failed"
    return status


def test_a_quorum_missed_in_the_identify_round_fails_the_run(run_config):
    # 16 of 30 nodes never say who they are (their first reply is lost): the run
    # asked for 30 clients and has 14, below min-reply-fraction 0.8 from the first
    # round on.
    config = run_config({"data.n-train": 20, "data.n-eval": 10})
    status = _failed(
        config,
        partitions(30),
        r"only 14 of 30 planned clients gave a valid reply in round 'identify'.*"
        r"needs 24.*Missing \(16\): \[0, 1, 2, 3, 4, ... 11 more\].*"
        r"connected nodes: 30, identified clients: 14, nodes without an identity "
        r"reply: \[\(1000, 'timeout",
        silent=range(16),
        silent_on=("query.privatize",),
    )
    assert status["round"] == "identify" and status["missing"] == list(range(16))


def test_the_quorum_counts_absent_clients_of_the_round_s_group(run_config):
    # Evaluation clients 45..49 never connect: 45 of 50 identify, every training
    # client releases, but only 15 of the 20 evaluation clients the run asked for can
    # answer, below 0.8 of them.
    config = run_config(
        SMALL, REFERENCE, {"flower.min-nodes": 40, "flower.wait-timeout": 0.0}
    )
    status = _failed(
        config,
        partitions(50)[:45],
        r"only 15 of 20 evaluation clients gave a valid reply in round 'evaluate'",
    )
    assert status["missing"] == [45, 46, 47, 48, 49]


def test_clients_lost_in_earlier_rounds_count_against_the_quorum(run_config):
    # 5 clients absent and 6 silent in the label round: 39 of the 50 the run asked for,
    # below 40, although 39 of the 45 asked in that round (0.87) answered.
    config = run_config(
        SMALL,
        {"privacy.mechanism": "label-uniform"},
        {"flower.min-nodes": 40, "flower.wait-timeout": 0.0},
    )
    nodes = partitions(50, **{"features-public": True})[:45]
    status = _failed(
        config,
        nodes,
        r"only 39 of 50 labelling clients gave a valid reply in round 'label'",
        silent=range(6),
        silent_on=("query.label",),
    )
    assert status["missing"] == [0, 1, 2, 3, 4, 5, 45, 46, 47, 48, 49]


def test_a_run_at_the_quorum_goes_on(run_config):
    # 10 of 50 lost over two rounds: exactly 0.8 of the planned clients remain.
    config = run_config(SMALL, {"flower.min-nodes": 40, "flower.wait-timeout": 0.0})
    _, _, result, report = _run(config, partitions(50)[:45], silent=range(5))
    assert len(result.payload) == 40
    absent = report["participation"]["absent_clients"]
    assert absent == [0, 1, 2, 3, 4, 45, 46, 47, 48, 49]


class RestartingGrid(FakeGrid):
    """A FakeGrid on which node ``restart`` releases, then restarts before its reply
    leaves: the SuperLink reports it unavailable for that message, once."""

    def __init__(self, *args, restart: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.restart = 1000 + restart
        self.lost = 0

    def send_and_receive(self, messages, *, timeout=None):
        from flwr.app import Error
        from flwr.common.constant import ErrorCode

        replies = []
        for message in messages:
            (reply,) = super().send_and_receive([message], timeout=timeout)
            kind = message.metadata.message_type
            if (
                message.metadata.dst_node_id == self.restart
                and kind == ("query.privatize")
                and not self.lost
            ):
                self.lost += 1
                message.metadata.__dict__["_message_id"] = f"lost-{self.lost}"
                reply = Message(
                    Error(ErrorCode.NODE_UNAVAILABLE, "node restarted"),
                    reply_to=message,
                )
            replies.append(reply)
        return replies


def test_a_restarted_node_is_asked_again_and_answers_from_its_ledger(
    run_config, tmp_path
):
    # Client 3 holds its own data file: its release is charged and stored before the
    # node restarts; asked again, it sends the very same release at no further cost.
    from ldpfda.datasets.files import save_node_data

    config = run_config(SMALL)
    settings, options = parse_run_config(config)
    nodes = partitions(50)
    path = save_node_data(tmp_path / "c3.npz", [[0.5, -0.5, 0.25, 0.0]], [1])
    nodes[3] = {
        "client-id": 3,
        "data-path": str(path),
        "privacy-budget": 5.0,
        "state-dir": str(tmp_path / "state"),
    }
    grid = RestartingGrid(client_app, config, nodes, restart=3)
    result, report = run_server(grid, settings, options, run_id=7)
    assert grid.lost == 1
    part = report["participation"]["privatize"]
    assert part["missing"] == [] and part["answered"] == 50
    assert 3 in result.payload.client_ids
    figures = report["privacy"]["clients"]["3"]
    assert figures["reported_spent"] == figures["charged_by_server"] == 5.0


class GoneGrid(FakeGrid):
    """A FakeGrid whose node ``gone`` dies once the run has begun: from the first
    message on, the SuperLink no longer lists it and reports it unavailable for every
    message to it."""

    def __init__(self, *args, gone: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.gone = 1000 + gone
        self.dead = False

    def get_node_ids(self) -> list[int]:
        return [n for n in self.node_ids if not (self.dead and n == self.gone)]

    def send_and_receive(self, messages, *, timeout=None):
        from flwr.app import Error
        from flwr.common.constant import ErrorCode

        messages, self.dead = list(messages), True
        dead = [m for m in messages if m.metadata.dst_node_id == self.gone]
        live = [m for m in messages if m.metadata.dst_node_id != self.gone]
        replies = list(super().send_and_receive(live, timeout=timeout))
        for i, message in enumerate(dead):
            message.metadata.__dict__["_message_id"] = f"gone-{i}"
            replies.append(
                Message(Error(ErrorCode.NODE_UNAVAILABLE, "offline"), reply_to=message)
            )
        return replies


@pytest.mark.parametrize(("rejoin", "waited"), [(None, 30.0), (4.0, 4.0), (0.0, 0.0)])
def test_a_node_gone_for_good_is_waited_for_as_long_as_the_rejoin_timeout(
    run_config, monkeypatch, rejoin, waited
):
    # On a virtual clock: the server waits for the unavailable node (polling every
    # second) until flower.rejoin-timeout, by default the reply timeout, then asks it
    # once more and goes on without it.
    import ldpfda.server.grid as grid_module

    clock = [0.0]
    monkeypatch.setattr(grid_module.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(
        grid_module.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s)
    )
    extra = {"flower.reply-timeout": 30.0}
    if rejoin is not None:
        extra["flower.rejoin-timeout"] = rejoin
    config = run_config(SMALL, extra)
    settings, options = parse_run_config(config)
    grid = GoneGrid(client_app, config, partitions(50), gone=7)
    result, report = run_server(grid, settings, options, run_id=7)
    assert clock[0] == waited
    assert 7 not in result.payload.client_ids and len(result.payload) == 49
    part = report["participation"]
    assert part["absent_clients"] == [7]
    assert part["identify"]["missing"] == [1007]
    (gone,) = part["rejections"]
    assert (gone["node_id"], gone["kind"]) == (1007, "unavailable")


def test_every_refusal_is_reported_by_its_reason_code(run_config, tmp_path):
    # Three hosts refuse a label-only run for three reasons of their own; the run goes
    # on with the others and the report names each refusal by its kind.
    from ldpfda.datasets.files import save_node_data

    config = run_config(SMALL, {"privacy.mechanism": "label-uniform"})
    settings, options = parse_run_config(config)
    nodes = partitions(50)
    path = save_node_data(tmp_path / "c.npz", [[0.5, -0.5, 0.25, 0.0]], [1])
    host = {"data-path": str(path), "state-dir": str(tmp_path / "s")}
    nodes[1] = {**host, "client-id": 1, "privacy-budget": 5.0}  # features private
    nodes[2] = {**host, "client-id": 2, "features-public": True}  # no budget
    nodes[3] = {  # budget below the run's epsilon
        **host,
        "client-id": 3,
        "privacy-budget": 0.5,
        "features-public": True,
    }
    grid = FakeGrid(client_app, config, nodes)
    result, report = run_server(grid, settings, options, run_id=7)
    kinds = {(r["client_id"], r["kind"]) for r in report["participation"]["rejections"]}
    assert (1, "policy") in kinds and (3, "budget") in kinds
    # A node without a budget does not even say who it is.
    assert any(
        r["kind"] == "policy" and r["stage"] == "identify"
        for r in report["participation"]["rejections"]
    )
    assert len(result.payload) == 47


def test_twenty_clients_run_the_default_protocol_with_the_shipped_mrma_settings(
    run_config, caplog
):
    # The shipped config's mrma.subsample-size (25) and num-weak-models (10) do not
    # bind a default-protocol federation of 10 + 10 clients; they do bind MRMA's.
    from ldpfda.config import SettingError

    # On the vector design (the app's default dataset is the wearable one).
    config = run_config(
        {"data.dataset": "vector", "data.n-train": 10, "data.n-eval": 10, "seed": 11}
    )
    assert (config["mrma.subsample-size"], config["mrma.num-weak-models"]) == (25, 10)
    with pytest.raises(SettingError, match="subsample_size must be <= n_train"):
        parse_run_config({**config, **REFERENCE})
    with caplog.at_level("WARNING", logger="flwr.ldpfda"):
        _, _, result, report = _run(config, partitions(20))
    assert len(result.payload) == 20
    # Too few clients for epsilon 5: the report and the server log say so.
    signal = report["signal"]
    assert signal["no_signal"] is True
    assert "20 clients at epsilon 5 are too few" in signal["warning"]
    assert any("carries no signal" in r.getMessage() for r in caplog.records)
    saved = json.loads((grid_report_dir(config) / "report.json").read_text())
    assert saved["signal"]["warning"] == signal["warning"]


_BLAS_CHILD = """
import json, sys
from flwr.app import Context, RecordDict
from threadpoolctl import threadpool_info
import ldpfda.server.server_app as server_app

def blas():
    libraries = threadpool_info()
    return sorted({i["num_threads"] for i in libraries if i["user_api"] == "blas"})

seen = {"before": blas()}
server_app.run_server = lambda *args, **kwargs: seen.setdefault("during", blas())
config = json.load(sys.stdin)
server_app.main(None, Context(1, 0, {}, RecordDict(), config))
seen["after"] = blas()
print(json.dumps(seen))
"""


def test_the_serverapp_runs_its_own_numpy_work_on_one_blas_thread():
    # In the simulation a fork (Ray starting its processes) stopped OpenBLAS's pool
    # while the ServerApp's thread waited on it, for ever. The suite's processes run
    # one BLAS thread already, so the ServerApp runs here in a child with two.
    import os
    import subprocess
    import sys

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}
    out = subprocess.run(
        [sys.executable, "-c", _BLAS_CHILD],
        input=json.dumps(app_config()),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {"before": [2], "during": [1], "after": [2]}
