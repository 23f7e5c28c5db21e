r"""Multinomial logistic regression on noisy labels: backward, forward and plain.

All three minimise an average loss plus the ridge penalty
:math:`\frac{\alpha}{2}\lVert W\rVert_F^2` on **every** weight, intercepts included
(this keeps the backward objective, whose targets have negative entries, strongly
convex and coercive), with :math:`\alpha = 1/(C n)`, by L-BFGS with the analytic
gradient, in the logits :math:`z_i = W \tilde x_i`, :math:`\tilde x_i = (x_i, 1)`.

**Parameters of all three.** ``C`` is the inverse penalty strength; ``max_iter`` and
``tol`` are L-BFGS's iteration limit and gradient tolerance. With candidates ``Cs``
given instead, a random ``validation_fraction`` of the noisy examples (split seeded by
``random_state``) is held out and every ``C`` is scored by the held-out noisy-label
log-likelihood through the channel,
:math:`\frac{1}{|V|}\sum_{i\in V}\log[T_{c_i}(\beta)^\top s_i]_{\tilde y_i}` (a proper
scoring rule computed from released data only; ``validation_scores_``); the best
``C``, ``C_``, is refitted on all.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Self

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import minimize
from scipy.special import softmax
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_array, check_is_fitted

from ldpfda._validation import check_int, check_real
from ldpfda.labeldp.mechanisms import LabelRelease, _given_clusters, check_labels
from ldpfda.labeldp.transition import check_distributions

__all__ = [
    "DEFAULT_CS",
    "BackwardCorrectedLogisticRegression",
    "ForwardCorrectedLogisticRegression",
    "NoisyLabelLogisticRegression",
]

LossGrad = Callable[
    [NDArray[np.float64]], tuple[NDArray[np.float64], NDArray[np.float64]]
]


def _logsumexp(z: NDArray[np.float64]) -> NDArray[np.float64]:
    """Row-wise log-sum-exp (entries may be -inf, as long as one per row is finite)."""
    m = z.max(axis=1)
    return m + np.log(np.exp(z - m[:, None]).sum(axis=1))


def _soft_cross_entropy(arrays: dict[str, NDArray], index: NDArray) -> LossGrad:
    r""":math:`\mathrm{lse}(z_i) - a_i^\top z_i` against target rows :math:`a_i`."""
    targets = arrays["targets"][index]

    def loss_grad(z: NDArray[np.float64]) -> tuple[NDArray, NDArray]:
        lse = _logsumexp(z)
        losses = lse - np.einsum("ik,ik->i", targets, z)
        return losses, np.exp(z - lse[:, None]) - targets

    return loss_grad


def _check_xy(
    X: ArrayLike, y: ArrayLike, n_classes: int | None
) -> tuple[NDArray, NDArray, int]:
    """``X`` as floats, ``y`` as classes of ``range(K)`` of the same length, and K:
    ``n_classes``, by default ``max(y) + 1`` (at least 2)."""
    raw = np.asarray(y)
    if n_classes is None:
        n_classes = max(int(raw.max()) + 1 if raw.size else 2, 2)
    k = check_int(n_classes, "n_classes", minimum=2)
    x = check_array(X, dtype=np.float64)
    labels = check_labels(raw, k, "y")
    if labels.size != x.shape[0]:
        raise ValueError(f"X and y differ in length: {x.shape[0]} != {labels.size}")
    return x, labels, k


class _LinearClassifier(ClassifierMixin, BaseEstimator):
    """Prediction of a fitted softmax model with ``coef_`` and ``intercept_``."""

    def _set_weights(self, w: NDArray[np.float64]) -> None:
        """Store (K, p + 1) weights, the last column the intercepts."""
        self.coef_ = w[:, :-1].copy()
        self.intercept_ = w[:, -1].copy()
        self.classes_ = np.arange(w.shape[0])
        self.n_features_in_ = w.shape[1] - 1

    def decision_function(self, X: ArrayLike) -> NDArray[np.float64]:
        """Logits :math:`W x + b`, shape (n, K)."""
        check_is_fitted(self)
        x = check_array(X, dtype=np.float64)
        if x.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {x.shape[1]} features, but the model was fitted with "
                f"{self.n_features_in_}"
            )
        return x @ self.coef_.T + self.intercept_

    def predict_proba(self, X: ArrayLike) -> NDArray[np.float64]:
        """Clean-label probabilities :math:`\\mathrm{softmax}(W x + b)`."""
        return softmax(self.decision_function(X), axis=1)

    def predict(self, X: ArrayLike) -> NDArray[np.int64]:
        scores = self.decision_function(X)  # checks that the model is fitted
        return self.classes_[np.argmax(scores, axis=1)]


# Estimators are keyword dataclasses: scikit-learn reads the parameters off __init__.
@dataclass(kw_only=True, eq=False, repr=False)
class _LogisticBase(_LinearClassifier):
    """Shared fitting machinery; subclasses build the per-example loss."""

    C: float = 1.0
    Cs: Sequence[float] | None = None
    validation_fraction: float = 0.2
    max_iter: int = 1000
    tol: float = 1e-6
    random_state: int | None = None

    def _check_params(self) -> None:
        check_real(self.C, "C", low=0.0, low_open=True)
        if self.Cs is not None and len(self.Cs) == 0:
            raise ValueError("Cs must hold at least one value, got an empty sequence")
        for value in self.Cs or ():
            check_real(value, "Cs", low=0.0, low_open=True)
        share = self.validation_fraction
        check_real(
            share,
            "validation_fraction",
            low=0.0,
            high=1.0,
            low_open=True,
            high_open=True,
        )
        check_int(self.max_iter, "max_iter", minimum=1)
        check_real(self.tol, "tol", low=0.0, low_open=True)

    @staticmethod
    def _loss_grad(arrays: dict[str, NDArray], index: NDArray) -> LossGrad:
        """Per-example losses (m,) and logit gradients (m, K) on ``index``."""
        raise NotImplementedError

    def _solve(
        self, xt: NDArray, loss_grad: LossGrad, n_classes: int, C: float, w0: NDArray
    ) -> tuple[NDArray[np.float64], int]:
        n = xt.shape[0]
        alpha = 1.0 / (C * n)

        def objective(w_flat: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
            w = w_flat.reshape(n_classes, xt.shape[1])
            losses, grad_z = loss_grad(xt @ w.T)
            value = losses.mean() + 0.5 * alpha * np.sum(w * w)
            grad = grad_z.T @ xt / n + alpha * w
            return float(value), grad.ravel()

        result = minimize(
            objective,
            w0.ravel(),
            jac=True,
            method="L-BFGS-B",
            options={
                "maxiter": int(self.max_iter),
                "gtol": float(self.tol),
                "ftol": 1e-12,
                "maxcor": 20,
            },
        )
        if result.nit >= self.max_iter:
            warnings.warn(
                f"{type(self).__name__} did not converge in max_iter={self.max_iter} "
                f"iterations (C={C:g}, gradient max {np.abs(result.jac).max():.2e})",
                ConvergenceWarning,
                stacklevel=4,
            )
        return result.x.reshape(n_classes, xt.shape[1]), int(result.nit)

    def _fit_arrays(
        self, x: NDArray, arrays: dict[str, NDArray], n_classes: int
    ) -> None:
        """Fit on per-example arrays; ``arrays['log_t']`` scores held-out examples."""
        n, p = x.shape
        xt = np.hstack([x, np.ones((n, 1))])
        zero = np.zeros((n_classes, p + 1))
        if self.Cs is None:
            best_c = float(self.C)
            self.validation_scores_ = None
        else:
            gen = np.random.default_rng(self.random_state)
            order = gen.permutation(n)
            n_val = min(max(1, int(round(self.validation_fraction * n))), n - 1)
            val, train = np.sort(order[:n_val]), np.sort(order[n_val:])
            scores = {}
            w = zero
            # Increasing C with warm starts: each fit starts near its solution.
            for c_value in sorted(float(v) for v in self.Cs):
                w, _ = self._solve(
                    xt[train], self._loss_grad(arrays, train), n_classes, c_value, w
                )
                z = xt[val] @ w.T
                log_p = _logsumexp(z + arrays["log_t"][val]) - _logsumexp(z)
                scores[c_value] = float(np.mean(log_p))
            best_score = max(scores.values())
            best_c = min(c for c, s in scores.items() if s == best_score)
            self.validation_scores_ = scores
        w, self.n_iter_ = self._solve(
            xt, self._loss_grad(arrays, np.arange(n)), n_classes, best_c, zero
        )
        self.C_ = best_c
        self._set_weights(w)


class _CorrectedLogisticBase(_LogisticBase):
    """A learner that needs the release's channel (distributions, clusters, beta)."""

    #: Whether the loss needs the rows of the inverse channel (backward correction).
    _needs_targets = False

    def fit(
        self,
        X: ArrayLike,
        y: ArrayLike,
        *,
        distributions: ArrayLike,
        beta: float,
        clusters: ArrayLike | None = None,
    ) -> Self:
        """Fit on noisy labels ``y`` released with cluster distributions :math:`q_c`.

        ``beta`` is the correction (:math:`\\beta = \\lambda` for unbiased), in [0, 1)
        for the backward and in [0, 1] for the forward correction.
        """
        self._check_params()
        q = check_distributions(distributions)
        x, labels, _ = _check_xy(X, y, q.shape[1])
        if clusters is None:
            if q.shape[0] != 1:
                raise ValueError(
                    "clusters are required when there is more than one cluster"
                )
            c = np.zeros(labels.size, dtype=np.int64)
        else:
            c, _ = _given_clusters(clusters, labels, q.shape[0])
        b = check_real(beta, "beta", low=0.0, high=1.0, high_open=self._needs_targets)
        self._fit_channels(x, labels, q[c], np.full(labels.size, b))
        return self

    def fit_channels(
        self,
        X: ArrayLike,
        y: ArrayLike,
        *,
        priors: ArrayLike,
        resample_probabilities: ArrayLike,
    ) -> Self:
        r"""Fit with one channel per example (examples of one release mixing channels).

        Example :math:`i` went through
        :math:`T_i = (1-\lambda_i) I + \lambda_i \mathbf 1 q_i^\top` (row ``i`` of
        ``priors`` is :math:`q_i`, :math:`\lambda_i \in [0, 1)`), corrected without
        bias (:math:`\beta_i = \lambda_i`).
        """
        self._check_params()
        x = check_array(X, dtype=np.float64)
        q = check_distributions(priors, "priors")
        k = q.shape[1]
        labels = check_labels(y, k, "y")
        lam = np.asarray(resample_probabilities, dtype=float).reshape(-1)
        n = x.shape[0]
        if not labels.size == q.shape[0] == lam.size == n:
            raise ValueError(
                f"X, y, priors and resample_probabilities differ in length: {n}, "
                f"{labels.size}, {q.shape[0]}, {lam.size}"
            )
        if np.any(~np.isfinite(lam)) or np.any(lam < 0) or np.any(lam >= 1):
            raise ValueError("resample_probabilities must be in [0, 1)")
        self._fit_channels(x, labels, q, lam)
        return self

    def _fit_channels(
        self, x: NDArray, labels: NDArray, q: NDArray, lam: NDArray[np.float64]
    ) -> None:
        """Fit through one channel per example: prior rows ``q``, resampling ``lam``."""
        n, k = q.shape
        onehot = np.eye(k)[labels]
        # Column ~y_i of T_i: (1 - lam_i) e_{~y_i} + lam_i q_i(~y_i) 1.
        column = (1 - lam)[:, None] * onehot + (lam * q[np.arange(n), labels])[:, None]
        with np.errstate(divide="ignore"):
            arrays = {"log_t": np.log(column)}
        if self._needs_targets:
            # Row ~y_i of T_i^{-1} = (I - lam_i 1 q_i^T) / (1 - lam_i).
            arrays["targets"] = (onehot - lam[:, None] * q) / (1 - lam)[:, None]
        self._fit_arrays(x, arrays, k)

    def fit_release(
        self, X: ArrayLike, release: LabelRelease, *, beta: float | None = None
    ) -> Self:
        """Fit on a :class:`LabelRelease` (default ``beta`` = the release's)."""
        b = release.beta if beta is None else release.check_beta(beta)
        return self.fit(
            X,
            release.labels,
            clusters=release.clusters,
            distributions=release.distributions,
            beta=b,
        )


class BackwardCorrectedLogisticRegression(_CorrectedLogisticBase):
    r"""Minimiser of the backward-corrected cross-entropy on noisy labels.

    .. math:: \min_W \frac1n \sum_i \sum_y [T_{c_i}(\beta)^{-1}]_{\tilde y_i y}
              \bigl(-\log \mathrm{softmax}(W\tilde x_i)_y\bigr)
              + \frac{1}{2Cn}\lVert W\rVert_F^2

    With :math:`\beta = \lambda` the data term is an unbiased estimate of the clean
    cross-entropy. Its variance grows like :math:`1/(1-\beta)^2`, so at small epsilon
    the fit is dominated by the penalty.

    References
    ----------
    N. Natarajan et al., "Learning with noisy labels", NeurIPS 2013; G. Patrini et al.,
    CVPR 2017; H. Esfandiari et al., AISTATS 2022.
    """

    _needs_targets = True
    _loss_grad = staticmethod(_soft_cross_entropy)


class ForwardCorrectedLogisticRegression(_CorrectedLogisticBase):
    r"""Maximum likelihood of the noisy labels through the known channel.

    .. math:: \min_W -\frac1n \sum_i \log\bigl[T_{c_i}(\beta)^\top
              \mathrm{softmax}(W\tilde x_i)\bigr]_{\tilde y_i}
              + \frac{1}{2Cn}\lVert W\rVert_F^2

    :meth:`predict_proba` returns the clean-label model :math:`\mathrm{softmax}(W x)`.
    The objective is not convex in general; L-BFGS starts from :math:`W = 0`.

    References
    ----------
    G. Patrini, A. Rozza, A. K. Menon, R. Nock, L. Qu, "Making deep neural networks
    robust to label noise: a loss correction approach", CVPR 2017.
    """

    @staticmethod
    def _loss_grad(arrays: dict[str, NDArray], index: NDArray) -> LossGrad:
        r""":math:`\mathrm{lse}(z_i) - \mathrm{lse}(z_i + \log t_i)`, :math:`t_i` the
        channel's column of :math:`\tilde y_i`."""
        log_t = arrays["log_t"][index]

        def loss_grad(z: NDArray[np.float64]) -> tuple[NDArray, NDArray]:
            lse = _logsumexp(z)
            shifted = z + log_t
            lse_noisy = _logsumexp(shifted)
            grad = np.exp(z - lse[:, None]) - np.exp(shifted - lse_noisy[:, None])
            return lse - lse_noisy, grad

        return loss_grad


@dataclass(kw_only=True, eq=False, repr=False)
class NoisyLabelLogisticRegression(_LogisticBase):
    r"""Plain multinomial logistic regression on the (noisy) labels as given.

    .. math:: \min_W -\frac1n \sum_i \log \mathrm{softmax}(W\tilde x_i)_{y_i}
              + \frac{1}{2Cn}\lVert W\rVert_F^2

    Also the non-private reference when fitted on clean labels. ``n_classes`` (K)
    defaults to ``max(y) + 1``; give it when a class may be absent from ``y``.
    """

    n_classes: int | None = None

    def fit(self, X: ArrayLike, y: ArrayLike) -> Self:
        return self._fit_labels(X, y, None)

    def fit_release(self, X: ArrayLike, release: LabelRelease) -> Self:
        """Fit on the noisy labels of a :class:`LabelRelease`, ignoring the channel."""
        return self._fit_labels(X, release.labels, release.n_classes)

    def _fit_labels(self, X: ArrayLike, y: ArrayLike, default_k: int | None) -> Self:
        """Fit on ``y``; K is ``n_classes``, else ``default_k``, else ``max(y) + 1``."""
        self._check_params()
        k = default_k if self.n_classes is None else self.n_classes
        x, labels, k = _check_xy(X, y, k)
        onehot = np.eye(k)[labels]
        with np.errstate(divide="ignore"):
            log_t = np.log(onehot)
        self._fit_arrays(x, {"targets": onehot, "log_t": log_t}, k)
        return self

    _loss_grad = staticmethod(_soft_cross_entropy)


#: A log-spaced grid of ``C`` for the held-out selection.
DEFAULT_CS: tuple[float, ...] = (0.001, 0.01, 0.1, 1.0)
