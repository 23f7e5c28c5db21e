"""The node owns its privacy: what a curious server tries, through the ClientApp.

Every test calls the host's ClientApp handlers exactly as a ServerApp's messages
would, on a deployed node (a data file, a lifetime budget, a state directory), and
sends what the server's operator controls: the run config and the requests. Each was
written against the behaviour before the node policy and fails there.
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from ldpfda.client.client_app import ERROR_BUDGET, app
from ldpfda.datasets.files import save_node_data
from ldpfda.schema.queries import ERROR_LEDGER, ERROR_POLICY

from .support import SMALL

VECTOR = {"data.dataset": "vector"}


@pytest.fixture(autouse=True)
def _task_identity():
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 7, 1, 1


@pytest.fixture
def host(tmp_path):
    """The node config of a host with one client's data and a budget of 5."""
    path = save_node_data(tmp_path / "me.npz", [[0.5, -0.5, 0.25, 0.0]], [1])

    def build(**extra):
        return {
            "client-id": 0,
            "data-path": str(path),
            "privacy-budget": 5.0,
            "state-dir": str(tmp_path / "state"),
            **extra,
        }

    return build


def _ask(run_config, node, kind, content=None, *, run_id=3):
    """One query to a fresh ClientApp process (Flower starts one per query)."""
    context = Context(
        run_id=run_id,
        node_id=99,
        node_config=dict(node),
        state=RecordDict(),
        run_config=dict(run_config),
    )
    return app(Message(content or RecordDict(), 99, f"query.{kind}"), context)


def _model(coef, intercept):
    return RecordDict(
        {
            "model": ArrayRecord(
                {
                    "coef": Array(np.asarray(coef, dtype=float)),
                    "intercept": Array(np.array([intercept], dtype=float)),
                }
            )
        }
    )


def _spent(reply):
    return reply.content.config_records["ledger"]["spent"]


# -- 1. the label-only switch ----------------------------------------------------------


def test_a_label_only_run_cannot_make_a_host_send_its_features(run_config, host):
    config = run_config(SMALL, VECTOR, {"privacy.mechanism": "label-uniform"})
    reply = _ask(config, host(), "features")
    assert reply.has_error() and reply.error.code == ERROR_POLICY
    # Only the node's operator can declare its features public.
    public = _ask(config, host(**{"features-public": True}), "features")
    assert not public.has_error()
    # Peer-to-peer needs its own consent.
    p2p = run_config(SMALL, VECTOR, {"privacy.mechanism": "label-p2p"})
    refused = _ask(p2p, host(**{"features-public": True}), "features")
    assert refused.has_error() and refused.error.code == ERROR_POLICY
    node = host(**{"features-public": True, "p2p": True})
    assert not _ask(p2p, node, "features").has_error()


# -- 2. the budget comes from the node; epsilon = inf ----------------------------------


def test_a_host_without_a_finite_budget_answers_nothing(run_config, host):
    config = run_config(SMALL, VECTOR)
    for budget in (None, "inf"):
        node = host()
        node.pop("privacy-budget")
        if budget is not None:
            node["privacy-budget"] = budget
        for kind in ("identify", "privatize"):
            reply = _ask(config, node, kind)
            assert reply.has_error() and reply.error.code == ERROR_POLICY, (
                budget,
                kind,
            )


def test_a_host_refuses_epsilon_inf_and_epsilons_that_make_rr_deterministic(
    run_config, host
):
    for epsilon in (float("inf"), 40.0):
        config = run_config(SMALL, VECTOR, {"privacy.epsilon": epsilon})
        reply = _ask(config, host(**{"privacy-budget": 1e6}), "privatize")
        assert reply.has_error() and reply.error.code == ERROR_POLICY, epsilon


def test_max_release_epsilon_is_the_nodes_cap(run_config, host):
    config = run_config(SMALL, VECTOR, {"privacy.epsilon": 2.0})
    reply = _ask(config, host(**{"max-release-epsilon": 1.0}), "privatize")
    assert reply.has_error() and reply.error.code == ERROR_POLICY


# -- 3. the ledger is per record, for life ---------------------------------------------


def test_new_runs_and_sessions_do_not_reset_the_lifetime_budget(run_config, host):
    # The server tries three runs of eps 2 (and new session names) on a record whose
    # lifetime budget is 5; a fresh context each time, as a restarted node has.
    spent = []
    for run_id, session in ((3, ""), (4, "s1"), (5, "s2")):
        config = run_config(SMALL, VECTOR, {"privacy.epsilon": 2.0 + run_id / 100})
        config["flower.session"] = session
        reply = _ask(config, host(), "privatize", run_id=run_id)
        spent.append(None if reply.has_error() else _spent(reply))
        if reply.has_error():
            assert reply.error.code == ERROR_BUDGET
    assert spent[:2] == pytest.approx([2.03, 2.03 + 2.04])
    assert spent[2] is None  # 2.03 + 2.04 + 2.05 > 5: refused


def test_a_new_version_of_the_data_file_does_not_reset_the_budget(
    run_config, host, tmp_path
):
    # The host rewrites its file (a value corrected, a day's curve added, another
    # format): a new record, the same person. What client 0 spent on the old version
    # still counts against its lifetime budget of 5.
    path = tmp_path / "me.npz"
    versions = ([[0.5, -0.5, 0.25, 0.0]], [[0.5, -0.5, 0.25, 0.1]])

    def ask(version, epsilon):
        save_node_data(path, versions[version], [1])
        config = run_config(SMALL, VECTOR, {"privacy.epsilon": epsilon})
        return _ask(config, host(), "privatize")

    first = ask(0, 2.01)
    second = ask(1, 2.02)
    assert not first.has_error() and not second.has_error()
    assert _spent(second) == pytest.approx(2.01 + 2.02)
    third = ask(1, 2.03)  # 6.06 > 5: refused, whichever version asks
    assert third.has_error() and third.error.code == ERROR_BUDGET
    assert ask(0, 2.04).error.code == ERROR_BUDGET
    # The old version's identical query still gets its stored release, for free, and
    # the ledger reports the client's total.
    again = ask(0, 2.01)
    np.testing.assert_array_equal(
        again.content.array_records["payload"]["releases"].numpy(),
        first.content.array_records["payload"]["releases"].numpy(),
    )
    assert _spent(again) == pytest.approx(2.01 + 2.02)
    # Each record's file holds its own release only: nothing is counted twice.
    files = sorted((tmp_path / "state").glob("client-0-*.json"))
    assert [len(json.loads(f.read_text())["events"]) for f in files] == [1, 1]
    # Other clients in the same state directory keep budgets of their own (client 1's
    # records are not client 10's, asked first).
    config = run_config(SMALL, VECTOR, {"privacy.epsilon": 4.5})
    for client in (10, 1):
        reply = _ask(config, host(**{"client-id": client}), "privatize")
        assert not reply.has_error() and _spent(reply) == pytest.approx(4.5)
    # An old version's ledger that cannot be read fails the new version closed too.
    old = next(
        f for f in files if json.loads(f.read_text())["events"][0]["epsilon"] < 2.015
    )
    old.write_text("{")
    assert ask(1, 2.02).error.code == ERROR_LEDGER


def test_the_operator_reads_what_each_client_spent_without_changing_it(
    run_config, host, tmp_path, capsys
):
    from ldpfda.cli import main

    path = tmp_path / "me.npz"
    for version, epsilon in ((0.0, 2.01), (0.1, 2.02)):
        save_node_data(path, [[0.5, -0.5, 0.25, version]], [1])
        config = run_config(SMALL, VECTOR, {"privacy.epsilon": epsilon})
        assert not _ask(config, host(), "privatize").has_error()
    state = tmp_path / "state"
    before = {f.name: f.read_bytes() for f in state.iterdir()}
    argv = ["node", "ledger", "--state-dir", str(state), "--privacy-budget", "5"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith(
        "client 0: spent 4.03 in 2 release(s), 2 version(s) of its data file, "
        "0.97 left of 5; last release 20"
    )
    assert sorted(line.split(": ", 1)[1].split(";")[0] for line in lines[2:]) == [
        "1 release(s), epsilon 2.01",
        "1 release(s), epsilon 2.02",
    ]
    assert {f.name: f.read_bytes() for f in state.iterdir()} == before
    # A ledger it cannot trust is an error naming the file (the node refuses too).
    (ledger,) = [
        f for f in state.glob("client-0-*.json") if b'"epsilon": 2.01' in f.read_bytes()
    ]
    ledger.write_text("{")
    assert main(argv) == 1
    assert ledger.name in capsys.readouterr().err
    assert main(["node", "ledger", "--state-dir", str(tmp_path / "none")]) == 1
    assert "no state directory" in capsys.readouterr().err
    (tmp_path / "fresh").mkdir()  # a node before its first release
    assert main(["node", "ledger", "--state-dir", str(tmp_path / "fresh")]) == 0
    assert "no client has released anything yet" in capsys.readouterr().out


def test_a_period_budget_caps_what_a_record_spends_per_day(
    run_config, host, monkeypatch
):
    # Lifetime 5, at most 2.5 per day: two releases of eps 1.2 fit in one day, a third
    # waits for the next day; ledger times are the node's clock, which the test sets.
    import ldpfda.client.release as release_module

    clock = {"now": 1_000_000.0}
    monkeypatch.setattr(release_module.time, "time", lambda: clock["now"])
    node = host(**{"period-budget": 2.5, "budget-period": "day"})
    spent, codes = [], []
    for hour in (0, 1, 2, 25, 26):
        clock["now"] = 1_000_000.0 + 3600.0 * hour
        # Distinct epsilons: each is a new release, not a repeat of a stored one.
        config = run_config(SMALL, VECTOR, {"privacy.epsilon": 1.2 + hour / 1000})
        reply = _ask(config, node, "privatize", run_id=10 + hour)
        codes.append(reply.error.code if reply.has_error() else 0)
        spent.append(None if reply.has_error() else _spent(reply))
    # The third (3.6 in a day) is refused by the period; the lifetime would allow it.
    assert codes == [0, 0, ERROR_BUDGET, 0, 0]
    assert spent[1] == pytest.approx(1.2 + 1.201)
    # A new day: 1.2 more, and 1.2 more again within the lifetime 5 (4.8 spent) ...
    assert spent[4] == pytest.approx(1.2 + 1.201 + 1.225 + 1.226)
    # ... while the lifetime budget still binds: 0.3 more would pass 5.
    refused = _ask(
        run_config(SMALL, VECTOR, {"privacy.epsilon": 0.3}), node, "privatize"
    )
    assert refused.has_error() and refused.error.code == ERROR_BUDGET


def test_a_malformed_period_is_refused_by_the_policy(run_config, host):
    config = run_config(SMALL, VECTOR)
    for period in ("fortnight", -1.0, 0):
        node = host(**{"period-budget": 1.0, "budget-period": period})
        reply = _ask(config, node, "privatize")
        assert reply.has_error() and reply.error.code == ERROR_POLICY, period


def test_an_identical_query_returns_the_identical_release_for_free(run_config, host):
    config = run_config(SMALL, VECTOR)
    first = _ask(config, host(), "privatize", run_id=3)
    # Another run, a restarted node (fresh context): the same release, nothing spent.
    again = _ask(config, host(), "privatize", run_id=8)
    for reply in (first, again):
        assert not reply.has_error()
    np.testing.assert_array_equal(
        again.content.array_records["payload"]["releases"].numpy(),
        first.content.array_records["payload"]["releases"].numpy(),
    )
    assert _spent(first) == _spent(again) == 5.0


def test_a_corrupted_or_vanished_ledger_fails_closed(run_config, host, tmp_path):
    config = run_config(SMALL, VECTOR, {"privacy.epsilon": 1.0})
    assert not _ask(config, host(), "privatize").has_error()
    (ledger,) = (tmp_path / "state").glob("client-0-*.json")
    body = json.loads(ledger.read_text())
    ledger.write_text(json.dumps(body)[:-7])  # a torn write
    for kind in ("identify", "privatize"):
        reply = _ask(config, host(), kind)
        assert reply.has_error() and reply.error.code == ERROR_LEDGER
    ledger.unlink()  # gone, though the state directory's index lists the record
    reply = _ask(config, host(), "privatize")
    assert reply.has_error() and reply.error.code == ERROR_LEDGER


def test_concurrent_queries_cannot_both_spend(run_config, host):
    # Budget 5, releases of eps 3 under different epsilons (not memoized): of the
    # queries in flight at once, exactly one is answered.
    replies = []

    def ask(i):
        config = run_config(SMALL, VECTOR, {"privacy.epsilon": 3.0 + i / 100})
        replies.append(_ask(config, host(), "privatize"))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    answered = [r for r in replies if not r.has_error()]
    assert len(answered) == 1
    assert all(r.error.code == ERROR_BUDGET for r in replies if r.has_error())


# -- 4. repeatable noise: the XOR attack -----------------------------------------------


def test_the_threshold_scan_attack_gets_no_more_than_the_budget(run_config, host):
    # The attack of the issue: one constant model, then sign(x1 - t) over a grid of t,
    # each in a new run with the operator's noise-seed set. Before, every run's ledger
    # was fresh and the noise repeated, so XOR-ing the bits cancelled the randomized
    # response. Now each distinct model is a new release on one lifetime budget, and a
    # repeated model gets the repeated bit.
    config = run_config(SMALL, VECTOR, {"privacy.epsilon": 1.0})
    node = host(**{"noise-seed": 11})
    bits = []
    for run_id, t in enumerate([None, *np.linspace(-1, 1, 40)]):
        coef = np.zeros(4) if t is None else np.array([1.0, 0, 0, 0])
        intercept = 1.0 if t is None else -float(t)
        reply = _ask(config, node, "evaluate", _model(coef, intercept), run_id=run_id)
        bits.append(
            None
            if reply.has_error()
            else int(reply.content.array_records["feedback"]["bit"].numpy()[0])
        )
    answered = [b for b in bits if b is not None]
    assert len(answered) == 5  # budget 5 at eps 1: five releases, then refusals
    repeat = _ask(config, node, "evaluate", _model(np.zeros(4), 1.0), run_id=99)
    assert int(repeat.content.array_records["feedback"]["bit"].numpy()[0]) == bits[0]


# -- 8. priors the sampler cannot realise ----------------------------------------------


def _prior(q):
    return RecordDict({"prior": ArrayRecord({"q": Array(np.asarray(q, dtype=float))})})


def test_a_prior_with_a_category_never_drawn_is_refused(run_config, host):
    config = run_config(SMALL, VECTOR, {"privacy.mechanism": "label-cluster"})
    node = host(**{"features-public": True})
    reply = _ask(config, node, "label", _prior([1.0 - 1e-15, 1e-15]))
    assert reply.has_error() and "2^-32" in reply.error.reason
    # A prior off 1 by rounding is renormalised and answered.
    fine = _ask(config, node, "label", _prior([0.3 + 1e-9, 0.7]))
    assert not fine.has_error()
