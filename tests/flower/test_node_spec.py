"""A node on its own curves and its own timestamps, under the federation's spec.

Through the host's ClientApp handlers, as a server would call them: the node reads its
own long CSV (a wearable subject on its device's irregular clock), featurizes it with
the spec of its ``spec-path``, and answers only queries made under that same spec.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from ldpfda.client.client_app import app
from ldpfda.datasets.readers import read_curves, write_long_csv
from ldpfda.datasets.wearable import make_wearable
from ldpfda.schema.queries import ERROR_SPEC, SPEC_RECORD
from ldpfda.schema.spec import FederationSpec

from .support import SMALL

SPEC = """\
format-version = 1
labels = ["healthy", "blunted"]
min-points = 24
[domain]
start = 0.0
end = 1440.0
unit = "min"
[release]
protocol = "default"
epsilon = 2.0
[[channels]]
name = "heart_rate"
unit = "bpm"
[channels.basis]
order = 4
n-basis = 8
penalty = 0.0001
[channels.bounds]
value-low = 30.0
value-high = 220.0
"""

LABEL_ONLY = {"data.dataset": "vector", "privacy.mechanism": "label-uniform"}


@pytest.fixture(autouse=True)
def _task_identity():
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 7, 1, 1


@pytest.fixture
def host(tmp_path):
    """A host with subject 3 of the wearable generator, in a long CSV of its own."""
    spec_path = tmp_path / "federation.toml"
    spec_path.write_text(SPEC, encoding="utf-8")
    data = write_long_csv(
        tmp_path / "me.csv", make_wearable(1, first_subject=3, seed=11)
    )

    def build(**extra):
        return {
            "client-id": 0,
            "data-path": str(data),
            "spec-path": str(spec_path),
            "privacy-budget": 5.0,
            "features-public": True,
            "state-dir": str(tmp_path / "state"),
            **extra,
        }

    return build


def _ask(run_config, node, kind, spec_hash=None):
    content = RecordDict()
    if spec_hash is not None:
        content[SPEC_RECORD] = ConfigRecord({"hash": spec_hash})
    context = Context(
        run_id=3,
        node_id=99,
        node_config=dict(node),
        state=RecordDict(),
        run_config=dict(run_config),
    )
    return app(Message(content, 99, f"query.{kind}"), context)


def test_a_node_featurizes_its_own_irregular_curve_with_its_spec(run_config, host):
    spec = FederationSpec.loads(SPEC)
    node = host()
    reply = _ask(run_config(SMALL, LABEL_ONLY), node, "features", spec.hash)
    assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
    sent = reply.content.array_records["features"]["x"].numpy()
    # What the spec makes of the node's own file, on the device's own timestamps.
    own = spec.featurizer().featurize(
        read_curves(node["data-path"], spec_labels=spec.labels)
    )
    np.testing.assert_array_equal(sent.reshape(own.features.shape), own.features)
    assert own.features.shape == (1, 8)
    assert 0 < np.abs(own.features).max() <= 1


@pytest.mark.parametrize("kind", ["identify", "features", "label"])
def test_a_query_under_another_spec_or_none_is_refused_naming_both(
    run_config, host, kind
):
    spec = FederationSpec.loads(SPEC)
    other = FederationSpec.loads(SPEC.replace("n-basis = 8", "n-basis = 9"))
    assert other.hash != spec.hash
    config = run_config(SMALL, LABEL_ONLY)
    for sent in (other.hash, None):
        reply = _ask(config, host(), kind, sent)
        assert reply.has_error() and reply.error.code == ERROR_SPEC
        assert spec.hash[:16] in reply.error.reason
        assert (sent[:16] if sent else "none") in reply.error.reason


def test_a_node_without_a_spec_refuses_a_query_under_one(run_config, host):
    node = host()
    node.pop("spec-path")
    spec = FederationSpec.loads(SPEC)
    reply = _ask(run_config(SMALL, LABEL_ONLY), node, "identify", spec.hash)
    assert reply.has_error() and reply.error.code == ERROR_SPEC


def test_data_far_outside_the_bounds_clip_and_the_node_says_so(
    run_config, host, tmp_path, caplog
):
    # Heart rate recorded in beats per second (a unit mix-up): everything clips.
    curves = make_wearable(1, first_subject=3, seed=11)
    tiny = type(curves)(**{**curves.__dict__, "values": curves.values / 60.0})
    path = write_long_csv(tmp_path / "bps.csv", tiny)
    spec = FederationSpec.loads(SPEC)
    with caplog.at_level(logging.INFO, logger="flwr.ldpfda.node"):
        reply = _ask(
            run_config(SMALL, LABEL_ONLY),
            host(**{"data-path": str(path)}),
            "features",
            spec.hash,
        )
    assert not reply.has_error()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("clipped" in w and "unit" in w for w in warnings), warnings


def test_a_spec_the_node_cannot_read_is_refused_with_the_spec_code(
    run_config, host, tmp_path
):
    broken = tmp_path / "broken.toml"
    broken.write_text(SPEC.replace("order = 4", "order = 0"), encoding="utf-8")
    reply = _ask(
        run_config(SMALL, LABEL_ONLY),
        host(**{"spec-path": str(broken)}),
        "identify",
        "0" * 64,
    )
    assert reply.has_error() and reply.error.code == ERROR_SPEC
    # The reply says only that the spec cannot be read; the node's log says why.
    assert "order" not in reply.error.reason


# -- a whole run under the spec --------------------------------------------------------


def _spec_run(
    tmp_path,
    run_config,
    *,
    other_spec_for=(),
    public=True,
    extra=None,
    spec=SPEC,
    n_classes=2,
):
    """A run of 60 hosts under ``spec``; their subjects have ``n_classes`` labels."""
    from ldpfda.server.server_app import parse_run_config, run_server

    from .support import FakeGrid

    tmp_path.mkdir(parents=True, exist_ok=True)
    spec_path = tmp_path / "federation.toml"
    spec_path.write_text(spec, encoding="utf-8")
    other = tmp_path / "other.toml"
    other.write_text(spec.replace("n-basis = 8", "n-basis = 9"), encoding="utf-8")
    # Every host's own subject on its own device clock; public and test curves are
    # other subjects of the same kind, on the server.
    subjects = make_wearable(60, n_classes=n_classes, seed=11)
    nodes = []
    for i in range(60):
        path = write_long_csv(tmp_path / f"host-{i}.csv", subjects.subject(i))
        nodes.append(
            {
                "client-id": i,
                "data-path": str(path),
                "spec-path": str(other if i in other_spec_for else spec_path),
                "privacy-budget": 5.0,
                "state-dir": str(tmp_path / f"state-{i}"),
            }
        )
    server = {"flower.spec": str(spec_path)}
    if public:
        server["flower.public-data"] = str(
            write_long_csv(
                tmp_path / "public.csv", make_wearable(300, first_subject=10**5, seed=5)
            )
        )
    test = make_wearable(500, first_subject=10**6, n_classes=n_classes, seed=5)
    server["flower.test-data"] = str(write_long_csv(tmp_path / "test.csv", test))
    config = run_config(
        SMALL,
        {"data.n-train": 40, "data.n-eval": 20, "privacy.epsilon": 5.0},
        server,
        extra or {},
    )
    settings, options = parse_run_config(config)
    grid = FakeGrid(app, config, nodes)
    return run_server(grid, settings, options, run_id=7)


def test_a_run_under_the_spec_uses_every_hosts_own_curves(tmp_path, run_config):
    result, report = _spec_run(tmp_path, run_config, other_spec_for={5})
    part = report["participation"]
    # Every host but the one under another spec released, on its own timestamps; that
    # one refused at once, before it said who it is.
    assert [(r["stage"], r["client_id"], r["kind"]) for r in part["rejections"]] == [
        ("identify", None, "spec")
    ]
    assert "(code 4005)" in part["rejections"][0]["reason"]
    assert len(result.payload) == 59
    assert report["flower"]["flower.spec"].endswith("federation.toml")
    errors = report["test_errors"]
    assert errors and all(0.0 <= v <= 1.0 for v in errors.values())


def test_a_spec_run_without_public_curves_says_what_it_needs(tmp_path, run_config):
    with pytest.raises(ValueError, match="flower.public-data"):
        _spec_run(tmp_path, run_config, public=False)


def test_a_simulated_node_reads_its_own_file_from_the_run_s_node_data(
    run_config, tmp_path
):
    from ldpfda.schema.queries import ERROR_DATA

    spec_path = tmp_path / "federation.toml"
    spec_path.write_text(SPEC, encoding="utf-8")
    folder = tmp_path / "nodes"
    folder.mkdir()
    own = write_long_csv(folder / "client-2.csv", make_wearable(3, seed=4).subject(2))
    spec = FederationSpec.loads(SPEC)
    config = run_config(
        SMALL,
        LABEL_ONLY,
        {"flower.spec": str(spec_path), "flower.node-data": str(folder)},
    )
    # Simulated nodes have no node config but their partition: the run names both
    # the folder and the spec, and partition 2 takes client-2's file.
    partition = {"partition-id": 2, "num-partitions": 4, "features-public": True}
    reply = _ask(config, partition, "features", spec.hash)
    assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
    sent = reply.content.array_records["features"]["x"].numpy()
    expected = spec.featurize_file(own)[1].features
    np.testing.assert_array_equal(sent.reshape(expected.shape), expected)
    # Partition 3 has no file there: it answers nothing but the data error code.
    reply = _ask(config, {**partition, "partition-id": 3}, "features", spec.hash)
    assert reply.has_error() and reply.error.code == ERROR_DATA


def test_the_second_moment_comes_from_the_public_curves_or_the_releases(
    tmp_path, run_config
):
    # With flower.public-data the moment fit uses the spec's features of those 300
    # public subjects, never the embedded design's draws; without them and with
    # data.public-features = false it falls back to the releases, and says so.
    from ldpfda.schema.spec import FederationSpec
    from ldpfda.server.learners import MomentLinearClassifier

    result, report = _spec_run(tmp_path, run_config)
    assert report["second_moment"]["public_rows"] == 300
    assert report["second_moment"]["source"].startswith("flower.public-data (")
    public = FederationSpec.load(tmp_path / "federation.toml").featurize_file(
        tmp_path / "public.csv"
    )[1]
    refit = MomentLinearClassifier(
        joint=True,
        public=public.features,
        mechanism=result.payload.release_mechanism().inner,
    ).fit(result.payload.releases)
    coef = refit.to_linear_models().coef[0]
    np.testing.assert_allclose(coef, result.final.coef[0], atol=1e-12)
    _, fallback = _spec_run(
        tmp_path / "f", run_config, public=False, extra={"data.public-features": False}
    )
    assert fallback["second_moment"] == {"source": "releases", "public_rows": 0}


def test_the_multi_server_phases_refuse_a_spec(tmp_path):
    # They featurize with the embedded design: a spec's hosts would be misread.
    from ldpfda.config import Settings
    from ldpfda.server.multiserver_app import run_phase
    from ldpfda.server.options import FlowerOptions

    options = FlowerOptions(
        phase="train", session="s", spec="a.toml", report_dir=str(tmp_path)
    )
    settings = Settings.reference(server_id=0)
    with pytest.raises(ValueError, match="flower.spec and flower.public-data"):
        run_phase(None, settings, options)
