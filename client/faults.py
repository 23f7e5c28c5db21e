r"""Test-only fault injection: a Flower mod that corrupts a node's honest reply.

:data:`app` is the ClientApp of :mod:`ldpfda.client.client_app` with
:func:`misbehave_mod` around every handler. It exists to exercise the server's reply
checks in tests and fault studies; a host runs :data:`ldpfda.client.client_app.app`,
which has no such hook.

Node config
-----------
``test-misbehave`` (str)
    ``nan``, ``shape`` (one column short), ``range`` (a value no mechanism releases),
    ``label`` (reference release only) and ``bit`` (an evaluation reply of 3) must be
    rejected by the server. ``extreme`` is valid, so accepted: every released
    coordinate at the end of the mechanism's declared output range opposite to the
    node's true value, the most damaging reply the server cannot tell from an honest
    one. ``hang`` makes (and charges) its release, then sends it only after
    ``test-hang-seconds``: a node that crashes with a release on its ledger.
``test-hang-seconds`` (float)
    How long a ``hang`` node sleeps before it answers; default 3600, longer than any
    reply timeout a test uses.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
from flwr.app import Array, Context, Error, Message
from flwr.clientapp import ClientApp
from numpy.typing import NDArray

from ldpfda.client.client_app import RELEASES, register
from ldpfda.client.node import ClientSetup, client_data, client_setup
from ldpfda.schema import catalog
from ldpfda.schema.queries import ERROR_REQUEST, message_type

__all__ = ["MISBEHAVIOURS", "app", "misbehave_mod"]

#: What ``test-misbehave = "range"`` writes: beyond every mechanism's output range.
_OUT_OF_RANGE = 1e300
#: Values of the node-config key ``test-misbehave``.
MISBEHAVIOURS = ("", "nan", "shape", "range", "extreme", "label", "bit", "hang")
#: Default sleep of a ``hang`` node, in seconds (one hour).
HANG_SECONDS = 3600.0


def _fault(context: Context) -> tuple[str, float]:
    """The node's ``test-misbehave`` and ``test-hang-seconds``, checked."""
    how = str(context.node_config.get("test-misbehave", ""))
    if how not in MISBEHAVIOURS:
        raise ValueError(f"test-misbehave must be one of {MISBEHAVIOURS}")
    hang = context.node_config.get("test-hang-seconds", HANG_SECONDS)
    if isinstance(hang, bool) or not isinstance(hang, (int, float)) or not hang >= 0:
        raise ValueError(f"test-hang-seconds must be a number >= 0, got {hang!r}")
    return how, float(hang)


def _corrupt_release(
    message: Message, context: Context, setup: ClientSetup, how: str
) -> None:
    record = message.content.array_records["payload"]
    key = "releases" if "releases" in record else "features"
    released = record[key].numpy().astype(np.float64)
    if how == "nan":
        released[0, 0] = math.nan
    elif how == "shape":
        released = released[:, :-1]
    elif how == "range":
        released[0, 0] = _OUT_OF_RANGE
    elif how == "extreme":
        features, labels = client_data(context, setup)
        truth: NDArray[np.floating] = features
        if key == "releases":
            signs = 2.0 * labels[:, None] - 1.0
            truth = signs * np.hstack([np.ones((1, 1)), features])
        low, high = catalog.release_range(setup.settings, features.shape[1])
        released = np.where(truth >= 0, low, high).astype(np.float64)
    elif how == "label" and "labels" in record:
        record["labels"] = Array(np.array([2], dtype=np.int8))
    record[key] = Array(np.ascontiguousarray(released))


def misbehave_mod(
    message: Message, context: Context, call_next: Callable[[Message, Context], Message]
) -> Message:
    """Answer honestly, then corrupt the reply as the node's ``test-misbehave`` says."""
    kind = message.metadata.message_type
    try:
        how, hang = _fault(context)
    except ValueError as exc:
        return Message(Error(ERROR_REQUEST, str(exc)), reply_to=message)
    privatize = kind == message_type(catalog.PRIVATIZE)
    if not how or kind not in {message_type(name) for name in RELEASES}:
        return call_next(message, context)
    reply = call_next(message, context)
    if how == "hang":
        time.sleep(hang)
    if reply.has_error() or not (privatize or kind == message_type(catalog.EVALUATE)):
        return reply
    if privatize and "payload" not in reply.content.array_records:
        return reply  # the first round's identity-only reply of a node not asked
    if privatize:
        _corrupt_release(reply, context, client_setup(context), how)
    elif how == "bit":
        reply.content.array_records["feedback"]["bit"] = Array(
            np.array([3], dtype=np.int8)
        )
    return reply


#: The ClientApp of the fault tests: the host's app with :func:`misbehave_mod`.
app = register(ClientApp(mods=[misbehave_mod]))
