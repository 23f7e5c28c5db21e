"""What a client computes and releases, as plain vectorised functions.

Row ``i`` of every array belongs to client ``client_ids[i]``; one client is a batch of
one. A client's noise comes from its own keyed stream (run seed, client id), so a client
gives the same answer whether it is processed alone (a Flower SuperNode) or among a
million (the in-process engine). No function here returns raw curves or raw labels.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import (
    check_binary_labels,
    check_class_labels,
    check_epsilon,
    check_finite_array,
)
from ldpfda.fda.features import Featurizer
from ldpfda.privacy.joint import ClassSignedFeatureMechanism, ClassSplitMechanism
from ldpfda.privacy.ledger import PrivacyLedger
from ldpfda.privacy.random import ClientStreams
from ldpfda.privacy.randomized_response import FeedbackBit
from ldpfda.schema.payloads import JointPayload, TrainingPayload
from ldpfda.schema.releases import joint_mechanism, training_mechanisms

__all__ = [
    "FEATURE_STREAM",
    "FEEDBACK_STREAM",
    "JOINT_STREAM",
    "LABEL_STREAM",
    "answer_evaluation",
    "privatize",
    "privatize_curves",
    "privatize_joint",
]

FEATURE_STREAM = "privatize/features"
LABEL_STREAM = "privatize/label"
FEEDBACK_STREAM = "evaluate/feedback"
JOINT_STREAM = "privatize/joint"


def _client_inputs(
    features: ArrayLike, labels: ArrayLike, client_ids: ArrayLike, n_classes: int = 2
) -> tuple[NDArray[np.float64], NDArray[np.int8], NDArray[np.int64]]:
    """Validated (scaled features, labels in 0 .. K - 1, client ids) of one batch."""
    x = _scaled_features(features)
    y = (
        check_binary_labels(labels)
        if n_classes == 2
        else check_class_labels(labels, n_classes)
    )
    if y.size != x.shape[0]:
        raise ValueError(f"labels has {y.size} entries for {x.shape[0]} feature rows")
    return x, y, _client_ids(client_ids, x.shape[0])


def _client_ids(client_ids: ArrayLike, n: int) -> NDArray[np.int64]:
    ids = np.asarray(client_ids)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"client_ids must be integers, got dtype {ids.dtype}")
    ids = ids.astype(np.int64).reshape(-1)
    if ids.size != n:
        raise ValueError(f"client_ids has {ids.size} entries for {n} clients")
    return ids


def _scaled_features(features: ArrayLike) -> NDArray[np.float64]:
    x = check_finite_array(features, "features", ndim=2)
    if np.any(np.abs(x) > 1.0 + 1e-12):
        raise ValueError(
            "features must be rescaled into [-1, 1] before privatization "
            f"(got max |x| = {np.abs(x).max():.6g}); use a featurizer"
        )
    return x


def privatize(
    features: ArrayLike,
    labels: ArrayLike,
    *,
    client_ids: ArrayLike,
    seed: int,
    epsilon: float,
    label_share: float | None = None,
    ledger: PrivacyLedger | None = None,
    release: int = 0,
    n_classes: int = 2,
) -> TrainingPayload:
    r"""Perturb each client's scaled coefficients with Laplace noise, its label with RR.

    With the reference split each of the p coordinates and the label spend
    :math:`\varepsilon/(p+1)`; the Laplace scale on [-1, 1] is
    :math:`2(p+1)/\varepsilon`. If a ``ledger`` is given, both releases are charged
    before anything is released, and a client that cannot afford them makes the call
    fail with :class:`~ldpfda.BudgetExceededError` (no one releases anything).

    Parameters
    ----------
    features : array of shape (n, p)
        Coefficients already rescaled into [-1, 1].
    labels : array of shape (n,)
        True labels in {0, 1}.
    client_ids : array of shape (n,)
    seed : int
        The run seed.
    epsilon : float
        Each client's training budget, in (0, inf].
    label_share : float, optional
        Share of epsilon on the label; the reference 1/(p+1) if None.
    ledger : PrivacyLedger, optional
    release : int
        Index of this release for these clients in the run. Each index has its own
        noise stream, so a client allowed a second release never reuses its noise.
    n_classes : int
        K: labels in 0 .. K - 1, released by K-ary randomized response at the label
        share (:class:`~ldpfda.privacy.KaryRandomizedResponse`) when K > 2.
    """
    x, y, ids = _client_inputs(features, labels, client_ids, n_classes)
    epsilon = check_epsilon(epsilon)
    feature_mechanism, label_mechanism = training_mechanisms(
        epsilon, x.shape[1], label_share, n_classes
    )
    if ledger is not None:
        ledger.charge_all([feature_mechanism.event(), label_mechanism.event()], ids)
    streams = ClientStreams(seed, ids)
    return TrainingPayload(
        client_ids=ids,
        features=feature_mechanism.randomise(
            x, streams.stream(f"{FEATURE_STREAM}#{release}")
        ),
        labels=label_mechanism.randomise(
            y, streams.stream(f"{LABEL_STREAM}#{release}")
        ).astype(np.int8),
        feature_epsilon=feature_mechanism.epsilon,
        label_epsilon=label_mechanism.epsilon,
        n_classes=n_classes,
    )


def privatize_joint(
    features: ArrayLike,
    labels: ArrayLike,
    *,
    client_ids: ArrayLike,
    seed: int,
    epsilon: float,
    mechanism: str = "hybrid",
    ledger: PrivacyLedger | None = None,
    release: int = 0,
    n_classes: int = 2,
    design: str = "draw",
) -> JointPayload:
    r"""Each client releases :math:`\tilde y\,(1, x)`, :math:`\tilde y = 2y - 1`, once.

    With ``n_classes`` K > 2 each client draws a class j uniformly from its stream and
    releases j and :math:`\tilde y_j\,(1, x)`, :math:`\tilde y_j = 2\cdot 1\{y = j\}
    - 1`, at the whole ``epsilon``
    (:class:`~ldpfda.privacy.joint.ClassSignedFeatureMechanism`): the payload's
    ``classes`` are the draws, its ``releases`` the vectors. With ``design="split"``
    each client releases its label by K-ary randomized response and x by the vector
    mechanism, the epsilon split between them
    (:func:`~ldpfda.privacy.joint.split_label_share`)
    (:class:`~ldpfda.privacy.joint.ClassSplitMechanism`): ``classes`` are the reported
    labels, ``releases`` the rows (1, z).

    The whole ``epsilon`` goes into one release of
    :class:`~ldpfda.privacy.joint.SignedFeatureMechanism` with the vector ``mechanism``
    (:func:`~ldpfda.privacy.vector_mechanisms.make_vector_mechanism`), which estimates
    :math:`E[\tilde y\,(1, x)]` without bias. If a ``ledger`` is given the release is
    charged before anything is released, and a client that cannot afford it makes the
    call fail with :class:`~ldpfda.BudgetExceededError` (no one releases anything).
    The noise comes from the client's keyed stream ``privatize/joint#<release>``.

    Parameters
    ----------
    features : array of shape (n, p)
        Coefficients already rescaled into [-1, 1].
    labels : array of shape (n,)
        True labels in {0, 1} (in 0 .. K - 1 for K classes).
    client_ids : array of shape (n,)
    seed : int
        The run seed.
    epsilon : float
        Each client's budget, in (0, inf].
    mechanism : {"hybrid", "piecewise", "duchi", "laplace"}
    ledger : PrivacyLedger, optional
    release : int
        Index of this release for these clients in the run (see :func:`privatize`).
    n_classes : int
        K, the number of classes (public: the federation's label set).

    References
    ----------
    N. Wang et al., "Collecting and analyzing multidimensional data with local
    differential privacy", ICDE 2019; J. C. Duchi, M. I. Jordan, M. J. Wainwright,
    JASA 2018.
    """
    x, y, ids = _client_inputs(features, labels, client_ids, n_classes)
    mech = joint_mechanism(
        check_epsilon(epsilon), x.shape[1], mechanism, n_classes, design
    )
    if ledger is not None:
        ledger.charge(mech.event(), ids)
    stream = ClientStreams(seed, ids).stream(f"{JOINT_STREAM}#{release}")
    if isinstance(mech, ClassSignedFeatureMechanism | ClassSplitMechanism):
        classes, z = mech.release(x, y, stream)
        return JointPayload(ids, z, mech.epsilon, mechanism, classes, n_classes, design)
    return JointPayload(ids, mech.release(x, y, stream), mech.epsilon, mechanism)


def privatize_curves(
    curves: Any,
    labels: ArrayLike,
    featurizer: Featurizer,
    **kwargs: Any,
) -> TrainingPayload:
    """Project, rescale and privatize raw curves (or vectors) in one step."""
    return privatize(featurizer.transform(curves), labels, **kwargs)


def answer_evaluation(
    coef: ArrayLike,
    intercept: ArrayLike,
    features: ArrayLike,
    labels: ArrayLike,
    *,
    client_ids: ArrayLike,
    seed: int,
    epsilon: float,
    ledger: PrivacyLedger | None = None,
    release: int = 0,
    n_classes: int = 2,
) -> NDArray[np.int8]:
    r"""Each evaluation client says, by randomized response, if a model erred on it.

    Client ``i`` computes
    :math:`w_i = 1\{\mathrm{sign}(b_i + \beta_i^\top x_i) \ne y_i\}` locally with its
    own model (row ``i`` of ``coef``/``intercept``, or one model for all) and releases
    :math:`w_i` through :class:`~ldpfda.privacy.FeedbackBit` with its whole
    ``epsilon``. ``release`` indexes the client's releases as in :func:`privatize`.

    With ``n_classes`` K > 2 a model is K score rows: ``coef`` of shape (K, p) or
    (n, K, p), ``intercept`` (K,) or (n, K), and
    :math:`w_i = 1\{\arg\max_k (b_{ik} + \beta_{ik}^\top x_i) \ne y_i\}`.
    """
    x, y, ids = _client_inputs(features, labels, client_ids, n_classes)
    if n_classes > 2:
        wrong = _multiclass_wrong(coef, intercept, x, y, n_classes)
        return _feedback(wrong, ids, seed, epsilon, ledger, release)
    n, p = x.shape
    w = check_finite_array(coef, "coef")
    b = check_finite_array(intercept, "intercept")
    if w.shape not in ((p,), (n, p)) or b.size not in (1, n):
        raise ValueError(
            f"coef must have shape ({p},) or ({n}, {p}) and intercept 1 or {n} values, "
            f"got coef {w.shape} and intercept {b.shape}"
        )
    w = np.broadcast_to(w, (n, p)) if w.ndim == 1 else w
    b = np.broadcast_to(b.reshape(-1), (n,)) if b.size == 1 else b.reshape(-1)
    if w.shape != (n, p) or b.shape != (n,):
        raise ValueError(
            f"coef must have shape ({p},) or ({n}, {p}) and intercept ({n},), got "
            f"{w.shape} and {b.shape}"
        )
    predicted = (np.einsum("ij,ij->i", x, w) + b > 0).astype(np.int8)
    return _feedback(
        (predicted != y).astype(np.int8), ids, seed, epsilon, ledger, release
    )


def _multiclass_wrong(
    coef: ArrayLike,
    intercept: ArrayLike,
    x: NDArray[np.float64],
    y: NDArray[np.int8],
    k: int,
) -> NDArray[np.int8]:
    """1{the K-row model errs on the client}, every client of the batch."""
    n, p = x.shape
    w = check_finite_array(coef, "coef")
    b = check_finite_array(intercept, "intercept")
    if w.shape not in ((k, p), (n, k, p)) or b.shape not in ((k,), (n, k)):
        raise ValueError(
            f"a {k}-class model must have coef of shape ({k}, {p}) or ({n}, {k}, {p}) "
            f"and intercept ({k},) or ({n}, {k}), got {w.shape} and {b.shape}"
        )
    scores = np.einsum("ij,ikj->ik", x, np.broadcast_to(w, (n, k, p))) + b
    return (scores.argmax(axis=1) != y).astype(np.int8)


def _feedback(
    wrong: NDArray[np.int8],
    ids: NDArray[np.int64],
    seed: int,
    epsilon: float,
    ledger: PrivacyLedger | None,
    release: int,
) -> NDArray[np.int8]:
    """The feedback bits of ``wrong``, charged to ``ledger`` first."""
    mechanism = FeedbackBit(epsilon=epsilon)
    if ledger is not None:
        ledger.charge(mechanism.event(), ids)
    stream = ClientStreams(seed, ids).stream(f"{FEEDBACK_STREAM}#{release}")
    return mechanism.randomise(wrong, stream).astype(np.int8)
