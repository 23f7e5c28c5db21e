"""scikit-learn classifiers trained by a local-DP protocol on simulated clients.

:class:`MRMAClassifier` runs the reference MRMA protocol, :class:`~ldpfda.LDPClassifier`
(:mod:`ldpfda.engine.classifier`) the platform's default one. Both read their clients'
data the same way (:mod:`ldpfda.engine.inputs`), take a federation spec, a
:class:`~ldpfda.engine.accountant.BudgetAccountant` and a ``random_state``, and predict
with the same linear rule; only the protocol differs.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import expit, softmax
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import Tags
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import (
    check_array,
    check_is_fitted,
    column_or_1d,
    validate_data,
)

from ldpfda._validation import check_epsilon, check_real
from ldpfda.config import Settings
from ldpfda.engine.accountant import BudgetAccountant
from ldpfda.engine.inprocess import ArrayClients
from ldpfda.engine.inputs import (
    INPUT_TYPES,
    CurveInputs,
    check_spec,
    curve_inputs,
    describe,
    is_curves,
    warn_if_private,
)
from ldpfda.engine.runner import run_protocol
from ldpfda.fda.features import Featurizer, VectorFeaturizer
from ldpfda.fda.scaling import CoefficientScaler
from ldpfda.privacy.random import derive_seed, run_seed
from ldpfda.schema.spec import FederationSpec
from ldpfda.server.fitting import ProtocolResult

__all__ = ["MRMAClassifier"]

#: Each client's budget when neither the estimator nor a spec gives one.
DEFAULT_EPSILON = 5.0


class _Prepared:
    """What a fit learned from its inputs before any client releases."""

    def __init__(
        self,
        featurizer: Featurizer,
        features: NDArray[np.float64],
        labels: NDArray[np.int8],
        classes: NDArray[Any],
        public: NDArray[np.float64] | None,
        client_ids: NDArray[np.int64],
    ) -> None:
        self.featurizer = featurizer
        self.features = features
        self.labels = labels
        self.classes = classes
        self.public = public
        self.client_ids = client_ids

    @property
    def n_clients(self) -> int:
        return int(self.features.shape[0])


def _classes(y: NDArray[Any], multiclass: bool) -> NDArray[Any]:
    """The sorted classes of ``y``: two, or (``multiclass``) at least two."""
    classes = np.unique(y)
    if classes.size < 2 or (classes.size > 2 and not multiclass):
        found = classes.tolist()
        shown = found if len(found) <= 10 else [*found[:10], "..."]
        if multiclass:
            raise ValueError(
                f"y must have at least 2 classes, got {classes.size}: {shown}"
            )
        later = " (LDPClassifier runs the K-class protocol)" if len(found) > 2 else ""
        raise ValueError(
            f"Only binary classification is supported. y must have exactly 2 classes, "
            f"got {classes.size}: {shown}{later}"
        )
    return classes


def _indices(y: NDArray[Any], classes: NDArray[Any]) -> NDArray[np.int8]:
    """Each label's position in ``classes`` (binary: 1 for ``classes[1]``)."""
    if classes.size == 2:
        return (y == classes[1]).astype(np.int8)
    index = {value: i for i, value in enumerate(classes.tolist())}
    return np.array([index[v] for v in y.tolist()], dtype=np.int8)


def _check_client_ids(client_ids: ArrayLike | None, n: int) -> NDArray[np.int64]:
    if client_ids is None:
        return np.arange(n, dtype=np.int64)
    ids = np.asarray(client_ids)
    if ids.shape != (n,):
        raise ValueError(
            f"client_ids must have shape ({n},), one id per client, got {ids.shape}"
        )
    if ids.dtype.kind not in "iu":
        raise TypeError(f"client_ids must be integers, got dtype {ids.dtype}")
    if n and ids.min() < 0:
        raise ValueError(f"client_ids must be >= 0, got {ids.min()}")
    if np.unique(ids).size != n:
        raise ValueError("client_ids must be unique (one id per client)")
    return ids.astype(np.int64)


class _LocalDPClassifier(ClassifierMixin, BaseEstimator):
    """What both estimators share: inputs, labels, budget, prediction.

    Subclasses set ``_protocol`` (the spec's ``release.protocol`` they run) and
    implement :meth:`_run`.
    """

    _protocol: ClassVar[str]
    #: Whether a few hundred clients fall short of the 0.83 training accuracy the
    #: common checks ask of a classifier on make_blobs (scikit-learn's poor_score).
    _poor_score: ClassVar[bool] = False
    #: Whether the protocol takes K > 2 classes.
    _multiclass: ClassVar[bool] = False
    epsilon: float | None
    input_type: str
    spec: FederationSpec | str | None
    featurizer: Featurizer | None
    n_basis: int | None
    order: int | None
    accountant: BudgetAccountant | None
    random_state: int | np.random.Generator | None

    # -- scikit-learn --------------------------------------------------------------

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        assert tags.classifier_tags is not None
        # MRMA is binary; the default protocol has a K-class release.
        tags.classifier_tags.multi_class = self._multiclass
        tags.classifier_tags.poor_score = self._poor_score
        return tags

    # -- fit -------------------------------------------------------------------------

    def _resolve_epsilon(self, spec: FederationSpec | None) -> float:
        name = type(self).__name__
        if spec is not None:
            if spec.release.protocol != self._protocol:
                other = "LDPClassifier" if self._protocol == "reference" else name
                runs = "MRMAClassifier" if other == name else "LDPClassifier"
                raise ValueError(
                    f"the spec's release.protocol is {spec.release.protocol!r}, which "
                    f"{runs} runs; {name} runs the {self._protocol!r} protocol"
                )
            if self.epsilon is not None:
                epsilon = check_epsilon(self.epsilon)
                if epsilon != spec.release.epsilon:
                    raise ValueError(
                        f"epsilon={epsilon!r} but the spec fixes release.epsilon="
                        f"{spec.release.epsilon!r}: leave epsilon=None or match it"
                    )
            return spec.release.epsilon
        if self.epsilon is None:
            return DEFAULT_EPSILON
        return check_epsilon(self.epsilon)

    def _labels(
        self,
        y: Any,
        n: int,
        spec: FederationSpec | None,
        spec_labels: NDArray[np.int64] | None,
    ) -> tuple[NDArray[np.int8], NDArray[Any]]:
        """Labels in 0 .. K - 1 and the K classes (the spec's labels if it has one);
        K = 2 unless the protocol takes more."""
        if spec is not None and len(spec.labels) != 2 and not self._multiclass:
            raise ValueError(
                f"Only binary classification is supported. The spec declares "
                f"{len(spec.labels)} labels {spec.labels} ({type(self).__name__} is "
                "binary; LDPClassifier runs the K-class protocol)"
            )
        if y is None and spec is not None and spec_labels is not None:
            return spec_labels.astype(np.int8), np.asarray(spec.labels)
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is "
                "None"
            )
        y = column_or_1d(y, warn=True)
        if y.shape[0] != n:
            raise ValueError(f"y has {y.shape[0]} labels for {n} clients")
        if y.dtype.kind in "fc" and not np.all(np.isfinite(y)):
            raise ValueError("y contains NaN or infinite values")
        if spec is not None:
            classes = np.asarray(spec.labels)
            names = y.astype(str)
            outside = ~np.isin(names, classes)
            if outside.any():
                bad = sorted(set(names[outside].tolist()))
                raise ValueError(
                    f"y holds label(s) {bad} that are not in the spec's labels "
                    f"{spec.labels}"
                )
            return _indices(names, classes), classes
        check_classification_targets(y)
        classes = _classes(y, self._multiclass)
        return _indices(y, classes), classes

    def _prepare(
        self,
        X: Any,
        y: Any,
        grid_points: ArrayLike | None,
        public_curves: Any,
        client_ids: ArrayLike | None,
        spec: FederationSpec | None,
    ) -> _Prepared:
        for attribute in ("n_features_in_", "feature_names_in_"):
            self.__dict__.pop(attribute, None)
        if self.input_type not in INPUT_TYPES:
            raise ValueError(
                f"input_type must be one of {INPUT_TYPES}, got {self.input_type!r}"
            )
        from scipy.sparse import issparse

        if issparse(X):
            raise TypeError(
                "sparse input is not supported: curves and feature vectors must be "
                "dense (X.toarray())"
            )
        if self.input_type == "vectors":
            return self._prepare_vectors(X, y, grid_points, public_curves, client_ids)
        if self.featurizer is not None:
            if spec is not None:
                raise ValueError(
                    "pass a spec or a featurizer, not both: the spec fixes the "
                    "featurizer"
                )
            warn_if_private(public_curves, X)
            features = self.featurizer.transform(X)
            public = (
                None
                if public_curves is None
                else self.featurizer.transform(public_curves)
            )
            inputs = CurveInputs(self.featurizer, features, None, public, None)
        else:
            inputs = curve_inputs(
                X,
                grid_points=grid_points,
                public_curves=public_curves,
                spec=spec,
                n_basis=self.n_basis,
                order=self.order,
            )
        n = int(inputs.features.shape[0])
        if n < 2:
            raise ValueError(
                f"the protocol needs at least 2 clients, got n_samples={n} (one "
                "sample per client)"
            )
        labels, classes = self._labels(y, n, spec, inputs.labels)
        if inputs.n_columns is not None:
            self.n_features_in_ = inputs.n_columns
        return _Prepared(
            inputs.featurizer,
            inputs.features,
            labels,
            classes,
            inputs.public,
            _check_client_ids(client_ids, n),
        )

    def _prepare_vectors(
        self,
        X: Any,
        y: Any,
        grid_points: ArrayLike | None,
        public_curves: Any,
        client_ids: ArrayLike | None,
    ) -> _Prepared:
        if self.spec is not None:
            raise ValueError(
                "a spec describes curves; leave input_type='curves' with a spec "
                "(input_type='vectors' reads X as feature vectors in [-1, 1])"
            )
        if grid_points is not None:
            raise ValueError(
                "grid_points are for curves; input_type='vectors' reads each row of X "
                "as a feature vector in [-1, 1] (leave input_type='curves' for curves)"
            )
        if is_curves(X):
            raise ValueError(
                f"input_type='vectors' reads X as feature vectors, got {describe(X)}: "
                "leave input_type='curves' for curves"
            )
        X, y = validate_data(self, X, y, dtype=np.float64, ensure_min_samples=2)
        warn_if_private(public_curves, X)
        featurizer = self.featurizer or VectorFeaturizer(
            CoefficientScaler(-1.0, 1.0), X.shape[1]
        )
        features = featurizer.transform(X)
        public = None
        if public_curves is not None:
            public = featurizer.transform(
                check_array(public_curves, dtype=np.float64, input_name="public_curves")
            )
        labels, classes = self._labels(y, X.shape[0], None, None)
        return _Prepared(
            featurizer,
            features,
            labels,
            classes,
            public,
            _check_client_ids(client_ids, X.shape[0]),
        )

    def _fit(
        self,
        X: Any,
        y: Any,
        grid_points: ArrayLike | None,
        public_curves: Any,
        client_ids: ArrayLike | None,
    ) -> ProtocolResult:
        spec = check_spec(self.spec)
        epsilon = self._resolve_epsilon(spec)
        accountant = BudgetAccountant.load_default(self.accountant)
        data = self._prepare(X, y, grid_points, public_curves, client_ids, spec)
        seed = run_seed(self.random_state)
        run = self._plan(data, epsilon, seed)
        # Every check passed: charge the fit before any client releases.
        if accountant is not None:
            accountant.spend(
                epsilon, what=f"{type(self).__name__}.fit", n_clients=data.n_clients
            )
        result = run()
        self.classes_ = data.classes
        self.featurizer_ = data.featurizer
        self.coef_ = result.final.coef.copy()
        self.intercept_ = result.final.intercept.copy()
        self.epsilon_ = epsilon
        self.result_: ProtocolResult = result
        self.input_kind_ = self.input_type
        return result

    def _plan(self, data: _Prepared, epsilon: float, seed: int) -> Any:
        """Validate the protocol's settings and return the run (a callable that makes
        the clients release); raise before anything is released."""
        raise NotImplementedError

    # -- predict --------------------------------------------------------------------

    def _features(self, X: Any) -> NDArray[np.float64]:
        check_is_fitted(self, "coef_")
        if self.input_kind_ == "vectors":
            X = validate_data(self, X, reset=False, dtype=np.float64)
        return self.featurizer_.transform(X)

    def decision_function(self, X: Any) -> NDArray[np.float64]:
        r"""Scores :math:`b + \beta^\top z(x)` of new, non-private data (positive
        means ``classes_[1]``), in the form the model was fitted on; with K > 2
        classes one score per class, shape (n, K)."""
        z = self._features(X)
        if self.coef_.shape[0] > 1:
            return z @ self.coef_.T + self.intercept_
        return z @ self.coef_[0] + self.intercept_[0]

    def predict_proba(self, X: Any) -> NDArray[np.float64]:
        """Logistic link of the score, shape (n, 2), or the softmax of the K scores,
        shape (n, K): a monotone score, not a calibrated probability."""
        scores = self.decision_function(X)
        if scores.ndim == 2:
            return softmax(scores, axis=1)
        p1 = expit(scores)
        return np.column_stack([1.0 - p1, p1])

    def predict(self, X: Any) -> NDArray[Any]:
        """``classes_[1]`` where the score is positive, else ``classes_[0]``; with K > 2
        classes the class of the largest score."""
        scores = self.decision_function(X)
        if scores.ndim == 2:
            return self.classes_[np.argmax(scores, axis=1)]
        return self.classes_[(scores > 0).astype(int)]


class MRMAClassifier(_LocalDPClassifier):
    r"""Classifier learned under local DP by model reversal and model averaging.

    ``fit`` treats every row (sample) of ``X`` as one client: a random
    ``eval_fraction`` of them form the evaluation group, the rest the training group.
    Training clients release Laplace-perturbed scaled coefficients and a randomized
    label (K-ary randomized response for K > 2 classes); evaluation clients release
    one randomized "was the model wrong on me" bit.
    No client's raw data reach the learned model other than through those releases,
    and each client spends at most ``epsilon``. The fitted model classifies new,
    non-private curves: :math:`\hat y = 1\{\bar b + \bar\beta^\top z(x) > 0\}`, with
    :math:`z` the client-side featurizer (projection and rescaling).

    It always runs the reference MRMA protocol
    (:meth:`ldpfda.config.Settings.reference`), to reproduce and study MRMA; the
    platform's default protocol is :class:`~ldpfda.LDPClassifier`.

    Parameters
    ----------
    epsilon : float or None
        Per-client budget of one fit, in (0, inf] (inf: no noise, simulation only).
        None: the spec's ``release.epsilon``, else 5.0.
    n_estimators : int
        Number M of weak classifiers.
    subsample_size : int
        Payloads each weak classifier is trained on.
    cutoff : float
        c of the selection rule :math:`|1/2 - \hat e| > 1/2 - c`.
    eval_fraction : float
        Share of clients in the evaluation group (500 / 3000 train in the reference).
    weak_learner : {"logistic", "svm"}
    label_share : float or None
        Share of a training client's budget on its label (None = 1/(p+1)).
    normalize_models : bool
        Scale every weak model to unit norm before averaging.
    featurizer : Featurizer or None
        Client-side map to [-1, 1]^p, fixed in advance; X is passed to it as is.
    n_basis, order : int or None
        B-spline basis of curves without a spec (None: 10 and 4, or an FDataBasis's
        own); must be None with a spec, which fixes every channel's basis.
    input_type : {"curves", "vectors"}
        How a plain 2-D array is read: curves sampled on ``grid_points`` (default), or
        feature vectors already in [-1, 1] (values outside are clipped to it, as each
        client would clip its own). scikit-fda data, DataFrames of curves and
        LongCurves are curves whatever this says. See :mod:`ldpfda.engine.inputs` for
        every accepted form.
    spec : FederationSpec, path or None
        A federation spec fixing the basis, bounds, labels and epsilon; its
        ``release.protocol`` must be ``"reference"``.
    accountant : BudgetAccountant or None
        Charged ``epsilon`` per fit, before any release; a fit it cannot afford is
        refused with :class:`~ldpfda.BudgetExceededError`. None: the installed
        default accountant, if any (:meth:`BudgetAccountant.set_default`).
    random_state : int, Generator or None
        None (default) keys the clients' noise and the server's randomness with fresh
        OS entropy, so nobody can replay the noise. A fixed value makes the noise
        reproducible -- for simulation and tests only: noise whose seed is known
        protects nothing.

    Attributes
    ----------
    classes_ : ndarray of shape (K,)
    coef_ : ndarray of shape (1, p), or (K, p) for K > 2 classes
    intercept_ : ndarray of shape (1,), or (K,)
    epsilon_ : float
        What every client was allowed to spend in this fit.
    featurizer_ : Featurizer
        The client-side map of this fit, applied again to predict.
    result_ : ProtocolResult
        Per-model estimated errors, weights, reversal flags, privacy summary.
    n_features_in_ : int
        Columns of X, when X is a 2-D array or DataFrame.

    References
    ----------
    Q. Qin, Z. Bai, "Classification under local differential privacy with model reversal
    and model averaging", JMLR 27(5), 2026.
    """

    _protocol = "reference"
    # K classes: labels by K-ary randomized response, K-row weak models, weights by
    # estimated accuracy above 1/K (docs/estimators.md, "K classes" of MRMA).
    _multiclass = True
    # MRMA estimates each weak model's error from a few randomized bits: on the 200
    # clients of the common checks, with 2 weak models, its training accuracy ranges
    # from 0.5 to 0.94 over seeds.
    _poor_score = True

    def __init__(
        self,
        epsilon: float | None = None,
        n_estimators: int = 50,
        subsample_size: int = 50,
        cutoff: float = 0.2,
        eval_fraction: float = 5 / 6,
        weak_learner: str = "logistic",
        label_share: float | None = None,
        normalize_models: bool = True,
        featurizer: Featurizer | None = None,
        n_basis: int | None = None,
        order: int | None = None,
        random_state: int | np.random.Generator | None = None,
        *,
        input_type: str = "curves",
        spec: FederationSpec | str | None = None,
        accountant: BudgetAccountant | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.n_estimators = n_estimators
        self.subsample_size = subsample_size
        self.cutoff = cutoff
        self.eval_fraction = eval_fraction
        self.weak_learner = weak_learner
        self.label_share = label_share
        self.normalize_models = normalize_models
        self.featurizer = featurizer
        self.n_basis = n_basis
        self.order = order
        self.random_state = random_state
        self.input_type = input_type
        self.spec = spec
        self.accountant = accountant

    def fit(
        self,
        X: Any,
        y: ArrayLike | None = None,
        *,
        grid_points: ArrayLike | None = None,
        public_curves: Any = None,
        client_ids: ArrayLike | None = None,
    ) -> MRMAClassifier:
        """Run the protocol with one client per row of ``X``.

        Parameters
        ----------
        X : curves or vectors
            Any form of :mod:`ldpfda.engine.inputs`; one row (sample) per client.
        y : array-like of shape (n,), or None for LongCurves (their labels)
        grid_points : array-like, optional
            The grid of a 2-D array of curves.
        public_curves : optional
            Public calibration curves, drawn independently of every client, in the
            form of ``X``: they fix the rescaling bounds of curves without a spec.
        client_ids : array-like of int, optional
            Each client's id (unique, >= 0), which keys its noise; ``0 .. n-1`` if
            None. Split with X by model selection (GridSearchCV), so a client keeps
            its id in every fold.
        """
        if not 0.0 < check_real(self.eval_fraction, "eval_fraction") < 1.0:
            raise ValueError(
                f"eval_fraction must be in (0, 1), got {self.eval_fraction!r}"
            )
        self._fit(X, y, grid_points, public_curves, client_ids)
        return self

    def _plan(self, data: _Prepared, epsilon: float, seed: int) -> Any:
        n = data.n_clients
        n_eval = int(round(n * float(self.eval_fraction)))
        n_train = n - n_eval
        if n_train < 2 or n_eval < 1:
            raise ValueError(
                f"{n} clients with eval_fraction={self.eval_fraction!r} leave "
                f"{n_train} training and {n_eval} evaluation clients; MRMA needs at "
                "least 2 training clients and one evaluation client per weak model"
            )
        if isinstance(self.subsample_size, int) and self.subsample_size > n_train:
            raise ValueError(
                f"subsample_size must be <= the {n_train} training clients (of {n}, "
                f"eval_fraction={self.eval_fraction!r}), got {self.subsample_size}"
            )
        if isinstance(self.n_estimators, int) and self.n_estimators > n_eval:
            raise ValueError(
                f"n_estimators must be <= the {n_eval} evaluation clients (of {n}, "
                f"eval_fraction={self.eval_fraction!r}): every weak model needs one, "
                f"got {self.n_estimators}"
            )
        basis = {
            k: v
            for k, v in (("n_basis", self.n_basis), ("order", self.order))
            if v is not None
        }
        # The reference MRMA, pinned (see the class docstring); the estimator has no
        # public features, so a moment weak learner would estimate its second moment
        # from the releases.
        settings = Settings.reference(
            public_features=False,
            epsilon=epsilon,
            label_share=self.label_share,
            num_weak_models=self.n_estimators,
            subsample_size=self.subsample_size,
            cutoff=self.cutoff,
            weak_learner=self.weak_learner,
            normalize_models=self.normalize_models,
            n_train=n_train,
            n_eval=n_eval,
            n_test=1,
            repeats=1,
            seed=seed,
            **basis,
        )
        features, labels, ids = data.features, data.labels, data.client_ids

        def run() -> ProtocolResult:
            rng = np.random.default_rng(derive_seed(seed, "server"))
            order = rng.permutation(n)
            train_idx, eval_idx = np.sort(order[n_eval:]), np.sort(order[:n_eval])
            identity = VectorFeaturizer(CoefficientScaler(-1.0, 1.0), features.shape[1])
            return run_protocol(
                ArrayClients(
                    ids[train_idx], features[train_idx], labels[train_idx], identity
                ),
                ArrayClients(
                    ids[eval_idx], features[eval_idx], labels[eval_idx], identity
                ),
                settings,
                seed=derive_seed(seed, "clients"),
                server_rng=rng,
                keep_payload=False,
                n_classes=int(data.classes.size),
            )

        return run
