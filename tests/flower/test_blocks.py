"""Block mode of the simulation (``flower.clients-per-node``): a node per block of
clients, the grid mapping each client id to its node, every protocol bit for bit equal
to the in-process engine; a node with its own data refuses it."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Context, Message, RecordDict

from ldpfda.client.client_app import app as client_app
from ldpfda.datasets.files import save_node_data
from ldpfda.engine import run_repeat
from ldpfda.schema.queries import ERROR_POLICY
from ldpfda.server.grid import GridClients
from ldpfda.server.options import parse_run_config
from ldpfda.server.server_app import run_server

from .support import REFERENCE, SMALL, FakeGrid, partitions
from .test_contract import PROTOCOLS

#: 50 clients in blocks of 8: seven nodes, the last with two clients.
BLOCKS = {"flower.clients-per-node": 8}
BLOCK = {"clients_per_node": 8}


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_block_nodes_run_the_protocol_of_the_engine(run_config, protocol):
    config = run_config(SMALL, PROTOCOLS[protocol], BLOCKS)
    settings, options = parse_run_config(config)
    grid = FakeGrid(client_app, config, partitions(7))
    flower, report = run_server(grid, settings, options, run_id=7)
    local = run_repeat(settings, options.repeat)

    for key, array in local.payload.arrays().items():
        np.testing.assert_array_equal(flower.payload.arrays()[key], array, err_msg=key)
    np.testing.assert_array_equal(flower.final.coef, local.final.coef)
    np.testing.assert_array_equal(flower.final.intercept, local.final.intercept)
    assert flower.privacy["releases"] == local.privacy["releases"]
    part = report["participation"]
    assert part["connected_nodes"] == 7 and part["rejections"] == []
    spent = {c["reported_spent"] for c in report["privacy"]["clients"].values()}
    assert spent == {settings.epsilon}


def test_the_grid_maps_each_client_to_its_block_and_asks_each_node_once(run_config):
    config = run_config(SMALL, REFERENCE, BLOCKS)
    settings, options = parse_run_config(config)
    clients = GridClients(FakeGrid(client_app, config, partitions(7)), 10.0, **BLOCK)
    clients.connect(50, 7, 0.0)
    np.testing.assert_array_equal(clients.ids(), np.arange(50))  # an identify round
    assert clients.node_of == {c: 1000 + c // 8 for c in range(50)}
    assert clients.reported[49] == {"spent": 0.0, "budget": settings.epsilon}
    grid = FakeGrid(client_app, config, partitions(7))
    run_server(grid, settings, options, run_id=7)
    # One message per node and round: privatize, the first query, to all 7 (each
    # reply says whose block it is); evaluate to the nodes of clients 30..49.
    sent = {}
    for m in grid.sent:
        sent.setdefault(m.metadata.message_type, []).append(m.metadata.dst_node_id)
    assert sent == {
        "query.privatize": [1000 + i for i in range(7)],
        "query.evaluate": [1003, 1004, 1005, 1006],
    }
    ids = [
        m.content.array_records["block"]["ids"].numpy().tolist()
        for m in grid.sent
        if m.metadata.message_type == "query.evaluate"
    ]
    assert ids[0] == [30, 31] and ids[-1] == [48, 49]


def test_a_block_with_a_bad_reply_loses_its_clients_alone(run_config):
    config = run_config(SMALL, BLOCKS, {"flower.min-reply-fraction": 0.5})
    settings, options = parse_run_config(config)
    grid = FakeGrid(client_app, config, partitions(7), silent={2})
    flower, report = run_server(grid, settings, options, run_id=7)
    part = report["participation"]
    # Its first reply lost, node 2 never said whose block it serves.
    assert part["absent_clients"] == list(range(16, 24))
    np.testing.assert_array_equal(
        flower.payload.client_ids, [c for c in range(50) if not 16 <= c < 24]
    )


@pytest.mark.parametrize("own", ["client-id", "ledger-dir", "data-path"])
def test_a_node_with_its_own_client_refuses_block_mode(run_config, tmp_path, own):
    config = run_config(SMALL, BLOCKS)
    data = save_node_data(tmp_path / "c.npz", [[0.5, -0.5, 0.25, 0.0]], [1])
    node = {
        "client-id": {"client-id": 3},
        "ledger-dir": {"partition-id": 0, "ledger-dir": str(tmp_path)},
        # A host: its data file, a lifetime budget and its state directory.
        "data-path": {
            "client-id": 0,
            "data-path": str(data),
            "privacy-budget": 10.0,
            "state-dir": str(tmp_path / "state"),
        },
    }[own]
    context = Context(
        run_id=1, node_id=5, node_config=node, state=RecordDict(), run_config=config
    )
    message = Message(RecordDict(), 5, "query.identify")
    message.metadata.__dict__["_message_id"] = "m"
    reply = client_app(message, context)
    assert reply.has_error() and reply.error.code == ERROR_POLICY
    assert "simulated partitions only" in reply.error.reason


def test_the_first_query_names_its_clients_as_runs_of_ids():
    from ldpfda.schema.blocks import id_runs, in_runs

    ids = np.array([7, 0, 1, 2, 9, 8, 30])
    runs = id_runs(ids)
    assert runs.tolist() == [[0, 3], [7, 10], [30, 31]]
    everyone = np.arange(-2, 40)
    np.testing.assert_array_equal(everyone[in_runs(everyone, runs)], np.sort(ids))
    assert not in_runs(everyone, id_runs(np.zeros(0, dtype=np.int64))).any()
