"""The protocols, each written once as typed queries (:mod:`ldpfda.schema.catalog`)
over a :class:`Session`, whose transport is in process or Flower's grid: both runs of
the same settings and seed end with the same model by construction.

``moment``: every client releases once, the server fits the moment classifier.
``mrma``: training clients release, the server fits M weak models, each evaluation
client answers one feedback bit on its subgroup's model, then reversal, selection and
averaging. ``label``: every client sends its public features, then a randomized label
(``label-p2p``: a label for the relay, then a peer's). ``server_rng`` is drawn in a
fixed order: subsamples and evaluation groups (MRMA), clusters and pilots (label).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda.config import Settings
from ldpfda.privacy.budget import split_budget
from ldpfda.privacy.peer_to_peer import p2p_guarantee
from ldpfda.schema import catalog
from ldpfda.schema.payloads import (
    JointPayload,
    LabelPayload,
    LinearModels,
    TrainingPayload,
)
from ldpfda.schema.queries import Request
from ldpfda.schema.releases import p2p_event, uniform_priors
from ldpfda.server.fitting import (
    MomentSums,
    ProtocolResult,
    aggregate,
    moment_result,
    train_weak,
)
from ldpfda.server.labels import (
    cluster_features,
    label_result,
    p2p_blocks,
    prior_rr_rounds,
)
from ldpfda.server.mrma import assign_groups
from ldpfda.server.session import QuorumError, Replies, Session, locate, logger

__all__ = ["Plan", "ask_feedback", "planned_ids", "run_plan", "train_round"]


@dataclass(frozen=True)
class Plan:
    """What a protocol run needs besides its session: ``train_ids`` and ``eval_ids``
    (in a ``moment`` or ``label`` run both simply release), the public featurizer's
    output width, public, unlabeled scaled features (the moment classifier's second
    moment) and the number of classes K (public; K > 2 in the ``moment`` protocol of a
    joint release, in the ``mrma`` protocol of the reference release and in the
    label-only modes; every request of a K-class run says K)."""

    settings: Settings
    train_ids: NDArray[np.int64]
    eval_ids: NDArray[np.int64]
    n_features: int
    server_rng: np.random.Generator
    public: NDArray[np.float64] | None = None
    #: The training and evaluation clients the run asked for, whether they turned up
    #: or not (default: ``train_ids`` and ``eval_ids``); every round's quorum is
    #: counted on them.
    planned: tuple[NDArray[np.int64], NDArray[np.int64]] | None = None
    n_classes: int = 2
    #: Whether a ``moment`` run keeps every joint release in its result's payload
    #: (False: it keeps only their sums, and memory does not grow with the clients).
    keep_payload: bool = True

    def __post_init__(self) -> None:
        self.settings.check_n_classes(self.n_classes)

    @cached_property
    def every_client(self) -> NDArray[np.int64]:
        """The training, then the evaluation clients (one array, built once; no copy
        when the two are the halves of one int64 array, as in process)."""
        train, evaluation = self.train_ids, self.eval_ids
        whole = train.base
        if (
            isinstance(whole, np.ndarray)
            and whole.dtype == np.int64
            and whole.ndim == 1
            and whole.flags.c_contiguous
            and whole is evaluation.base
            and whole.size == train.size + evaluation.size
            and np.array_equal(whole[: train.size], train)
            and np.array_equal(whole[train.size :], evaluation)
        ):
            return whole
        return np.concatenate([train, evaluation]).astype(np.int64)

    def asked_for(self, group: str) -> NDArray[np.int64]:
        """The planned clients of ``group``: ``"train"``, ``"eval"`` or ``"every"``."""
        if group == "every" and self.planned is None:
            return self.every_client
        train, evaluation = self.planned or (self.train_ids, self.eval_ids)
        if group == "every":
            return np.concatenate([train, evaluation]).astype(np.int64)
        return np.asarray(train if group == "train" else evaluation, dtype=np.int64)


def planned_ids(settings: Settings) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The clients a run of ``settings`` asks for: training ``0 .. n_train-1``,
    evaluation the next ``n_eval`` (:attr:`Plan.planned`)."""
    total = settings.n_train + settings.n_eval
    return np.arange(settings.n_train), np.arange(settings.n_train, total)


def run_plan(session: Session, plan: Plan) -> ProtocolResult:
    """Run the protocol of ``plan.settings`` through ``session``; the result's
    ``timings`` are the session's."""
    run = {"moment": _moment, "mrma": _mrma}.get(plan.settings.protocol, _label_only)
    result = run(session, plan)
    result.timings = dict(session.timings)
    return result


def _sorted(replies: Replies) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    order = np.argsort(replies.ids, kind="stable")
    return replies.ids[order], order


def _privatize(
    session: Session,
    plan: Plan,
    group: str,
    *,
    minimum: int,
    what: str,
    sums: MomentSums | None = None,
) -> JointPayload | TrainingPayload:
    """The ``privatize`` round of the clients of ``group`` (:meth:`Plan.asked_for`):
    the valid releases as the payload, ordered by client id; with ``sums``, the
    joint releases are added to them chunk by chunk, and the payload holds what they
    keep."""
    s = plan.settings
    ids = plan.every_client if group == "every" else plan.train_ids
    session.status("privatize", releasing_clients=int(ids.size))
    k = plan.n_classes
    query = catalog.privatize_query(s, plan.n_features, k)

    def add(part: Replies) -> None:
        assert sums is not None
        sums.add(part.ids, part.values["releases"], part.values.get("class"))

    got = session.ask(
        catalog.PRIVATIZE,
        query,
        ids,
        catalog.classes_request(k),
        minimum=minimum,
        what=what,
        planned=plan.asked_for(group),
        reduce=None if sums is None else add,
    )
    if sums is not None:
        # The releases are in the sums already; sorting ten million ids here only
        # to keep none of them cost 16 bytes a client at the peak.
        return sums.payload(_no_releases(plan))
    released, order = _sorted(got)
    if s.joint_release:
        releases = got.values["releases"][order].astype(np.float64)
        if k == 2:
            return JointPayload(released, releases, s.epsilon, s.vector_mechanism)
        classes = got.values["class"][order].astype(np.int64)
        return JointPayload(
            released,
            releases,
            s.epsilon,
            s.vector_mechanism,
            classes,
            k,
            s.multiclass_release,
        )
    split = split_budget(
        epsilon=s.epsilon, n_coefficients=plan.n_features, label_share=s.label_share
    )
    return TrainingPayload(
        released,
        got.values["features"][order].astype(np.float64),
        got.values["labels"][order].astype(np.int8),
        split.coefficients,
        split.label,
        k,
    )


def _no_releases(plan: Plan) -> JointPayload:
    """A joint payload of no client: what ``plan``'s joint releases are."""
    s, k = plan.settings, plan.n_classes
    return JointPayload(
        np.zeros(0, dtype=np.int64),
        np.zeros((0, plan.n_features + 1)),
        s.epsilon,
        s.vector_mechanism,
        None if k == 2 else np.zeros(0, dtype=np.int64),
        k,
        s.multiclass_release,
    )


def _moment(session: Session, plan: Plan) -> ProtocolResult:
    sums = None
    if plan.settings.joint_release:
        sums = MomentSums.of(_no_releases(plan), plan.every_client, plan.keep_payload)
    with session.timed("clients_privatize_s"):
        payload = _privatize(
            session, plan, "every", minimum=2, what="releasing", sums=sums
        )
    session.status("fit", payloads=len(payload) if sums is None else sums.added)
    with session.timed("server_train_s"):
        privacy = session.ledger.summary()
        return moment_result(
            payload, plan.settings, public=plan.public, privacy=privacy, sums=sums
        )


def train_round(
    session: Session, plan: Plan
) -> tuple[JointPayload | TrainingPayload, LinearModels]:
    """MRMA's training: the releases of ``plan.train_ids`` and the server's M weak
    models on subsamples drawn from ``plan.server_rng``.

    Stops the run when fewer than ``mrma.subsample-size`` clients give a valid release;
    times ``clients_privatize_s`` and ``server_train_s``.
    """
    s = plan.settings
    with session.timed("clients_privatize_s"):
        payload = _privatize(
            session, plan, "train", minimum=s.subsample_size, what="training"
        )
    session.status("train", payloads=len(payload))
    with session.timed("server_train_s"):
        return payload, train_weak(payload, s, plan.server_rng, public=plan.public)


def _mrma(session: Session, plan: Plan) -> ProtocolResult:
    payload, weak = train_round(session, plan)
    session.status("evaluate", eval_clients=int(plan.eval_ids.size))
    with session.timed("clients_evaluate_s"):
        _, bits, groups = ask_feedback(session, plan, weak)
    session.status("aggregate", feedback_bits=int(bits.size))
    with session.timed("server_aggregate_s"):
        privacy = session.ledger.summary()
        return aggregate(
            weak,
            bits,
            groups,
            payload,
            plan.settings,
            privacy=privacy,
            public=plan.public,
        )


def ask_feedback(
    session: Session, plan: Plan, weak: LinearModels
) -> tuple[NDArray[np.int64], NDArray[np.int8], NDArray[np.int64]]:
    """The evaluation round: ``plan.eval_ids`` in one subgroup per model of ``weak``
    (drawn from ``plan.server_rng``), each evaluator sent its subgroup's model.

    Returns the clients whose bit came back (by id), their bits and their subgroups.
    """
    eval_ids, k = plan.eval_ids, plan.n_classes
    rows = 1 if k == 2 else k
    # One row per model: a K-class model's K x p coefficients flattened, K intercepts.
    coef = weak.coef.reshape(-1, rows * weak.coef.shape[1])
    intercept = weak.intercept.reshape(coef.shape[0], rows)
    if k == 2:
        intercept = intercept[:, 0]  # binary models travel with a scalar intercept
    groups = assign_groups(eval_ids.size, coef.shape[0], plan.server_rng)
    request = catalog.classes_request(
        k, Request(rows={"coef": coef[groups], "intercept": intercept[groups]})
    )
    query = catalog.evaluate_query(plan.settings, plan.n_features, k)
    got = session.ask(
        catalog.EVALUATE,
        query,
        eval_ids,
        request,
        what="evaluation",
        planned=plan.asked_for("eval"),
    )
    answered, order = _sorted(got)
    _, where = locate(eval_ids, answered)
    return answered, got.values["bit"][order].astype(np.int8), groups[where]


def _label_only(session: Session, plan: Plan) -> ProtocolResult:
    s, k = plan.settings, plan.n_classes
    planned = plan.asked_for("every")
    with session.timed("clients_features_s"):
        session.status("features", clients=int(plan.every_client.size))
        query = catalog.features_query(plan.n_features, k)
        got = session.ask(
            catalog.FEATURES,
            query,
            plan.every_client,
            catalog.classes_request(k),
            what="releasing",
            planned=planned,
        )
        ids, order = _sorted(got)
        x = got.values["x"][order].astype(np.float64)

    def release(
        stage: str, index: NDArray[np.int64], prior_rows: NDArray[np.float64]
    ) -> NDArray[np.int64]:
        asked = ids[index]
        query = catalog.label_query(s, k)
        request = catalog.classes_request(k, Request(rows={"q": prior_rows}))
        answers = session.ask(
            stage, query, asked, request, what="labelling", planned=planned
        )
        return answers.get("label", asked, -1).astype(np.int64)

    session.status("labels", clients=int(ids.size))
    with session.timed("clients_label_s"):
        if s.mechanism == "label-p2p":
            labels, priors, info = _p2p_rounds(session, plan, ids, x)
        else:
            labels, priors, info = prior_rr_rounds(
                s, ids, x, plan.server_rng, release, k
            )
        keep = np.flatnonzero(labels >= 0)
        payload = LabelPayload(
            ids[keep], x[keep], labels[keep], priors[keep], s.epsilon
        )
    session.status("fit", payloads=len(payload))
    with session.timed("server_train_s"):
        privacy = {**session.ledger.summary(), "labeldp": info}
        return label_result(payload, s, plan.server_rng, privacy=privacy)


def _p2p_rounds(
    session: Session, plan: Plan, ids: NDArray[np.int64], x: NDArray[np.float64]
) -> tuple[NDArray[np.int64], NDArray[np.float64], dict[str, Any]]:
    r"""``label-p2p``: the relay's round, then every client forwards a peer's label.

    The relay is the server: every client randomizes its label (K-ary randomized
    response for K > 2) at its whole epsilon (``eps0 = epsilon``) and is charged that;
    the forwarded labels, which the model is fit on, are
    :math:`(\varepsilon, \delta)`-label-DP with a smaller epsilon toward an analyst
    who sees only them (reported under ``labeldp``).

    Only clients whose bit arrived are forwarded, in clusters that kept at least
    ``labeldp.min-cluster-size`` bits; the run stops if missing replies shrank the
    clusters so far that the forwarded bits would be less private than promised.
    """
    s, k = plan.settings, plan.n_classes
    size = s.min_cluster_size
    clusters = cluster_features(
        x, n_clusters=s.n_clusters, min_size=size, rng=plan.server_rng
    )
    sizes = np.bincount(clusters)
    eps0 = float(s.epsilon)
    event = p2p_event(local_epsilon=eps0, cluster_sizes=sizes, n_classes=k)
    shared = {
        "local-epsilon": np.array([eps0], dtype=np.float64),
        "cluster-sizes": sizes.astype(np.int64),
    }
    query = catalog.p2p_randomize_query(k)
    planned = plan.asked_for("every")
    got = session.ask(
        catalog.P2P_RANDOMIZE,
        query,
        ids,
        catalog.classes_request(k, Request(shared=shared)),
        what="randomizing",
        planned=planned,
    )
    noisy = got.get("label", ids, -1)
    has_bit = noisy >= 0
    kept = np.bincount(clusters[has_bit], minlength=sizes.size)
    forward = has_bit & (kept[clusters] >= size)
    if np.any(has_bit & ~forward):
        logger.warning(
            "ldpfda: %d client(s) not forwarded: their cluster kept fewer than %d bits",
            int((has_bit & ~forward).sum()),
            size,
        )
    delta = event.as_dict()["delta"]
    realized, _ = p2p_guarantee(
        local_epsilon=eps0, cluster_sizes=kept[kept >= size], delta=delta, n_classes=k
    )
    if realized > event.epsilon * (1 + 1e-9):
        raise QuorumError(
            f"missing replies shrank clusters so far that the forwarded bits would be "
            f"{realized:.6g}-DP, above the promised {event.epsilon:.6g}; not forwarding"
        )
    index = np.flatnonzero(forward)
    query = catalog.p2p_forward_query(k)
    blocks = p2p_blocks(noisy[index], clusters[index])
    request = catalog.classes_request(k, Request(ragged={"labels": blocks}))
    reports = session.ask(
        catalog.P2P_FORWARD,
        query,
        ids[index],
        request,
        what="forwarding",
        planned=planned,
    )
    labels = reports.get("label", ids, -1).astype(np.int64)
    info = {
        "mechanism": s.mechanism,
        "local_epsilon": eps0,
        "epsilon": event.epsilon,
        "delta": delta,
        "n_clusters": int(sizes.size),
        "min_cluster_size": int(sizes.min()),
        "forwarded_clients": int(index.size),
    }
    return labels, uniform_priors(ids.size, k), info
