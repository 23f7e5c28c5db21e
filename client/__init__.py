"""The client side of the protocol: local projection, rescaling and LDP releases."""

from ldpfda.client.protocol import answer_evaluation, privatize, privatize_curves
from ldpfda.schema.payloads import TrainingPayload

__all__ = ["TrainingPayload", "answer_evaluation", "privatize", "privatize_curves"]
