"""The reference MRMA protocol with crashing, hanging and malicious clients, in process.

:class:`FaultyClients` decorates the in-process transport. Malicious clients send
either garbage (NaN, wrong dimension, values outside the declared output range, a
non-bit feedback, a second reply), which the server's checks reject and record as for
a Flower node, or the most damaging *valid* replies (features at the edge of the range
against the true decision direction with the opposite label, inverted feedback bits),
whose damage the ``ldpfda faults`` study measures.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda._validation import check_real
from ldpfda.config import Settings
from ldpfda.datasets.population import repeat_data
from ldpfda.engine.inprocess import InProcessClients, split_clients
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.random import derive_seed
from ldpfda.schema import catalog
from ldpfda.schema.queries import Query, ReplyError, Request
from ldpfda.server.fitting import score
from ldpfda.server.mrma import fit_linear
from ldpfda.server.plans import Plan, run_plan
from ldpfda.server.session import Replies, Session, check_replies, wire_rows

__all__ = ["ATTACKS", "FaultResult", "FaultyClients", "Rejection", "run_with_faults"]

ATTACKS = ("extreme", "garbage")
_GARBAGE = ("nan", "shape", "range", "label", "duplicate")
#: The non-bits garbage evaluators send, in turn.
_BAD_BITS = (2, 0.5, np.nan, -1, 7)


@dataclass(frozen=True)
class Rejection:
    """A reply that was not used, and why."""

    client_id: int
    stage: str
    reason: str


@dataclass
class FaultResult:
    """Test errors, who was rejected and why, and how many replies were used."""

    test_errors: dict[str, float]
    rejected: list[Rejection] = field(default_factory=list)
    used: dict[str, int] = field(default_factory=dict)

    def rejection_counts(self) -> dict[str, int]:
        """How many replies were rejected, by ``<stage>/<kind>``."""
        return dict(
            Counter(f"{r.stage}/{r.reason.split(':')[0]}" for r in self.rejected)
        )


class FaultyClients:
    """The in-process transport with some clients that crash, hang or lie.

    Every client computes its honest release in ``inner`` first; ``roles`` gives
    ``crash`` (no reply), ``hang`` (its late reply is dropped) or ``malicious`` by
    client id (honest if absent). Malicious clients send ``attack`` (``ATTACKS``),
    pushing against ``direction`` (p,); ``rng`` draws the labels of extreme releases.
    """

    def __init__(
        self,
        inner: InProcessClients,
        roles: dict[int, str],
        *,
        attack: str,
        rng: np.random.Generator,
        direction: NDArray[np.float64],
    ) -> None:
        self.inner = inner
        self.roles = roles
        self.attack = attack
        self.rng = rng
        self.sign = np.sign(direction)

    def ask(self, query: Query, ids: NDArray[np.int64], request: Request) -> Replies:
        honest, found = self.inner.answers(query, ids, request)
        clean = self.inner.clean(ids)
        out = Replies(np.zeros(0, dtype=np.int64), {})
        valid: list[int] = []
        rows: list[dict[str, NDArray]] = []
        for i, c in enumerate(int(c) for c in ids):
            role = self.roles.get(c, "honest")
            if role in ("crash", "hang") or not found[i]:
                why = "timed out" if role == "hang" else "crashed"
                out.missing[c] = f"missing: {why}"
                continue
            arrays = {k: v[i] for k, v in honest.items()}
            if role == "malicious":
                arrays = self._attack(query, i, arrays, request, clean, out, c)
            try:
                rows.append(wire_rows(query, _as_wire(query, arrays)))
            except ReplyError as exc:
                out.rejected[c] = str(exc)
                continue
            valid.append(c)
        values = {
            spec.key: np.stack([r[spec.key] for r in rows]) for spec in query.reply
        }
        checked = check_replies(
            query, np.array(valid, dtype=np.int64), values, out.rejected
        )
        checked.missing = out.missing
        return checked

    def rejoin(self, ids: NDArray[np.int64]) -> None:
        """A faulty client does not come back."""

    def _attack(
        self,
        query: Query,
        i: int,
        arrays: dict[str, Any],
        request: Request,
        clean: tuple[NDArray[np.float64], NDArray[np.int8]],
        out: Replies,
        c: int,
    ) -> dict[str, Any]:
        x, y = clean
        if query.name == catalog.PRIVATIZE:
            spec = next(s for s in query.reply if s.key == "features")
            low, high = float(spec.low or 0.0), float(spec.high or 0.0)
            p = x.shape[1]
            if self.attack == "extreme":
                label = int(self.rng.integers(2))
                # Opposite corner of the range to where the true model puts this label.
                edge = np.where(self.sign * (2 * label - 1) > 0, low, high)
                edge = np.where(self.sign == 0, 0.0, edge)
                return {"features": edge, "labels": label}
            kind = _GARBAGE[i % len(_GARBAGE)]
            if kind == "duplicate":  # a second, different reply: the first one stands
                out.rejected[c] = "duplicate: a second reply from this client"
                return arrays
            return {
                "nan": {"features": np.full(p, np.nan), "labels": 1},
                "shape": {"features": np.zeros(p + 3), "labels": 1},
                "range": {"features": np.full(p, 10 * max(-low, high)), "labels": 0},
                "label": {"features": np.zeros(p), "labels": 7},
            }[kind]
        if self.attack == "extreme":
            coef, intercept = request.rows["coef"][i], request.rows["intercept"][i]
            wrong = (x[i] @ coef + intercept > 0) != y[i]
            return {"bit": int(not wrong)}  # the inverted truth
        return {"bit": _BAD_BITS[i % len(_BAD_BITS)]}


def _as_wire(query: Query, arrays: dict[str, Any]) -> dict[str, NDArray]:
    """A client's reply values as the arrays it would send (rows of wire shape)."""
    return {
        spec.key: np.asarray(arrays[spec.key], dtype=float).reshape(
            (1, -1) if spec.shape else (1,)
        )
        for spec in query.reply
    }


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
) -> FaultResult:
    """One repeat of the reference protocol with the given shares of faulty clients."""
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
    train, evaluation, test = split_clients(settings, repeat_data(settings, repeat))
    n_tr, n_ev = settings.n_train, settings.n_eval
    p = train.featurizer.n_features_out
    rng = np.random.default_rng(derive_seed(settings.seed, "faults", repeat))
    fractions = {"malicious": malicious, "crash": crash, "hang": hang}
    roles = np.concatenate([_roles(n_tr, rng, fractions), _roles(n_ev, rng, fractions)])
    every = np.arange(n_tr + n_ev)
    # What an informed attacker pushes against: the true coefficient direction of the
    # vector design, or the first basis direction.
    direction = np.zeros(p)
    direction[: min(p, 4)] = [1.0, -0.5, 1 / 3, -0.25][: min(p, 4)]
    inner = InProcessClients(
        [train, evaluation],
        settings,
        seed=derive_seed(settings.seed, "clients", repeat),
        ledger=PrivacyLedger(budget=settings.epsilon, client_ids=every),
    )
    faulty = FaultyClients(
        inner,
        {int(c): str(r) for c, r in zip(every, roles, strict=True) if r != "honest"},
        attack=attack,
        rng=rng,
        direction=direction,
    )
    session = Session(faulty, PrivacyLedger(budget=settings.epsilon, client_ids=every))
    server_rng = np.random.default_rng(derive_seed(settings.seed, "server", repeat))
    plan = Plan(settings, train.client_ids, evaluation.client_ids, p, server_rng)
    result = run_plan(session, plan)
    result.baselines["non_private"] = fit_linear(train.features(), train.labels)
    score(result, *test)
    rejected = [
        Rejection(int(c), stage, reason)
        for stage, round_ in session.rounds.items()
        for c, reason in sorted({**round_.missing, **round_.rejected}.items())
    ]
    used = {
        "payloads": int(session.rounds[catalog.PRIVATIZE].answered.size),
        "bits": int(session.rounds[catalog.EVALUATE].answered.size),
    }
    return FaultResult(dict(result.test_errors), rejected, used)
