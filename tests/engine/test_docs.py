"""The examples of docs/estimators.md run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ldpfda.exceptions import BudgetExceededError

DOC = Path(__file__).resolve().parents[2] / "docs" / "estimators.md"


def test_the_examples_run_and_the_search_stops_at_the_fourth_fit():
    first, second = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    namespace: dict = {}
    exec(first, namespace)
    assert namespace["model"].result_.privacy["max_spent"] == 5.0
    with pytest.raises(BudgetExceededError):
        exec(second, namespace)
    accountant = namespace["accountant"]
    assert accountant.spent == 6.0 and len(accountant.spends) == 3
    assert accountant.remaining() == 0.0
