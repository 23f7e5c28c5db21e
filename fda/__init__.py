"""Curves and bases: B-spline projection and rescaling into [-1, 1]^p.

What a client runs needs numpy and scipy only; the scikit-learn transformer
:class:`BSplineProjector` is imported from :mod:`~ldpfda.fda.basis` on first use.
"""

from typing import Any

from ldpfda.fda.bspline import BSplineProjection, as_curves
from ldpfda.fda.features import CurveFeaturizer, Featurizer, VectorFeaturizer
from ldpfda.fda.scaling import CoefficientScaler

__all__ = [
    "BSplineProjection",
    "BSplineProjector",
    "CoefficientScaler",
    "CurveFeaturizer",
    "Featurizer",
    "VectorFeaturizer",
    "as_curves",
]


def __getattr__(name: str) -> Any:
    # scikit-learn is imported only by whoever asks for the transformer.
    if name == "BSplineProjector":
        from ldpfda.fda.basis import BSplineProjector

        return BSplineProjector
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
