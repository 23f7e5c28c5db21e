"""The reference MRMA protocol with crashing, hanging and malicious clients, in process.

Each training or evaluation client is honest, crashes (no reply), hangs past the
deadline (its late reply is dropped), or is malicious. Malicious clients either send
garbage (NaN, wrong dimension, values outside the mechanism's declared output range, a
non-bit feedback, a second reply) -- which the server's screening rejects and records --
or the most damaging *valid* replies: features at the edge of the output range pointing
against the true decision direction with the opposite label, and inverted feedback bits.
Valid replies cannot be told apart from honest ones; their damage is what the
``ldpfda faults`` study measures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda._validation import check_real
from ldpfda.client.protocol import (
    TrainingPayload,
    answer_evaluation,
    privatize,
    training_output_range,
)
from ldpfda.config import Settings
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.random import derive_seed
from ldpfda.server.engine import aggregate, repeat_data, score, train_weak
from ldpfda.server.mrma import assign_groups
from ldpfda.server.validation import Rejection, screen_bits, screen_payloads

__all__ = ["ATTACKS", "FaultResult", "run_with_faults"]

ATTACKS = ("extreme", "garbage")
_GARBAGE = ("nan", "shape", "range", "label", "duplicate")


@dataclass
class FaultResult:
    """Test errors, who was rejected and why, and how many replies were used."""

    test_errors: dict[str, float]
    rejected: list[Rejection] = field(default_factory=list)
    used: dict[str, int] = field(default_factory=dict)

    def rejection_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rejected:
            key = f"{r.stage}/{r.reason.split(':')[0]}"
            out[key] = out.get(key, 0) + 1
        return out


def _roles(n: int, rng: np.random.Generator, fractions: dict[str, float]) -> NDArray:
    roles = np.full(n, "honest", dtype=object)
    order = rng.permutation(n)
    start = 0
    for role, fraction in fractions.items():
        count = int(round(fraction * n))
        roles[order[start : start + count]] = role
        start += count
    return roles


def run_with_faults(
    settings: Settings,
    repeat: int = 0,
    *,
    malicious: float = 0.1,
    attack: str = "extreme",
    crash: float = 0.0,
    hang: float = 0.0,
    direction: NDArray[np.float64] | None = None,
) -> FaultResult:
    """One repeat of the reference protocol with the given shares of faulty clients.

    ``direction`` is what an informed attacker pushes against (default: the true
    coefficient direction of the vector design, or the first basis direction).
    """
    if settings.protocol != "mrma" or settings.joint_release:
        raise ValueError(
            "run_with_faults runs the reference MRMA protocol; use "
            "Settings.reference(...)"
        )
    for name, value in (("malicious", malicious), ("crash", crash), ("hang", hang)):
        check_real(value, name, low=0.0, high=1.0)
    if malicious + crash + hang > 1.0:
        raise ValueError("malicious + crash + hang must be <= 1")
    if attack not in ATTACKS:
        raise ValueError(f"attack must be one of {ATTACKS}, got {attack!r}")
    data = repeat_data(settings, repeat)
    featurizer = data.featurizer
    (x_tr, y_tr), (x_ev, y_ev) = data.train, data.evaluation
    assert data.test is not None
    x_test, y_test = featurizer.transform(data.test[0]), data.test[1]
    z_tr, z_ev = featurizer.transform(x_tr), featurizer.transform(x_ev)
    p = z_tr.shape[1]
    n_tr, n_ev = settings.n_train, settings.n_eval
    seed = derive_seed(settings.seed, "clients", repeat)
    rng = np.random.default_rng(derive_seed(settings.seed, "faults", repeat))
    fractions = {"malicious": malicious, "crash": crash, "hang": hang}
    roles_tr, roles_ev = _roles(n_tr, rng, fractions), _roles(n_ev, rng, fractions)
    ids_tr, ids_ev = np.arange(n_tr), n_tr + np.arange(n_ev)
    ledger = PrivacyLedger(
        budget=settings.epsilon, client_ids=np.concatenate([ids_tr, ids_ev])
    )
    low, high = training_output_range(
        epsilon=settings.epsilon, n_features=p, label_share=settings.label_share
    )
    if direction is None:
        direction = np.zeros(p)
        direction[: min(p, 4)] = [1.0, -0.5, 1 / 3, -0.25][: min(p, 4)]
    sign = np.sign(direction)

    # Training round: honest clients release through privatize; the others reply below.
    honest = privatize(
        z_tr,
        y_tr,
        client_ids=ids_tr,
        seed=seed,
        epsilon=settings.epsilon,
        label_share=settings.label_share,
        ledger=ledger,
    )
    replies: list[tuple[int, Any, Any]] = []
    for i, cid in enumerate(ids_tr):
        role = roles_tr[i]
        if role == "honest":
            replies.append((cid, honest.features[i], honest.labels[i]))
        elif role == "crash":
            replies.append((cid, None, "crashed"))
        elif role == "hang":
            replies.append((cid, None, "timed out"))
        elif attack == "extreme":
            label = int(rng.integers(2))
            # Opposite corner of the range to where the true model puts this label.
            edge = np.where(sign * (2 * label - 1) > 0, low, high)
            edge = np.where(sign == 0, 0.0, edge)
            replies.append((cid, edge, label))
        else:
            kind = _GARBAGE[i % len(_GARBAGE)]
            bad: dict[str, tuple[Any, Any]] = {
                "nan": (np.full(p, np.nan), 1),
                "shape": (np.zeros(p + 3), 1),
                "range": (np.full(p, 10 * max(abs(low), high)), 0),
                "label": (np.zeros(p), 7),
                "duplicate": (honest.features[i], honest.labels[i]),
            }
            features, label = bad[kind]
            replies.append((cid, features, label))
            if kind == "duplicate":  # a second, different reply from the same client
                replies.append((cid, -honest.features[i], 1 - honest.labels[i]))
    screened = screen_payloads(replies, n_features=p, feature_range=(low, high))
    payload = TrainingPayload(
        screened.client_ids,
        screened.values,
        screened.labels,
        honest.feature_epsilon,
        honest.label_epsilon,
    )

    server_rng = np.random.default_rng(derive_seed(settings.seed, "server", repeat))
    weak = train_weak(payload, settings, server_rng)

    # Evaluation round.
    groups = assign_groups(n_ev, settings.num_weak_models, server_rng)
    bits = answer_evaluation(
        weak.coef[groups],
        weak.intercept[groups],
        z_ev,
        y_ev,
        client_ids=ids_ev,
        seed=seed,
        epsilon=settings.epsilon,
        ledger=ledger,
    )
    wrong = (
        (z_ev * weak.coef[groups]).sum(axis=1) + weak.intercept[groups] > 0
    ) != y_ev
    bit_replies: list[tuple[int, Any]] = []
    for i, cid in enumerate(ids_ev):
        role = roles_ev[i]
        if role == "honest":
            bit_replies.append((cid, int(bits[i])))
        elif role in ("crash", "hang"):
            bit_replies.append((cid, None))
        elif attack == "extreme":
            bit_replies.append((cid, int(not wrong[i])))  # the inverted truth
        else:
            bit_replies.append((cid, (2, 0.5, np.nan, -1, "yes")[i % 5]))
    screened_bits = screen_bits(bit_replies)
    position = {int(c): k for k, c in enumerate(ids_ev)}
    used_groups = np.array(
        [groups[position[int(c)]] for c in screened_bits.client_ids], dtype=np.int64
    )
    result = aggregate(
        weak,
        screened_bits.values.astype(np.int8),
        used_groups,
        payload,
        settings,
        clean_train=(z_tr, y_tr),
        privacy=ledger.summary(),
        keep_payload=False,
    )
    score(result, x_test, y_test)
    return FaultResult(
        dict(result.test_errors),
        screened.rejected + screened_bits.rejected,
        {"payloads": len(payload), "bits": int(screened_bits.client_ids.size)},
    )
