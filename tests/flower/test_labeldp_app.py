"""The label-only modes over Flower: whole runs on the in-memory Grid, node refusals,
reply validation.

A run in which every node answers gives the in-process engine's numbers bit for bit:
the same clusters, pilots, priors, released (or forwarded) labels and model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from ldpfda.client.client_app import ERROR_BUDGET, ERROR_REQUEST
from ldpfda.client.client_app import app as client_app
from ldpfda.engine import run_repeat
from ldpfda.privacy.random import derive_seed
from ldpfda.server.grid import ReplyError
from ldpfda.server.labels import cluster_features
from ldpfda.server.options import parse_run_config
from ldpfda.server.server_app import run_server

from .support import SMALL, FakeGrid, parse_features, parse_label, partitions

LABEL = {"privacy.epsilon": 1.0, "labeldp.n-clusters": 3}
MECHANISMS = ["label-uniform", "label-cluster", "label-p2p"]


@pytest.fixture(autouse=True)
def _task_identity():
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 7, 1, 1


def _run(config, node_configs, **grid_kwargs):
    settings, options = parse_run_config(config)
    grid = FakeGrid(client_app, config, node_configs, **grid_kwargs)
    result, report = run_server(grid, settings, options, run_id=7)
    return grid, settings, result, report


def _report_dir(config) -> Path:
    return Path(config["flower.report-dir"]) / "run-7"


@pytest.mark.parametrize("dataset", ["vector", "functional"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_label_run_equals_the_in_process_engine(run_config, mechanism, dataset):
    config = run_config(
        SMALL, LABEL, {"privacy.mechanism": mechanism, "data.dataset": dataset}
    )
    grid, settings, result, report = _run(config, partitions(50))
    reference = run_repeat(settings, 0)
    assert result.method == reference.method == "label"
    for name in ("client_ids", "features", "labels", "priors"):
        np.testing.assert_array_equal(
            getattr(result.payload, name), getattr(reference.payload, name)
        )
    assert result.payload.epsilon == reference.payload.epsilon
    np.testing.assert_array_equal(result.final.coef, reference.final.coef)
    np.testing.assert_array_equal(result.final.intercept, reference.final.intercept)
    assert report["test_errors"]["label"] == reference.test_errors["label"]
    assert report["privacy"]["labeldp"] == reference.privacy["labeldp"]

    # The nodes say who they are with their features: no identify round.
    kinds = {m.metadata.message_type for m in grid.sent}
    if mechanism == "label-p2p":
        assert kinds == {
            "query.features",
            "query.p2p_randomize",
            "query.p2p_forward",
        }
        # The relay is the server: each client is charged the local epsilon of the
        # bit the server receives, its whole budget; the forwarded bits are amplified.
        assert reference.privacy["labeldp"]["epsilon"] < 1.0
    else:
        assert kinds == {"query.features", "query.label"}
    eps = 1.0
    written = json.loads((_report_dir(config) / "report.json").read_text())
    assert written["method"] == "label"
    clients = written["privacy"]["clients"]
    assert len(clients) == 50
    for figures in clients.values():
        assert figures["reported_spent"] == pytest.approx(eps, rel=1e-12)
        assert figures["charged_by_server"] == pytest.approx(eps, rel=1e-12)
    payload = np.load(_report_dir(config) / "payload.npz")
    np.testing.assert_array_equal(payload["labels"], reference.payload.labels)


def test_each_client_releases_its_label_once(run_config):
    config = run_config(SMALL, LABEL, {"privacy.mechanism": "label-cluster"})
    grid, *_ = _run(config, partitions(50))
    asked = [
        m.metadata.dst_node_id
        for m in grid.sent
        if m.metadata.message_type == "query.label"
    ]
    assert len(asked) == len(set(asked)) == 50


def test_silent_pilots_and_clients_are_recorded_and_the_run_goes_on(run_config):
    config = run_config(SMALL, LABEL, {"privacy.mechanism": "label-cluster"})
    _, _, result, report = _run(
        config, partitions(50), silent={1, 17}, silent_on={"query.label"}
    )
    assert len(result.payload) == 48
    assert not {1, 17} & set(result.payload.client_ids.tolist())
    missing = {
        int(c)
        for name in ("label-pilots", "label-others")
        for c in report["participation"][name]["missing"]
    }
    assert missing == {1, 17}


def test_p2p_does_not_forward_a_cluster_that_lost_bits_below_s(run_config):
    # With s the smallest cluster's size, one silent member of that cluster leaves it
    # below s: its members are not forwarded (their guarantee would weaken); the
    # other clusters are.
    config = run_config(SMALL, LABEL, {"privacy.mechanism": "label-p2p"})
    settings, _ = parse_run_config(config)
    reference = run_repeat(settings, 0)
    s = reference.privacy["labeldp"]["min_cluster_size"]
    clusters = cluster_features(
        reference.payload.features,
        n_clusters=3,
        min_size=s,
        rng=np.random.default_rng(derive_seed(settings.seed, "server", 0)),
    )
    small = np.flatnonzero(clusters == np.argmin(np.bincount(clusters)))
    assert small.size == s
    config["labeldp.min-cluster-size"] = s
    _, _, result, report = _run(
        config,
        partitions(50),
        silent={int(small[0])},
        silent_on={"query.p2p_randomize"},
    )
    assert report["privacy"]["labeldp"]["forwarded_clients"] == 50 - s
    assert not set(small.tolist()) & set(result.payload.client_ids.tolist())
    assert len(result.payload) == 50 - s


def _node(config, mechanism, partition=0):
    grid = FakeGrid(
        client_app, {**config, "privacy.mechanism": mechanism}, partitions(50)
    )
    node = grid.node_ids[partition]
    return grid, node


def _query(grid, node, kind, content=None):
    message = Message(content or RecordDict(), node, f"query.{kind}")
    return grid.client_app(message, grid.contexts[node])


def _prior(q):
    return RecordDict({"prior": ArrayRecord({"q": Array(np.asarray(q, float))})})


def test_nodes_refuse_label_queries_outside_the_label_modes(run_config):
    config = run_config(SMALL, LABEL)
    grid, node = _node(config, "joint-hybrid")
    reply = _query(grid, node, "features")
    assert reply.has_error() and reply.error.code == ERROR_REQUEST
    assert "privacy.mechanism" in reply.error.reason
    grid, node = _node(config, "label-p2p")
    reply = _query(grid, node, "label", _prior([0.5, 0.5]))
    assert reply.has_error() and "label-uniform or label-cluster" in reply.error.reason


def test_a_node_releases_once_and_refuses_bad_priors(run_config):
    config = run_config(SMALL, LABEL)
    grid, node = _node(config, "label-cluster")
    for q, match in (([0.0, 1.0], "priors must be > 0"), ([0.5], "at least 2")):
        reply = _query(grid, node, "label", _prior(q))
        assert reply.has_error() and reply.error.code == ERROR_REQUEST
        assert match in reply.error.reason
    reply = _query(grid, node, "label", RecordDict())
    assert reply.has_error() and "prior.q" in reply.error.reason
    first = _query(grid, node, "label", _prior([0.3, 0.7]))
    assert not first.has_error()
    assert first.content.config_records["ledger"]["spent"] == pytest.approx(1.0)
    second = _query(grid, node, "label", _prior([0.3, 0.7]))
    assert second.has_error() and second.error.code == ERROR_BUDGET
    grid, node = _node(config, "label-uniform")
    reply = _query(grid, node, "label", _prior([0.3, 0.7]))
    assert reply.has_error() and "uniform prior" in reply.error.reason


def test_p2p_nodes_check_cluster_sizes(run_config):
    config = run_config(SMALL, LABEL)  # labeldp.min-cluster-size = 10
    grid, node = _node(config, "label-p2p")
    request = RecordDict(
        {
            "p2p": ArrayRecord(
                {
                    "local-epsilon": Array(np.array([2.0])),
                    "cluster-sizes": Array(np.array([40, 5], dtype=np.int64)),
                }
            )
        }
    )
    reply = _query(grid, node, "p2p_randomize", request)
    assert reply.has_error() and "labeldp.min-cluster-size" in reply.error.reason
    peers = RecordDict({"peers": ArrayRecord({"labels": Array(np.ones(3, np.int8))})})
    reply = _query(grid, node, "p2p_forward", peers)
    assert reply.has_error() and "min-cluster-size" in reply.error.reason


def _reply(records: dict) -> Message:
    request = Message(RecordDict(), 5, "query.label")
    ledger = ConfigRecord({"client-id": 3, "spent": 1.0, "budget": 1.0})
    return Message(RecordDict({**records, "ledger": ledger}), reply_to=request)


@pytest.mark.parametrize(
    ("x", "match"),
    [
        (np.zeros((1, 3)), "shape"),
        (np.array([[0.1, np.nan]]), "nan"),
        (np.array([[0.1, 1.5]]), "range"),
    ],
)
def test_bad_feature_replies_are_rejected(x, match):
    reply = _reply({"features": ArrayRecord({"x": Array(x)})})
    with pytest.raises(ReplyError, match=match):
        parse_features(reply, client_id=3, n_features=2)


def test_feature_and_label_replies_are_parsed():
    x, figures = parse_features(
        _reply({"features": ArrayRecord({"x": Array(np.array([[0.5, -1.0]]))})}),
        client_id=3,
        n_features=2,
    )
    np.testing.assert_array_equal(x, [0.5, -1.0])
    assert figures == {"spent": 1.0, "budget": 1.0}
    label, _ = parse_label(
        _reply({"label": ArrayRecord({"label": Array(np.array([1]))})}), client_id=3
    )
    assert label == 1
    for bad in (np.array([2]), np.array([0.5]), np.array([1, 0])):
        with pytest.raises(ReplyError):
            parse_label(
                _reply({"label": ArrayRecord({"label": Array(bad)})}), client_id=3
            )
