"""Privacy audit suite: every local randomizer, 10^6 releases per neighbouring input
(fewer where a row says so: a node's memoized path releases one client at a time).

For each mechanism the audit runs the release on the extreme neighbouring inputs, bins a
statistic that determines the privacy loss, and estimates epsilon with simultaneous
confidence bounds (:mod:`tests.privacy.privacy_audit`, after the histogram tests of
Ding et al. 2018 and Google's DP stochastic tester). It fails when the lower
confidence bound exceeds the claimed epsilon, and it is shown to catch deliberately
broken mechanisms. The table of estimated against claimed epsilon is printed at the
end of the test run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from ldpfda.client.labeldp_protocol import p2p_randomize
from ldpfda.client.ledger import RecordState
from ldpfda.client.policy import NodePolicy
from ldpfda.client.protocol import privatize
from ldpfda.client.release import ClientSetup, release
from ldpfda.config import Settings
from ldpfda.labeldp import histogram_sigma, noisy_cluster_histograms
from ldpfda.privacy.joint import (
    ClassSignedFeatureMechanism,
    ClassSplitMechanism,
    SignedFeatureMechanism,
)
from ldpfda.privacy.laplace import LaplaceMechanism
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.randomized_response import (
    BinaryRandomizedResponse,
    FeedbackBit,
    KaryRandomizedResponse,
    rr_keep_probability,
)
from ldpfda.privacy.vector_mechanisms import (
    DuchiMechanism,
    HybridMechanism,
    PiecewiseMechanism,
)
from ldpfda.schema import catalog
from ldpfda.schema.queries import Request
from ldpfda.schema.releases import p2p_event, p2p_relay_event
from tests.privacy.privacy_audit import PrivacyAudit, estimate_epsilon

#: Releases per neighbouring input.
N = 1_000_000


@dataclass(frozen=True)
class Case:
    """One audit: the release, the extreme neighbouring inputs and a loss statistic."""

    name: str
    epsilon: float
    release: Callable[[np.ndarray, np.random.Generator], np.ndarray]
    x: object
    x_prime: object
    bins: np.ndarray
    statistic: Callable[[np.ndarray], np.ndarray] | None = None
    #: Releases per neighbouring input (fewer for a release made one at a time).
    n: int = 1_000_000


def _clipped_sum(z: np.ndarray) -> np.ndarray:
    # Between -1 and +1 the Laplace log density ratio is -(2/b) sum_k clip(z_k, -1, 1).
    return np.clip(z, -1.0, 1.0).sum(axis=1)


def _laplace_bins(p: int) -> np.ndarray:
    return np.concatenate([[-p + 1e-9], np.linspace(-p, p, 17)[1:-1], [p - 1e-9]])


def _laplace(epsilon: float, p: int, sampler: str, scale_factor: float = 1.0) -> Case:
    mech = LaplaceMechanism(epsilon=epsilon, dimension=p, sampler=sampler)
    mech.scale *= scale_factor
    label = "" if scale_factor == 1.0 else f" x{scale_factor:g} scale"
    return Case(
        f"laplace {sampler} p={p}{label}",
        epsilon,
        mech.randomise,
        -np.ones(p),
        np.ones(p),
        _laplace_bins(p),
        _clipped_sum,
    )


def _rr(cls, epsilon: float, leak: float | None = None, **kw) -> Case:
    mech = cls(epsilon=epsilon, **kw)
    k = getattr(mech, "n_categories", 2)
    if leak is not None:
        mech.keep_probability = rr_keep_probability(epsilon=leak, n_categories=k)
    label = f" K={k}" if k > 2 else ""
    label += "" if leak is None else f" (keeps as eps={leak:g})"
    return Case(
        f"{mech.name}{label}", epsilon, mech.randomise, 0, 1, np.arange(k - 1) + 0.5
    )


def _count_positive(z: np.ndarray) -> np.ndarray:
    return (np.asarray(z) > 0).sum(axis=1)


def _vector(cls, epsilon: float, p: int) -> Case:
    mech = cls(epsilon=epsilon, dimension=p)
    if cls is DuchiMechanism:
        statistic, n_bins = _count_positive, p
    else:

        def statistic(z: np.ndarray, s=mech.scale) -> np.ndarray:
            return (np.asarray(z) / s >= 1.0).sum(axis=1)

        n_bins = mech.n_sampled
    return Case(
        f"{mech.name} p={p}",
        epsilon,
        mech.randomise,
        -np.ones(p),
        np.ones(p),
        np.arange(n_bins) + 0.5,
        statistic,
    )


def _joint(epsilon: float, p: int) -> Case:
    # (y=0, x=-1) and (y=1, x=-1) encode to opposite corners of the box.
    mech = SignedFeatureMechanism(epsilon=epsilon, n_features=p, mechanism="duchi")
    rows = np.column_stack
    return Case(
        f"joint y*(1,x) duchi p={p}",
        epsilon,
        mech.randomise,
        rows([[0], -np.ones((1, p))])[0],
        rows([[1], -np.ones((1, p))])[0],
        np.arange(p + 1) + 0.5,
        _count_positive,
    )


def _joint_classes(epsilon: float, p: int, k: int, amplified: bool = False) -> Case:
    r"""The K-class joint release: a drawn class j and :math:`\tilde y_j (1, x)`.

    (y=0, x=-1) and (y=1, x=-1): a client that draws class 0 or 1 releases opposite
    corners of the box, one that draws another class the same corner. The drawn
    class and the number of coordinates of z on the side of (1, -1, ..., -1)
    determine the Duchi loss. The broken variant releases the vector at the epsilon
    that amplification by the class draw would allow,
    :math:`\ln(1 + K(e^\varepsilon - 1))`, as if j were secret: it is released.
    """
    side = np.concatenate([[1.0], -np.ones(p)])
    inner = math.log1p(k * math.expm1(epsilon)) if amplified else epsilon
    mech = ClassSignedFeatureMechanism(
        epsilon=inner, n_features=p, n_classes=k, mechanism="duchi"
    )

    def statistic(z: np.ndarray) -> np.ndarray:
        return z[:, 0] * (p + 2) + (z[:, 1:] * side > 0).sum(axis=1)

    label = " as if amplified by the draw" if amplified else ""
    return Case(
        f"joint K={k} class draw + y_j*(1,x) duchi p={p}{label}",
        epsilon,
        mech.randomise,
        np.concatenate([[0.0], -np.ones(p)]),
        np.concatenate([[1.0], -np.ones(p)]),
        np.arange(k * (p + 2) - 1) + 0.5,
        statistic,
    )


def _joint_split(epsilon: float, p: int, k: int, spent: float | None = None) -> Case:
    r"""The K-class split release: the label by K-ary randomized response at half the
    epsilon, x by Duchi's mechanism at the other half, rows (label, 1, z).

    (y=0, x=-1) and (y=1, x=+1) differ in the label and sit at opposite corners of
    the box: the reported label and the number of positive coordinates of z
    determine the loss. The broken variant spends ``spent`` (the label and x each at
    the whole epsilon, as if the split were forgotten) while it claims ``epsilon``.
    """
    mech = ClassSplitMechanism(
        epsilon=epsilon if spent is None else spent,
        n_features=p,
        n_classes=k,
        mechanism="duchi",
    )

    def statistic(z: np.ndarray) -> np.ndarray:
        return z[:, 0] * (p + 1) + (z[:, 2:] > 0).sum(axis=1)

    label = "" if spent is None else f" spending {spent:g}"
    return Case(
        f"joint K={k} label RR + (1,x) duchi split p={p}{label}",
        epsilon,
        mech.randomise,
        np.concatenate([[0.0], -np.ones(p)]),
        np.concatenate([[1.0], np.ones(p)]),
        np.arange(k * (p + 1) - 1) + 0.5,
        statistic,
    )


def _privatize(epsilon: float, p: int, k: int = 2) -> Case:
    # The whole training release (Laplace coefficients + RR label) of one client; with
    # k > 2 classes its label by K-ary randomized response.
    def release(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        seed = int(rng.integers(2**62))
        x, y = values[:, :p], values[:, p].astype(np.int8)
        ids = np.arange(values.shape[0])
        out = privatize(x, y, client_ids=ids, seed=seed, epsilon=epsilon, n_classes=k)
        return np.column_stack([out.features, out.labels])

    b = LaplaceMechanism(epsilon=epsilon * p / (p + 1), dimension=p).scale

    # Log-loss statistic: the coefficients' loss (in units of 2/b) and the label's
    # (labels 0 and 1 are the inputs; any other K-ary output has loss 0).
    def statistic(z: np.ndarray) -> np.ndarray:
        label = z[:, p] if k == 2 else (z[:, p] == 1) - 0.5 * (z[:, p] != 0)
        return (
            np.clip(z[:, :p], -1, 1).sum(axis=1) * (2 / b)
            + label * (epsilon / (p + 1)) * 2
        )

    edges = np.linspace(-epsilon * 1.2, epsilon * 1.2, 25)
    x = np.concatenate([-np.ones(p), [0.0]])
    x_prime = np.concatenate([np.ones(p), [1.0]])
    return Case(
        f"privatize (features+label) p={p}" + (f" K={k} label" if k > 2 else ""),
        epsilon,
        release,
        x,
        x_prime,
        edges,
        statistic,
    )


def _memoized(epsilon: float, memoize: bool = True) -> Case:
    """A deployed node asked the same label query twice, as a server may.

    Each sample is a fresh node (its own record state and noise secret) that answers
    the ``label-uniform`` query twice through :func:`~ldpfda.client.release.release`,
    the node's memoized path, on the neighbouring labels 0 and 1. The sum of the two
    released labels is sufficient for the pair; the claim is one release's epsilon,
    so the second answer must be the stored first one. The broken variant releases
    afresh and spends epsilon twice.
    """
    settings = Settings(mechanism="label-uniform", epsilon=epsilon)
    policy = NodePolicy(True, 2 * epsilon, 2 * epsilon, True, Path("unused"))
    query = catalog.label_query(settings)
    request = Request.of_client({"q": np.array([0.5, 0.5])}, query.request)
    features = np.zeros((1, 2))

    def one_node(y: int, secret: int) -> int:
        setup = ClientSetup(0, settings, 0, policy, record="audit", secret=secret)
        state = RecordState(PrivacyLedger(budget=2 * epsilon, client_ids=[0]))
        labels = np.array([y], dtype=np.int8)
        return sum(
            int(
                release(
                    catalog.LABEL,
                    setup,
                    state,
                    features,
                    labels,
                    request,
                    memoize=memoize,
                )["label"][0]
            )
            for _ in range(2)
        )

    def release_twice(y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        secrets = rng.integers(2**62, size=y.size)
        return np.array(
            [one_node(int(v), int(k)) for v, k in zip(y, secrets, strict=True)],
            dtype=float,
        )

    label = "" if memoize else " released afresh"
    return Case(
        f"memoized label release asked twice{label} (5000 per input)",
        epsilon,
        release_twice,
        0,
        1,
        np.array([0.5, 1.5]),
        n=5_000,
    )


def _histogram(epsilon: float, noise_factor: float = 1.0) -> Case:
    """ClusterRR's histogram release of one cluster of 8 labels, K=2: (5, 3) vs (4, 4).

    A label change moves both counts by 1; the log ratio of the discrete Laplace
    outputs is (1/sigma) times the statistic below, which takes the values -2, 0, 2.
    """
    sigma = histogram_sigma(epsilon=epsilon) * noise_factor

    def release(counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return noisy_cluster_histograms(counts, sigma=sigma, rng=rng) * 8.0

    def statistic(z: np.ndarray) -> np.ndarray:
        first = np.where(z[:, 0] <= 4.5, 1.0, -1.0)
        second = np.where(z[:, 1] >= 3.5, 1.0, -1.0)
        return first + second

    label = "" if noise_factor == 1.0 else f" x{noise_factor:g} noise"
    return Case(
        f"cluster histogram (discrete Laplace){label}",
        epsilon,
        release,
        np.array([5, 3]),
        np.array([4, 4]),
        np.array([-1.0, 1.0]),
        statistic,
    )


def _p2p_relay(local_epsilon: float, charged: float | None = None, k: int = 2) -> Case:
    """The peer-to-peer label as the relay (in the Flower app: the server) receives it.

    The client function :func:`~ldpfda.client.labeldp_protocol.p2p_randomize` on the
    neighbouring labels 0 and 1, in a cluster of 10 (``k`` > 2: K-ary randomized
    response, the released label binned as 0, 1 or another); the claim is what the
    client's ledger is charged (:func:`~ldpfda.schema.releases.p2p_relay_event`). The
    broken variant claims the amplified epsilon toward an analyst, as the ledger used
    to.
    """

    def release(y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        ids = np.arange(y.size)
        return p2p_randomize(
            y.astype(np.int8),
            client_ids=ids,
            seed=int(rng.integers(2**62)),
            local_epsilon=local_epsilon,
            cluster_sizes=[10],
            n_classes=k,
        ).astype(float)

    claim = p2p_relay_event(
        local_epsilon=local_epsilon, cluster_sizes=[10], n_classes=k
    ).epsilon
    label = "" if charged is None else " charged as amplified"
    what = "bit" if k == 2 else f"label K={k}"
    return Case(
        f"p2p relay {what} eps0={local_epsilon:g}{label}",
        claim if charged is None else charged,
        release,
        0,
        1,
        np.arange(min(k, 3) - 1) + 0.5,
    )


CORRECT = [
    _laplace(1.0, 4, "discrete"),
    _laplace(2.0, 2, "discrete"),
    _laplace(1.0, 4, "continuous"),
    _rr(BinaryRandomizedResponse, 1.0),
    _rr(FeedbackBit, 2.0),
    _rr(KaryRandomizedResponse, 1.0, n_categories=5),
    _vector(DuchiMechanism, 1.0, 4),
    _vector(PiecewiseMechanism, 2.0, 4),
    _vector(HybridMechanism, 5.0, 4),
    _joint(1.0, 3),
    _joint_classes(1.0, 3, 3),
    _joint_split(2.0, 3, 3),
    _privatize(2.0, 3),
    _privatize(2.0, 3, k=3),
    _histogram(1.0),
    _p2p_relay(1.0),
    _p2p_relay(1.0, k=3),
    _memoized(1.0),
]

BROKEN = [
    (_laplace(1.0, 4, "discrete", scale_factor=0.5), 2.0),
    (_rr(BinaryRandomizedResponse, 1.0, leak=1.3), 1.3),
    (_rr(KaryRandomizedResponse, 1.0, leak=1.4, n_categories=5), 1.4),
    (_histogram(1.0, noise_factor=0.5), 2.0),
    (
        _p2p_relay(
            1.0, charged=p2p_event(local_epsilon=1.0, cluster_sizes=[10]).epsilon
        ),
        1.0,
    ),
    (
        _p2p_relay(
            1.0,
            charged=p2p_event(
                local_epsilon=1.0, cluster_sizes=[10], n_classes=3
            ).epsilon,
            k=3,
        ),
        1.0,
    ),
    (_memoized(1.0, memoize=False), 2.0),
    (_joint_classes(1.0, 3, 3, amplified=True), math.log1p(3 * math.expm1(1.0))),
    (_joint_split(1.0, 3, 3, spent=2.0), 2.0),
]


def _run(case: Case, seed: int) -> PrivacyAudit:
    return estimate_epsilon(
        case.release,
        case.x,
        case.x_prime,
        n=case.n,
        bins=case.bins,
        statistic=case.statistic,
        rng=seed,
    )


def _table_row(record_property, name: str, claimed: float, audit: PrivacyAudit) -> None:
    """A row of the audit table that the terminal summary prints (tests/conftest.py),
    carried in the test's report so that it reaches the summary from a worker too."""
    row = (name, claimed, audit.estimate, audit.lower_bound, audit.upper_bound)
    record_property("audit_row", (*row, audit.violates(claimed)))


@pytest.mark.parametrize("case", CORRECT, ids=[c.name for c in CORRECT])
def test_mechanism_keeps_its_claimed_epsilon(case, record_property):
    audit = _run(case, 101)
    _table_row(record_property, case.name, case.epsilon, audit)
    assert not audit.violates(case.epsilon), (
        f"{case.name}: estimated {audit.estimate:.4f} +- {audit.margin:.4f} "
        f"> claimed {case.epsilon}"
    )


@pytest.mark.parametrize(
    ("case", "true_epsilon"), BROKEN, ids=[c.name for c, _ in BROKEN]
)
def test_the_audit_catches_a_broken_mechanism(case, true_epsilon, record_property):
    audit = _run(case, 202)
    _table_row(record_property, f"BROKEN {case.name}", case.epsilon, audit)
    assert audit.violates(case.epsilon)
    # And it measures the real epsilon: the true value lies within the bounds.
    assert audit.lower_bound <= true_epsilon <= audit.upper_bound + 1e-12
    assert math.isfinite(audit.estimate)
