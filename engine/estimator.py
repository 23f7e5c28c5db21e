"""A scikit-learn classifier trained by the MRMA protocol on simulated clients."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from ldpfda.config import Settings
from ldpfda.engine.inprocess import ArrayClients
from ldpfda.engine.runner import run_protocol
from ldpfda.fda.features import CurveFeaturizer, Featurizer, VectorFeaturizer
from ldpfda.fda.scaling import CoefficientScaler
from ldpfda.privacy.random import derive_seed, run_seed
from ldpfda.server.fitting import ProtocolResult

__all__ = ["MRMAClassifier"]


class MRMAClassifier(ClassifierMixin, BaseEstimator):
    r"""Binary classifier learned under local DP by model reversal and model averaging.

    ``fit`` treats every row of ``X`` as one client: a random ``eval_fraction`` of them
    form the evaluation group, the rest the training group. Training clients release
    Laplace-perturbed scaled coefficients and a randomized label; evaluation clients
    release one randomized "was the model wrong on me" bit. No client's raw data reach
    the learned model other than through those releases, and each client spends at most
    ``epsilon``. The fitted model classifies new, non-private curves:
    :math:`\hat y = 1\{\bar b + \bar\beta^\top z(x) > 0\}`, with :math:`z` the
    client-side featurizer (projection and rescaling).

    It always runs the reference MRMA protocol
    (:meth:`ldpfda.config.Settings.reference`), to reproduce and study MRMA; the
    default protocol is :func:`ldpfda.engine.run_protocol` with ``Settings()``.

    Parameters
    ----------
    epsilon : float
        Per-client budget.
    n_estimators : int
        Number M of weak classifiers.
    eval_fraction : float
        Share of clients in the evaluation group (500 / 3000 train in the reference).
    weak_learner : {"logistic", "svm"}
    label_share : float or None
        Share of a training client's budget on its label (None = 1/(p+1)).
    featurizer : Featurizer or None
        Client-side map to [-1, 1]^p, fixed in advance. If None: B-spline projection
        with ``n_basis``/``order`` for curves (``grid_points`` given), with rescaling
        bounds from ``public_curves``; or the identity on [-1, 1]^p for vectors.
    random_state : int, Generator or None
        None (default) keys the clients' noise and the server's randomness with fresh
        OS entropy, so nobody can replay the noise. A fixed value makes the noise
        reproducible -- for simulation and tests only: noise whose seed is known
        protects nothing.

    Attributes
    ----------
    coef_ : ndarray of shape (1, p)
    intercept_ : ndarray of shape (1,)
    result_ : ProtocolResult
        Per-model estimated errors, weights, reversal flags, privacy summary.

    References
    ----------
    Q. Qin, Z. Bai, "Classification under local differential privacy with model reversal
    and model averaging", JMLR 27(5), 2026.
    """

    def __init__(
        self,
        epsilon: float = 5.0,
        n_estimators: int = 50,
        subsample_size: int = 50,
        cutoff: float = 0.2,
        eval_fraction: float = 5 / 6,
        weak_learner: str = "logistic",
        label_share: float | None = None,
        normalize_models: bool = True,
        featurizer: Featurizer | None = None,
        n_basis: int = 10,
        order: int = 4,
        random_state: int | np.random.Generator | None = None,
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

    def _make_featurizer(
        self, X: Any, grid_points: ArrayLike | None, public_curves: Any
    ) -> Featurizer:
        if self.featurizer is not None:
            return self.featurizer
        if grid_points is not None or hasattr(X, "data_matrix"):
            if public_curves is None:
                raise ValueError(
                    "public_curves are needed to fix the rescaling bounds of curves "
                    "(or pass a featurizer with bounds fixed in advance)"
                )
            return CurveFeaturizer.calibrated(
                public_curves, grid_points, n_basis=self.n_basis, order=self.order
            )
        x = np.asarray(X, dtype=float)
        return VectorFeaturizer(CoefficientScaler(-1.0, 1.0), x.shape[1])

    def fit(
        self,
        X: Any,
        y: ArrayLike,
        *,
        grid_points: ArrayLike | None = None,
        public_curves: Any = None,
    ) -> MRMAClassifier:
        """Run the protocol with one client per row of ``X`` (curves or vectors)."""
        y = np.asarray(y)
        if y.ndim != 1:
            raise ValueError(f"y must be 1-D, got shape {y.shape}")
        classes = np.unique(y)
        if classes.size != 2:
            raise ValueError(f"y must have exactly 2 classes, got {classes.size}")
        if not 0.0 < float(self.eval_fraction) < 1.0:
            raise ValueError(
                f"eval_fraction must be in (0, 1), got {self.eval_fraction!r}"
            )
        featurizer = self._make_featurizer(X, grid_points, public_curves)
        features = featurizer.transform(X)  # validates curves: NaN, grid, shape
        n = features.shape[0]
        if y.size != n:
            raise ValueError(f"y has {y.size} labels for {n} clients")
        labels = (y == classes[1]).astype(np.int8)
        seed = run_seed(self.random_state)
        n_eval = int(round(n * float(self.eval_fraction)))
        # The reference MRMA, pinned (see the class docstring); the estimator has no
        # public features, so a moment weak learner would estimate its second moment
        # from the releases.
        settings = Settings.reference(
            public_features=False,
            epsilon=self.epsilon,
            label_share=self.label_share,
            n_basis=self.n_basis,
            order=self.order,
            num_weak_models=self.n_estimators,
            subsample_size=self.subsample_size,
            cutoff=self.cutoff,
            weak_learner=self.weak_learner,
            normalize_models=self.normalize_models,
            n_train=n - n_eval,
            n_eval=n_eval,
            n_test=1,
            repeats=1,
            seed=seed,
        )
        rng = np.random.default_rng(derive_seed(seed, "server"))
        order = rng.permutation(n)
        train_idx, eval_idx = np.sort(order[n_eval:]), np.sort(order[:n_eval])
        identity = VectorFeaturizer(CoefficientScaler(-1.0, 1.0), features.shape[1])
        result = run_protocol(
            ArrayClients(train_idx, features[train_idx], labels[train_idx], identity),
            ArrayClients(eval_idx, features[eval_idx], labels[eval_idx], identity),
            settings,
            seed=derive_seed(seed, "clients"),
            server_rng=rng,
            keep_payload=False,
        )
        self.classes_ = classes
        self.featurizer_ = featurizer
        self.coef_ = result.final.coef.copy()
        self.intercept_ = result.final.intercept.copy()
        self.result_: ProtocolResult = result
        self.n_features_in_ = features.shape[1]
        return self

    def decision_function(self, X: Any) -> NDArray[np.float64]:
        check_is_fitted(self, "coef_")
        z = self.featurizer_.transform(X)
        return z @ self.coef_[0] + self.intercept_[0]

    def predict_proba(self, X: Any) -> NDArray[np.float64]:
        """Logistic link of the averaged score (a monotone score, not calibrated)."""
        p1 = expit(self.decision_function(X))
        return np.column_stack([1.0 - p1, p1])

    def predict(self, X: Any) -> NDArray:
        check_is_fitted(self, "coef_")
        return self.classes_[(self.decision_function(X) > 0).astype(int)]
