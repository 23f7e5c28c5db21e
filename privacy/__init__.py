"""Local differential privacy: mechanisms vectorised over a batch of clients,
per-client randomness, and ledgers that add up each client's :class:`ReleaseEvent`.
Needs numpy and scipy only."""

from ldpfda.exceptions import BudgetExceededError, PrivacyLeakWarning
from ldpfda.privacy.base import Mechanism, ReleaseEvent
from ldpfda.privacy.budget import BudgetSplit, split_budget
from ldpfda.privacy.laplace import LaplaceMechanism, laplace_epsilon, laplace_scale
from ldpfda.privacy.ledger import LedgerEntry, PrivacyLedger
from ldpfda.privacy.random import ClientStreams, KeyedUniform, as_generator, derive_seed
from ldpfda.privacy.randomized_response import (
    BinaryRandomizedResponse,
    FeedbackBit,
    KaryRandomizedResponse,
    rr_epsilon,
    rr_keep_probability,
)

__all__ = [
    "BinaryRandomizedResponse",
    "BudgetExceededError",
    "BudgetSplit",
    "ClientStreams",
    "FeedbackBit",
    "KaryRandomizedResponse",
    "KeyedUniform",
    "LaplaceMechanism",
    "LedgerEntry",
    "Mechanism",
    "PrivacyLeakWarning",
    "PrivacyLedger",
    "ReleaseEvent",
    "as_generator",
    "derive_seed",
    "laplace_epsilon",
    "laplace_scale",
    "rr_epsilon",
    "rr_keep_probability",
    "split_budget",
]
