"""How clients answer each query: one vectorised function per query, both transports.

:func:`answer` takes a batch of clients (their ids, scaled features, labels, noise seed
and ledger) and one request row per client, and returns one reply row per client. The
in-process transport calls it on chunks of many clients; a Flower SuperNode calls it on
a batch of one (its own client), so a client answers the same in both. Every release
is charged to the batch's ledger before anything is released.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ldpfda.client.labeldp_protocol import (
    check_public_features,
    p2p_forward,
    p2p_randomize,
    release_labels,
)
from ldpfda.client.protocol import answer_evaluation, privatize, privatize_joint
from ldpfda.config import Settings
from ldpfda.privacy.laplace import LaplaceMechanism
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.randomized_response import FeedbackBit
from ldpfda.schema import catalog
from ldpfda.schema.queries import ERROR_REQUEST, Request
from ldpfda.schema.releases import P2P_RR, PRIOR_RR, UNIFORM_RR, joint_mechanism

__all__ = ["ClientBatch", "Refusal", "answer", "release_index"]

LABEL_MODES = ("label-uniform", "label-cluster", "label-p2p")
#: The smallest prior entry a node samples from: 2^-32, so that the 52-bit uniforms
#: realise every category's probability to a relative error of 2^-20 or less.
MIN_PRIOR = 2.0**-32


class Refusal(Exception):
    """A query the client answers with an error reply (``code``, generic reason)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


@dataclass(frozen=True)
class ClientBatch:
    """Clients answering together: row ``i`` of every array is client ``ids[i]``.

    Attributes
    ----------
    ids : ndarray of shape (n,)
    features : ndarray of shape (n, p)
        Scaled features in [-1, 1].
    labels : ndarray of shape (n,)
        True labels; they never leave except through a mechanism.
    seed : int
        Seed that, with the client id, keys each client's noise.
    ledger : PrivacyLedger
        Charged before every release.
    """

    ids: NDArray[np.int64]
    features: NDArray[np.float64]
    labels: NDArray[np.int8]
    seed: int
    ledger: PrivacyLedger


def release_index(ledger: PrivacyLedger, *mechanisms: str) -> int:
    """How many ``mechanisms`` releases a one-client ledger holds: the next noise index.

    A node whose budget allows a second release of a kind draws fresh noise for it. A
    ledger over many clients (in process) is asked each release once: index 0.
    """
    if ledger.client_ids.size != 1:
        return 0
    return sum(entry.event.mechanism in mechanisms for entry in ledger.entries)


def _require_mode(settings: Settings, *modes: str) -> None:
    if settings.mechanism not in modes:
        raise Refusal(
            ERROR_REQUEST,
            f"this query belongs to privacy.mechanism {' or '.join(modes)}; the "
            f"run uses {settings.mechanism!r}",
        )


def answer(
    name: str, batch: ClientBatch, request: Request, settings: Settings
) -> dict[str, NDArray]:
    """The reply arrays of query ``name`` for every client of ``batch``.

    Raises
    ------
    Refusal
        For a query that does not belong to the run's mode.
    ValueError
        For a request the clients cannot use.
    BudgetExceededError
        When a release would overspend a client's budget (nobody releases).
    """
    handler = _ANSWERS.get(name)
    if handler is None:
        raise Refusal(ERROR_REQUEST, f"unknown query {name!r}")
    return handler(batch, request, settings)


def _identify(batch: ClientBatch, request: Request, s: Settings) -> dict[str, NDArray]:
    return {}


def _privatize(batch: ClientBatch, request: Request, s: Settings) -> dict[str, NDArray]:
    if s.label_release:
        raise Refusal(ERROR_REQUEST, "label-only runs ask for features and labels")
    x, y, ids, ledger = batch.features, batch.labels, batch.ids, batch.ledger
    k = catalog.request_classes(request)
    if s.joint_release:
        design = s.multiclass_release
        name = joint_mechanism(
            s.epsilon, x.shape[1], s.vector_mechanism, k, design
        ).name
        joint = privatize_joint(
            x,
            y,
            client_ids=ids,
            seed=batch.seed,
            epsilon=s.epsilon,
            mechanism=s.vector_mechanism,
            ledger=ledger,
            release=release_index(ledger, name),
            n_classes=k,
            design=design,
        )
        if joint.classes is None:
            return {"releases": joint.releases}
        return {"class": joint.classes, "releases": joint.releases}
    payload = privatize(
        x,
        y,
        client_ids=ids,
        seed=batch.seed,
        epsilon=s.epsilon,
        label_share=s.label_share,
        ledger=ledger,
        release=release_index(ledger, LaplaceMechanism.name),
        n_classes=k,
    )
    return {"features": payload.features, "labels": payload.labels}


def _evaluate(batch: ClientBatch, request: Request, s: Settings) -> dict[str, NDArray]:
    n, p = batch.features.shape
    coef = request.per_client("coef", n)
    intercept = request.per_client("intercept", n).reshape(n, -1)
    # A K-class model (K > 2) comes as K intercepts and its K x p coefficients.
    k = catalog.request_classes(request)
    rows = 1 if k == 2 else k
    if coef.shape != (n, rows * p) or intercept.shape != (n, rows):
        raise ValueError(
            f"the model must have coef of shape ({p},) and intercept of shape (1,) "
            f"(a K-class one: K * {p} and K), got {coef.shape[1:]} and "
            f"{intercept.shape[1:]}"
        )
    bits = answer_evaluation(
        coef.reshape(n, k, p) if k > 2 else coef,
        intercept if k > 2 else intercept.reshape(-1),
        batch.features,
        batch.labels,
        client_ids=batch.ids,
        seed=batch.seed,
        epsilon=s.epsilon,
        ledger=batch.ledger,
        release=release_index(batch.ledger, FeedbackBit.name),
        n_classes=k,
    )
    return {"bit": bits}


def _features(batch: ClientBatch, request: Request, s: Settings) -> dict[str, NDArray]:
    _require_mode(s, *LABEL_MODES)
    return {"x": check_public_features(batch.features)}


def _label(batch: ClientBatch, request: Request, s: Settings) -> dict[str, NDArray]:
    _require_mode(s, "label-uniform", "label-cluster")
    q = request.per_client("q", batch.ids.size).astype(np.float64)
    if q.ndim != 2 or not np.all(np.isfinite(q)) or np.any(q < 0):
        raise ValueError("the prior must be finite and >= 0")
    k = catalog.request_classes(request)
    if k > 2 and q.shape[1] != k:  # a K-class query's prior has K entries
        raise ValueError(f"the prior must have {k} entries, got {q.shape[1]}")
    # Sums off 1 by rounding are renormalised; an entry the sampler cannot realise
    # (its uniforms have 52 bits) would be a category that is never drawn.
    q = q / q.sum(axis=1, keepdims=True)
    if np.any((q > 0) & (q < MIN_PRIOR)):  # zeros are refused by the release itself
        raise ValueError(
            f"every prior entry must be >= 2^-32 (the samplers' resolution with "
            f"margin), got {q.min():.3g}"
        )
    if s.mechanism == "label-uniform" and not np.allclose(
        q, 1.0 / q.shape[1], rtol=0, atol=1e-12
    ):
        raise ValueError("label-uniform takes the uniform prior")
    labels = release_labels(
        batch.labels,
        q,
        client_ids=batch.ids,
        seed=batch.seed,
        epsilon=s.epsilon,
        ledger=batch.ledger,
        release=release_index(batch.ledger, UNIFORM_RR, PRIOR_RR),
    )
    return {"label": labels.astype(np.int64)}


def _p2p_randomize(
    batch: ClientBatch, request: Request, s: Settings
) -> dict[str, NDArray]:
    _require_mode(s, "label-p2p")
    eps0 = request.common("local-epsilon").reshape(-1)
    sizes = request.common("cluster-sizes")
    if eps0.shape != (1,):
        raise ValueError(f"local-epsilon must have shape (1,), got {eps0.shape}")
    if sizes.size == 0 or int(sizes.min()) < s.min_cluster_size:
        raise ValueError(
            f"every cluster needs >= {s.min_cluster_size} clients "
            f"(labeldp.min-cluster-size), got cluster sizes {sizes.tolist()}"
        )
    bits = p2p_randomize(
        batch.labels,
        client_ids=batch.ids,
        seed=batch.seed,
        local_epsilon=float(eps0[0]),
        cluster_sizes=sizes,
        ledger=batch.ledger,
        release=release_index(batch.ledger, P2P_RR),
        n_classes=catalog.request_classes(request),
    )
    return {"label": bits}


def _p2p_forward(
    batch: ClientBatch, request: Request, s: Settings
) -> dict[str, NDArray]:
    _require_mode(s, "label-p2p")
    peers, offsets, counts = request.blocks("labels")
    if counts.size and int(counts.min()) < s.min_cluster_size:
        raise ValueError(
            f"the node's cluster must bring >= {s.min_cluster_size} noisy labels "
            f"(labeldp.min-cluster-size), got {int(counts.min())}"
        )
    # The draw continues the release count of the client's randomized bit.
    bits = p2p_forward(
        peers,
        offsets,
        counts,
        client_ids=batch.ids,
        seed=batch.seed,
        release=max(release_index(batch.ledger, P2P_RR) - 1, 0),
        n_classes=catalog.request_classes(request),
    )
    return {"label": bits}


_ANSWERS = {
    catalog.IDENTIFY: _identify,
    catalog.PRIVATIZE: _privatize,
    catalog.EVALUATE: _evaluate,
    catalog.FEATURES: _features,
    catalog.LABEL: _label,
    catalog.P2P_RANDOMIZE: _p2p_randomize,
    catalog.P2P_FORWARD: _p2p_forward,
}
