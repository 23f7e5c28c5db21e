"""Budget split of a training client and the per-client privacy ledger."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from ldpfda import BudgetExceededError
from ldpfda.privacy import (
    BudgetSplit,
    LaplaceMechanism,
    PrivacyLedger,
    ReleaseEvent,
    split_budget,
)

# --- split_budget ---------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 5.0, 37.5])
@pytest.mark.parametrize("p", [1, 4, 10, 25])
def test_reference_split_spends_epsilon_over_p_plus_one_on_each_release(epsilon, p):
    split = split_budget(epsilon=epsilon, n_coefficients=p)
    assert isinstance(split, BudgetSplit)
    assert split.total == epsilon and split.n_coefficients == p
    assert split.per_coordinate == pytest.approx(epsilon / (p + 1), rel=1e-14)
    assert split.label == pytest.approx(epsilon / (p + 1), rel=1e-14)
    assert split.coefficients == pytest.approx(epsilon * p / (p + 1), rel=1e-14)
    assert split.coefficients + split.label == pytest.approx(epsilon, rel=1e-14)
    assert split.laplace_scale == pytest.approx(2 * (p + 1) / epsilon, rel=1e-14)
    # The Laplace mechanism on the whole vector gets the same scale: exactly with the
    # continuous sampler; the discrete one first takes its slack p 2^-20 out of epsilon.
    exact = LaplaceMechanism(
        epsilon=split.coefficients, dimension=p, sampler="continuous"
    )
    assert exact.scale == pytest.approx(split.laplace_scale, rel=1e-14)
    discrete = LaplaceMechanism(epsilon=split.coefficients, dimension=p)
    slack = p * LaplaceMechanism.SLACK_PER_COORDINATE
    assert discrete.scale == pytest.approx(
        split.laplace_scale * split.coefficients / (split.coefficients - slack),
        rel=1e-14,
    )


@pytest.mark.parametrize("share", [0.05, 0.25, 0.5, 0.9])
def test_label_share_is_configurable(share):
    split = split_budget(epsilon=4.0, n_coefficients=8, label_share=share)
    assert split.label == pytest.approx(4.0 * share)
    assert split.per_coordinate == pytest.approx(4.0 * (1 - share) / 8)
    assert split.coefficients + split.label == pytest.approx(4.0, rel=1e-14)
    assert split.laplace_scale == pytest.approx(2.0 / split.per_coordinate)


def test_infinite_budget_means_no_noise():
    split = split_budget(epsilon=math.inf, n_coefficients=5)
    assert math.isinf(split.per_coordinate) and math.isinf(split.label)
    assert split.laplace_scale == 0.0


@pytest.mark.parametrize("share", [0.0, 1.0, -0.2, 1.5, math.nan])
def test_bad_label_share_is_named(share):
    with pytest.raises(ValueError, match="label_share"):
        split_budget(epsilon=1.0, n_coefficients=4, label_share=share)


def test_bad_split_parameters_are_named():
    for epsilon in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="epsilon"):
            split_budget(epsilon=epsilon, n_coefficients=4)
    with pytest.raises(TypeError, match="epsilon"):
        split_budget(epsilon="1", n_coefficients=4)
    with pytest.raises(ValueError, match="n_coefficients"):
        split_budget(epsilon=1.0, n_coefficients=0)
    with pytest.raises(TypeError, match="n_coefficients"):
        split_budget(epsilon=1.0, n_coefficients=4.0)
    with pytest.raises(TypeError, match="label_share"):
        split_budget(epsilon=1.0, n_coefficients=4, label_share="0.5")
    with pytest.raises(TypeError):
        split_budget(1.0, 4)  # keyword-only


def test_budget_split_is_immutable():
    split = split_budget(epsilon=1.0, n_coefficients=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        split.label = 0.9  # type: ignore[misc]


# --- PrivacyLedger --------------------------------------------------------------------


def _event(epsilon: float, name: str = "test") -> ReleaseEvent:
    return ReleaseEvent.of(name, epsilon)


def test_ledger_records_charges_per_client():
    ledger = PrivacyLedger(budget=1.0, client_ids=[10, 3, 7])
    ledger.charge(_event(0.25, "a"), [3, 10])
    ledger.charge(_event(0.5, "b"), [3])
    assert ledger.spent(3) == pytest.approx(0.75)
    assert ledger.spent(10) == pytest.approx(0.25)
    assert ledger.spent(7) == 0.0
    np.testing.assert_allclose(
        ledger.spent_all(), [0.25, 0.75, 0.0]
    )  # client_ids order
    assert [e.event.mechanism for e in ledger.entries] == ["a", "b"]
    np.testing.assert_array_equal(ledger.entries[0].client_ids, [3, 10])


def test_ledger_refuses_overspending_and_charges_nobody():
    ledger = PrivacyLedger(budget=1.0, client_ids=np.arange(5))
    ledger.charge(_event(0.6, "first"), [0, 1])
    before = ledger.spent_all()
    with pytest.raises(BudgetExceededError, match="client 1"):
        ledger.charge(_event(0.6, "second"), [2, 1, 3])  # 1 would reach 1.2
    np.testing.assert_array_equal(ledger.spent_all(), before)  # 2 and 3 not charged
    assert len(ledger.entries) == 1 and ledger.entries[0].event.mechanism == "first"
    # The others can still spend.
    ledger.charge(_event(0.6, "third"), [2, 3])
    assert ledger.spent(2) == pytest.approx(0.6)
    assert ledger.spent(1) == pytest.approx(0.6)


def test_ledger_can_spend_reports_per_client():
    ledger = PrivacyLedger(budget=1.0, client_ids=[0, 1, 2])
    ledger.charge(_event(0.9), [1])
    np.testing.assert_array_equal(ledger.can_spend(0.2, [0, 1, 2]), [True, False, True])


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 2.7, 10.0])
@pytest.mark.parametrize("p", [1, 6, 9, 19, 49])
def test_float_slack_allows_p_plus_one_charges_of_the_split_budget(epsilon, p):
    split = split_budget(epsilon=epsilon, n_coefficients=p)
    ledger = PrivacyLedger(budget=epsilon, client_ids=[0])
    for _ in range(p):
        ledger.charge(_event(split.per_coordinate, "coordinate"), [0])
    ledger.charge(_event(split.label, "label"), [0])
    assert ledger.spent(0) == pytest.approx(epsilon, rel=1e-12)
    # ...but the slack is relative rounding, not budget: anything real is refused.
    with pytest.raises(BudgetExceededError):
        ledger.charge(_event(1e-6 * epsilon), [0])


def test_infinite_budget_never_refuses():
    ledger = PrivacyLedger(budget=math.inf, client_ids=[0, 1])
    for _ in range(3):
        ledger.charge(_event(1e6), [0, 1])
    ledger.charge(_event(math.inf), [0])
    assert ledger.spent(1) == pytest.approx(3e6)


def test_charge_refuses_an_invalid_event_epsilon():
    # A negative epsilon would give budget back: the client could then release again.
    ledger = PrivacyLedger(budget=1.0, client_ids=[0])
    ledger.charge(_event(1.0), [0])
    with pytest.raises(ValueError, match="epsilon"):
        ledger.charge(_event(-1.0), [0])
    assert ledger.spent(0) == pytest.approx(1.0)
    assert len(ledger.entries) == 1


def test_ledger_validates_its_inputs():
    for budget in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="budget"):
            PrivacyLedger(budget=budget, client_ids=[0])
    with pytest.raises(TypeError, match="budget"):
        PrivacyLedger(budget="1", client_ids=[0])
    with pytest.raises(ValueError, match="unique"):
        PrivacyLedger(budget=1.0, client_ids=[0, 1, 1])
    ledger = PrivacyLedger(budget=1.0, client_ids=[0, 1])
    with pytest.raises(KeyError, match="client 5"):
        ledger.charge(_event(0.1), [0, 5])
    assert ledger.spent(0) == 0.0
    with pytest.raises(ValueError, match="once"):
        ledger.charge(_event(0.1), [1, 1])
    with pytest.raises(KeyError):
        ledger.spent(2)
    with pytest.raises(TypeError):
        PrivacyLedger(1.0, [0])  # keyword-only


def test_summary_totals():
    ledger = PrivacyLedger(budget=2.0, client_ids=np.arange(4))
    ledger.charge(_event(0.5, "laplace"), [0, 1])
    ledger.charge(_event(0.5, "laplace"), [2])  # a second chunk of the same release
    ledger.charge(_event(1.0, "feedback_bit"), [3])
    summary = ledger.summary()
    assert summary["budget_per_client"] == 2.0
    assert summary["n_clients"] == 4
    assert summary["max_spent"] == pytest.approx(1.0)
    assert summary["min_spent"] == pytest.approx(0.5)
    assert summary["mean_spent"] == pytest.approx((0.5 * 3 + 1.0) / 4)
    assert summary["releases"]["laplace"]["clients"] == 3
    assert summary["releases"]["feedback_bit"]["clients"] == 1
    empty = PrivacyLedger(budget=1.0, client_ids=[0]).summary()
    assert empty["max_spent"] == 0.0 and empty["releases"] == {}


def test_a_run_of_consecutive_ids_is_charged_without_copies():
    ledger = PrivacyLedger(budget=2.0, client_ids=np.arange(10, 20))
    ledger.charge(LaplaceMechanism(epsilon=1.0, dimension=1).event(), np.arange(12, 16))
    ledger.charge(
        LaplaceMechanism(epsilon=0.5, dimension=1).event(), np.array([15, 11])
    )
    kept = ledger.entries[0].client_ids
    np.testing.assert_array_equal(kept, np.arange(12, 16))
    assert np.shares_memory(kept, ledger.client_ids) and not kept.flags.writeable
    np.testing.assert_array_equal(
        ledger.spent_all(), [0, 0.5, 1, 1, 1, 1.5, 0, 0, 0, 0]
    )
    with pytest.raises(KeyError, match="20"):
        ledger.can_spend(1.0, np.arange(18, 21))
    with pytest.raises(ValueError, match="once per call"):
        ledger.charge(
            LaplaceMechanism(epsilon=0.1, dimension=1).event(), np.array([13, 13])
        )


def _dense_model(n: int, steps: list[tuple[np.ndarray, float]]) -> np.ndarray:
    spent = np.zeros(n)
    for ids, epsilon in steps:
        spent[ids] += epsilon
    return spent


@pytest.mark.parametrize("seed", range(20))
def test_runs_of_equal_spending_hold_exactly_the_totals_one_per_client_would(
    seed, monkeypatch
):
    """Charges as the engine makes them (runs of consecutive ids) mixed with single
    clients, scattered sets and refused charges: every total, every refusal and the
    summary equal a plain array's, float for float (some seeds with a cap of 8 runs,
    so that the ledger turns into one total per client midway)."""
    if seed % 3 == 0:
        monkeypatch.setattr("ldpfda.privacy.ledger._MAX_RUNS", 8)
    rng = np.random.default_rng(seed)
    n, first = 200, 1000
    ledger = PrivacyLedger(budget=3.0, client_ids=np.arange(first, first + n))
    steps: list[tuple[np.ndarray, float]] = []
    for _ in range(60):
        epsilon = float(rng.choice([0.1, 0.25, 1 / 3, 0.7]))
        kind = rng.integers(4 if seed % 2 else 2)
        if kind == 0:  # a run, as a chunk of the engine
            start = int(rng.integers(0, n - 2))
            rows = np.arange(start, int(rng.integers(start + 2, n + 1)))
        elif kind == 1:  # the whole federation
            rows = np.arange(n)
        elif kind == 2:  # one client
            rows = np.array([int(rng.integers(n))])
        else:  # a scattered set
            rows = np.sort(rng.choice(n, size=int(rng.integers(2, 30)), replace=False))
        expected = _dense_model(n, steps)[rows] + epsilon <= 3.0 * (1 + 1e-9)
        np.testing.assert_array_equal(ledger.can_spend(epsilon, first + rows), expected)
        if expected.all():
            ledger.charge(_event(epsilon), first + rows)
            steps.append((rows, epsilon))
        else:
            with pytest.raises(BudgetExceededError):
                ledger.charge(_event(epsilon), first + rows)
        spent = _dense_model(n, steps)
        np.testing.assert_array_equal(ledger.spent_all(), spent)
        probe = int(rng.integers(n))
        assert ledger.spent(first + probe) == spent[probe]
    # Scattered sets, or more than 8 runs, made it one total per client.
    assert (ledger._spent is not None) == (seed % 2 == 1 or seed % 3 == 0)
    dense = PrivacyLedger(budget=3.0, client_ids=np.arange(first, first + n)[::-1])
    for rows, epsilon in steps:
        dense.charge(_event(epsilon), first + rows)
    assert {k: v for k, v in ledger.summary().items() if k != "releases"} == {
        k: v for k, v in dense.summary().items() if k != "releases"
    }


def test_a_federation_charged_run_by_run_holds_a_few_numbers_not_one_per_client():
    n = 10_000_000
    ledger = PrivacyLedger(budget=5.0, client_ids=np.arange(n))
    for start in range(0, n, 100_000):
        ledger.charge(_event(5.0, "joint"), np.arange(start, start + 100_000))
    assert ledger._spent is None and ledger._levels.tolist() == [5.0]
    summary = ledger.summary()
    assert summary["min_spent"] == summary["max_spent"] == summary["mean_spent"] == 5.0
    assert not ledger.can_spend(1e-6, np.arange(n - 5, n)).any()
    # One client charged alone: a run of its own, still no array per client.
    small = PrivacyLedger(budget=5.0, client_ids=np.arange(n))
    small.charge(_event(1.0), [17])
    assert small._spent is None and small.spent(17) == 1.0 and small.spent(18) == 0.0
