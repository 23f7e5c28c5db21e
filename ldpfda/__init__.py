"""ldpfda: classification of functional data under local differential privacy.

The package gathers the product's top-level folders under one import name:

- :mod:`ldpfda.fda` -- curves, B-spline projection and coefficient rescaling;
- :mod:`ldpfda.privacy` -- LDP mechanisms, per-client randomness and budget ledgers;
- :mod:`ldpfda.client` -- what a client computes and releases;
- :mod:`ldpfda.server` -- the MRMA server and the in-process engine;
- :mod:`ldpfda.datasets` -- embedded data generators and loaders.
"""

from ldpfda.exceptions import BudgetExceededError, PrivacyLeakWarning

# The one version of the package. pyproject.toml and flower-app/pyproject.toml repeat it
# as a literal, because Flower reads [project].version of a Flower app statically;
# tests/test_packaging.py checks that the three agree.
__version__ = "0.1.0"

__all__ = ["BudgetExceededError", "PrivacyLeakWarning", "__version__"]
