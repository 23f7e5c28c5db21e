"""The server side of MRMA: weak models, error estimation, reversal and averaging."""

from ldpfda.server.engine import METHODS, ProtocolResult, run_protocol, run_repeat
from ldpfda.server.mrma import (
    ErrorEstimates,
    LinearModels,
    assign_groups,
    average_models,
    estimate_errors,
    fit_weak_models,
    mrma_weights,
    reverse_models,
)

__all__ = [
    "METHODS",
    "ErrorEstimates",
    "LinearModels",
    "ProtocolResult",
    "assign_groups",
    "average_models",
    "estimate_errors",
    "fit_weak_models",
    "mrma_weights",
    "reverse_models",
    "run_protocol",
    "run_repeat",
]
