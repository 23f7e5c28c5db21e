"""Faulty and malicious clients: bad replies are rejected with reasons, runs
complete."""

from __future__ import annotations

import numpy as np
import pytest

from ldpfda.config import Settings
from ldpfda.server.faults import run_with_faults
from ldpfda.server.validation import screen_bits, screen_payloads

SETTINGS = Settings.reference(
    epsilon=5.0,
    n_train=200,
    n_eval=400,
    n_test=2000,
    num_weak_models=10,
    subsample_size=30,
)


def test_screening_keeps_valid_replies_and_names_every_rejection():
    replies = [
        (3, [0.5, -0.5], 1),
        (1, [0.1, 0.2], 0),
        (1, [0.9, 0.9], 1),  # duplicate: the first reply stands
        (2, [np.nan, 0.0], 1),
        (4, [0.0, 0.0, 0.0], 1),
        (5, [50.0, 0.0], 1),
        (6, [0.0, 0.0], 2),
        (7, None, "crashed"),
        (8, "text", 1),
    ]
    screened = screen_payloads(replies, n_features=2, feature_range=(-10.0, 10.0))
    np.testing.assert_array_equal(screened.client_ids, [1, 3])
    np.testing.assert_array_equal(screened.values, [[0.1, 0.2], [0.5, -0.5]])
    np.testing.assert_array_equal(screened.labels, [0, 1])
    reasons = {r.client_id: r.reason.split(":")[0] for r in screened.rejected}
    assert reasons == {
        1: "duplicate",
        2: "nan",
        4: "shape",
        5: "range",
        6: "label",
        7: "missing",
        8: "shape",
    }


def test_bit_screening():
    screened = screen_bits(
        [(1, 1), (2, 0), (2, 1), (3, 2), (4, 0.5), (5, None), (6, np.nan), (7, "x")]
    )
    np.testing.assert_array_equal(screened.client_ids, [1, 2])
    np.testing.assert_array_equal(screened.values, [1.0, 0.0])
    assert screened.reasons() == {"duplicate": 1, "bit": 4, "missing": 1}


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
