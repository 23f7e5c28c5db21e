"""Local differential privacy: mechanisms, per-client randomness and budget ledgers.

Nothing here knows about curves or Flower. Every mechanism is a vectorised
:class:`Mechanism` applied to a batch of clients; every release is described by an
immutable :class:`ReleaseEvent` that a :class:`PrivacyLedger` adds up per client.
The label mechanisms a client runs live here too: the epsilon maps of label
resampling (:mod:`~ldpfda.privacy.label_accounting`), the peer-to-peer mechanism and
its exact guarantee (:mod:`~ldpfda.privacy.peer_to_peer`) and label checks
(:mod:`~ldpfda.privacy.labels`). Every module needs numpy and scipy only.
"""

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
