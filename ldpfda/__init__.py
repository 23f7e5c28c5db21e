"""ldpfda: classification of functional data under local differential privacy.

The product's top-level folders install under this one import name (``ldpfda.fda``,
``ldpfda.privacy``, ``ldpfda.client``, ``ldpfda.server``, ``ldpfda.engine``, ...;
README.md describes each).
"""

from ldpfda.exceptions import BudgetExceededError, PrivacyLeakWarning

# The one version of the package. pyproject.toml and flower-app/pyproject.toml repeat it
# as a literal (Flower reads [project].version statically); a test checks all three.
__version__ = "0.1.0"

__all__ = ["BudgetExceededError", "PrivacyLeakWarning", "__version__"]
