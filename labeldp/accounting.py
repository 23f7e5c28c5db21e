"""Epsilon maps of the label-DP releases, re-exported from
:mod:`ldpfda.privacy.label_accounting` (where a client sizes its own resampling
probability with them) under their historical names."""

from ldpfda.privacy.label_accounting import (
    histogram_epsilon,
    histogram_sigma,
    resampling_epsilon,
    resampling_probability,
    uniform_rr_epsilon,
    uniform_rr_probability,
)

__all__ = [
    "histogram_epsilon",
    "histogram_sigma",
    "resampling_epsilon",
    "resampling_probability",
    "uniform_rr_epsilon",
    "uniform_rr_probability",
]
