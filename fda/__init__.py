"""Curves and bases: B-spline projection and rescaling into [-1, 1]^p.

Knows nothing about privacy; :mod:`ldpfda.client` composes it with the mechanisms.
"""

from ldpfda.fda.basis import BSplineProjector, as_curves
from ldpfda.fda.features import CurveFeaturizer, Featurizer, VectorFeaturizer
from ldpfda.fda.scaling import CoefficientScaler

__all__ = [
    "BSplineProjector",
    "CoefficientScaler",
    "CurveFeaturizer",
    "Featurizer",
    "VectorFeaturizer",
    "as_curves",
]
