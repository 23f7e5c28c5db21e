"""The K-class default protocol on Flower: the same releases and model as in process.

A run of ``data.n-classes = 3`` (three wearable conditions) over a grid of ClientApps
(:class:`~.support.FakeGrid`) against ``run_repeat`` with every client in this
process; then nodes that refuse a query for another number of classes than their data
or their federation spec hold. Every other K-class protocol (MRMA on the reference
release, the label-only modes) runs on both transports in ``test_contract.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from ldpfda.client.client_app import app as client_app
from ldpfda.engine import run_repeat
from ldpfda.schema import catalog
from ldpfda.schema.queries import ERROR_DATA, ERROR_REQUEST, ERROR_SPEC, SPEC_RECORD
from ldpfda.schema.spec import FederationSpec
from ldpfda.server.options import parse_run_config
from ldpfda.server.server_app import run_server

from .support import SMALL, FakeGrid, partitions
from .test_node_spec import SPEC

THREE = {
    "data.dataset": "wearable",
    "data.n-classes": 3,
    "data.n-train": 150,
    "data.n-test": 300,
    "fda.calibration-size": 200,
}

#: The spec of the node tests with three conditions as its label set.
THREE_LABELS = SPEC.replace(
    'labels = ["healthy", "blunted"]', 'labels = ["healthy", "blunted", "delayed"]'
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One K = 3 run on Flower (its result and report) and the same in process."""
    from .support import app_config

    config = {**app_config(), **SMALL, **THREE}
    config["flower.report-dir"] = str(tmp_path_factory.mktemp("reports"))
    settings, options = parse_run_config(config)
    grid = FakeGrid(client_app, config, partitions(settings.n_train + settings.n_eval))
    flower, report = run_server(grid, settings, options, run_id=7)
    return flower, report, run_repeat(settings, options.repeat), config


def test_a_three_class_run_on_flower_is_the_in_process_run(runs):
    flower, report, local, config = runs
    assert flower.payload.n_classes == local.payload.n_classes == 3
    for key, array in local.payload.arrays().items():
        np.testing.assert_array_equal(flower.payload.arrays()[key], array, err_msg=key)
    # Every class was drawn, and the model has one row per class.
    assert set(np.unique(flower.payload.classes)) == {0, 1, 2}
    assert flower.final.coef.shape[0] == 3
    np.testing.assert_array_equal(flower.final.coef, local.final.coef)
    np.testing.assert_array_equal(flower.final.intercept, local.final.intercept)
    assert flower.test_errors["moment"] == local.test_errors["moment"]
    # One K-class release per client, at the run's epsilon.
    assert flower.privacy["releases"] == local.privacy["releases"]
    assert flower.privacy["max_spent"] == local.privacy["max_spent"] == 5.0
    assert report["participation"]["rejections"] == []
    # The report and the model file carry the K rows.
    assert np.shape(report["final_model"]["coef"]) == flower.final.coef.shape
    saved = np.load(Path(config["flower.report-dir"]) / "run-7" / "model.npz")
    np.testing.assert_array_equal(saved["coef"], flower.final.coef)
    np.testing.assert_array_equal(saved["intercept"], flower.final.intercept)


def test_each_node_records_one_k_class_release_at_the_runs_epsilon(runs):
    from ldpfda.client.node import load_ledger
    from ldpfda.schema.releases import multiclass_design

    *_, config = runs
    settings, _ = parse_run_config(config)
    context = _context(config, {"partition-id": 4})
    reply = _privatize(context, 3)
    assert not reply.has_error(), reply.error.reason
    events = load_ledger(context, 4, settings.epsilon).entries
    # At epsilon 5 with 3 classes and 10 features the split release has the smaller
    # stated variance ("auto"): the label by randomized response, then (1, z).
    assert multiclass_design(settings.epsilon, 10, 3) == "split"
    assert [(e.event.mechanism, e.event.epsilon) for e in events] == [
        ("class_split_features", settings.epsilon)
    ]
    payload = reply.content.array_records["payload"]
    assert int(payload["class"].numpy().reshape(-1)[0]) in (0, 1, 2)
    assert payload["releases"].numpy().reshape(-1)[0] == 1.0


def test_a_node_refuses_a_query_for_fewer_classes_than_its_labels(runs):
    # A node whose label is the third condition cannot answer a binary query: the
    # refusal is the data code, and the reply names no label.
    flower, _, _, config = runs
    settings, options = parse_run_config(config)
    from ldpfda.datasets.population import simulated_partition

    client = next(
        i
        for i in range(settings.n_train + settings.n_eval)
        if simulated_partition(settings, options.repeat, i)[1][0] == 2
    )
    context = _context(config, {"partition-id": client})
    reply = _privatize(context, 2)
    assert reply.has_error() and reply.error.code == ERROR_DATA
    assert "2" not in reply.error.reason
    bad = _privatize(context, 1)  # n-classes must be >= 3 when sent
    assert bad.has_error() and bad.error.code == ERROR_REQUEST


def test_a_label_only_node_takes_k_from_every_query(run_config):
    # The features query of a K-class label run says K: a node whose label is the
    # third condition answers it for K = 3 and refuses it for two (data code).
    config = run_config(SMALL, THREE, {"privacy.mechanism": "label-uniform"})
    settings, options = parse_run_config(config)
    from ldpfda.datasets.population import simulated_partition

    client = next(
        i
        for i in range(settings.n_train + settings.n_eval)
        if simulated_partition(settings, options.repeat, i)[1][0] == 2
    )
    for k, code in ((3, None), (2, ERROR_DATA)):
        content = RecordDict()
        if k != 2:
            value = Array(np.array([k], dtype=np.int64))
            content[catalog.CLASSES_SPEC.record] = ArrayRecord(
                {catalog.N_CLASSES_KEY: value}
            )
        message = Message(content, 99, f"query.{catalog.FEATURES}")
        reply = client_app(message, _context(config, {"partition-id": client}))
        if code is None:
            assert not reply.has_error(), reply.error.reason
        else:
            assert reply.has_error() and reply.error.code == code


def test_a_node_refuses_a_number_of_classes_its_spec_does_not_declare(
    run_config, tmp_path
):
    from ldpfda.datasets.readers import write_long_csv
    from ldpfda.datasets.wearable import make_wearable

    spec_path = tmp_path / "three.toml"
    spec_path.write_text(THREE_LABELS, encoding="utf-8")
    spec = FederationSpec.load(spec_path)
    data = write_long_csv(
        tmp_path / "me.csv", make_wearable(1, first_subject=3, n_classes=3, seed=11)
    )
    node = {
        "client-id": 0,
        "data-path": str(data),
        "spec-path": str(spec_path),
        "privacy-budget": 5.0,
        "state-dir": str(tmp_path / "state"),
    }
    config = run_config(SMALL, {"data.dataset": "vector", "privacy.epsilon": 2.0})
    for k, code in ((2, ERROR_SPEC), (4, ERROR_SPEC), (3, None)):
        reply = _privatize(_context(config, node), k, spec.hash)
        if code is None:
            assert not reply.has_error(), reply.error.reason
            assert "class" in reply.content.array_records["payload"]
        else:
            assert reply.has_error() and reply.error.code == code
            assert "3 labels" in reply.error.reason
    # A label outside the spec's names is the data code, for K classes as for two.
    three = make_wearable(12, n_classes=4, seed=11)
    outside = int(np.flatnonzero(three.labels == 3)[0])
    write_long_csv(data, three.subject(outside))
    reply = _privatize(_context(config, node), 3, spec.hash)
    assert reply.has_error() and reply.error.code == ERROR_DATA
    assert "advanced" not in reply.error.reason


def test_a_run_under_a_three_label_spec_fits_three_classes(tmp_path, run_config):
    # K is the spec's label set: every host releases its class-signed vector and the
    # server fits one row per label (the second moment from the releases, no test
    # file: the featurizing of the hosts' own files is what this run is about).
    from .test_node_spec import _spec_run

    fast = {"data.public-features": False, "flower.test-data": ""}
    result, report = _spec_run(
        tmp_path,
        run_config,
        spec=THREE_LABELS,
        n_classes=3,
        other_spec_for={5},
        public=False,
        extra=fast,
    )
    assert result.payload.n_classes == 3 and len(result.payload) == 59
    assert set(np.unique(result.payload.classes)) == {0, 1, 2}
    assert result.final.coef.shape == (3, 8)
    assert [r["kind"] for r in report["participation"]["rejections"]] == ["spec"]
    assert result.privacy["max_spent"] == 5.0
    assert np.shape(report["final_model"]["coef"]) == (3, 8)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        (
            {"server.method": "mrma", "mrma.weak-learner": "moment"},
            "K > 2 classes need the moment protocol",
        ),
        ({"data.dataset": "wearable", "data.n-classes": 4}, "its label set fixes K"),
    ],
)
def test_a_three_label_spec_run_that_cannot_fit_it_stops_before_asking_nodes(
    run_config, tmp_path, changes, match
):
    spec_path = tmp_path / "three.toml"
    spec_path.write_text(THREE_LABELS, encoding="utf-8")
    config = run_config(
        SMALL,
        {"data.public-features": False, **changes},
        {"flower.spec": str(spec_path), "flower.wait-timeout": 0.1},
    )
    settings, options = parse_run_config(config)
    grid = FakeGrid(client_app, config, [])
    with pytest.raises(ValueError, match=match):
        run_server(grid, settings, options, run_id=7)
    assert grid.sent == []


# -- helpers ---------------------------------------------------------------------------


def _context(run_config, node):
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 7, 1, 1
    return Context(
        run_id=3,
        node_id=99,
        node_config=dict(node),
        state=RecordDict(),
        run_config=dict(run_config),
    )


def _privatize(context, n_classes, spec_hash=None):
    """A privatize query for ``n_classes`` (none sent for 2), as the server sends it."""
    content = RecordDict()
    if n_classes != 2:
        record = catalog.CLASSES_SPEC.record
        value = np.array([n_classes], dtype=np.int64)
        content[record] = ArrayRecord({catalog.N_CLASSES_KEY: Array(value)})
    if spec_hash is not None:
        content[SPEC_RECORD] = ConfigRecord({"hash": spec_hash})
    return client_app(Message(content, 99, f"query.{catalog.PRIVATIZE}"), context)
