"""The engine room, above the client and the server: in-process runs and sessions.

:func:`run_protocol` and :func:`run_repeat` run a protocol plan with every client in
this process; the estimators (:class:`LDPClassifier`, the default protocol, and
:class:`MRMAClassifier`, the reference), their :class:`BudgetAccountant`, multi-server
sessions and the fault study build on them. The estimators and the accountant load
on first access.
"""

import importlib
from typing import Any

from ldpfda.engine.runner import run_protocol, run_repeat

#: Where each lazily loaded name is defined.
_SUBMODULE_OF = {
    "BudgetAccountant": "accountant",
    "LDPClassifier": "classifier",
    "MRMAClassifier": "estimator",
}

__all__ = ["run_protocol", "run_repeat", *sorted(_SUBMODULE_OF)]


def __getattr__(name: str) -> Any:
    try:
        submodule = _SUBMODULE_OF[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{submodule}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
