"""The contract of the two transports: every protocol, one test, bit for bit.

Each protocol plan runs once with every client in this process
(:class:`~ldpfda.engine.inprocess.InProcessClients`, through ``run_repeat``) and once
with every client a ClientApp behind a grid (:class:`~ldpfda.server.grid.GridClients`,
through the ServerApp's ``run_server``). Both must release the same payloads, charge
the same epsilon and end with the same model, to the last bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from ldpfda.client.client_app import app as client_app
from ldpfda.engine import run_repeat
from ldpfda.server.options import parse_run_config
from ldpfda.server.server_app import run_server

from .support import REFERENCE, SMALL, FakeGrid, partitions

PROTOCOLS = {
    "default-moment": {},
    "reference-mrma": REFERENCE,
    "mrma-on-joint-releases": {"server.method": "mrma", "mrma.weak-learner": "moment"},
    "label-uniform": {"privacy.mechanism": "label-uniform"},
    "label-cluster": {"privacy.mechanism": "label-cluster", "labeldp.n-clusters": 3},
    "label-p2p": {"privacy.mechanism": "label-p2p", "labeldp.n-clusters": 3},
    # K > 2 only: the label and x released apart (two classes keep y~(1, x)).
    "default-split": {"privacy.multiclass-release": "split"},
}


@pytest.mark.parametrize("dataset", ["vector", "functional"])
@pytest.mark.parametrize("protocol", sorted(set(PROTOCOLS) - {"default-split"}))
def test_both_transports_run_the_same_protocol(run_config, protocol, dataset):
    *_, report = _same_run(
        run_config(SMALL, PROTOCOLS[protocol], {"data.dataset": dataset})
    )
    assert report["n_classes"] == 2


#: The protocols that take K > 2 classes, on three wearable conditions.
K_CLASS = [
    "default-moment",
    "default-split",
    "reference-mrma",
    "label-uniform",
    "label-cluster",
]


@pytest.mark.parametrize("protocol", [*K_CLASS, "label-p2p"])
def test_both_transports_run_the_same_three_class_protocol(run_config, protocol):
    from .test_kclass import THREE

    flower, local, report = _same_run(run_config(SMALL, PROTOCOLS[protocol], THREE))
    assert flower.final.coef.shape[0] == local.final.coef.shape[0] == 3
    assert report["n_classes"] == 3


def _same_run(config):
    """Run ``config`` on both transports; assert they agree; both results and the
    Flower run's report."""
    settings, options = parse_run_config(config)
    grid = FakeGrid(client_app, config, partitions(settings.n_train + settings.n_eval))
    flower, report = run_server(grid, settings, options, run_id=7)
    local = run_repeat(settings, options.repeat)

    assert flower.method == local.method
    for key, array in local.payload.arrays().items():
        np.testing.assert_array_equal(flower.payload.arrays()[key], array, err_msg=key)
    np.testing.assert_array_equal(flower.final.coef, local.final.coef)
    np.testing.assert_array_equal(flower.final.intercept, local.final.intercept)
    np.testing.assert_array_equal(flower.weights, local.weights)
    assert flower.privacy["max_spent"] == local.privacy["max_spent"] <= settings.epsilon
    assert flower.privacy["releases"] == local.privacy["releases"]
    # Nobody was missing or rejected, and the report says so.
    assert report["participation"]["rejections"] == []
    return flower, local, report
