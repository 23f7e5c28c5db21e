"""The Flower ServerApp: the server of the protocol over Flower's message API.

A thin shell over :mod:`ldpfda.server.engine`. One run is one repeat of the protocol.
With the default settings (a joint release and ``server.method = "auto"``, i.e. the
``moment`` method of :attr:`~ldpfda.config.Settings.protocol`):

1. wait until the expected nodes are connected (``data.n-train + data.n-eval``);
2. ask every node who it is (``query.identify``);
3. ask every client for its one release (``query.privatize``), order the releases by
   client id and fit the moment classifier with
   :func:`~ldpfda.server.engine.moment_result`, using the run's public features
   (:func:`~ldpfda.server.engine.public_features`). There is no evaluation round;
4. score on a test set if one is configured, and write ``report.json``, ``model.npz``
   and ``payload.npz``.

With ``privacy.mechanism = "reference"`` (or ``server.method = "mrma"``) it is MRMA:

1. and 2. as above; clients ``0 .. n_train-1`` train, the next ``n_eval`` evaluate, as
   in :func:`~ldpfda.server.engine.run_repeat`;
3. collect the training payloads (``query.privatize``), ordered by client id, and fit
   the weak models with :func:`~ldpfda.server.engine.train_weak`;
4. split the evaluators with :func:`~ldpfda.server.mrma.assign_groups` and send each
   subgroup its model (``query.evaluate``);
5. :func:`~ldpfda.server.engine.aggregate` the feedback bits, score on a test set if one
   is configured, and write ``report.json``, ``model.npz`` and ``payload.npz``.

Every reply is validated before use (:func:`parse_identity`, :func:`parse_payload`,
:func:`parse_joint_payload`, :func:`parse_feedback`), against the output range of the
mechanism the run's settings name; a reply that fails is logged and recorded, never
used. Nodes
that do not answer within ``flower.reply-timeout`` are recorded as missing and the run
goes on if at least ``flower.min-reply-fraction`` of each group answered. A client is
asked each query at most once, and never for more than its budget: the server keeps its
own :class:`~ldpfda.privacy.ledger.PrivacyLedger` of what it asked.

Flower-only run-config keys (``flower.*``) are described by :class:`FlowerOptions`;
every other key is a :class:`~ldpfda.config.Settings` key.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid, ServerApp
from numpy.typing import NDArray

from ldpfda import __version__
from ldpfda._validation import check_int, check_real
from ldpfda.client.client_app import EVALUATE, IDENTIFY, PRIVATIZE
from ldpfda.client.data import (
    design_test_set,
    load_node_data,
    public_featurizer,
    run_settings,
)
from ldpfda.client.protocol import (
    JointPayload,
    TrainingPayload,
    evaluation_events,
    joint_events,
    joint_output_range,
    privatize_events,
    training_output_range,
)
from ldpfda.config import Settings
from ldpfda.exceptions import BudgetExceededError
from ldpfda.privacy.base import ReleaseEvent
from ldpfda.privacy.budget import split_budget
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.random import derive_seed
from ldpfda.server.engine import (
    Payload,
    ProtocolResult,
    aggregate,
    moment_result,
    public_features,
    score,
    train_weak,
)
from ldpfda.server.mrma import assign_groups
from ldpfda.server.validation import reason_kind

__all__ = [
    "FlowerOptions",
    "ReplyError",
    "app",
    "parse_feedback",
    "parse_identity",
    "parse_joint_payload",
    "parse_payload",
    "parse_run_config",
    "run_server",
]

# A child of Flower's logger, so these lines reach `flwr run --stream` and `flwr log`.
logger = logging.getLogger("flwr.ldpfda")

#: Error codes with which Flower reports that a node never answered (it went offline,
#: its ClientApp crashed, or the reply was lost): the client is missing, not wrong.
_UNAVAILABLE = frozenset(
    {
        ErrorCode.MESSAGE_UNAVAILABLE,
        ErrorCode.REPLY_MESSAGE_UNAVAILABLE,
        ErrorCode.NODE_UNAVAILABLE,
        ErrorCode.CLIENT_APP_CRASHED,
    }
)

#: Values of ``flower.phase``: the one-server protocol, or a multi-server phase.
PHASES = ("single", "train", "evaluate")


class ReplyError(ValueError):
    """A reply that cannot be used: an error reply, or content that fails validation.

    The message is ``"<kind>: <detail>"`` (the convention of
    :mod:`ldpfda.server.validation`); ``kind`` is one of ``error`` (the node answered
    with an error), ``content`` (a record or array is missing or unreadable),
    ``identity``, ``ledger``, ``shape``, ``nan``, ``range``, ``label`` or ``bit``.
    """

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


@dataclass(frozen=True)
class FlowerOptions:
    """Flower-only settings of a run (run-config keys ``flower.<kebab-name>``).

    Attributes
    ----------
    repeat : int
        Which repeat's derived seeds (data, clients, server) the run uses.
    min_nodes : int
        Start with this many connected nodes once ``wait_timeout`` has passed;
        0 means every configured client (``n_train + n_eval``).
    wait_timeout : float
        Seconds to wait for the nodes to connect.
    reply_timeout : float
        Seconds to wait for the replies of each query round.
    min_reply_fraction : float
        Smallest share of the asked training clients, and of the asked evaluation
        clients, that must give a valid reply for the run to go on.
    report_dir : str
        Directory for ``run-<run id>/report.json`` and the model; relative paths are
        taken from the ServerApp process's working directory.
    test_data : str
        ``"design"``: score on the embedded design's test set of this repeat (the one
        :func:`~ldpfda.server.engine.run_repeat` uses); ``""``: no test set; otherwise
        the path of a data file (:mod:`ldpfda.client.data` format) with test rows.
    phase : str
        ``"single"``: the one-server protocol above. ``"train"`` or ``"evaluate"``: one
        phase of a multi-server session (:mod:`ldpfda.server.multiserver_app`).
    session : str
        Name of the multi-server session the run belongs to; nodes keep their ledger
        per session (``""``: per run).
    artifact_dir : str
        Directory of the session's model and estimate artifacts
        (:mod:`ldpfda.server.artifacts`), shared by its servers.
    """

    repeat: int = 0
    min_nodes: int = 0
    wait_timeout: float = 60.0
    reply_timeout: float = 300.0
    min_reply_fraction: float = 0.8
    report_dir: str = "results/flower"
    test_data: str = "design"
    phase: str = "single"
    session: str = ""
    artifact_dir: str = "results/flower/artifacts"

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "repeat", check_int(self.repeat, "repeat", minimum=0))
        set_(self, "min_nodes", check_int(self.min_nodes, "min_nodes", minimum=0))
        set_(
            self, "wait_timeout", check_real(self.wait_timeout, "wait_timeout", low=0.0)
        )
        set_(
            self,
            "reply_timeout",
            check_real(self.reply_timeout, "reply_timeout", low=0.0, low_open=True),
        )
        set_(
            self,
            "min_reply_fraction",
            check_real(
                self.min_reply_fraction, "min_reply_fraction", low=0.0, high=1.0
            ),
        )
        if not isinstance(self.report_dir, str) or not self.report_dir:
            raise ValueError(
                f"report_dir must be a non-empty path, got {self.report_dir!r}"
            )
        if not isinstance(self.test_data, str):
            raise TypeError(
                f"test_data must be a str, got {type(self.test_data).__name__}"
            )
        if self.phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {self.phase!r}")
        if not isinstance(self.session, str) or not re.fullmatch(
            r"([A-Za-z0-9][A-Za-z0-9._-]{0,63})?", self.session
        ):
            raise ValueError(
                "session must be empty or a name of letters, digits, '.', '_' and "
                f"'-' (at most 64), got {self.session!r}"
            )
        if self.phase != "single" and not self.session:
            raise ValueError(f"phase {self.phase!r} needs a session name")
        if not isinstance(self.artifact_dir, str) or not self.artifact_dir:
            raise ValueError(
                f"artifact_dir must be a non-empty path, got {self.artifact_dir!r}"
            )

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> FlowerOptions:
        """Options from kebab-case keys without the ``flower.`` prefix."""
        names = {f.name for f in dataclasses.fields(cls)}
        changes = {k.replace("-", "_"): v for k, v in mapping.items()}
        unknown = sorted(
            f"flower.{k}"
            for k, n in zip(mapping, changes, strict=True)
            if n not in names
        )
        if unknown:
            raise ValueError(f"unknown setting(s): {', '.join(unknown)}")
        return cls(**changes)

    def to_mapping(self) -> dict[str, Any]:
        return {
            f"flower.{f.name.replace('_', '-')}": getattr(self, f.name)
            for f in dataclasses.fields(self)
        }


def parse_run_config(run_config: Mapping[str, Any]) -> tuple[Settings, FlowerOptions]:
    """Validated settings and Flower options from a run config (both refuse typos)."""
    settings, flower = run_settings(run_config)
    return settings, FlowerOptions.from_mapping(flower)


# -- reply validation ------------------------------------------------------------------


def _content(message: Message) -> RecordDict:
    if message.has_error():
        error = message.error
        raise ReplyError("error", f"error reply (code {error.code}): {error.reason}")
    if not message.has_content():
        raise ReplyError("content", "reply has no content")
    return message.content


def _ledger_info(content: RecordDict, key: str, client_id: int) -> dict[str, float]:
    try:
        record = content.config_records[key]
        reported = record["client-id"]
        spent = float(record["spent"])  # type: ignore[arg-type]
        budget = float(record["budget"])  # type: ignore[arg-type]
    except (KeyError, TypeError, ValueError) as exc:
        raise ReplyError(
            "ledger", f"reply lacks a valid '{key}' record: {exc!r}"
        ) from exc
    if isinstance(reported, bool) or not isinstance(reported, int):
        raise ReplyError("ledger", f"client-id must be an int, got {reported!r}")
    if reported != client_id:
        raise ReplyError(
            "ledger", f"reply is signed by client {reported}, expected {client_id}"
        )
    # Both may be inf (a non-private run), never NaN or negative.
    if not spent >= 0 or not budget > 0:
        raise ReplyError(
            "ledger", f"invalid ledger figures spent={spent!r}, budget={budget!r}"
        )
    return {"spent": spent, "budget": budget}


def _array(content: RecordDict, record: str, key: str) -> NDArray:
    try:
        value = content.array_records[record][key].numpy()
    except Exception as exc:  # a corrupt Array may fail in many ways inside numpy
        raise ReplyError(
            "content", f"reply lacks a readable '{record}.{key}' array: {exc!r}"
        ) from exc
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
        raise ReplyError("content", f"'{record}.{key}' must be numeric")
    return value


def parse_identity(message: Message) -> tuple[int, dict[str, float]]:
    """The client id and ledger figures of a ``query.identify`` reply.

    Raises
    ------
    ReplyError
        For an error reply or a reply without a valid identity.
    """
    content = _content(message)
    try:
        client_id = content.config_records["identity"]["client-id"]
    except KeyError as exc:
        raise ReplyError(
            "identity", "reply lacks an 'identity' record with a client-id"
        ) from exc
    if isinstance(client_id, bool) or not isinstance(client_id, int) or client_id < 0:
        raise ReplyError(
            "identity", f"client-id must be an int >= 0, got {client_id!r}"
        )
    return client_id, _ledger_info(content, "identity", client_id)


def bounded_row(
    array: NDArray, width: int, what: str, bounds: tuple[float, float]
) -> NDArray[np.float64]:
    """The one row of a ``(1, width)`` reply array, finite and within ``bounds``.

    Raises
    ------
    ReplyError
        ``shape``, ``nan`` or ``range``, naming ``what``.
    """
    if array.shape != (1, width):
        raise ReplyError(
            "shape", f"{what} must have shape (1, {width}), got {array.shape}"
        )
    x = array.astype(np.float64)
    if not np.all(np.isfinite(x)):
        raise ReplyError("nan", f"{what} contain NaN or infinite values")
    low, high = bounds
    if np.any(x < low) or np.any(x > high):
        raise ReplyError(
            "range",
            f"{what} outside the mechanism's range [{low:.6g}, {high:.6g}]: "
            f"got [{x.min():.6g}, {x.max():.6g}]",
        )
    return x[0]


def single_value(
    array: NDArray, what: str, allowed: range, kind: str, description: str
) -> int:
    """The one entry of a ``(1,)`` reply array, which must be an int in ``allowed``.

    Raises
    ------
    ReplyError
        ``shape``, or ``kind`` with ``description`` of what was expected.
    """
    if array.shape != (1,):
        raise ReplyError("shape", f"{what} must have shape (1,), got {array.shape}")
    value = float(array[0])
    if value not in allowed:
        raise ReplyError(kind, f"{description}, got {array[0]!r}")
    return int(value)


def parse_payload(
    message: Message,
    *,
    client_id: int,
    n_features: int,
    feature_range: tuple[float, float],
) -> tuple[NDArray[np.float64], int, dict[str, float]]:
    """Features ``(p,)``, randomized label and ledger figures of a privatize reply.

    A valid payload has features of shape ``(1, p)``, finite and within the feature
    mechanism's declared output range ``feature_range``, and one label in {0, 1}.

    Raises
    ------
    ReplyError
        For anything else, with the reason.
    """
    content = _content(message)
    features = _array(content, "payload", "features")
    labels = _array(content, "payload", "labels")
    x = bounded_row(features, n_features, "features", feature_range)
    label = single_value(
        labels, "labels", range(2), "label", "randomized label must be 0 or 1"
    )
    return x, label, _ledger_info(content, "ledger", client_id)


def parse_joint_payload(
    message: Message,
    *,
    client_id: int,
    n_features: int,
    output_range: tuple[float, float],
) -> tuple[NDArray[np.float64], dict[str, float]]:
    """The release ``(p + 1,)`` and ledger figures of a joint privatize reply.

    A valid reply has ``releases`` of shape ``(1, p + 1)``, finite and within the joint
    mechanism's declared ``output_range``
    (:func:`~ldpfda.client.protocol.joint_output_range`).

    Raises
    ------
    ReplyError
        For anything else, with the reason.
    """
    content = _content(message)
    releases = _array(content, "payload", "releases")
    z = bounded_row(releases, n_features + 1, "releases", output_range)
    return z, _ledger_info(content, "ledger", client_id)


def parse_feedback(message: Message, *, client_id: int) -> tuple[int, dict[str, float]]:
    """The randomized-response bit and ledger figures of an evaluate reply.

    Raises
    ------
    ReplyError
        For an error reply, a missing bit, or a bit that is not 0 or 1.
    """
    content = _content(message)
    bit = _array(content, "feedback", "bit")
    value = single_value(bit, "bit", range(2), "bit", "feedback must be a bit (0 or 1)")
    return value, _ledger_info(content, "ledger", client_id)


# -- the run ---------------------------------------------------------------------------


@dataclass
class Round:
    """Who was asked one query, who answered, who did not, and what was rejected.

    Keys are client ids, node ids in the ``identify`` round (before the server knows
    who is who). ``missing`` and ``rejected`` give each key its reason,
    ``"<kind>: <detail>"``; a missing node is ``timeout`` or ``unavailable``.
    """

    name: str
    asked: list[int] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)
    missing: dict[int, str] = field(default_factory=dict)
    rejected: dict[int, str] = field(default_factory=dict)
    refused_by_server: list[int] = field(default_factory=list)

    @property
    def _who(self) -> str:
        return "node" if self.name == IDENTIFY else "client"

    def miss(self, key: int, reason: str) -> None:
        """Record that ``key`` gave no reply to use, and log it."""
        self.missing[key] = reason
        logger.warning(
            "ldpfda: %s: no reply from %s %d (%s)", self.name, self._who, key, reason
        )

    def reject(self, key: int, reason: str) -> None:
        """Record that the reply of ``key`` is not used, and log it."""
        self.rejected[key] = reason
        logger.warning(
            "ldpfda: %s reply of %s %d rejected: %s", self.name, self._who, key, reason
        )

    def summary(self) -> dict[str, Any]:
        return {
            "asked": len(self.asked),
            "answered": len(self.answered),
            "missing": sorted(self.missing),
            "rejected": {str(k): v for k, v in sorted(self.rejected.items())},
            "not_asked_budget": sorted(self.refused_by_server),
        }


class _Status:
    """Writes ``status.json`` (the current stage) next to the report."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started = time.time()

    def __call__(self, stage: str, **extra: Any) -> None:
        logger.info("ldpfda: %s", stage)
        self.directory.mkdir(parents=True, exist_ok=True)
        body = {"stage": stage, "elapsed_s": time.time() - self.started, **extra}
        tmp = self.directory / "status.json.tmp"
        tmp.write_text(json.dumps(body), encoding="utf-8")
        tmp.replace(self.directory / "status.json")


def _jsonable(value: Any) -> Any:
    """``value`` with non-finite floats as strings ("inf"), for strict JSON."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def wait_for_nodes(
    grid: Grid, expected: int, minimum: int, timeout: float
) -> list[int]:
    """Node ids once ``expected`` nodes are connected, or ``minimum`` at the timeout.

    Raises
    ------
    RuntimeError
        When fewer than ``minimum`` nodes are connected after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        nodes = sorted(int(n) for n in grid.get_node_ids())
        if len(nodes) >= expected:
            return nodes
        if time.monotonic() >= deadline:
            if len(nodes) >= minimum:
                logger.warning(
                    "ldpfda: starting with %d of %d expected nodes",
                    len(nodes),
                    expected,
                )
                return nodes
            raise RuntimeError(
                f"only {len(nodes)} node(s) connected after {timeout:g} s, but the run "
                f"needs {minimum} (flower.min-nodes; the settings name {expected} "
                f"clients, data.n-train + data.n-eval). Start more SuperNodes, set "
                f'--federation-config "num-supernodes={expected}" in simulation, or '
                f"lower data.n-train / data.n-eval."
            )
        time.sleep(min(1.0, max(deadline - time.monotonic(), 0.01)))


def _ask(
    grid: Grid, contents: Mapping[int, RecordDict], kind: str, timeout: float
) -> dict[int, Message]:
    """Send ``query.<kind>`` to each node of ``contents``; replies by node id.

    Waits at most ``timeout`` seconds. The grid returns only replies to the messages
    just sent, so a reply that comes after the timeout is never used: Flower keeps it
    and nobody pulls it. Anything else that answers no message of this call (another
    node, another query, a second reply) is logged and dropped. Flower's error replies
    that say a node is unavailable come from the SuperLink; they are kept under the
    node the message went to and say why it is missing (:func:`_absence`).
    """
    message_type = f"query.{kind}"
    messages = [
        Message(content, node, message_type, group_id=kind)
        for node, content in contents.items()
    ]
    if not messages:
        return {}
    received = grid.send_and_receive(messages, timeout=timeout)
    # The grid gives each message its id as it pushes it.
    node_by_id = {
        m.metadata.message_id: m.metadata.dst_node_id
        for m in messages
        if m.metadata.message_id
    }
    replies: dict[int, Message] = {}
    for reply in received:
        unavailable = reply.has_error() and reply.error.code in _UNAVAILABLE
        if unavailable:
            node = node_by_id.get(reply.metadata.reply_to_message_id)
        else:
            node = int(reply.metadata.src_node_id)
        answers = unavailable or reply.metadata.message_type == message_type
        if node not in contents or node in replies or not answers:
            logger.warning(
                "ldpfda: ignored a stray reply (%s from node %s) to the %s round",
                reply.metadata.message_type,
                reply.metadata.src_node_id,
                kind,
            )
            continue
        replies[node] = reply
    return replies


def _absence(reply: Message | None, timeout: float) -> str | None:
    """Why a node gave no reply to use (``timeout`` or ``unavailable``), else None."""
    if reply is None:
        return f"timeout: no reply within flower.reply-timeout = {timeout:g} s"
    if reply.has_error() and reply.error.code in _UNAVAILABLE:
        return f"unavailable: {reply.error.reason} (code {reply.error.code})"
    return None


def _rejections(
    rounds: Mapping[str, Round],
    node_of: Mapping[int, int],
    claimed: Mapping[int, int],
) -> list[dict[str, Any]]:
    """Every reply the run did not use, and every one that never came, with the reason.

    One entry per round and node: ``stage``, ``client_id`` (None when a node never
    said who it is), ``node_id``, ``kind`` and ``reason``. ``claimed`` is the client id
    each node gave in the identify round.
    """
    out = []
    for stage, round_ in rounds.items():
        for key, reason in sorted({**round_.missing, **round_.rejected}.items()):
            if stage == IDENTIFY:
                node, client = key, claimed.get(key)
            else:
                node, client = node_of[key], key
            out.append(
                {
                    "stage": stage,
                    "client_id": client,
                    "node_id": node,
                    "kind": reason_kind(reason),
                    "reason": reason,
                }
            )
    return out


def _release_events(
    settings: Settings, n_features: int
) -> dict[str, list[ReleaseEvent]]:
    """What each query makes a client release, for the server's own accounting.

    The very events the client's ledger records for the release the settings name.
    """
    if settings.joint_release:
        privatize = joint_events(
            epsilon=settings.epsilon,
            n_features=n_features,
            mechanism=settings.vector_mechanism,
        )
    else:
        privatize = privatize_events(
            epsilon=settings.epsilon,
            n_features=n_features,
            label_share=settings.label_share,
        )
    return {PRIVATIZE: privatize, EVALUATE: evaluation_events(epsilon=settings.epsilon)}


def _output_range(settings: Settings, n_features: int) -> tuple[float, float]:
    """The declared range of every value a privatize reply releases."""
    if settings.joint_release:
        return joint_output_range(
            epsilon=settings.epsilon,
            n_features=n_features,
            mechanism=settings.vector_mechanism,
        )
    return training_output_range(
        epsilon=settings.epsilon,
        n_features=n_features,
        label_share=settings.label_share,
    )


def _release_parser(
    settings: Settings, n_features: int
) -> Callable[[Message, int], tuple[Any, ...]]:
    """Validation of a privatize reply: rows of the release and the ledger figures."""
    output_range = _output_range(settings, n_features)
    if settings.joint_release:
        return lambda reply, c: parse_joint_payload(
            reply, client_id=c, n_features=n_features, output_range=output_range
        )
    return lambda reply, c: parse_payload(
        reply, client_id=c, n_features=n_features, feature_range=output_range
    )


def _payload(
    settings: Settings, n_features: int, rows: Mapping[int, tuple[Any, ...]]
) -> Payload:
    """The valid releases as the engine's payload, ordered by client id."""
    ids = np.array(sorted(rows), dtype=np.int64)
    if settings.joint_release:
        return JointPayload(
            client_ids=ids,
            releases=np.array([rows[c][0] for c in ids], dtype=np.float64).reshape(
                -1, n_features + 1
            ),
            epsilon=settings.epsilon,
            mechanism=settings.vector_mechanism,
        )
    split = split_budget(
        epsilon=settings.epsilon,
        n_coefficients=n_features,
        label_share=settings.label_share,
    )
    return TrainingPayload(
        client_ids=ids,
        features=np.array([rows[c][0] for c in ids], dtype=np.float64).reshape(
            -1, n_features
        ),
        labels=np.array([rows[c][1] for c in ids], dtype=np.int8),
        feature_epsilon=split.coefficients,
        label_epsilon=split.label,
    )


def _payload_arrays(payload: Payload) -> dict[str, NDArray]:
    if isinstance(payload, JointPayload):
        return {"client_ids": payload.client_ids, "releases": payload.releases}
    return {
        "client_ids": payload.client_ids,
        "features": payload.features,
        "labels": payload.labels,
    }


def _charge(
    ledger: PrivacyLedger, events: Iterable[ReleaseEvent], client_id: int
) -> bool:
    """Charge a query to ``client_id`` in the server's ledger; False if it can't pay."""
    try:
        ledger.charge_all(list(events), [client_id])
    except BudgetExceededError:
        return False
    return True


def _collect(
    round_: Round,
    replies: Mapping[int, Message],
    node_of: Mapping[int, int],
    reported: dict[int, dict[str, float]],
    parse: Callable[[Message, int], tuple[Any, ...]],
    *,
    timeout: float,
) -> dict[int, tuple[Any, ...]]:
    """Validate the replies of ``round_``: parsed values of the valid ones, by client.

    Missing and rejected clients are recorded in ``round_`` (a client without a reply
    within ``timeout`` seconds is missing); the ledger figures of valid replies go to
    ``reported`` (a client asked without a valid reply is dropped from it: what it
    spent is then known only from the server's own accounting).
    """
    valid: dict[int, tuple[Any, ...]] = {}
    for c in round_.asked:
        reported.pop(c, None)
        reply = replies.get(node_of[c])
        absence = _absence(reply, timeout)
        if absence is not None:
            round_.miss(c, absence)
            continue
        assert reply is not None
        try:
            *values, figures = parse(reply, c)
        except ReplyError as exc:
            round_.reject(c, str(exc))
            continue
        valid[c] = tuple(values)
        reported[c] = figures
        round_.answered.append(c)
    return valid


def _require(round_: Round, minimum: int, fraction: float, what: str) -> None:
    """Stop the run, saying why, if too few clients of ``round_`` gave a valid reply."""
    needed = max(minimum, math.ceil(fraction * len(round_.asked)))
    if len(round_.answered) < needed:
        rejected = sorted(round_.rejected.items())
        raise RuntimeError(
            f"only {len(round_.answered)} of {len(round_.asked)} {what} clients gave a "
            f"valid reply; the run needs {needed} (flower.min-reply-fraction = "
            f"{fraction:g}, and at least {minimum}). "
            f"Missing: {_head(sorted(round_.missing))}; "
            f"rejected: {_head(rejected)} (see the log for every reason)"
        )


def _head(items: list[Any], n: int = 5) -> str:
    return str(items[:n])[:-1] + (
        f", ... {len(items) - n} more]" if len(items) > n else "]"
    )


def _test_set(
    settings: Settings, options: FlowerOptions
) -> tuple[NDArray[np.float64], NDArray[np.int8]] | None:
    if options.test_data == "":
        return None
    if options.test_data == "design":
        return design_test_set(settings, options.repeat)
    featurizer, grid = public_featurizer(settings, options.repeat)
    data = load_node_data(options.test_data)
    return data.features(featurizer, grid), data.labels


def identify_clients(
    grid: Grid, nodes: list[int], total: int, reply_timeout: float
) -> tuple[Round, dict[int, int], dict[int, int], dict[int, dict[str, float]]]:
    """The identify round: who is who, and what each client says it has spent.

    Returns the round, the node of every identified client, the client id every
    answering node claimed, and every identified client's ledger figures. Of two nodes
    claiming one client id the lower node id stands and the other is rejected as a
    duplicate; an id outside ``0 .. total-1`` is rejected as unknown.
    """
    identify = Round(IDENTIFY, asked=list(nodes))
    node_of: dict[int, int] = {}
    claimed: dict[int, int] = {}
    reported: dict[int, dict[str, float]] = {}
    replies = _ask(grid, {n: RecordDict() for n in nodes}, IDENTIFY, reply_timeout)
    for node in sorted(nodes):
        reply = replies.get(node)
        absence = _absence(reply, reply_timeout)
        if absence is not None:
            identify.miss(node, absence)
            continue
        assert reply is not None
        try:
            client_id, figures = parse_identity(reply)
        except ReplyError as exc:
            identify.reject(node, str(exc))
            continue
        claimed[node] = client_id
        if client_id >= total:
            identify.reject(node, f"unknown: client {client_id} is not in this run")
        elif client_id in node_of:
            identify.reject(
                node,
                f"duplicate: client {client_id} is already node {node_of[client_id]}",
            )
        else:
            node_of[client_id] = node
            reported[client_id] = figures
            identify.answered.append(node)
    return identify, node_of, claimed, reported


def privacy_section(
    budget: float,
    ledger: PrivacyLedger,
    reported: Mapping[int, Mapping[str, float]],
    clients: list[int],
) -> dict[str, Any]:
    """The report's ``privacy`` block: the server's charges and each client's word."""
    charged = ledger.spent_all()
    return {
        "budget_per_client": budget,
        "server_accounting": ledger.summary(),
        "clients": {
            str(c): {
                "charged_by_server": float(charged[c]),
                "reported_spent": reported[c]["spent"] if c in reported else None,
                "reported_budget": reported[c]["budget"] if c in reported else None,
            }
            for c in clients
        },
    }


def write_run(
    out: Path,
    report: Mapping[str, Any],
    final: Any,
    payload: Mapping[str, NDArray],
    status: _Status,
) -> None:
    """Write ``report.json`` (strict JSON), ``model.npz`` and ``payload.npz``, then
    mark the run done in its status file and the log."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.json"
    path.write_text(
        json.dumps(_jsonable(report), indent=2, allow_nan=False), encoding="utf-8"
    )
    np.savez(out / "model.npz", coef=final.coef[0], intercept=final.intercept)
    np.savez(out / "payload.npz", **payload)
    status("done", report=str(path.resolve()))
    logger.info("ldpfda: report written to %s", path.resolve())


def run_server(
    grid: Grid, settings: Settings, options: FlowerOptions, *, run_id: int = 0
) -> tuple[ProtocolResult, dict[str, Any]]:
    """Run one repeat of the protocol over ``grid`` and write its report.

    Returns the :class:`~ldpfda.server.engine.ProtocolResult` (with the collected
    payload) and the report written to ``<report_dir>/run-<run_id>/report.json``.

    Raises
    ------
    RuntimeError
        When too few nodes connect or too few valid replies arrive.
    """
    if settings.label_release:  # the label-only modes (issue 5)
        from ldpfda.server.labeldp_app import run_label_server

        return run_label_server(grid, settings, options, run_id=run_id)
    out = Path(options.report_dir) / f"run-{run_id}"
    status = _Status(out)
    timings: dict[str, float] = {}
    n_train, n_eval = settings.n_train, settings.n_eval
    total = n_train + n_eval
    featurizer, _ = public_featurizer(settings, options.repeat)
    n_features = featurizer.n_features_out
    events = _release_events(settings, n_features)
    parse_release = _release_parser(settings, n_features)
    moment = settings.protocol == "moment"
    public = (
        public_features(settings, options.repeat, featurizer=featurizer)
        if settings.public_features
        else None
    )
    server_rng = np.random.default_rng(
        derive_seed(settings.seed, "server", options.repeat)
    )
    ledger = PrivacyLedger(budget=settings.epsilon, client_ids=np.arange(total))
    reported: dict[int, dict[str, float]] = {}

    try:
        status("waiting-for-nodes", expected=total)
        t0 = time.perf_counter()
        nodes = wait_for_nodes(
            grid, total, options.min_nodes or total, options.wait_timeout
        )
        timings["wait_for_nodes_s"] = time.perf_counter() - t0

        # Who is who: client ids decide the groups, as in run_repeat.
        status("identify", nodes=len(nodes))
        t0 = time.perf_counter()
        identify, node_of, claimed, identified = identify_clients(
            grid, nodes, total, options.reply_timeout
        )
        reported.update(identified)
        timings["identify_s"] = time.perf_counter() - t0
        train_ids = [c for c in sorted(node_of) if c < n_train]
        eval_ids = [c for c in sorted(node_of) if c >= n_train]
        absent = sorted(set(range(total)) - set(node_of))
        if absent:
            logger.warning(
                "ldpfda: %d configured client(s) absent: %s", len(absent), absent[:20]
            )

        # Releasing clients (every client of a moment run, the training clients of an
        # MRMA run) release their payloads, each asked once.
        releasing = train_ids + eval_ids if moment else train_ids
        status("privatize", releasing_clients=len(releasing))
        t0 = time.perf_counter()
        privatize_round = Round(PRIVATIZE)
        asked = {}
        for c in releasing:
            if _charge(ledger, events[PRIVATIZE], c):
                asked[node_of[c]] = RecordDict()
                privatize_round.asked.append(c)
            else:
                privatize_round.refused_by_server.append(c)
        replies = _ask(grid, asked, PRIVATIZE, options.reply_timeout)
        rows = _collect(
            privatize_round,
            replies,
            node_of,
            reported,
            parse_release,
            timeout=options.reply_timeout,
        )
        _require(
            privatize_round,
            2 if moment else settings.subsample_size,
            options.min_reply_fraction,
            "releasing" if moment else "training",
        )
        payload = _payload(settings, n_features, rows)
        timings["clients_privatize_s"] = time.perf_counter() - t0

        if moment:
            status("fit", payloads=len(payload))
            t0 = time.perf_counter()
            result = moment_result(
                payload, settings, public=public, privacy=ledger.summary()
            )
            timings["server_train_s"] = time.perf_counter() - t0
            rounds = {IDENTIFY: identify, PRIVATIZE: privatize_round}
        else:
            result, rounds = _mrma_rounds(
                grid,
                settings,
                options,
                payload,
                n_features=n_features,
                eval_ids=eval_ids,
                node_of=node_of,
                ledger=ledger,
                reported=reported,
                public=public,
                server_rng=server_rng,
                status=status,
                timings=timings,
            )
            rounds = {IDENTIFY: identify, PRIVATIZE: privatize_round, **rounds}
        t0 = time.perf_counter()
        test = _test_set(settings, options)
        if test is not None:
            score(result, *test)
        timings["server_score_s"] = time.perf_counter() - t0
        result.timings = timings

        report = result.report()
        report.update(
            {
                "ldpfda_version": __version__,
                "run_id": int(run_id),
                "settings": settings.to_mapping(),
                "flower": options.to_mapping(),
                "participation": {
                    "expected_clients": total,
                    "connected_nodes": len(nodes),
                    "absent_clients": absent,
                    "ignored_nodes": {
                        str(node): reason
                        for node, reason in identify.rejected.items()
                        if reason_kind(reason) in ("duplicate", "unknown")
                    },
                    "train_clients": train_ids,
                    "eval_clients": eval_ids,
                    "output_range": list(_output_range(settings, n_features)),
                    "rejections": _rejections(rounds, node_of, claimed),
                    **{name: r.summary() for name, r in rounds.items()},
                },
            }
        )
        report["privacy"] = privacy_section(
            settings.epsilon, ledger, reported, sorted(node_of)
        )
        write_run(out, report, result.final, _payload_arrays(payload), status)
        return result, report
    except Exception as exc:
        status("failed", error=f"{type(exc).__name__}: {exc}")
        raise


def _mrma_rounds(
    grid: Grid,
    settings: Settings,
    options: FlowerOptions,
    payload: Payload,
    *,
    n_features: int,
    eval_ids: list[int],
    node_of: Mapping[int, int],
    ledger: PrivacyLedger,
    reported: dict[int, dict[str, float]],
    public: NDArray[np.float64] | None,
    server_rng: np.random.Generator,
    status: _Status,
    timings: dict[str, float],
) -> tuple[ProtocolResult, dict[str, Round]]:
    """MRMA after the training payloads: weak models, evaluation round, aggregation."""
    status("train", payloads=len(payload))
    t0 = time.perf_counter()
    weak = train_weak(payload, settings, server_rng, public=public)
    timings["server_train_s"] = time.perf_counter() - t0
    events = _release_events(settings, n_features)

    # Evaluation subgroups: each evaluator gets its model.
    status("evaluate", eval_clients=len(eval_ids))
    t0 = time.perf_counter()
    groups = assign_groups(len(eval_ids), settings.num_weak_models, server_rng)
    evaluate_round = Round(EVALUATE)
    asked = {}
    group_of: dict[int, int] = {}
    for c, g in zip(eval_ids, groups, strict=True):
        if not _charge(ledger, events[EVALUATE], c):
            evaluate_round.refused_by_server.append(c)
            continue
        asked[node_of[c]] = RecordDict(
            {
                "model": ArrayRecord(
                    {
                        "coef": Array(
                            np.ascontiguousarray(weak.coef[g], dtype=np.float64)
                        ),
                        "intercept": Array(
                            np.array([weak.intercept[g]], dtype=np.float64)
                        ),
                    }
                )
            }
        )
        group_of[c] = int(g)
        evaluate_round.asked.append(c)
    replies = _ask(grid, asked, EVALUATE, options.reply_timeout)
    feedback = _collect(
        evaluate_round,
        replies,
        node_of,
        reported,
        lambda reply, c: parse_feedback(reply, client_id=c),
        timeout=options.reply_timeout,
    )
    answered = sorted(feedback)
    bits = [feedback[c][0] for c in answered]
    answered_groups = [group_of[c] for c in answered]
    _require(evaluate_round, 1, options.min_reply_fraction, "evaluation")
    timings["clients_evaluate_s"] = time.perf_counter() - t0

    status("aggregate", feedback_bits=len(bits))
    t0 = time.perf_counter()
    result = aggregate(
        weak,
        np.array(bits, dtype=np.int8),
        np.array(answered_groups, dtype=np.int64),
        payload,
        settings,
        privacy=ledger.summary(),
        public=public,
    )
    timings["server_aggregate_s"] = time.perf_counter() - t0
    return result, {"evaluate": evaluate_round}


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point of ``flwr run``: parse the run config, run one repeat or phase."""
    settings, options = parse_run_config(context.run_config)
    if options.phase != "single":
        from ldpfda.server.multiserver_app import run_phase

        run_phase(grid, settings, options, run_id=context.run_id)
        return
    run_server(grid, settings, options, run_id=context.run_id)
