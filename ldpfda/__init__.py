"""ldpfda: classification of functional data under local differential privacy.

The product's top-level folders install under this one import name (``ldpfda.fda``,
``ldpfda.privacy``, ``ldpfda.client``, ``ldpfda.server``, ``ldpfda.engine``, ...;
README.md describes each).

The scikit-learn estimators load on first access, so that a client host, which has
neither scikit-learn nor the server, can import the package:
:class:`LDPClassifier` (the default protocol), :class:`MRMAClassifier` (the reference
MRMA) and their :class:`BudgetAccountant`.
"""

import importlib
from typing import Any

from ldpfda.exceptions import BudgetExceededError, PrivacyLeakWarning

# The one version of the package. pyproject.toml and flower-app/pyproject.toml repeat it
# as a literal (Flower reads [project].version statically); a test checks all three.
__version__ = "0.1.0"

#: Where each lazily loaded name is defined.
_MODULE_OF = {
    "BudgetAccountant": "ldpfda.engine.accountant",
    "LDPClassifier": "ldpfda.engine.classifier",
    "MRMAClassifier": "ldpfda.engine.estimator",
}

__all__ = [
    "BudgetAccountant",
    "BudgetExceededError",
    "LDPClassifier",
    "MRMAClassifier",
    "PrivacyLeakWarning",
    "__version__",
]


def __getattr__(name: str) -> Any:
    try:
        module = _MODULE_OF[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
