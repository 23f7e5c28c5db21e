"""In-process runs: a protocol plan over the in-process transport, scored.

:func:`run_protocol` runs the plan of :mod:`ldpfda.server.plans` for the settings'
protocol with every client answering in this process
(:class:`~ldpfda.engine.inprocess.InProcessClients`), exactly the plan the Flower
ServerApp runs over the grid. :func:`run_repeat` is one repeat on an embedded design.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda.config import Settings
from ldpfda.datasets.population import public_features, repeat_data
from ldpfda.engine.inprocess import (
    ClientPopulation,
    InProcessClients,
    all_ids,
    split_clients,
)
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.random import derive_seed
from ldpfda.server.fitting import ProtocolResult, assess_signal, score
from ldpfda.server.mrma import fit_linear
from ldpfda.server.plans import Plan, run_plan
from ldpfda.server.session import Session

__all__ = ["run_keyed", "run_protocol", "run_repeat"]


def run_protocol(
    train: ClientPopulation,
    evaluation: ClientPopulation,
    settings: Settings,
    *,
    seed: int,
    server_rng: np.random.Generator,
    test: tuple[NDArray[np.float64], NDArray[np.int8]] | None = None,
    clean_train: tuple[NDArray[np.float64], NDArray[np.int8]] | None = None,
    chunk_size: int = 100_000,
    keep_payload: bool = True,
    public: NDArray[np.float64] | None = None,
    n_classes: int = 2,
) -> ProtocolResult:
    """Run the protocol of ``settings`` end to end, every client in this process.

    Parameters
    ----------
    train, evaluation : ClientPopulation
        Training and evaluation clients (disjoint ids); in a ``moment`` or label-only
        run both simply release.
    seed : int
        Run seed that keys every client's noise.
    server_rng : Generator
        The server's own randomness (subsamples, groups, clusters, pilots).
    test : (features, labels), optional
        Clean scaled test data; test errors of every method are then reported.
    clean_train : (features, labels), optional
        Clean scaled data, for the non-private reference model only.
    keep_payload : bool
        False keeps an empty payload in the result; a ``moment`` run then keeps only
        the sums of the releases, chunk by chunk, so its memory does not grow with
        the releases.
    public : array of shape (m, p), optional
        Public, unlabeled scaled features (the moment classifier's feature second
        moment when ``settings.public_features`` is True).
    n_classes : int
        K, the number of classes (public); labels are ``0 .. K - 1``. K > 2 needs the
        moment protocol of a joint release or MRMA on the reference release
        (:class:`~ldpfda.server.plans.Plan`).
    """
    # One array of ids, which the plan, the session and both ledgers share.
    n_train = int(all_ids(train).size)
    every = np.concatenate([all_ids(train), all_ids(evaluation)]).astype(np.int64)
    plan = Plan(
        settings,
        every[:n_train],
        every[n_train:],
        _n_features(train),
        server_rng,
        public,
        n_classes=n_classes,
        keep_payload=keep_payload,
    )
    every = plan.every_client
    ledger = PrivacyLedger(budget=settings.epsilon, client_ids=every)
    clients = InProcessClients(
        [train, evaluation], settings, seed=seed, ledger=ledger, chunk_size=chunk_size
    )
    session = Session(clients, PrivacyLedger(budget=settings.epsilon, client_ids=every))
    result = run_plan(session, plan)
    if clean_train is not None:
        result.baselines["non_private"] = fit_linear(*clean_train, n_classes=n_classes)
    if not keep_payload:
        result.payload = result.payload.take(slice(0, 0))
    if test is not None:
        score(result, *test)
    assess_signal(result, public, test)
    return result


def run_keyed(
    train: ClientPopulation,
    evaluation: ClientPopulation,
    settings: Settings,
    seed: int,
    **options: Any,
) -> ProtocolResult:
    """:func:`run_protocol` with the clients' noise keyed by ``derive_seed(seed,
    "clients")`` and the server's randomness by ``derive_seed(seed, "server")``;
    ``options`` are :func:`run_protocol`'s keywords."""
    return run_protocol(
        train,
        evaluation,
        settings,
        seed=derive_seed(seed, "clients"),
        server_rng=np.random.default_rng(derive_seed(seed, "server")),
        **options,
    )


def _n_features(population: ClientPopulation) -> int:
    featurizer = getattr(population, "featurizer", None)
    if featurizer is not None:
        return int(featurizer.n_features_out)
    _, x, _ = next(iter(population.batches(1)))
    return int(x.shape[1])


def run_repeat(settings: Settings, repeat: int = 0) -> ProtocolResult:
    """One repeat of the simulation on an embedded design, with every baseline scored.

    Training clients have ids ``0 .. n_train-1`` and evaluation clients the next
    ``n_eval`` ids. Data, the run seed and the server's randomness are derived from
    ``(settings.seed, repeat)``, public features by
    :func:`~ldpfda.datasets.population.public_features`. The non-private reference is
    a logistic regression on the clean data of the clients the server learns from: the
    training clients of an ``mrma`` run, every client of a ``moment`` or label-only run.
    """
    data = repeat_data(settings, repeat)
    train, evaluation, test = split_clients(settings, data)
    clean = (train.features(), train.labels)
    if settings.protocol in ("moment", "label"):
        clean = (
            np.vstack([clean[0], evaluation.features()]),
            np.concatenate([train.labels, evaluation.labels]).astype(np.int8),
        )
    public = (
        public_features(settings, repeat, featurizer=data.featurizer)
        if settings.public_features
        else None
    )
    return run_protocol(
        train,
        evaluation,
        settings,
        seed=derive_seed(settings.seed, "clients", repeat),
        server_rng=np.random.default_rng(derive_seed(settings.seed, "server", repeat)),
        test=test,
        clean_train=clean,
        public=public,
        n_classes=settings.n_classes,
    )
