r"""The ClientApp queries of the label-only modes (issue 5).

Registered on :data:`ldpfda.client.client_app.app`; a thin shell over
:mod:`ldpfda.client.labeldp_protocol`. A node answers them only when the run's
``privacy.mechanism`` is a label-only mode (``label-uniform``, ``label-cluster``,
``label-p2p``), the modes in which its features are public; in any other run it refuses
with :data:`~ldpfda.client.client_app.ERROR_REQUEST`. Every reply carries
``ConfigRecord "ledger"`` (``client-id``, ``budget``, ``spent``).

``query.features``
    Reply ``ArrayRecord "features"`` with ``x`` (float64, shape ``(1, p)``, the scaled
    coefficients, sent in the clear). Costs no epsilon: features are public here.
``query.label`` (``label-uniform``, ``label-cluster``)
    Request ``ArrayRecord "prior"`` with ``q`` (float64, shape ``(K,)``, positive, sums
    to 1; uniform in ``label-uniform``). The node randomizes its label with the prior at
    its epsilon (:func:`~ldpfda.client.labeldp_protocol.release_labels`: it derives
    :math:`\lambda` itself) and replies ``ArrayRecord "label"`` with ``label`` (int64,
    shape ``(1,)``).
``query.p2p_randomize`` (``label-p2p``)
    Request ``ArrayRecord "p2p"`` with ``local-epsilon`` (float64, shape ``(1,)``) and
    ``cluster-sizes`` (int64, shape ``(C,)``). The node checks the guarantee of the
    forwarded bits (:func:`~ldpfda.client.labeldp_protocol.p2p_event`) against its
    budget, charges it, and replies ``ArrayRecord "label"`` with ``label`` (int8, shape
    ``(1,)``): its bit by randomized response at ``local-epsilon``, for the relay.
``query.p2p_forward`` (``label-p2p``)
    Request ``ArrayRecord "peers"`` with ``labels`` (int8, shape ``(s,)``, the noisy
    bits of the node's cluster, at least ``labeldp.min-cluster-size`` of them). The
    node draws one uniformly and replies ``ArrayRecord "label"`` with ``label`` (int8,
    shape ``(1,)``). Post-processing: no epsilon.

A node releases its label once per run: a second label query overspends its budget and
is refused with :data:`~ldpfda.client.client_app.ERROR_BUDGET`.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from numpy.typing import NDArray

from ldpfda.client.client_app import (
    ERROR_REQUEST,
    ClientSetup,
    _answer,
    _client_data,
    _ledger_record,
    _Refusal,
    _releases,
    app,
    client_setup,
    load_ledger,
    node_ledger,
)
from ldpfda.client.labeldp_protocol import (
    P2P_RR,
    PRIOR_RR,
    UNIFORM_RR,
    check_public_features,
    p2p_forward,
    p2p_randomize,
    release_labels,
)

__all__ = [
    "FEATURES",
    "LABEL",
    "P2P_FORWARD",
    "P2P_RANDOMIZE",
    "features_query",
    "label_query",
    "p2p_forward_query",
    "p2p_randomize_query",
]

FEATURES = "features"
LABEL = "label"
P2P_RANDOMIZE = "p2p_randomize"
P2P_FORWARD = "p2p_forward"


def _setup(context: Context, *mechanisms: str) -> ClientSetup:
    """The node's setup; refused unless the run's mechanism is in ``mechanisms``."""
    setup = client_setup(context)
    if setup.settings.mechanism not in mechanisms:
        raise _Refusal(
            ERROR_REQUEST,
            f"this query belongs to privacy.mechanism {' or '.join(mechanisms)}; the "
            f"run uses {setup.settings.mechanism!r}",
        )
    return setup


def _request_array(message: Message, record: str, key: str) -> NDArray:
    try:
        return np.asarray(message.content.array_records[record][key].numpy())
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"the request carries no usable '{record}.{key}': {exc}"
        ) from exc


def _label_reply(label: NDArray, ledger_record: ConfigRecord) -> RecordDict:
    return RecordDict(
        {"label": ArrayRecord({"label": Array(label)}), "ledger": ledger_record}
    )


def _features(message: Message, context: Context) -> RecordDict:
    setup = _setup(context, "label-uniform", "label-cluster", "label-p2p")
    features, _ = _client_data(context, setup)
    ledger = load_ledger(context, setup.client_id, setup.budget)
    x = check_public_features(features).astype(np.float64)
    return RecordDict(
        {"features": ArrayRecord({"x": Array(x)}), "ledger": _ledger_record(ledger)}
    )


def _label(message: Message, context: Context) -> RecordDict:
    setup = _setup(context, "label-uniform", "label-cluster")
    q = _request_array(message, "prior", "q").astype(np.float64)
    if q.ndim != 1:
        raise ValueError(f"the prior must have shape (K,), got {q.shape}")
    if setup.settings.mechanism == "label-uniform" and not np.allclose(
        q, 1.0 / q.size, rtol=0, atol=1e-12
    ):
        raise ValueError(f"label-uniform takes the uniform prior, got {q.tolist()}")
    _, labels = _client_data(context, setup)
    with node_ledger(context, setup) as ledger:
        label = release_labels(
            labels,
            q[None, :],
            client_ids=[setup.client_id],
            seed=setup.noise_seed,
            epsilon=setup.settings.epsilon,
            ledger=ledger,
            release=_releases(ledger, UNIFORM_RR) + _releases(ledger, PRIOR_RR),
        )
    return _label_reply(label.astype(np.int64), _ledger_record(ledger))


def _p2p_randomize(message: Message, context: Context) -> RecordDict:
    setup = _setup(context, "label-p2p")
    eps0 = _request_array(message, "p2p", "local-epsilon").astype(np.float64)
    sizes = _request_array(message, "p2p", "cluster-sizes")
    if eps0.shape != (1,):
        raise ValueError(f"local-epsilon must have shape (1,), got {eps0.shape}")
    if sizes.size == 0 or int(sizes.min()) < setup.settings.min_cluster_size:
        raise ValueError(
            f"every cluster needs >= {setup.settings.min_cluster_size} clients "
            f"(labeldp.min-cluster-size), got cluster sizes {sizes.tolist()}"
        )
    _, labels = _client_data(context, setup)
    with node_ledger(context, setup) as ledger:
        bit = p2p_randomize(
            labels,
            client_ids=[setup.client_id],
            seed=setup.noise_seed,
            local_epsilon=float(eps0[0]),
            cluster_sizes=sizes,
            ledger=ledger,
            release=_releases(ledger, P2P_RR),
        )
    return _label_reply(bit.astype(np.int8), _ledger_record(ledger))


def _p2p_forward(message: Message, context: Context) -> RecordDict:
    setup = _setup(context, "label-p2p")
    peers = _request_array(message, "peers", "labels")
    if peers.ndim != 1 or peers.size < setup.settings.min_cluster_size:
        raise ValueError(
            f"the node's cluster must bring >= {setup.settings.min_cluster_size} "
            f"noisy labels (labeldp.min-cluster-size), got shape {peers.shape}"
        )
    ledger = load_ledger(context, setup.client_id, setup.budget)
    # The draw continues the release count of the node's randomized bit.
    bit = p2p_forward(
        peers,
        [0],
        [peers.size],
        client_ids=[setup.client_id],
        seed=setup.noise_seed,
        release=max(_releases(ledger, P2P_RR) - 1, 0),
    )
    return _label_reply(bit.astype(np.int8), _ledger_record(ledger))


@app.query(FEATURES)
def features_query(message: Message, context: Context) -> Message:
    """Send the node's public features (label-only modes; no epsilon)."""
    return _answer(_features, message, context)


@app.query(LABEL)
def label_query(message: Message, context: Context) -> Message:
    """Release the node's label once, randomized with the prior it received."""
    return _answer(_label, message, context)


@app.query(P2P_RANDOMIZE)
def p2p_randomize_query(message: Message, context: Context) -> Message:
    """Release the node's bit by randomized response to the relay (label-p2p)."""
    return _answer(_p2p_randomize, message, context)


@app.query(P2P_FORWARD)
def p2p_forward_query(message: Message, context: Context) -> Message:
    """Report the noisy bit of a peer drawn uniformly from the node's cluster."""
    return _answer(_p2p_forward, message, context)
