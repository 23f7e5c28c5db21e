"""Model selection re-spends the budget: counted per client, bounded by an accountant.

Every fit runs the whole protocol, so a client releases once per fit it takes part in.
GridSearchCV with 6 candidates and 3 folds fits 18 times on two thirds of the clients
and refits once on all of them: every client releases 6 x 2 + 1 = 13 times.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import skfda
from sklearn.model_selection import GridSearchCV

import ldpfda.engine.inprocess as inprocess
from ldpfda.datasets import FunctionalDesign, VectorDesign
from ldpfda.engine.accountant import BudgetAccountant
from ldpfda.engine.classifier import LDPClassifier
from ldpfda.engine.estimator import MRMAClassifier
from ldpfda.exceptions import BudgetExceededError
from ldpfda.schema import catalog

EPSILON = 2.0
N_CLIENTS = 300
#: First client id: ids need not be row numbers, they travel with X through the folds.
FIRST_ID = 1000


@pytest.fixture
def releases(monkeypatch) -> Counter:
    """How often each client id has released (its features or its feedback bit), over
    every fit while the test runs."""
    counts: Counter = Counter()
    answer = inprocess.answer

    def counting(name, batch, request, settings):
        if name in (catalog.PRIVATIZE, catalog.EVALUATE):  # one or the other per fit
            counts.update(batch.ids.tolist())
        return answer(name, batch, request, settings)

    monkeypatch.setattr(inprocess, "answer", counting)
    return counts


@pytest.fixture(scope="module")
def data():
    design = FunctionalDesign()
    curves, labels = design.sample(N_CLIENTS, 0)
    public, _ = design.sample(150, 1)  # not N_CLIENTS long: never split into folds
    grid = design.grid_points
    return skfda.FDataGrid(curves, grid), labels, skfda.FDataGrid(public, grid)


def _search(cls, accountant, **search):
    """6 candidates x 3 folds: the default protocol on curves over their basis size
    and mechanism, MRMA on vectors (faster weak models) over M and the cut-off."""
    if cls is LDPClassifier:
        estimator = LDPClassifier(EPSILON, accountant=accountant, random_state=0)
        grid = {"n_basis": [6, 8, 10], "mechanism": ["hybrid", "duchi"]}
    else:
        estimator = MRMAClassifier(
            EPSILON,
            subsample_size=20,
            input_type="vectors",
            accountant=accountant,
            random_state=0,
        )
        grid = {"n_estimators": [3, 5], "cutoff": [0.1, 0.2, 0.3]}
    return GridSearchCV(estimator, grid, cv=3, **search)


def _fit(search, data):
    curves, labels, public = data
    ids = FIRST_ID + np.arange(N_CLIENTS)
    if isinstance(search.estimator, MRMAClassifier):
        x, y = VectorDesign().sample(N_CLIENTS, 0)
        return search.fit(x, y, client_ids=ids)
    return search.fit(curves, labels, public_curves=public, client_ids=ids)


@pytest.mark.parametrize("cls", [LDPClassifier, MRMAClassifier])
def test_grid_search_makes_every_client_release_13_times(cls, data, releases):
    accountant = BudgetAccountant()  # unlimited: records every fit
    search = _fit(_search(cls, accountant), data)
    assert len(search.cv_results_["params"]) == 6
    # Every client released 13 times, each time at EPSILON: 13 * EPSILON in all.
    assert set(releases) == set(FIRST_ID + np.arange(N_CLIENTS))
    assert set(releases.values()) == {13}
    # Each of the 19 fits reported EPSILON, on its fold's clients or on all of them.
    assert len(accountant.spends) == 19
    assert {s.epsilon for s in accountant.spends} == {EPSILON}
    assert Counter(s.n_clients for s in accountant.spends) == {200: 18, 300: 1}
    assert accountant.spent == 19 * EPSILON
    assert search.best_estimator_.result_.privacy["max_spent"] == EPSILON


@pytest.mark.parametrize("cls", [LDPClassifier, MRMAClassifier])
def test_an_accountant_of_three_fits_refuses_the_fourth_before_any_release(
    cls, data, releases
):
    accountant = BudgetAccountant(3 * EPSILON)
    search = _search(cls, accountant, error_score="raise")
    with pytest.raises(BudgetExceededError, match="would exceed the accountant"):
        _fit(search, data)
    assert len(accountant.spends) == 3 and accountant.remaining() == 0.0
    # Three fits on two folds each: every client released twice, nobody a third time.
    assert set(releases.values()) == {2}
    assert sum(releases.values()) == 3 * 200


def test_the_default_accountant_bounds_repeated_fits(data, releases):
    curves, labels, public = data
    model = LDPClassifier(EPSILON, random_state=0)
    with BudgetAccountant(2 * EPSILON) as accountant:
        model.fit(curves, labels, public_curves=public)
        model.fit(curves, labels, public_curves=public)
        with pytest.raises(BudgetExceededError):
            model.fit(curves, labels, public_curves=public)
    assert set(releases.values()) == {2}
    assert [s.what for s in accountant.spends] == ["LDPClassifier.fit"] * 2
    # Outside the block there is no default: fits are not accounted.
    model.fit(curves, labels, public_curves=public)
    assert len(accountant.spends) == 2
    with pytest.raises(TypeError, match="accountant must be a BudgetAccountant"):
        LDPClassifier(accountant=3.0).fit(curves, labels, public_curves=public)
