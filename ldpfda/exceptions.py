"""Exceptions and warnings shared by every part of ldpfda."""


class PrivacyLeakWarning(UserWarning):
    """A setting was derived from private data, so the released output may leak it.

    Raised, for example, when rescaling bounds are inferred from the very curves that
    are about to be privatized: the bounds then depend on the private data and are not
    covered by the mechanism's epsilon.
    """


class BudgetExceededError(RuntimeError):
    """A release would make a client spend more epsilon than its budget allows."""
