"""The client side of the protocol: local projection, rescaling and LDP releases."""

from ldpfda.client.protocol import (
    TrainingPayload,
    answer_evaluation,
    privatize,
    privatize_curves,
)

__all__ = ["TrainingPayload", "answer_evaluation", "privatize", "privatize_curves"]
