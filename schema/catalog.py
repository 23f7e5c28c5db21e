"""Every query of ldpfda's protocols, built from the run's public parameters.

Each query declares its request and reply arrays as
:class:`~ldpfda.schema.queries.ArraySpec` (docs/flower.md tabulates the rounds of every
protocol); the costs are the events of :mod:`ldpfda.schema.releases`, the output ranges
those of the mechanisms the settings name.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda.config import Settings
from ldpfda.privacy.base import ReleaseEvent
from ldpfda.privacy.joint import ClassSplitMechanism
from ldpfda.schema.queries import ArraySpec, Cost, Query, Request
from ldpfda.schema.releases import (
    check_priors,
    evaluation_events,
    joint_mechanism,
    label_event,
    p2p_relay_event,
    prior_groups,
    training_mechanisms,
)

__all__ = [
    "CLASSES_SPEC",
    "EVALUATE",
    "FEATURES",
    "IDENTIFY",
    "LABEL",
    "P2P_FORWARD",
    "P2P_RANDOMIZE",
    "PRIVATIZE",
    "classes_request",
    "evaluate_query",
    "features_query",
    "identify_query",
    "label_query",
    "p2p_forward_query",
    "p2p_randomize_query",
    "privatize_query",
    "release_range",
    "request_classes",
]

IDENTIFY = "identify"
PRIVATIZE = "privatize"
EVALUATE = "evaluate"
FEATURES = "features"
LABEL = "label"
P2P_RANDOMIZE = "p2p_randomize"
P2P_FORWARD = "p2p_forward"

#: The request key of every query of a K-class run (K > 2): K.
N_CLASSES_KEY = "n-classes"
#: Where every request of a K-class run carries K (absent for two classes).
CLASSES_SPEC = ArraySpec("classes", N_CLASSES_KEY, "int64")

#: The featurizer's box, with room for the last bit of its rounding.
FEATURE_BOX = (-1.0 - 1e-12, 1.0 + 1e-12)


def _constant(events: list[ReleaseEvent]) -> Cost:
    """The cost of a query that costs every client the same ``events``."""
    return lambda request, index: (
        [tuple(events)],
        np.zeros(index.size, dtype=np.int64),
    )


def _categorical(
    record: str, key: str, dtype: str, kind: str, describe: str, n: int = 2
) -> ArraySpec:
    """A reply value in ``0 .. n - 1``, rejected as ``kind: describe`` otherwise."""
    return ArraySpec(record, key, dtype, values=n, kind=kind, describe=describe)


def identify_query() -> Query:
    """Who a node is and what it has spent; releases nothing, costs nothing."""
    return Query(IDENTIFY, ledger_record="identity")


def _privatize_mechanisms(
    settings: Settings, n_features: int, n_classes: int = 2
) -> list[Any]:
    """The mechanisms of a privatize release: the joint one, or Laplace on x and
    randomized response on y (the reference release; K-ary for K > 2 classes)."""
    if settings.joint_release:
        mechanism = settings.vector_mechanism
        design = settings.multiclass_release
        return [
            joint_mechanism(settings.epsilon, n_features, mechanism, n_classes, design)
        ]
    return list(
        training_mechanisms(
            settings.epsilon, n_features, settings.label_share, n_classes
        )
    )


def release_range(settings: Settings, n_features: int) -> tuple[float, float]:
    """The declared range of every value a privatize reply releases."""
    return _privatize_mechanisms(settings, n_features)[0].output_range()


def request_classes(request: Request) -> int:
    """K of a request: its ``n-classes`` (K > 2), else 2."""
    if N_CLASSES_KEY not in {*request.rows, *request.shared}:
        return 2
    k = np.asarray(request.common(N_CLASSES_KEY)).reshape(-1)
    if k.size != 1 or int(k[0]) < 3:
        raise ValueError(f"{N_CLASSES_KEY} must be one integer >= 3, got {k.tolist()}")
    return int(k[0])


def classes_request(n_classes: int, request: Request | None = None) -> Request:
    """``request`` (default: empty) as a K-class run sends it: with ``n-classes``
    shared by every client for K > 2, unchanged for two classes."""
    request = Request() if request is None else request
    if n_classes == 2:
        return request
    shared = {**request.shared, N_CLASSES_KEY: np.array([n_classes], dtype=np.int64)}
    return Request(request.rows, shared, request.ragged)


def _classes(specs: tuple[ArraySpec, ...], n_classes: int) -> tuple[ArraySpec, ...]:
    """A query's request arrays, with :data:`CLASSES_SPEC` for K > 2 classes."""
    return specs if n_classes == 2 else (*specs, CLASSES_SPEC)


def privatize_query(settings: Settings, n_features: int, n_classes: int = 2) -> Query:
    """A client's one release of its features and label, as the settings name it.

    With K > 2 classes the request carries K (``n-classes``) and the reply the class
    each client drew besides its vector (joint release; with ``multiclass-release =
    "split"`` its label by K-ary randomized response besides (1, z)), or its label in
    0 .. K - 1 by K-ary randomized response (reference release).
    """
    mechanisms = _privatize_mechanisms(settings, n_features, n_classes)
    low, high = mechanisms[0].output_range()
    reply: tuple[ArraySpec, ...]
    if settings.joint_release:
        reply = (
            ArraySpec("payload", "releases", "float64", (n_features + 1,), low, high),
        )
        if n_classes > 2:
            what = "drawn class"
            if isinstance(mechanisms[0], ClassSplitMechanism):
                what = "reported label"
            describe = f"{what} must be in {{0, ..., {n_classes - 1}}}"
            reply = (
                _categorical("payload", "class", "int64", "label", describe, n_classes),
                *reply,
            )
    else:
        describe = "randomized label must be 0 or 1"
        if n_classes > 2:
            describe = f"randomized label must be in {{0, ..., {n_classes - 1}}}"
        reply = (
            ArraySpec("payload", "features", "float64", (n_features,), low, high),
            _categorical("payload", "labels", "int8", "label", describe, n_classes),
        )
    request = _classes((), n_classes)
    return Query(
        PRIVATIZE, request, reply, cost=_constant([m.event() for m in mechanisms])
    )


def evaluate_query(settings: Settings, n_features: int, n_classes: int = 2) -> Query:
    """Whether the model sent to a client errs on it, by randomized response.

    A K-class model (K > 2) travels as its K x p coefficients row after row and its
    K intercepts; the client predicts the class of the largest score.
    """
    request: tuple[ArraySpec, ...] = (
        ArraySpec("model", "coef", "float64", (n_features,), lead=False),
        ArraySpec("model", "intercept", "float64"),
    )
    if n_classes > 2:
        request = (
            ArraySpec(
                "model", "coef", "float64", (n_classes * n_features,), lead=False
            ),
            ArraySpec("model", "intercept", "float64", (n_classes,), lead=False),
            CLASSES_SPEC,
        )
    describe = "feedback must be a bit (0 or 1)"
    reply = (_categorical("feedback", "bit", "int8", "bit", describe),)
    events = evaluation_events(epsilon=settings.epsilon)
    return Query(EVALUATE, request, reply, _constant(events))


def features_query(n_features: int, n_classes: int = 2) -> Query:
    """A client's scaled features in the clear (label-only modes: features public);
    a K-class run says K, so that a node whose label or spec disagrees refuses
    before anything else."""
    low, high = FEATURE_BOX
    reply = (
        ArraySpec(
            "features", "x", "float64", (n_features,), low, high, what="features"
        ),
    )
    return Query(FEATURES, _classes((), n_classes), reply)


def _label_reply(dtype: str, n_classes: int) -> tuple[ArraySpec, ...]:
    describe = f"label must be in {{0, ..., {n_classes - 1}}}"
    return (_categorical("label", "label", dtype, "label", describe, n_classes),)


def label_query(settings: Settings, n_classes: int = 2) -> Query:
    """A client's label by randomized response with the prior it receives."""
    eps = settings.epsilon

    def cost(
        request: Request, index: NDArray[np.int64]
    ) -> tuple[list[tuple[ReleaseEvent, ...]], NDArray[np.int64]]:
        q = request.take(index).per_client("q", int(index.size))
        if not q.size:
            return [], np.zeros(0, dtype=np.int64)
        rows, group = prior_groups(check_priors(q, q.shape[0]))
        return [(label_event(row, eps),) for row in rows], group

    # Any length: the node checks the prior itself (K classes, positive, sums to 1).
    prior = ArraySpec("prior", "q", "float64", (-1,), lead=False)
    request = _classes((prior,), n_classes)
    return Query(LABEL, request, _label_reply("int64", n_classes), cost)


def p2p_randomize_query(n_classes: int = 2) -> Query:
    """A client's label by (K-ary) randomized response at the local epsilon, for the
    relay."""

    def cost(
        request: Request, index: NDArray[np.int64]
    ) -> tuple[list[tuple[ReleaseEvent, ...]], NDArray[np.int64]]:
        event = p2p_relay_event(
            local_epsilon=float(request.common("local-epsilon").reshape(-1)[0]),
            cluster_sizes=request.common("cluster-sizes"),
            n_classes=n_classes,
        )
        return _constant([event])(request, index)

    request = _classes(
        (
            ArraySpec("p2p", "local-epsilon", "float64"),
            ArraySpec("p2p", "cluster-sizes", "int64", (-1,), lead=False, ragged=True),
        ),
        n_classes,
    )
    return Query(P2P_RANDOMIZE, request, _label_reply("int8", n_classes), cost)


def p2p_forward_query(n_classes: int = 2) -> Query:
    """The noisy label of a peer a client draws from its cluster (post-processing)."""
    peers = ArraySpec("peers", "labels", "int8", (-1,), lead=False, ragged=True)
    request = _classes((peers,), n_classes)
    return Query(P2P_FORWARD, request, _label_reply("int8", n_classes))
