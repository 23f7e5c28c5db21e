"""The budget accountant: a total over fits, spent only by fits it can afford."""

from __future__ import annotations

import copy
import math
import pickle

import pytest

from ldpfda.engine.accountant import BudgetAccountant, Spend
from ldpfda.exceptions import BudgetExceededError


def test_spend_adds_up_and_remaining_is_what_is_left():
    accountant = BudgetAccountant(10.0)
    assert accountant.spent == 0.0 and accountant.remaining() == 10.0
    first = accountant.spend(4.0, what="fit", n_clients=30)
    assert first == Spend(4.0, "fit", 30)
    accountant.spend(2.5)
    assert accountant.spent == 6.5
    assert accountant.remaining() == 3.5
    assert accountant.remaining(2) == 1.75
    assert [s.epsilon for s in accountant.spends] == [4.0, 2.5]


def test_a_spend_that_would_overspend_is_refused_and_charges_nothing():
    accountant = BudgetAccountant(5.0)
    accountant.spend(5.0)
    with pytest.raises(BudgetExceededError, match=r"total 5.*0 remaining"):
        accountant.spend(1e-3)
    with pytest.raises(BudgetExceededError):
        accountant.check(1.0)
    assert accountant.spent == 5.0 and len(accountant.spends) == 1


def test_equal_shares_of_a_total_fit_despite_rounding():
    # 0.1 + 0.1 + 0.1 > 0.3 in floating point: the third share must still fit.
    accountant = BudgetAccountant(0.3)
    for _ in range(3):
        accountant.spend(0.1)
    with pytest.raises(BudgetExceededError):
        accountant.spend(0.1)


def test_an_infinite_total_records_every_fit_and_a_finite_one_refuses_inf():
    unlimited = BudgetAccountant()
    unlimited.spend(math.inf)
    unlimited.spend(1.0)
    assert len(unlimited.spends) == 2 and unlimited.remaining() == math.inf
    with pytest.raises(BudgetExceededError):
        BudgetAccountant(100.0).spend(math.inf)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_bad_epsilons_are_refused_by_name(bad):
    with pytest.raises(ValueError, match="epsilon"):
        BudgetAccountant(bad)
    with pytest.raises(ValueError, match="epsilon"):
        BudgetAccountant(1.0).spend(bad)
    with pytest.raises(TypeError, match="epsilon"):
        BudgetAccountant("1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k"):
        BudgetAccountant(1.0).remaining(0)


def test_an_accountant_resumes_from_earlier_spends():
    earlier = [Spend(2.0, "fit", 10), Spend(1.0, "fit", 10)]
    accountant = BudgetAccountant(4.0, spent=earlier)
    assert accountant.spent == 3.0
    with pytest.raises(BudgetExceededError):
        accountant.spend(1.5)
    with pytest.raises(TypeError, match="Spend"):
        BudgetAccountant(4.0, spent=[2.0])  # type: ignore[list-item]


def test_a_default_is_installed_only_explicitly_and_nests():
    assert BudgetAccountant.default() is None
    outer, inner = BudgetAccountant(3.0), BudgetAccountant(1.0)
    with outer:
        assert BudgetAccountant.default() is outer
        with inner:
            assert BudgetAccountant.default() is inner
            assert BudgetAccountant.load_default(None) is inner
            assert BudgetAccountant.load_default(outer) is outer
        assert BudgetAccountant.default() is outer
    assert BudgetAccountant.default() is None
    outer.set_default()
    assert BudgetAccountant.pop_default() is outer
    assert BudgetAccountant.pop_default() is None
    with pytest.raises(TypeError, match="accountant"):
        BudgetAccountant.load_default(3.0)  # type: ignore[arg-type]


def test_copies_are_the_same_budget_and_a_pickled_copy_refuses_to_spend():
    accountant = BudgetAccountant(2.0)
    assert copy.copy(accountant) is accountant
    assert copy.deepcopy({"a": accountant})["a"] is accountant
    accountant.spend(1.0)
    thawed = pickle.loads(pickle.dumps(accountant))
    assert thawed.spent == 1.0 and thawed is not accountant
    with pytest.raises(RuntimeError, match="n_jobs=1"):
        thawed.spend(0.5)
    assert accountant.spent == 1.0
    assert "spent=1" in repr(accountant)
