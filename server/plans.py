"""The protocols, each written once as typed queries (:mod:`ldpfda.schema.catalog`)
over a :class:`Session`, whose transport is in process or Flower's grid: both runs of
the same settings and seed end with the same model by construction.

``moment``: every client releases once, the server fits the moment classifier.
``mrma``: training clients release, the server fits M weak models, each evaluation
client answers one feedback bit on its subgroup's model, then reversal, selection and
averaging. ``label``: every client sends its public features, then a randomized label
(``label-p2p``: a bit for the relay, then a peer's bit). ``server_rng`` is drawn in a
fixed order: subsamples and evaluation groups (MRMA), clusters and pilots (label).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
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
from ldpfda.server.fitting import ProtocolResult, aggregate, moment_result, train_weak
from ldpfda.server.labels import (
    N_CLASSES,
    cluster_features,
    label_result,
    p2p_blocks,
    p2p_summary,
    prior_rr_rounds,
)
from ldpfda.server.mrma import assign_groups
from ldpfda.server.session import QuorumError, Replies, Session, locate, logger

__all__ = ["Plan", "ask_feedback", "run_plan", "train_round"]


@dataclass(frozen=True)
class Plan:
    """What a protocol run needs besides its session.

    ``train_ids`` and ``eval_ids`` take part (in a ``moment`` or ``label`` run both
    simply release); ``n_features`` is the public featurizer's output width;
    ``public`` holds public, unlabeled scaled features (the moment classifier's second
    moment).
    """

    settings: Settings
    train_ids: NDArray[np.int64]
    eval_ids: NDArray[np.int64]
    n_features: int
    server_rng: np.random.Generator
    public: NDArray[np.float64] | None = None

    @property
    def every_client(self) -> NDArray[np.int64]:
        return np.concatenate([self.train_ids, self.eval_ids]).astype(np.int64)


def run_plan(session: Session, plan: Plan) -> ProtocolResult:
    """Run the protocol of ``plan.settings`` through ``session``, timings included."""
    run = {"moment": _moment, "mrma": _mrma}.get(plan.settings.protocol, _label_only)
    return run(session, plan)


def _sorted(replies: Replies) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    order = np.argsort(replies.ids, kind="stable")
    return replies.ids[order], order


def _privatize(
    session: Session,
    settings: Settings,
    n_features: int,
    ids: NDArray[np.int64],
    timings: dict[str, float],
    *,
    minimum: int,
    what: str,
) -> JointPayload | TrainingPayload:
    """The ``privatize`` round of clients ``ids``: the valid releases as the payload,
    ordered by client id."""
    t0 = time.perf_counter()
    session.status("privatize", releasing_clients=int(ids.size))
    query = catalog.privatize_query(settings, n_features)
    got = session.ask(catalog.PRIVATIZE, query, ids, minimum=minimum, what=what)
    released, order = _sorted(got)
    if settings.joint_release:
        releases = got.values["releases"][order].astype(np.float64)
        payload: JointPayload | TrainingPayload = JointPayload(
            released, releases, settings.epsilon, settings.vector_mechanism
        )
    else:
        split = split_budget(
            epsilon=settings.epsilon,
            n_coefficients=n_features,
            label_share=settings.label_share,
        )
        payload = TrainingPayload(
            released,
            got.values["features"][order].astype(np.float64),
            got.values["labels"][order].astype(np.int8),
            split.coefficients,
            split.label,
        )
    timings["clients_privatize_s"] = time.perf_counter() - t0
    return payload


def _moment(session: Session, plan: Plan) -> ProtocolResult:
    s, p = plan.settings, plan.n_features
    timings: dict[str, float] = {}
    ids = plan.every_client
    payload = _privatize(session, s, p, ids, timings, minimum=2, what="releasing")
    session.status("fit", payloads=len(payload))
    t0 = time.perf_counter()
    result = moment_result(
        payload, s, public=plan.public, privacy=session.ledger.summary()
    )
    timings["server_train_s"] = time.perf_counter() - t0
    result.timings = timings
    return result


def train_round(
    session: Session,
    settings: Settings,
    n_features: int,
    train_ids: NDArray[np.int64],
    server_rng: np.random.Generator,
    timings: dict[str, float],
    public: NDArray[np.float64] | None = None,
) -> tuple[JointPayload | TrainingPayload, LinearModels]:
    """MRMA's training: the training clients' releases and the server's M weak models.

    Stops the run when fewer than ``mrma.subsample-size`` clients give a valid release;
    ``timings`` gets ``clients_privatize_s`` and ``server_train_s``.
    """
    payload = _privatize(
        session,
        settings,
        n_features,
        train_ids,
        timings,
        minimum=settings.subsample_size,
        what="training",
    )
    session.status("train", payloads=len(payload))
    t0 = time.perf_counter()
    weak = train_weak(payload, settings, server_rng, public=public)
    timings["server_train_s"] = time.perf_counter() - t0
    return payload, weak


def _mrma(session: Session, plan: Plan) -> ProtocolResult:
    s, p = plan.settings, plan.n_features
    timings: dict[str, float] = {}
    payload, weak = train_round(
        session, s, p, plan.train_ids, plan.server_rng, timings, plan.public
    )
    session.status("evaluate", eval_clients=int(plan.eval_ids.size))
    t0 = time.perf_counter()
    groups = assign_groups(plan.eval_ids.size, s.num_weak_models, plan.server_rng)
    _, bits, groups = ask_feedback(session, s, p, plan.eval_ids, weak, groups)
    timings["clients_evaluate_s"] = time.perf_counter() - t0

    session.status("aggregate", feedback_bits=int(bits.size))
    t0 = time.perf_counter()
    privacy = session.ledger.summary()
    result = aggregate(
        weak, bits, groups, payload, s, privacy=privacy, public=plan.public
    )
    timings["server_aggregate_s"] = time.perf_counter() - t0
    result.timings = timings
    return result


def ask_feedback(
    session: Session,
    settings: Settings,
    n_features: int,
    eval_ids: NDArray[np.int64],
    weak: LinearModels,
    groups: NDArray[np.int64],
) -> tuple[NDArray[np.int64], NDArray[np.int8], NDArray[np.int64]]:
    """The evaluation round: evaluator ``eval_ids[i]`` is sent model ``groups[i]``.

    Returns the clients whose bit came back (by id), their bits and their subgroups.
    """
    request = Request(
        rows={"coef": weak.coef[groups], "intercept": weak.intercept[groups]}
    )
    query = catalog.evaluate_query(settings, n_features)
    got = session.ask(catalog.EVALUATE, query, eval_ids, request, what="evaluation")
    answered, order = _sorted(got)
    _, where = locate(eval_ids, answered)
    return answered, got.values["bit"][order].astype(np.int8), groups[where]


def _label_only(session: Session, plan: Plan) -> ProtocolResult:
    s = plan.settings
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    session.status("features", clients=int(plan.every_client.size))
    query = catalog.features_query(plan.n_features)
    got = session.ask(catalog.FEATURES, query, plan.every_client, what="releasing")
    ids, order = _sorted(got)
    x = got.values["x"][order].astype(np.float64)
    timings["clients_features_s"] = time.perf_counter() - t0

    def release(
        stage: str, index: NDArray[np.int64], prior_rows: NDArray[np.float64]
    ) -> NDArray[np.int64]:
        asked = ids[index]
        query = catalog.label_query(s, N_CLASSES)
        request = Request(rows={"q": prior_rows})
        answers = session.ask(stage, query, asked, request, what="labelling")
        return answers.get("label", asked, -1).astype(np.int64)

    session.status("labels", clients=int(ids.size))
    t0 = time.perf_counter()
    if s.mechanism == "label-p2p":
        labels, priors, channel_epsilon, info = _p2p_rounds(session, plan, ids, x)
    else:
        labels, priors, info = prior_rr_rounds(s, ids, x, plan.server_rng, release)
        channel_epsilon = s.epsilon
    keep = np.flatnonzero(labels >= 0)
    payload = LabelPayload(
        ids[keep], x[keep], labels[keep], priors[keep], channel_epsilon
    )
    timings["clients_label_s"] = time.perf_counter() - t0

    session.status("fit", payloads=len(payload))
    t0 = time.perf_counter()
    privacy = {**session.ledger.summary(), "labeldp": info}
    result = label_result(payload, s, plan.server_rng, privacy=privacy)
    timings["server_train_s"] = time.perf_counter() - t0
    result.timings = timings
    return result


def _p2p_rounds(
    session: Session, plan: Plan, ids: NDArray[np.int64], x: NDArray[np.float64]
) -> tuple[NDArray[np.int64], NDArray[np.float64], float, dict[str, Any]]:
    r"""``label-p2p``: the relay's round, then every client forwards a peer's bit.

    The relay is the server: every client randomizes its bit at its whole epsilon
    (``eps0 = epsilon``) and is charged that; the forwarded bits, which the model is fit
    on, are :math:`(\varepsilon, \delta)`-label-DP with a smaller epsilon toward an
    analyst who sees only them (reported under ``labeldp``).

    Only clients whose bit arrived are forwarded, in clusters that kept at least
    ``labeldp.min-cluster-size`` bits; the run stops if missing replies shrank the
    clusters so far that the forwarded bits would be less private than promised.
    """
    s = plan.settings
    size = s.min_cluster_size
    clusters = cluster_features(
        x, n_clusters=s.n_clusters, min_size=size, rng=plan.server_rng
    )
    sizes = np.bincount(clusters)
    eps0 = float(s.epsilon)
    event = p2p_event(local_epsilon=eps0, cluster_sizes=sizes)
    shared = {
        "local-epsilon": np.array([eps0], dtype=np.float64),
        "cluster-sizes": sizes.astype(np.int64),
    }
    query = catalog.p2p_randomize_query()
    got = session.ask(
        catalog.P2P_RANDOMIZE, query, ids, Request(shared=shared), what="randomizing"
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
    realized, _ = p2p_guarantee(
        local_epsilon=eps0,
        cluster_sizes=kept[kept >= size],
        delta=event.as_dict()["delta"],
    )
    if realized > event.epsilon * (1 + 1e-9):
        raise QuorumError(
            f"missing replies shrank clusters so far that the forwarded bits would be "
            f"{realized:.6g}-DP, above the promised {event.epsilon:.6g}; not forwarding"
        )
    index = np.flatnonzero(forward)
    peers, offsets, counts = p2p_blocks(noisy[index], clusters[index])
    query = catalog.p2p_forward_query()
    request = Request(ragged={"labels": (peers, offsets, counts)})
    reports = session.ask(
        catalog.P2P_FORWARD, query, ids[index], request, what="forwarding"
    )
    labels = reports.get("label", ids, -1).astype(np.int64)
    info = {
        "mechanism": s.mechanism,
        **p2p_summary(eps0, sizes),
        "forwarded_clients": int(index.size),
    }
    return labels, uniform_priors(ids.size, N_CLASSES), eps0, info
