r"""The Flower ClientApp: one SuperNode is one client of the protocol.

A thin shell over :mod:`ldpfda.client.protocol`. The node answers three queries:

``query.identify``
    Reply ``ConfigRecord "identity"``: ``client-id``, ``budget``, ``spent``. Releases
    nothing about the data and costs no epsilon.
``query.privatize``
    The node's release, as ``privacy.mechanism`` of the run says, and
    ``ConfigRecord "ledger"`` (``client-id``, ``budget``, ``spent``). A joint release
    (the default, :func:`~ldpfda.client.protocol.privatize_joint`) replies
    ``ArrayRecord "payload"`` with ``releases`` (float64, shape ``(1, p + 1)``, the
    perturbed :math:`\tilde y\,(1, x)`). The reference release
    (``privacy.mechanism = "reference"``) replies ``ArrayRecord "payload"`` with
    ``features`` (float64, shape ``(1, p)``, the perturbed scaled coefficients) and
    ``labels`` (int8, shape ``(1,)``, the randomized label).
``query.evaluate``
    Request ``ArrayRecord "model"`` with ``coef`` (shape ``(p,)``) and ``intercept``
    (shape ``(1,)``). Reply ``ArrayRecord "feedback"`` with ``bit`` (int8, shape
    ``(1,)``, the randomized-response error bit) and ``ConfigRecord "ledger"``.

A query the node cannot or will not answer gets an error reply: code
:data:`ERROR_BUDGET` when the release would overspend the node's budget, code
:data:`ERROR_REQUEST` for a malformed request or unusable data. The node's ledger lives
in the run's ``Context.state`` (or in ``ledger-dir``), so a second request in the same
run is refused rather than answered with fresh noise.

Node config (``flower-supernode --node-config``)
------------------------------------------------
``client-id`` (int)
    The node's identity in the protocol (deployment). In simulation the
    ``partition-id`` is the identity.
``data-path`` (str)
    The node's data file (one row; see :mod:`ldpfda.client.data`). Without it the node
    serves simulated partition ``partition-id`` of the embedded design.
``privacy-budget`` (float)
    The node's own epsilon cap for the run; defaults to ``privacy.epsilon``.
``noise-seed`` (int)
    Secret seed of the node's noise. Simulated partitions use the run seed (so a run
    matches the in-process engine); a node with a data file and no ``noise-seed`` draws
    fresh OS entropy, because noise keyed by a seed the server knows protects nothing.
``ledger-dir`` (str)
    Keep the ledger in ``<ledger-dir>/run-<run id>/client-<id>.json`` so it survives a
    SuperNode restart; with the run-config key ``flower.session`` (a multi-server
    session, several runs) in ``<ledger-dir>/session-<session>/client-<id>.json``, so
    it also holds across the session's runs.
``test-misbehave`` (str)
    Testing aid only: corrupt the reply after the honest release, to exercise the
    server's reply validation. ``nan``, ``shape`` (one column short), ``range`` (a
    value no mechanism releases), ``label`` (reference release only) and ``bit`` (an
    evaluation reply of 3) must be rejected. ``extreme`` is valid, so accepted: every
    released coordinate at the end of the mechanism's declared output range opposite
    to the node's true value, the most damaging reply the server cannot tell from an
    honest one. ``hang`` answers a release query only after ``test-hang-seconds``.
``test-hang-seconds`` (float)
    How long a ``hang`` node sleeps before it answers; default 3600, longer than
    any reply timeout a test uses.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    RecordDict,
)
from flwr.clientapp import ClientApp
from numpy.typing import NDArray

from ldpfda.client.data import (
    load_node_data,
    public_featurizer,
    run_settings,
    simulated_noise_seed,
    simulated_partition,
)
from ldpfda.client.protocol import (
    answer_evaluation,
    joint_output_range,
    privatize,
    privatize_joint,
    training_output_range,
)
from ldpfda.config import Settings
from ldpfda.exceptions import BudgetExceededError
from ldpfda.privacy.base import ReleaseEvent
from ldpfda.privacy.joint import SignedFeatureMechanism
from ldpfda.privacy.laplace import LaplaceMechanism
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.random import derive_seed
from ldpfda.privacy.randomized_response import FeedbackBit

__all__ = [
    "ERROR_BUDGET",
    "ERROR_REQUEST",
    "ClientSetup",
    "app",
    "client_setup",
    "load_ledger",
    "node_ledger",
    "save_ledger",
]

#: Error code of a refused release (the node's budget would be overspent).
ERROR_BUDGET = 4001
#: Error code of a malformed request or of data the node cannot use.
ERROR_REQUEST = 4000

IDENTIFY = "identify"
PRIVATIZE = "privatize"
EVALUATE = "evaluate"

_STATE_PREFIX = "ldpfda-ledger-"
#: Allowed ``flower.session`` names (the session names a ledger directory).
_SESSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_MISBEHAVIOURS = ("", "nan", "shape", "range", "extreme", "label", "bit", "hang")
#: What ``test-misbehave = "range"`` writes: beyond every mechanism's output range.
_OUT_OF_RANGE = 1e300
#: Default sleep of a ``test-misbehave = "hang"`` node, in seconds (one hour).
_HANG_SECONDS = 3600.0


class _Refusal(Exception):
    """A query the node answers with an error reply."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


@dataclass(frozen=True)
class ClientSetup:
    """Everything a node derives from its context before answering.

    Attributes
    ----------
    client_id : int
    settings : Settings
        The run's settings, parsed like the in-process CLI's.
    repeat : int
        The repeat whose derived seeds the run uses (``flower.repeat``).
    budget : float
        The node's epsilon cap for the run.
    noise_seed : int
        Seed that, with the client id, keys the node's noise.
    misbehave : str
        Testing aid; empty for an honest node.
    hang_seconds : float
        Testing aid: how long a ``hang`` node sleeps before it answers.
    """

    client_id: int
    settings: Settings
    repeat: int
    budget: float
    noise_seed: int
    misbehave: str = ""
    hang_seconds: float = _HANG_SECONDS


def _node_int(node_config: dict[str, Any], key: str) -> int | None:
    value = node_config.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"node config {key} must be an integer, got {value!r}")
    return int(value)


def client_setup(context: Context) -> ClientSetup:
    """Identity, settings, budget and noise seed of the node running ``context``."""
    node = dict(context.node_config)
    settings, flower = run_settings(context.run_config)
    repeat = int(flower.get("repeat", 0))
    client_id = _node_int(node, "client-id")
    if client_id is None:
        client_id = _node_int(node, "partition-id")
    if client_id is None or client_id < 0:
        raise _Refusal(ERROR_REQUEST, "the node has no client-id (nor partition-id)")
    budget = node.get("privacy-budget", settings.epsilon)
    if isinstance(budget, str):
        budget = float(budget)
    secret = _node_int(node, "noise-seed")
    if secret is not None:
        noise_seed = derive_seed(secret, "noise", settings.seed, repeat)
    elif node.get("data-path"):
        noise_seed = secrets.randbits(62)
    else:
        # Simulated partition: the engine's client seed, so both runs release the same.
        noise_seed = simulated_noise_seed(settings, repeat)
    misbehave = str(node.get("test-misbehave", ""))
    if misbehave not in _MISBEHAVIOURS:
        raise _Refusal(ERROR_REQUEST, f"test-misbehave must be one of {_MISBEHAVIOURS}")
    hang = node.get("test-hang-seconds", _HANG_SECONDS)
    if isinstance(hang, bool) or not isinstance(hang, (int, float)) or not hang >= 0:
        raise _Refusal(
            ERROR_REQUEST, f"test-hang-seconds must be a number >= 0, got {hang!r}"
        )
    return ClientSetup(
        client_id, settings, repeat, float(budget), noise_seed, misbehave, float(hang)
    )


def _client_data(
    context: Context, setup: ClientSetup
) -> tuple[NDArray[np.float64], NDArray[np.int8]]:
    """The node's scaled features ``(1, p)`` and true label ``(1,)``."""
    path = context.node_config.get("data-path")
    if not path:
        return simulated_partition(setup.settings, setup.repeat, setup.client_id)
    data = load_node_data(str(path))
    if len(data) != 1:
        raise ValueError(f"a node holds one client's data; {path} has {len(data)} rows")
    featurizer, grid = public_featurizer(setup.settings, setup.repeat)
    return data.features(featurizer, grid), data.labels


# -- the ledger, kept across the queries of one run ------------------------------------


def _ledger_scope(context: Context) -> str:
    """What the ledger is kept for: the run config's ``flower.session``, else the run.

    A multi-server session spans several runs, and a client must not be asked again in
    a later run of it. Flower gives every run a fresh ``Context.state`` (it is carried
    over only within a run series), so a ledger that outlives a run needs
    ``ledger-dir``.
    """
    session = str(context.run_config.get("flower.session", "") or "")
    if not session:
        return f"run-{context.run_id}"
    if not _SESSION_NAME.fullmatch(session):
        raise ValueError(
            f"flower.session must match {_SESSION_NAME.pattern}, got {session!r}"
        )
    return f"session-{session}"


def _ledger_file(context: Context, client_id: int) -> Path | None:
    directory = context.node_config.get("ledger-dir")
    if not directory:
        return None
    return Path(str(directory)) / _ledger_scope(context) / f"client-{client_id}.json"


def _state_key(context: Context) -> str:
    return f"{_STATE_PREFIX}{_ledger_scope(context)}"


def load_ledger(context: Context, client_id: int, budget: float) -> PrivacyLedger:
    """The node's ledger for this run, rebuilt from what it released so far.

    Releases are replayed into a fresh :class:`PrivacyLedger`; a node that already
    spent more than ``budget`` (e.g. restarted with a smaller one) refuses everything.
    """
    file = _ledger_file(context, client_id)
    key = _state_key(context)
    if file is not None:
        stored = file.read_text(encoding="utf-8") if file.exists() else "[]"
    elif key in context.state:
        record = context.state.config_records[key]
        if int(record["client-id"]) != client_id:  # type: ignore[call-overload]
            raise _Refusal(ERROR_REQUEST, "the node's identity changed during the run")
        stored = str(record["events"])
    else:
        stored = "[]"
    ledger = PrivacyLedger(budget=budget, client_ids=[client_id])
    for item in json.loads(stored):
        event = ReleaseEvent.of(
            item["mechanism"], item["epsilon"], **item["parameters"]
        )
        ledger.charge(event, [client_id])
    return ledger


@contextmanager
def node_ledger(context: Context, setup: ClientSetup) -> Iterator[PrivacyLedger]:
    """The node's ledger for one release, saved afterwards even if the release fails.

    A refused release charges nothing, and a charged one is on disk (or in the run
    state) before the reply leaves.
    """
    ledger = load_ledger(context, setup.client_id, setup.budget)
    try:
        yield ledger
    finally:
        save_ledger(context, ledger)


def save_ledger(context: Context, ledger: PrivacyLedger) -> None:
    """Store every release of ``ledger`` (in ``Context.state`` or ``ledger-dir``)."""
    client_id = int(ledger.client_ids[0])
    events = json.dumps(
        [
            {
                "mechanism": e.event.mechanism,
                "epsilon": e.event.epsilon,
                "parameters": dict(e.event.parameters),
            }
            for e in ledger.entries
        ]
    )
    file = _ledger_file(context, client_id)
    if file is None:
        context.state[_state_key(context)] = ConfigRecord(
            {"client-id": client_id, "events": events}
        )
        return
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(".tmp")
    tmp.write_text(events, encoding="utf-8")
    os.replace(tmp, file)


def _releases(ledger: PrivacyLedger, mechanism: str) -> int:
    """How many ``mechanism`` releases the node made so far: the next release's index.

    A node whose budget allows a second release of a kind draws fresh noise for it.
    """
    return sum(entry.event.mechanism == mechanism for entry in ledger.entries)


def _ledger_record(ledger: PrivacyLedger) -> ConfigRecord:
    client_id = int(ledger.client_ids[0])
    return ConfigRecord(
        {
            "client-id": client_id,
            "budget": float(ledger.budget),
            "spent": ledger.spent(client_id),
        }
    )


# -- query handlers --------------------------------------------------------------------


def _identify(message: Message, context: Context) -> RecordDict:
    setup = client_setup(context)
    ledger = load_ledger(context, setup.client_id, setup.budget)
    return RecordDict({"identity": _ledger_record(ledger)})


def _privatize(message: Message, context: Context) -> RecordDict:
    setup = client_setup(context)
    if setup.settings.joint_release:
        return _privatize_joint(context, setup)
    features, labels = _client_data(context, setup)
    settings = setup.settings
    with node_ledger(context, setup) as ledger:
        payload = privatize(
            features,
            labels,
            client_ids=[setup.client_id],
            seed=setup.noise_seed,
            epsilon=settings.epsilon,
            label_share=settings.label_share,
            ledger=ledger,
            release=_releases(ledger, LaplaceMechanism.name),
        )
    released_y = payload.labels.astype(np.int8)
    if setup.misbehave == "label":
        released_y[:] = 2
    released_x = _misbehave(
        setup,
        payload.features.astype(np.float64),
        truth=features,
        output_range=training_output_range(
            epsilon=settings.epsilon,
            n_features=features.shape[1],
            label_share=settings.label_share,
        ),
    )
    return RecordDict(
        {
            "payload": ArrayRecord(
                {"features": Array(released_x), "labels": Array(released_y)}
            ),
            "ledger": _ledger_record(ledger),
        }
    )


def _privatize_joint(context: Context, setup: ClientSetup) -> RecordDict:
    """The joint release: one perturbed y~(1, x) at the whole run epsilon."""
    features, labels = _client_data(context, setup)
    settings = setup.settings
    with node_ledger(context, setup) as ledger:
        payload = privatize_joint(
            features,
            labels,
            client_ids=[setup.client_id],
            seed=setup.noise_seed,
            epsilon=settings.epsilon,
            mechanism=settings.vector_mechanism,
            ledger=ledger,
            release=_releases(ledger, SignedFeatureMechanism.name),
        )
    signed = (2.0 * labels[:, None] - 1.0) * np.hstack([np.ones((1, 1)), features])
    released = _misbehave(
        setup,
        payload.releases.astype(np.float64),
        truth=signed,
        output_range=joint_output_range(
            epsilon=settings.epsilon,
            n_features=features.shape[1],
            mechanism=settings.vector_mechanism,
        ),
    )
    return RecordDict(
        {
            "payload": ArrayRecord({"releases": Array(released)}),
            "ledger": _ledger_record(ledger),
        }
    )


def _misbehave(
    setup: ClientSetup,
    released: NDArray[np.float64],
    *,
    truth: NDArray[np.float64],
    output_range: tuple[float, float],
) -> NDArray[np.float64]:
    r"""Testing aid: the release ``(1, k)`` as a ``test-misbehave`` node sends it.

    ``truth`` is what the release estimates (the node's scaled features, or its
    :math:`\tilde y\,(1, x)`); ``extreme`` answers the end of ``output_range`` opposite
    to it. ``hang`` sleeps, then sends the honest release.
    """
    if setup.misbehave == "nan":
        released[0, 0] = math.nan
    elif setup.misbehave == "shape":
        released = released[:, :-1]
    elif setup.misbehave == "range":
        released[0, 0] = _OUT_OF_RANGE
    elif setup.misbehave == "extreme":
        low, high = output_range
        released = np.where(truth >= 0, low, high).astype(np.float64)
    elif setup.misbehave == "hang":
        time.sleep(setup.hang_seconds)
    return released


def _model(message: Message, n_features: int) -> tuple[NDArray, NDArray]:
    try:
        record = message.content.array_records["model"]
        coef = np.asarray(record["coef"].numpy(), dtype=float)
        intercept = np.asarray(record["intercept"].numpy(), dtype=float)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"the request carries no usable model: {exc}") from exc
    if coef.shape != (n_features,) or intercept.shape != (1,):
        raise ValueError(
            f"the model must have coef of shape ({n_features},) and intercept of shape "
            f"(1,), got {coef.shape} and {intercept.shape}"
        )
    return coef, intercept


def _evaluate(message: Message, context: Context) -> RecordDict:
    setup = client_setup(context)
    features, labels = _client_data(context, setup)
    coef, intercept = _model(message, features.shape[1])
    with node_ledger(context, setup) as ledger:
        bit = answer_evaluation(
            coef,
            intercept,
            features,
            labels,
            client_ids=[setup.client_id],
            seed=setup.noise_seed,
            epsilon=setup.settings.epsilon,
            ledger=ledger,
            release=_releases(ledger, FeedbackBit.name),
        )
    bit = bit.astype(np.int8)
    if setup.misbehave == "bit":
        bit[:] = 3
    elif setup.misbehave == "hang":
        time.sleep(setup.hang_seconds)
    return RecordDict(
        {"feedback": ArrayRecord({"bit": Array(bit)}), "ledger": _ledger_record(ledger)}
    )


def _answer(
    handler: Callable[[Message, Context], RecordDict],
    message: Message,
    context: Context,
) -> Message:
    """Run ``handler``; a refusal or a bad request becomes an error reply."""
    try:
        return Message(handler(message, context), reply_to=message)
    except BudgetExceededError as exc:
        return Message(Error(ERROR_BUDGET, f"refused: {exc}"), reply_to=message)
    except _Refusal as exc:
        return Message(Error(exc.code, str(exc)), reply_to=message)
    except (ValueError, TypeError, KeyError, OSError) as exc:
        return Message(
            Error(ERROR_REQUEST, f"{type(exc).__name__}: {exc}"), reply_to=message
        )


app = ClientApp()


@app.query(IDENTIFY)
def identify(message: Message, context: Context) -> Message:
    """Say who this node is and what it has spent (no data, no epsilon)."""
    return _answer(_identify, message, context)


@app.query(PRIVATIZE)
def privatize_query(message: Message, context: Context) -> Message:
    """Release the node's data once: jointly, or perturbed coefficients and label."""
    return _answer(_privatize, message, context)


@app.query(EVALUATE)
def evaluate_query(message: Message, context: Context) -> Message:
    """Release, by randomized response, whether the received model errs on the node."""
    return _answer(_evaluate, message, context)


# The label-only modes' queries (issue 5) register themselves on ``app``.
import ldpfda.client.labeldp_app  # noqa: E402, F401
