"""Embedded datasets: simulation designs generated on the fly, nothing downloaded."""

from ldpfda.datasets.synthetic import FunctionalDesign, VectorDesign, make_design

__all__ = ["FunctionalDesign", "VectorDesign", "make_design"]
