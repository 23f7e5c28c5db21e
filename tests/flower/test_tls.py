"""Loopback deployment with TLS and SuperNode authentication, end to end."""

from __future__ import annotations

import pytest

from ldpfda.server.server_app import parse_run_config

from .support import ROOT, app_config

pytestmark = pytest.mark.slow


def test_tls_deployment_with_authenticated_supernodes_runs_to_the_report(tmp_path,
                                                                        capfd):
    """1 SuperLink + 3 registered SuperNodes over TLS; one node sends a wrong shape.

    The default protocol: every node answers one privatize query with its joint
    release. The malformed reply is rejected and named in the report; the run ends.
    """
    from loopback import (
        INSECURE_WARNING,
        LoopbackFederation,
        make_node_files,
        wait_for_report,
    )

    config = {
        "data.dataset": "vector",
        "data.n-train": 2,
        "data.n-eval": 1,
        "mrma.subsample-size": 2,
        "mrma.num-weak-models": 1,
        "data.n-test": 2000,
        "flower.report-dir": str(tmp_path / "reports"),
        "flower.reply-timeout": 60.0,
        "flower.min-reply-fraction": 0.5,
        "flower.wait-timeout": 120.0,
    }
    settings, _ = parse_run_config(app_config() | config)
    files = make_node_files(settings, tmp_path / "data")
    federation = LoopbackFederation(tmp_path / "fed", files, tls=True,
                                    node_config=[{}, {}, {"test-misbehave": "shape"}])
    with federation:
        connection = (federation.home / "config.toml").read_text()
        assert "root-certificates" in connection and "insecure" not in connection
        federation.submit(ROOT, config)
        report = wait_for_report(tmp_path / "reports", timeout=300)
    assert INSECURE_WARNING not in capfd.readouterr().err

    part = report["participation"]
    assert part["connected_nodes"] == 3 and part["identify"]["answered"] == 3
    assert list(part["privatize"]["rejected"]) == ["2"]
    assert "shape" in part["privatize"]["rejected"]["2"]
    assert part["privatize"]["answered"] == 2
    assert report["test_errors"]
    clients = report["privacy"]["clients"]
    assert clients["0"]["reported_spent"] == pytest.approx(settings.epsilon)
