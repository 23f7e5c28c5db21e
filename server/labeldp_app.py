r"""The ServerApp of the label-only modes (issue 5): their rounds over Flower's API.

:func:`~ldpfda.server.server_app.run_server` hands a run over to
:func:`run_label_server` when ``privacy.mechanism`` is ``label-uniform``,
``label-cluster`` or ``label-p2p``. The server's steps and its randomness are those of
:func:`~ldpfda.server.labeldp_engine.run_label_protocol`, so a run in which every node
answers gives the in-process engine's numbers. Every client (``n_train + n_eval``)
takes part:

1. wait for the nodes and ask who they are (``query.identify``);
2. ``query.features``: every client sends its public features;
3. by mode --

   ``label-uniform``: ``query.label`` with the uniform prior to everybody;
   ``label-cluster``: cluster the features; ``query.label`` with the uniform prior to
   the pilots; priors from their labels; ``query.label`` with its cluster's prior to
   every other client;
   ``label-p2p``: cluster the features (at least ``labeldp.min-cluster-size`` per
   cluster); ``query.p2p_randomize`` to everybody (the relay's round); then
   ``query.p2p_forward`` with its cluster's noisy bits to every client whose cluster
   still has at least ``labeldp.min-cluster-size`` of them;

4. fit the corrected logistic regression on every valid label
   (:func:`~ldpfda.server.labeldp_engine.label_result`), score on the test set if one
   is configured, write ``report.json``, ``model.npz`` and ``payload.npz``.

Replies are validated (:func:`parse_features`, :func:`parse_label`) and the server keeps
its own ledger of what it asked each client, charged before asking. In ``label-p2p`` the
ServerApp is both the relay and the analyst: the guarantee
:math:`(\varepsilon, 1/s^2)` holds toward whoever sees only the outputs (``payload.npz``
holds the forwarded bits, never the relay's), while the process itself sees the
:math:`\varepsilon_0`-LDP bits; a deployment that needs the amplified guarantee against
the server must run the relay separately (trust model in docs/flower.md).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message, RecordDict
from flwr.serverapp import Grid
from numpy.typing import NDArray

from ldpfda import __version__
from ldpfda.client.client_app import IDENTIFY
from ldpfda.client.data import public_featurizer
from ldpfda.client.labeldp_app import FEATURES, LABEL, P2P_FORWARD, P2P_RANDOMIZE
from ldpfda.client.labeldp_protocol import (
    LabelPayload,
    label_events,
    p2p_event,
    uniform_priors,
)
from ldpfda.config import Settings
from ldpfda.labeldp.peer_to_peer import p2p_guarantee, p2p_local_epsilon
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.random import derive_seed
from ldpfda.server.engine import ProtocolResult, score
from ldpfda.server.labeldp_engine import (
    N_CLASSES,
    cluster_features,
    label_result,
    p2p_blocks,
    p2p_summary,
    prior_rr_rounds,
)
from ldpfda.server.server_app import (
    FlowerOptions,
    Round,
    _array,
    _ask,
    _charge,
    _collect,
    _content,
    _ledger_info,
    _rejections,
    _require,
    _Status,
    _test_set,
    bounded_row,
    identify_clients,
    logger,
    privacy_section,
    single_value,
    wait_for_nodes,
    write_run,
)

__all__ = ["parse_features", "parse_label", "run_label_server"]


def parse_features(
    message: Message, *, client_id: int, n_features: int
) -> tuple[NDArray[np.float64], dict[str, float]]:
    """The public features ``(p,)`` and ledger figures of a ``query.features`` reply.

    Valid features have shape ``(1, p)``, are finite and lie in [-1, 1] (the range of
    the run's featurizer).

    Raises
    ------
    ReplyError
        For anything else, with the reason.
    """
    content = _content(message)
    x = _array(content, "features", "x")
    # The featurizer's range, with room for the last bit of its rounding.
    row = bounded_row(x, n_features, "features", (-1.0 - 1e-12, 1.0 + 1e-12))
    return row, _ledger_info(content, "ledger", client_id)


def parse_label(
    message: Message, *, client_id: int, n_classes: int = N_CLASSES
) -> tuple[int, dict[str, float]]:
    """The released label and ledger figures of a label reply (any label query).

    Raises
    ------
    ReplyError
        Unless the reply holds one label in ``{0, ..., n_classes - 1}``.
    """
    content = _content(message)
    label = _array(content, "label", "label")
    value = single_value(
        label,
        "label",
        range(n_classes),
        "label",
        f"label must be in {{0, ..., {n_classes - 1}}}",
    )
    return value, _ledger_info(content, "ledger", client_id)


class _Rounds:
    """The rounds of one run: asks, validates, and keeps the server's accounting."""

    def __init__(
        self,
        grid: Grid,
        options: FlowerOptions,
        ledger: PrivacyLedger,
        node_of: Mapping[int, int],
        reported: dict[int, dict[str, float]],
    ) -> None:
        self.grid = grid
        self.options = options
        self.ledger = ledger
        self.node_of = node_of
        self.reported = reported
        self.rounds: dict[str, Round] = {}

    def ask(
        self,
        name: str,
        kind: str,
        requests: Mapping[int, tuple[RecordDict, list[Any]]],
        parse: Any,
        what: str,
    ) -> dict[int, Any]:
        """Ask every client of ``requests`` (content, events charged first) ``kind``.

        Returns the first parsed value of every valid reply, by client; stops the run
        when fewer than ``flower.min-reply-fraction`` of the asked clients answer.
        """
        round_ = self.rounds.setdefault(name, Round(name))
        asked = {}
        for c, (content, events) in requests.items():
            if _charge(self.ledger, events, c):
                asked[self.node_of[c]] = content
                round_.asked.append(c)
            else:
                round_.refused_by_server.append(c)
        replies = _ask(self.grid, asked, kind, self.options.reply_timeout)
        rows = _collect(
            round_,
            replies,
            self.node_of,
            self.reported,
            parse,
            timeout=self.options.reply_timeout,
        )
        _require(round_, 1, self.options.min_reply_fraction, what)
        return {c: values[0] for c, values in rows.items()}


def _prior_request(q: NDArray[np.float64], epsilon: float) -> tuple[RecordDict, list]:
    content = RecordDict({"prior": ArrayRecord({"q": Array(np.asarray(q, float))})})
    return content, label_events(q[None, :], epsilon=epsilon)


def run_label_server(
    grid: Grid, settings: Settings, options: FlowerOptions, *, run_id: int = 0
) -> tuple[ProtocolResult, dict[str, Any]]:
    """Run one label-only repeat over ``grid`` and write its report.

    Returns the :class:`~ldpfda.server.engine.ProtocolResult` (its payload a
    :class:`~ldpfda.client.labeldp_protocol.LabelPayload` ordered by client id) and
    the report written to ``<report_dir>/run-<run_id>/report.json``.

    Raises
    ------
    RuntimeError
        When too few nodes connect or too few valid replies arrive, or when missing
        replies would weaken the peer-to-peer guarantee.
    """
    out = Path(options.report_dir) / f"run-{run_id}"
    status = _Status(out)
    timings: dict[str, float] = {}
    total = settings.n_train + settings.n_eval
    eps = settings.epsilon
    n_features = public_featurizer(settings, options.repeat)[0].n_features_out
    server_rng = np.random.default_rng(
        derive_seed(settings.seed, "server", options.repeat)
    )
    ledger = PrivacyLedger(budget=eps, client_ids=np.arange(total))
    try:
        status("waiting-for-nodes", expected=total)
        t0 = time.perf_counter()
        nodes = wait_for_nodes(
            grid, total, options.min_nodes or total, options.wait_timeout
        )
        timings["wait_for_nodes_s"] = time.perf_counter() - t0
        status("identify", nodes=len(nodes))
        identify, node_of, claimed, reported = identify_clients(
            grid, nodes, total, options.reply_timeout
        )
        rounds = _Rounds(grid, options, ledger, node_of, reported)

        status("features", clients=len(node_of))
        t0 = time.perf_counter()
        rows = rounds.ask(
            FEATURES,
            FEATURES,
            {c: (RecordDict(), []) for c in sorted(node_of)},
            lambda reply, c: parse_features(reply, client_id=c, n_features=n_features),
            "releasing",
        )
        ids = np.array(sorted(rows), dtype=np.int64)
        x = np.array([rows[c] for c in ids], dtype=np.float64).reshape(-1, n_features)
        timings["clients_features_s"] = time.perf_counter() - t0

        status("labels", clients=int(ids.size))
        t0 = time.perf_counter()
        labels, priors, channel_epsilon, info = _label_rounds(
            rounds, settings, ids, x, server_rng
        )
        keep = np.flatnonzero(labels >= 0)
        payload = LabelPayload(
            ids[keep], x[keep], labels[keep], priors[keep], channel_epsilon
        )
        timings["clients_label_s"] = time.perf_counter() - t0

        status("fit", payloads=len(payload))
        t0 = time.perf_counter()
        result = label_result(
            payload,
            settings,
            server_rng,
            privacy={**ledger.summary(), "labeldp": info},
        )
        timings["server_train_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        test = _test_set(settings, options)
        if test is not None:
            score(result, *test)
        timings["server_score_s"] = time.perf_counter() - t0
        result.timings = timings

        all_rounds = {IDENTIFY: identify, **rounds.rounds}
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
                    "absent_clients": sorted(set(range(total)) - set(node_of)),
                    "rejections": _rejections(all_rounds, node_of, claimed),
                    **{name: r.summary() for name, r in all_rounds.items()},
                },
            }
        )
        report["privacy"] = {
            **privacy_section(eps, ledger, reported, sorted(node_of)),
            "labeldp": info,
        }
        write_run(
            out,
            report,
            result.final,
            {
                "client_ids": payload.client_ids,
                "features": payload.features,
                "labels": payload.labels,
                "priors": payload.priors,
            },
            status,
        )
        return result, report
    except Exception as exc:
        status("failed", error=f"{type(exc).__name__}: {exc}")
        raise


def _label_rounds(
    rounds: _Rounds,
    settings: Settings,
    ids: NDArray[np.int64],
    x: NDArray[np.float64],
    server_rng: np.random.Generator,
) -> tuple[NDArray[np.int64], NDArray[np.float64], float, dict[str, Any]]:
    """The label rounds of the run's mode.

    Returns every client's released label (-1 if none), its channel's prior, the
    channel's epsilon and what the report says about the mode.
    """
    eps = settings.epsilon
    label_parser = lambda reply, c: parse_label(reply, client_id=c)  # noqa: E731

    def release(
        stage: str, index: NDArray[np.int64], prior_rows: NDArray[np.float64]
    ) -> NDArray[np.int64]:
        requests = {
            int(ids[i]): _prior_request(prior, eps)
            for i, prior in zip(index, prior_rows, strict=True)
        }
        got = rounds.ask(stage, LABEL, requests, label_parser, "labelling")
        return np.array([got.get(int(ids[i]), -1) for i in index], dtype=np.int64)

    if settings.mechanism in ("label-uniform", "label-cluster"):
        labels, priors, info = prior_rr_rounds(settings, ids, x, server_rng, release)
        return labels, priors, eps, info
    info: dict[str, Any] = {"mechanism": settings.mechanism}
    return _p2p_rounds(rounds, settings, ids, x, server_rng, info)


def _p2p_rounds(
    rounds: _Rounds,
    settings: Settings,
    ids: NDArray[np.int64],
    x: NDArray[np.float64],
    server_rng: np.random.Generator,
    info: dict[str, Any],
) -> tuple[NDArray[np.int64], NDArray[np.float64], float, dict[str, Any]]:
    """``label-p2p``: the relay's round, then every client forwards a peer's bit."""
    s = settings.min_cluster_size
    clusters = cluster_features(
        x, n_clusters=settings.n_clusters, min_size=s, rng=server_rng
    )
    sizes = np.bincount(clusters)
    eps0 = p2p_local_epsilon(epsilon=settings.epsilon, cluster_sizes=sizes)
    event = p2p_event(local_epsilon=eps0, cluster_sizes=sizes)
    request = RecordDict(
        {
            "p2p": ArrayRecord(
                {
                    "local-epsilon": Array(np.array([eps0], dtype=np.float64)),
                    "cluster-sizes": Array(sizes.astype(np.int64)),
                }
            )
        }
    )
    got = rounds.ask(
        P2P_RANDOMIZE,
        P2P_RANDOMIZE,
        {int(c): (request, [event]) for c in ids},
        lambda reply, c: parse_label(reply, client_id=c),
        "randomizing",
    )
    # The relay: only clients whose bit arrived, in clusters that kept >= s bits.
    has_bit = np.array([int(c) in got for c in ids], dtype=bool)
    kept = np.bincount(clusters[has_bit], minlength=sizes.size)
    forward = has_bit & (kept[clusters] >= s)
    if np.any(has_bit & ~forward):
        logger.warning(
            "ldpfda: %d client(s) not forwarded: their cluster kept fewer than %d bits",
            int((has_bit & ~forward).sum()),
            s,
        )
    blocks = kept[kept >= s]
    realized, _ = p2p_guarantee(
        local_epsilon=eps0, cluster_sizes=blocks, delta=event.as_dict()["delta"]
    )
    if realized > event.epsilon * (1 + 1e-9):
        raise RuntimeError(
            f"missing replies shrank clusters so far that the forwarded bits would be "
            f"{realized:.6g}-DP, above the promised {event.epsilon:.6g}; not forwarding"
        )
    index = np.flatnonzero(forward)
    noisy = np.array([got[int(ids[i])] for i in index], dtype=np.int8)
    peers, offsets, counts = p2p_blocks(noisy, clusters[index])
    requests = {
        int(ids[i]): (
            RecordDict(
                {
                    "peers": ArrayRecord(
                        {"labels": Array(peers[o : o + n].astype(np.int8))}
                    )
                }
            ),
            [],
        )
        for i, o, n in zip(index, offsets, counts, strict=True)
    }
    reports = rounds.ask(
        P2P_FORWARD,
        P2P_FORWARD,
        requests,
        lambda reply, c: parse_label(reply, client_id=c),
        "forwarding",
    )
    labels = np.array([reports.get(int(c), -1) for c in ids], dtype=np.int64)
    info.update(p2p_summary(eps0, sizes))
    info["forwarded_clients"] = int(index.size)
    return labels, uniform_priors(ids.size, N_CLASSES), eps0, info
