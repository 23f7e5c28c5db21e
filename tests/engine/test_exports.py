"""The estimators are exported from the top-level package, loaded on first access."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_the_top_level_names_are_the_engine_objects():
    import ldpfda
    import ldpfda.engine as engine
    from ldpfda.engine.accountant import BudgetAccountant
    from ldpfda.engine.classifier import LDPClassifier
    from ldpfda.engine.estimator import MRMAClassifier

    assert ldpfda.LDPClassifier is engine.LDPClassifier is LDPClassifier
    assert ldpfda.MRMAClassifier is engine.MRMAClassifier is MRMAClassifier
    assert ldpfda.BudgetAccountant is engine.BudgetAccountant is BudgetAccountant
    for module in (ldpfda, engine):
        assert set(module.__all__) <= set(dir(module))
        with pytest.raises(AttributeError, match="no attribute 'nothing'"):
            module.nothing  # noqa: B018


def test_importing_the_package_does_not_import_scikit_learn():
    # A client host imports ldpfda without scikit-learn; only the estimators need it.
    code = (
        "import sys, ldpfda; assert 'sklearn' not in sys.modules; "
        "ldpfda.LDPClassifier; assert 'sklearn' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
