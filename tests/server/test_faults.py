"""Faulty and malicious clients: bad replies are rejected with reasons, runs
complete."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ldpfda.config import Settings
from ldpfda.engine.faults import run_with_faults
from ldpfda.schema import catalog
from ldpfda.schema.queries import ReplyError
from ldpfda.server.session import check_replies, wire_rows

SETTINGS = Settings.reference(
    epsilon=5.0,
    n_train=200,
    n_eval=400,
    n_test=2000,
    num_weak_models=10,
    subsample_size=30,
)


def _screen(query, replies):
    """Every reply through the one check both transports apply: valid ids, reasons."""
    ids, rows, rejected = [], [], {}
    for client, arrays in replies:
        try:
            rows.append(wire_rows(query, arrays))
            ids.append(client)
        except ReplyError as exc:
            rejected[client] = str(exc)
    values = {s.key: np.stack([r[s.key] for r in rows]) for s in query.reply}
    return check_replies(query, np.array(ids), values, rejected)


def _release(features, label):
    return {
        "features": np.atleast_2d(np.asarray(features, dtype=object)).astype(float)
        if not isinstance(features, str)
        else np.array([features]),
        "labels": np.array([label]),
    }


def test_screening_keeps_valid_replies_and_names_every_rejection():
    query = catalog.privatize_query(Settings.reference(epsilon=5.0), 2)
    query = dataclasses.replace(
        query,
        reply=(
            dataclasses.replace(query.reply[0], low=-10.0, high=10.0),
            query.reply[1],
        ),
    )
    replies = [
        (3, _release([0.5, -0.5], 1)),
        (1, _release([0.1, 0.2], 0)),
        (2, _release([np.nan, 0.0], 1)),
        (4, _release([0.0, 0.0, 0.0], 1)),
        (5, _release([50.0, 0.0], 1)),
        (6, _release([0.0, 0.0], 2)),
        (8, _release("text", 1)),
    ]
    screened = _screen(query, replies)
    np.testing.assert_array_equal(screened.ids, [3, 1])
    np.testing.assert_array_equal(
        screened.values["features"], [[0.5, -0.5], [0.1, 0.2]]
    )
    np.testing.assert_array_equal(screened.values["labels"], [1, 0])
    reasons = {c: r.split(":")[0] for c, r in screened.rejected.items()}
    assert reasons == {2: "nan", 4: "shape", 5: "range", 6: "label", 8: "content"}


def test_bit_screening():
    query = catalog.evaluate_query(Settings.reference(epsilon=5.0), 2)
    bits = [(1, 1), (2, 0), (3, 2), (4, 0.5), (6, np.nan), (7, -1)]
    screened = _screen(query, [(c, {"bit": np.array([b])}) for c, b in bits])
    np.testing.assert_array_equal(screened.ids, [1, 2])
    np.testing.assert_array_equal(screened.values["bit"], [1, 0])
    assert sorted({r.split(":")[0] for r in screened.rejected.values()}) == ["bit"]
    assert sorted(screened.rejected) == [3, 4, 6, 7]


def test_garbage_senders_are_all_rejected_and_the_run_completes():
    result = run_with_faults(
        SETTINGS, 0, malicious=0.1, attack="garbage", crash=0.05, hang=0.05
    )
    counts = result.rejection_counts()
    # 20 malicious training clients, one rejection each: a garbage reply, or the second
    # reply of a duplicate sender (whose first, honest reply is kept).
    assert counts["privatize/missing"] == 20
    garbage = {
        k: v
        for k, v in counts.items()
        if k.startswith("privatize/") and k != "privatize/missing"
    }
    assert sum(garbage.values()) == 20 and len(garbage) == 5
    kept_duplicates = garbage["privatize/duplicate"]
    assert result.used["payloads"] == 200 - 20 - (20 - kept_duplicates)
    assert counts["evaluate/bit"] == 40 and counts["evaluate/missing"] == 40
    assert result.used["bits"] == 400 - 80
    assert 0.0 <= result.test_errors["mrma"] <= 1.0


def test_valid_but_malicious_replies_are_used_and_the_same_seed_reproduces():
    a = run_with_faults(SETTINGS, 0, malicious=0.1, attack="extreme")
    b = run_with_faults(SETTINGS, 0, malicious=0.1, attack="extreme")
    assert a.test_errors == b.test_errors
    assert a.used == {"payloads": 200, "bits": 400} and not a.rejected


def test_bad_fault_settings_are_refused():
    with pytest.raises(ValueError, match="malicious"):
        run_with_faults(SETTINGS, malicious=1.5)
    with pytest.raises(ValueError, match="attack"):
        run_with_faults(SETTINGS, attack="loud")
    with pytest.raises(ValueError, match="reference"):
        run_with_faults(Settings(n_test=100), malicious=0.1)


def test_a_round_in_which_nobody_answered_checks_to_no_replies():
    # Every node of a round gone (a rejoin round of killed nodes): zero rows of every
    # array, which the check passes through instead of failing on their shape.
    query = catalog.privatize_query(Settings.reference(epsilon=5.0), 2)
    one = wire_rows(query, _release([0.5, -0.5], 1))
    values = {key: np.zeros((0, *row.shape)) for key, row in one.items()}
    got = check_replies(query, np.zeros(0, dtype=np.int64), values, {7: "timeout"})
    assert got.ids.size == 0 and got.rejected == {7: "timeout"}
    assert all(v.shape[0] == 0 for v in got.values.values())
