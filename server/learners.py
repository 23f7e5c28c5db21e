"""Learners for privatized releases, usable alone or as MRMA weak learners.

:class:`MomentLinearClassifier` and :class:`FlipCorrectedLogisticRegression` are
scikit-learn estimators that return their fit as
:class:`~ldpfda.server.mrma.LinearModels` (``to_linear_models``);
:func:`as_weak_learner` turns one into MRMA's ``learner=`` hook.

They keep scikit-learn's estimator protocol (parameters from ``__init__``,
``get_params``/``set_params``, ``clone``, tags, ``score``, ``NotFittedError``) without
importing scikit-learn: the ServerApp fits with them, and scikit-learn is 1.5 s of
CPU to import, more than the rest of the ServerApp together. (scipy's optimiser, 0.5 s,
is imported with the module: in a simulation that happens while Ray starts, whereas at
the fit it would delay the report.)
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import minimize
from scipy.special import expit, log_expit

from ldpfda._validation import (
    check_binary_labels,
    check_choice,
    check_class_labels,
    check_finite_array,
    check_int,
    check_real,
)
from ldpfda.config import MULTICLASS_RULES, NO_SIGNAL_FITS, THRESHOLDS
from ldpfda.privacy.base import Mechanism
from ldpfda.privacy.vector_mechanisms import ProductMoments, product_moments
from ldpfda.server.mrma import LinearModels

__all__ = [
    "MomentLinearClassifier",
    "MomentMulticlassClassifier",
    "MomentSplitClassifier",
    "FlipCorrectedLogisticRegression",
    "MULTICLASS_RULES",
    "NO_SIGNAL_FITS",
    "REGULARIZATIONS",
    "THRESHOLDS",
    "ReleaseMoments",
    "WeakLearner",
    "as_weak_learner",
    "class_moments",
    "discriminant_rule",
    "nearest_psd",
]

#: Regularisations of :class:`MomentLinearClassifier`.
REGULARIZATIONS = ("empirical-bayes", "ridge")

#: ``learner(features, labels) -> LinearModels``; ``labels`` is None for joint releases.
WeakLearner = Callable[[NDArray[np.float64], NDArray[np.int8] | None], LinearModels]


def nearest_psd(matrix: ArrayLike, *, floor: float = 1e-10) -> NDArray[np.float64]:
    """The nearest (Frobenius) PSD matrix, eigenvalues at least ``floor`` x the largest.

    An unbiased second-moment estimate from noisy releases need not be PSD; the relative
    floor keeps the ridge system solvable.
    """
    m = check_finite_array(matrix, "matrix", ndim=2)
    m = (m + m.T) / 2.0
    values, vectors = np.linalg.eigh(m)
    top = max(float(values.max()), 0.0)
    values = np.maximum(values, floor * top if top > 0 else floor)
    return (vectors * values) @ vectors.T


def _moments(mechanism: Mechanism | ProductMoments | None, p: int) -> ProductMoments:
    if mechanism is None:
        return ProductMoments(np.ones((p, p)), np.zeros(p), np.ones(p))
    if not isinstance(mechanism, ProductMoments):
        mechanism = product_moments(mechanism)
    if mechanism.dimension != p:
        raise ValueError(
            f"the mechanism releases vectors of length {mechanism.dimension}, but X "
            f"has {p} columns"
        )
    return mechanism


def _product_means(
    products: NDArray[np.float64], squares: NDArray[np.float64], n: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Per entry, the mean of :math:`r r^\top` over n rows and the variance of that
    mean, from :math:`\sum r r^\top` and :math:`\sum (r \circ r)(r \circ r)^\top`."""
    mean = products / n
    return mean, np.maximum(squares / n - mean**2, 0.0) / max(n - 1, 1)


@dataclass
class ReleaseMoments:
    r"""Sufficient statistics of the moment classifiers: per group g (the class a
    K-class release drew; one group otherwise) the count, mean and scatter matrix
    :math:`\sum (r - \bar r)(r - \bar r)^\top` of the rows r whose mean is the cross
    moment; over every row, :math:`\sum w w^\top` and
    :math:`\sum (w \circ w)(w \circ w)^\top` of the released features w (r itself
    for joint releases). A few KB whatever the number of rows."""

    count: NDArray[np.int64]
    mean: NDArray[np.float64]
    scatter: NDArray[np.float64]
    products: NDArray[np.float64]
    squares: NDArray[np.float64]

    @classmethod
    def of(
        cls,
        rows: NDArray[np.float64],
        groups: NDArray[np.int64],
        k: int,
        features: NDArray[np.float64] | None = None,
    ) -> ReleaseMoments:
        """The statistics of ``rows`` in groups 0 .. k-1 (``features``: w, else
        the rows)."""
        d = rows.shape[1]
        count = np.bincount(groups, minlength=k)
        mean, scatter = np.zeros((k, d)), np.zeros((k, d, d))
        for g in np.flatnonzero(count):
            part = rows if k == 1 else rows[groups == g]
            mean[g] = part.mean(axis=0)
            deviation = part - mean[g]
            scatter[g] = deviation.T @ deviation
        w = rows if features is None else features
        q = w * w
        return cls(count, mean, scatter, w.T @ w, q.T @ q)

    @classmethod
    def of_blocks(
        cls, blocks: NDArray[np.float64], features: NDArray[np.float64]
    ) -> ReleaseMoments:
        """The statistics of ``blocks`` (n, k, d), row i of group g its block g (every
        row in every group: a release that informs every class), and of ``features``
        w (n, d)."""
        n, k, d = blocks.shape
        mean = blocks.mean(axis=0) if n else np.zeros((k, d))
        deviation = blocks - mean
        scatter = np.einsum("nki,nkj->kij", deviation, deviation)
        q = features * features
        return cls(
            np.full(k, n, dtype=np.int64),
            mean,
            scatter,
            features.T @ features,
            q.T @ q,
        )

    def merge(self, other: ReleaseMoments) -> None:
        """Add ``other`` in place (Chan, Golub, LeVeque 1979): exactly ``other``
        when this is empty."""
        n = self.count + other.count
        seen = n > 0
        share = np.where(seen, other.count / np.maximum(n, 1), 0.0)
        cross = np.where(seen, self.count * share, 0.0)
        delta = other.mean - self.mean
        self.mean = self.mean + delta * share[:, None]
        outer = delta[:, :, None] * delta[:, None, :] * cross[:, None, None]
        self.scatter = self.scatter + other.scatter + outer
        self.products = self.products + other.products
        self.squares = self.squares + other.squares
        self.count = n


def _gram_fallback(
    gram: NDArray[np.float64],
    var: NDArray[np.float64],
    identified: NDArray[np.bool_],
    start: int,
) -> tuple[NDArray[np.float64], float]:
    r"""Release moments shrunk towards a diagonal target T by one weight
    :math:`\lambda = \sum \widehat{\mathrm{Var}} / \sum (\hat G - T)^2` in [0, 1]
    (Ledoit and Wolf's rule) on the identified entries; T is 1 for the constant and
    the mean identified feature variance on the rest, or 1/3 (the uniform law on
    [-1, 1]) when the releases identify none (Duchi's release: its squares are
    constant). Entries not identified take T's value."""
    d = gram.shape[0]
    diagonal = np.diag(identified)[start:]
    spread = np.clip(np.diag(gram)[start:][diagonal], 0.0, 1.0)
    level = max(float(spread.mean()), 1e-3) if spread.size else 1.0 / 3.0
    target = np.diag(np.r_[np.ones(start), np.full(d - start, level)])
    deviation = np.where(identified, gram - target, 0.0)
    size = float(np.sum(deviation**2))
    weight = 1.0 if size <= 0 else min(float(var.sum()) / size, 1.0)
    return target + (1.0 - weight) * deviation, weight


def _marginal_covariance(
    gram: NDArray[np.float64], tau: NDArray[np.float64], noise: NDArray[np.float64]
) -> NDArray[np.float64]:
    """:math:`G T G + S_k` for prior variances ``tau`` (..., d) and noise (K, d, d):
    shape (..., K, d, d), with a jitter of 1e-12 of its trace (a noiseless release's
    S can be singular)."""
    m = (gram * tau[..., None, :]) @ gram
    m = m[..., None, :, :] + noise
    trace = np.trace(m, axis1=-2, axis2=-1)[..., None, None]
    return m + (1e-12 * trace + 1e-300) * np.eye(gram.shape[0])


def _posterior_mean(
    gram: NDArray[np.float64],
    cross: NDArray[np.float64],
    noise: NDArray[np.float64],
    groups: NDArray[np.int64],
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.bool_]]:
    r"""Empirical-Bayes coefficients of :math:`\hat c_k = G\theta_k + e_k`,
    :math:`e_k \sim N(0, S_k)`, :math:`\theta_k \sim N(0, T)`,
    :math:`T = \mathrm{diag}(\tau^2_{g(j)})`: the posterior mean
    :math:`T G (G T G + S_k)^{-1} \hat c_k` with every :math:`\tau^2_g` maximising
    the marginal likelihood of the columns of :math:`\hat C` (Nelder-Mead on
    :math:`\log\tau^2`, floored at :math:`e^{-28}` times the scale of
    :math:`\hat C`: at the floor the fit tends to the direction of
    :math:`T G S_k^{-1} \hat c_k`, which the sign of the scores keeps). ``cross``
    (d, K), ``noise`` (K, d, d); also returns which groups are at the floor."""
    d, k = cross.shape
    scale = max(float(np.sum(cross**2)) / (k * float(np.trace(gram @ gram))), 1e-300)
    low = math.log(scale) - 28.0

    def systems(log_tau: NDArray[np.float64]) -> tuple[Any, NDArray[np.float64]]:
        tau = np.exp(np.clip(log_tau, low, low + 40.0))[groups]
        return _marginal_covariance(gram, tau, noise), tau

    def objective(log_tau: NDArray[np.float64]) -> float:
        m, _ = systems(log_tau)
        logdet = np.linalg.slogdet(m)[1].sum()
        return float(
            logdet + np.sum(cross.T * np.linalg.solve(m, cross.T[..., None])[..., 0])
        )

    start = np.full(groups.max() + 1, math.log(scale))
    fits = [
        minimize(
            objective,
            start + shift,
            method="Nelder-Mead",
            options={"xatol": 1e-4, "fatol": 1e-9, "maxiter": 400 * start.size},
        )
        for shift in (0.0, -6.0)
    ]
    best = min(fits, key=lambda fit: fit.fun).x
    floored = best <= low + 1.0
    m, tau = systems(np.where(floored, low, best))
    solved = np.linalg.solve(m, cross.T[..., None])[..., 0]
    return tau[:, None] * (gram @ solved.T), tau, floored


#: The grid of :math:`\log\tau^2` of :func:`_averaged_posterior_mean`, per group.
AVERAGE_GRID = np.linspace(-16.0, 10.0, 53)


def _averaged_posterior_mean(
    gram: NDArray[np.float64],
    cross: NDArray[np.float64],
    noise: NDArray[np.float64],
    groups: NDArray[np.int64],
) -> NDArray[np.float64]:
    r"""The posterior mean of :func:`_posterior_mean` averaged over the prior
    variances instead of taken at their maximum-likelihood point: every
    :math:`\tau_g` has a half-Cauchy(0, 1) prior (the unit is that of the
    coefficients of :math:`\pm 1` labels on features in [-1, 1]; Gelman 2006), and
    :math:`E[\hat\theta(\tau) \mid \hat C]` is a sum over the grid
    :data:`AVERAGE_GRID` of :math:`\log\tau_g^2`, weighted by marginal likelihood
    times prior. Where the maximum lies at :math:`\tau_x^2 = 0` the point estimate
    says "no signal" with certainty; the average keeps the slopes in proportion to
    the evidence for them. ``cross`` (d, K), ``noise`` (K, d, d)."""
    d = gram.shape[0]
    mesh = np.meshgrid(*[AVERAGE_GRID] * (int(groups.max()) + 1), indexing="ij")
    log_tau = np.stack([m.ravel() for m in mesh], axis=1)  # (points, groups)
    tau = np.exp(log_tau)[:, groups]  # (points, d)
    # half-Cauchy(0, 1) on tau, as a density of u = log tau^2: tau / (1 + tau^2) / pi.
    log_prior = np.sum(0.5 * log_tau - np.logaddexp(0.0, log_tau), axis=1)
    m = _marginal_covariance(gram, tau, noise)  # (points, K, d, d)
    solved = np.linalg.solve(m, cross.T[None, :, :, None])[..., 0]  # (points, K, d)
    logdet = np.linalg.slogdet(m)[1].sum(axis=1)
    quad = np.einsum("kd,pkd->p", cross.T, solved)
    log_weight = log_prior - 0.5 * (logdet + quad)
    weight = np.exp(log_weight - log_weight.max())
    theta = tau[:, :, None] * np.einsum("de,pke->pdk", gram, solved)  # (points, d, K)
    return np.einsum("p,pdk->dk", weight / weight.sum(), theta).reshape(d, -1)


def _refit_along(
    gram: NDArray[np.float64], cross: NDArray[np.float64], theta: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Intercept and scale of each column's slopes refitted by least squares along
    their direction: with :math:`u = \hat\theta_x` and :math:`s = u^\top x`, the
    least-squares fit of :math:`\tilde y` on :math:`(1, s)` solves

    .. math:: \begin{pmatrix} 1 & u^\top \mu \\ u^\top \mu & u^\top G_{xx} u
              \end{pmatrix} \begin{pmatrix} a \\ b \end{pmatrix} =
              \begin{pmatrix} \hat c_0 \\ u^\top \hat c_x \end{pmatrix}

    (:math:`\mu = G_{x0}`; the same G and :math:`\hat c`), and the column becomes
    :math:`(a, b\,u)`. ``cross`` and ``theta`` are (d, K); also returns each column's
    b (1 for a column with no slope or no spread along it, which is left as it was).
    """
    out, scales = theta.copy(), np.ones(theta.shape[1])
    for k in range(theta.shape[1]):
        u = theta[1:, k]
        mean, square = float(u @ gram[1:, 0]), float(u @ gram[1:, 1:] @ u)
        spread = square - mean * mean
        if not np.any(u) or spread <= 1e-12 * square:
            continue
        c0, cu = float(cross[0, k]), float(u @ cross[1:, k])
        scales[k] = (cu - mean * c0) / spread
        out[0, k] = c0 - mean * scales[k]
        out[1:, k] = scales[k] * u
    return out, scales


class _Estimator:
    """scikit-learn's estimator protocol for the classifiers here, without its import.

    The parameters are the keyword arguments of ``__init__``, stored unchanged;
    ``get_params``/``set_params`` follow :class:`sklearn.base.BaseEstimator` (so
    :func:`sklearn.base.clone` and its meta-estimators take these), the tags say
    "classifier", ``score`` is the accuracy.
    """

    @classmethod
    def _param_names(cls) -> list[str]:
        signature = inspect.signature(cls.__init__)
        return sorted(p.name for p in signature.parameters.values() if p.name != "self")

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The parameters by name (no parameter is an estimator: ``deep`` changes
        nothing)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> Any:
        valid = self._param_names()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(
                    f"invalid parameter {name!r} for {type(self).__name__}; "
                    f"valid parameters are {valid}"
                )
            setattr(self, name, value)
        return self

    def __sklearn_tags__(self) -> Any:
        from sklearn.utils import ClassifierTags, Tags, TargetTags

        return Tags(
            estimator_type="classifier",
            target_tags=TargetTags(required=True),
            classifier_tags=ClassifierTags(),
        )

    def __repr__(self) -> str:
        defaults = inspect.signature(type(self).__init__).parameters
        changed = [
            f"{name}={value!r}"
            for name, value in self.get_params(deep=False).items()
            if not _is_default(value, defaults[name].default)
        ]
        return f"{type(self).__name__}({', '.join(changed)})"

    def _check_fitted(self) -> None:
        if not hasattr(self, "coef_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError(
                f"This {type(self).__name__} instance is not fitted yet. Call 'fit' "
                "with appropriate arguments before using this estimator."
            )

    def score(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> float:
        """The accuracy of :meth:`predict` on ``(X, y)``."""
        hits = np.asarray(self.predict(X)) == np.asarray(y)  # type: ignore[attr-defined]
        return float(np.average(hits, weights=sample_weight))


def _is_default(value: Any, default: Any) -> bool:
    if value is default:
        return True
    if isinstance(value, np.ndarray) or isinstance(default, np.ndarray):
        return False
    try:
        return bool(value == default)
    except (TypeError, ValueError):
        return False


class _LinearClassifier(_Estimator):
    """Shared prediction of the linear classifiers here (labels in {0, 1})."""

    coef_: NDArray[np.float64]
    intercept_: float
    fit_intercept: bool

    def _augment(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        if not self.fit_intercept:
            return x
        return np.hstack([np.ones((x.shape[0], 1)), x])

    def _set_fit(self, theta: NDArray[np.float64], p: int) -> None:
        self.coef_ = theta[int(self.fit_intercept) :]
        self.intercept_ = float(theta[0]) if self.fit_intercept else 0.0
        self.n_features_in_ = p
        self.classes_ = np.array([0, 1])

    def decision_function(self, X: ArrayLike) -> NDArray[np.float64]:
        """Scores :math:`b + \\beta^\\top x`; positive means class 1."""
        self._check_fitted()
        x = check_finite_array(X, "X", ndim=2)
        if x.shape[1] != self.coef_.size:
            raise ValueError(f"X has {x.shape[1]} features, expected {self.coef_.size}")
        return x @ self.coef_ + self.intercept_

    def predict(self, X: ArrayLike) -> NDArray[np.int8]:
        return (self.decision_function(X) > 0).astype(np.int8)

    def to_linear_models(self) -> LinearModels:
        """The fit as a one-model :class:`~ldpfda.server.mrma.LinearModels`."""
        self._check_fitted()
        return LinearModels(self.coef_[None, :], np.array([self.intercept_]))


class MomentLinearClassifier(_LinearClassifier):
    r"""Least-squares linear classifier from privately estimated moments.

    With :math:`\tilde y = 2y - 1` and :math:`w = (1, x)`, the population least-squares
    fit of :math:`\tilde y` on w solves :math:`G\theta = c`, :math:`G = E[w w^\top]`,
    :math:`c = E[\tilde y\, w]`: its sign is Fisher's discriminant direction and
    :math:`(1 + \theta^\top w)/2` estimates :math:`P(y = 1 \mid x)`. The moments are
    estimated without bias. With ``joint=True``, X holds one release of
    :math:`\tilde y\, w` per client and :math:`\hat c` is their mean; otherwise X holds
    released features :math:`\tilde x` and y labels flipped with the known probability
    ``label_flip_rate`` :math:`= \rho`, so that
    :math:`\hat c = \overline{\tilde y_{\mathrm{rel}}(1, \tilde x)}/(1 - 2\rho)`.
    G is ``gram`` (a public second moment, taken as exact) when given; else the
    releases' second moment with the noise of ``mechanism`` removed
    (:func:`~ldpfda.privacy.vector_mechanisms.product_moments`), pooled with that of
    the ``public`` rows (unlabeled features) on the entries the releases identify,
    with one inverse-variance weight
    :math:`\omega = \sum V_{\mathrm{pub}} / \sum (V_{\mathrm{pub}} + V_{\mathrm{rel}})`
    (V the variances of the entries' means; one weight keeps a convex combination, so
    the small eigenvalues of an ill-conditioned G survive); without public rows the
    releases' moment is shrunk towards a diagonal by the Ledoit-Wolf weight. It is
    then clipped to the bounds of :math:`x \in [-1, 1]^p` and projected to the
    nearest PSD matrix.

    :math:`\hat c` is a mean of n independent rows :math:`r_i`, so its noise
    covariance :math:`S = \widehat{\mathrm{Cov}}(r)/n` is known from the data.
    ``"empirical-bayes"`` (default, no tuning) is the posterior mean for
    :math:`\hat c = G\theta + e`, :math:`e \sim N(0, S)`,
    :math:`\theta \sim N(0, T)`, :math:`T = \mathrm{diag}(\tau_0^2, \tau_x^2, \ldots,
    \tau_x^2)` (the intercept and the slopes have their own prior variance):

    .. math:: \hat\theta = T G (G T G + S)^{-1} \hat c,

    with :math:`\tau_0^2, \tau_x^2` maximising the marginal likelihood of
    :math:`\hat c` (type-II maximum likelihood), which shrinks noisy releases and an
    ill-conditioned G automatically. The posterior mean shrinks the slopes much more
    than the intercept when the releases are noisy (small epsilon), and the sign of
    :math:`\theta_0 + \theta_x^\top x` depends on their ratio: a noisy intercept
    then decides most predictions. ``threshold="posterior"`` (default) keeps the
    posterior mean; with ``"refit"`` the posterior gives the slopes' direction u
    only, and the intercept and the slopes' scale are the least-squares fit of
    :math:`\tilde y` on :math:`(1, u^\top x)` from the same :math:`\hat c` and G
    (:func:`_refit_along`; without noise that is the least-squares fit itself).
    Where no signal is detected (the slopes' prior at its floor), the direction is
    the posterior's limit direction :math:`G S^{-1} \hat c` and the refit gives a
    classifier along it where the posterior mean predicts one class: paired on the
    same releases that was better on most real data sets at small epsilon, worse on
    GunPoint and on unbalanced labels that carry no signal, where the majority class
    is right (experiments/README.md, issue 18). ``no_signal_fit="average"`` (default)
    replaces both there by the posterior mean averaged over the prior variances
    (:func:`_averaged_posterior_mean`: half-Cauchy(0, 1) priors on
    :math:`\tau_0, \tau_x`, weighted by the marginal likelihood): the maximum at
    :math:`\tau_x^2 = 0` is a point estimate that discards every
    :math:`\tau_x^2 > 0` the releases do not rule out (experiments/README.md).
    ``"ridge"`` is
    :math:`\hat\theta = (\hat G + \lambda D)^{-1} \hat c`,
    :math:`\lambda = \alpha\,\mathrm{tr}(\hat G_{xx})/p`, D the identity on the feature
    coefficients. The fit also sets ``cross_moment_``, ``gram_``, ``noise_variance_``
    (:math:`\mathrm{tr}(S)/d`), ``prior_variances_``, ``shrinkage_``
    (:math:`\mathrm{tr}(S)/(d\tau_x^2)` or :math:`\lambda`), ``slope_scale_`` (the
    refit's b per column; 1 for ``"posterior"`` and ``"ridge"``), ``identified_`` (the
    entries of :math:`\hat G` the releases estimate), ``gram_source_``,
    ``gram_weight_`` and ``fallback_`` (what the fit fell back to, "" for nothing).

    References
    ----------
    R. A. Fisher, "The use of multiple measurements in taxonomic problems", 1936;
    J. C. Duchi, M. I. Jordan, M. J. Wainwright, JASA 2018 (private moment estimation);
    A. E. Hoerl, R. W. Kennard, "Ridge regression", Technometrics 12, 1970; C. Morris,
    "Parametric empirical Bayes inference", JASA 78, 1983; O. Ledoit, M. Wolf, "A
    well-conditioned estimator for large-dimensional covariance matrices", J.
    Multivariate Anal. 88, 2004; C. E. Rasmussen, C. K. I. Williams, "Gaussian
    Processes for Machine Learning", 2006, Section 5.4 (marginal likelihood).
    """

    def __init__(
        self,
        *,
        regularization: str = "empirical-bayes",
        alpha: float = 0.1,
        threshold: str = "posterior",
        no_signal_fit: str = "average",
        fit_intercept: bool = True,
        joint: bool = False,
        mechanism: Mechanism | ProductMoments | None = None,
        gram: ArrayLike | None = None,
        public: ArrayLike | None = None,
        label_flip_rate: float = 0.0,
    ) -> None:
        self.regularization = regularization
        self.alpha = alpha
        self.threshold = threshold
        self.no_signal_fit = no_signal_fit
        self.fit_intercept = fit_intercept
        self.joint = joint
        self.mechanism = mechanism
        self.gram = gram
        self.public = public
        self.label_flip_rate = label_flip_rate

    def _check(self) -> float:
        check_choice(self.regularization, "regularization", REGULARIZATIONS)
        check_choice(self.threshold, "threshold", THRESHOLDS)
        check_choice(self.no_signal_fit, "no_signal_fit", NO_SIGNAL_FITS)
        return check_real(self.alpha, "alpha", low=0.0)

    def fit(self, X: ArrayLike, y: ArrayLike | None = None) -> MomentLinearClassifier:
        """Fit from the releases: their :class:`ReleaseMoments` (one chunk), then
        :meth:`fit_moments`."""
        self._check()
        rho = check_real(
            self.label_flip_rate, "label_flip_rate", low=0.0, high=0.5, high_open=True
        )
        x = check_finite_array(X, "X", ndim=2)
        if x.shape[0] < 1:
            raise ValueError("X must have at least one row")
        start = int(self.fit_intercept)
        features = None
        if self.joint:
            if y is not None:
                raise ValueError(
                    "y must be None when joint=True (X carries the labels)"
                )
            rows = x
            if x.shape[1] - start < 1:
                raise ValueError("X must have at least one feature column")
        else:
            if y is None:
                raise ValueError("y is required when joint=False")
            labels = check_binary_labels(y, "y")
            if labels.size != x.shape[0]:
                raise ValueError(f"y has {labels.size} entries for {x.shape[0]} rows")
            signs = 2.0 * labels - 1.0
            features = self._augment(x)
            rows = signs[:, None] * features / (1.0 - 2.0 * rho)
        if rows.shape[0] < 2:
            raise ValueError("X must have at least two rows")
        groups = np.zeros(rows.shape[0], dtype=np.int64)
        return self.fit_moments(ReleaseMoments.of(rows, groups, 1, features))

    def fit_moments(self, moments: ReleaseMoments) -> MomentLinearClassifier:
        """Fit from the :class:`ReleaseMoments` of the releases (one group), summed
        chunk by chunk or by :meth:`fit`."""
        alpha = self._check()
        n = int(moments.count[0])
        if n < 2:
            raise ValueError("X must have at least two rows")
        cross = moments.mean[0]
        noise = moments.scatter[0] / (n - 1) / n
        gram, identified = self._estimate_gram(moments, cross.size)
        theta, shrinkage = self._solve(gram, cross, noise, alpha)
        self._set_fit(theta, cross.size - int(self.fit_intercept))
        self.cross_moment_ = cross
        self.gram_ = gram
        self.noise_variance_ = float(np.trace(noise)) / noise.shape[0]
        self.shrinkage_ = float(shrinkage)
        self.identified_ = identified
        return self

    def _estimate_gram(
        self, moments: ReleaseMoments, d: int
    ) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        """:math:`E[(1, x)(1, x)^\\top]`: the ``gram`` given, else the release moments
        pooled with the ``public`` features' moments on the entries they identify
        (one inverse-variance weight, the summed variances of the entries), else
        the release moments shrunk towards a diagonal; sets ``gram_source_`` and
        ``gram_weight_`` (the releases' weight, or the diagonal's)."""
        start = int(self.fit_intercept)
        self.fallback_ = ""
        if self.gram is not None:
            gram = check_finite_array(self.gram, "gram", ndim=2)
            if gram.shape != (d, d):
                raise ValueError(f"gram must have shape ({d}, {d}), got {gram.shape}")
            self.gram_source_, self.gram_weight_ = "public gram", 0.0
            return nearest_psd(gram), np.ones((d, d), dtype=bool)
        gram, var, identified, noisy = self._release_gram(moments, d)
        if self.public is not None:
            public = check_finite_array(self.public, "public", ndim=2)
            if public.shape[1] != d - start or public.shape[0] < 2:
                raise ValueError(
                    f"public must have at least 2 rows of {d - start} features, "
                    f"got shape {public.shape}"
                )
            if start:
                public = np.hstack([np.ones((public.shape[0], 1)), public])
            squares = public * public
            mean, spread = _product_means(
                public.T @ public, squares.T @ squares, public.shape[0]
            )
            # One inverse-variance weight for every identified entry: entry-wise
            # weights would break the small eigenvalues of an ill-conditioned G.
            total = float(np.sum((spread + var)[identified]))
            weight = float(np.sum(spread[identified])) / total if total > 0 else 0.0
            gram = mean + weight * np.where(identified, gram - mean, 0.0)
            self.gram_source_ = "public features and releases"
            self.gram_weight_ = weight
        elif noisy:
            gram, self.gram_weight_ = _gram_fallback(gram, var, identified, start)
            self.gram_source_ = "releases, shrunk towards a diagonal"
            if self.gram_weight_ >= 0.5:
                self.fallback_ = (
                    "a diagonal second moment (the releases' weight "
                    f"{1 - self.gram_weight_:.2f})"
                )
        else:
            self.gram_source_, self.gram_weight_ = "releases", 0.0
        # Features lie in [-1, 1]^p: every entry of E[ww^T] lies in [-1, 1] and the
        # diagonal in [0, 1]. Clipping noisy estimates to these bounds only moves them
        # towards the truth.
        gram = np.clip(gram, -1.0, 1.0)
        np.fill_diagonal(gram, np.clip(np.diag(gram), 0.0, 1.0))
        return nearest_psd(gram), identified

    def _release_gram(
        self, moments: ReleaseMoments, d: int
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.bool_], bool]:
        """The releases' unbiased second moment of (1, x), the variance of each entry
        (0 where not identified), the identified entries, and whether the mechanism
        adds noise. The intercept's row of released features is their plain mean."""
        n = self._released(moments)
        gram, var = _product_means(moments.products, moments.squares, n)
        # Joint releases carry the constant coordinate through the mechanism.
        s = int(self.fit_intercept and not self.joint)
        mech = _moments(self._feature_mechanism(), d - s)
        inner, identified = mech.second_moment_of_sums(moments.products[s:, s:], n)
        factor = mech.offdiagonal.copy()
        np.fill_diagonal(factor, mech.slope)
        gram[s:, s:] = inner
        var[s:, s:] = np.where(
            identified, var[s:, s:] / np.where(identified, factor, 1.0) ** 2, 0.0
        )
        identified = np.pad(identified, ((s, 0), (s, 0)), constant_values=True)
        noisy = bool(np.any(mech.offset > 0) or np.any(factor != 1))
        if self.fit_intercept:
            gram[0, 0], var[0, 0], identified[0, 0] = 1.0, 0.0, True
        return gram, var, identified, noisy

    def _feature_mechanism(self) -> Mechanism | ProductMoments | None:
        """The mechanism whose releases' products estimate the second moment."""
        return self.mechanism

    def _released(self, moments: ReleaseMoments) -> int:
        """How many releases the products sum (each is in one group)."""
        return int(moments.count.sum())

    def _solve(
        self,
        gram: NDArray[np.float64],
        cross: NDArray[np.float64],
        noise: NDArray[np.float64],
        alpha: float,
    ) -> tuple[NDArray[np.float64], float]:
        """The regularised least-squares coefficients and the shrinkage used; ``cross``
        (d,) or (d, K), the coefficients alike; ``noise`` the covariance (d, d) of
        ``cross`` or (K, d, d), one per column. Sets ``prior_variances_`` and
        ``fallback_``."""
        d, start = gram.shape[0], int(self.fit_intercept)
        self.slope_scale_ = np.ones(1 if cross.ndim == 1 else cross.shape[1])
        if self.regularization == "ridge":
            trace = float(np.trace(gram[start:, start:]))
            shrinkage = alpha * max(trace / (d - start), 1e-12)
            penalty = np.diag((np.arange(d) >= start).astype(float))
            theta = np.linalg.lstsq(gram + shrinkage * penalty, cross, rcond=None)[0]
            self.prior_variances_ = np.full(1 + start, np.nan)
            return theta, float(shrinkage)
        columns = cross.reshape(d, -1)
        # The intercept and the slopes have their own prior variance.
        groups = (np.arange(d) >= start).astype(np.int64)
        noise = noise.reshape(-1, d, d)
        theta, tau, floored = _posterior_mean(gram, columns, noise, groups)
        average = bool(floored[-1]) and self.no_signal_fit == "average"
        if average:
            theta = _averaged_posterior_mean(gram, columns, noise, groups)
        refit = bool(start) and self.threshold == "refit"
        if refit:
            theta, self.slope_scale_ = _refit_along(gram, columns, theta)
        self.prior_variances_ = tau[[0, d - 1]] if start else tau[:1]
        if floored[-1]:
            # No signal detected in the features: with the intercept's prior above
            # the floor the posterior mean is the majority class of the released
            # labels, else the limit direction T G S^-1 c; the refit takes the
            # slopes' direction at the floor (the limit direction) all the same.
            what = "majority class of the released labels"
            what = what if start and not floored[0] else "limit direction G S^-1 c"
            what = "refit along the limit direction G S^-1 c" if refit else what
            if average:
                what = "posterior mean averaged over the prior variances"
                what = f"refit along the {what}" if refit else what
            self.fallback_ = f"no signal detected in the features: the {what}"
        level = float(np.trace(noise.mean(axis=0))) / d
        return theta.reshape(cross.shape), level / float(tau[-1])

    def predict_proba(self, X: ArrayLike) -> NDArray[np.float64]:
        r"""The least-squares estimate :math:`(1 + \hat\theta^\top w)/2` in [0, 1]."""
        p1 = np.clip((1.0 + self.decision_function(X)) / 2.0, 0.0, 1.0)
        return np.column_stack([1.0 - p1, p1])


#: The floor of the within-class covariance's eigenvalues in :func:`discriminant_rule`,
#: relative to the features' mean variance.
WITHIN_FLOOR = 1e-6


def class_moments(
    theta: NDArray[np.float64], gram: NDArray[np.float64]
) -> NDArray[np.float64]:
    r"""The fitted class moments :math:`m_k = E[1\{y = k\} w] = G (\theta_k + e_0)/2`
    (d, K) of least-squares coefficients ``theta`` (d, K) of :math:`\tilde y_k` on
    :math:`w = (1, x)`; row 0 holds the class shares."""
    shifted = np.array(theta, dtype=float)
    shifted[0] += 1.0
    return gram @ shifted / 2.0


def discriminant_rule(
    theta: NDArray[np.float64], gram: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64], str]:
    r"""Linear discriminant analysis from the K-class moment classifier's moments.

    ``theta`` (d, K) holds the least-squares coefficients of :math:`\tilde y_k` on
    :math:`w = (1, x)` (posterior means in the classifier), ``gram`` (d, d)
    :math:`G = E[w w^\top]`. Their fitted class moments
    :math:`m_k = E[1\{y = k\} w] = G (\theta_k + e_0) / 2` give the class shares
    :math:`\pi_k = m_{k0}` and means :math:`\mu_k`; :math:`G` the mean
    :math:`\mu` and the covariance :math:`\Sigma`, so the pooled within-class
    covariance is :math:`\Sigma_W = \Sigma - \sum_k \pi_k (\mu_k - \mu)
    (\mu_k - \mu)^\top`, and the discriminants are

    .. math:: \delta_k(x) = x^\top \Sigma_W^{-1} \mu_k
              - \tfrac12 \mu_k^\top \Sigma_W^{-1} \mu_k + \log \pi_k.

    From exact moments this is the plug-in LDA of the clients (covariances over n).
    Noisy moments can leave :math:`\Sigma_W` indefinite; its eigenvalues are raised
    to :data:`WITHIN_FLOOR` times the features' mean variance. Returns (coef (K, p),
    intercept (K,), ""), or, where a class share is not positive, the least-squares
    scores and the reason.
    """
    moments = class_moments(theta, gram)
    shares = moments[0]
    if np.any(shares <= 0.0):
        bad = np.flatnonzero(shares <= 0.0).tolist()
        why = f"lda: classes {bad} have no positive estimated share, least squares kept"
        return theta[1:].T.copy(), theta[0].copy(), why
    means = moments[1:] / shares
    mean = gram[1:, 0] / gram[0, 0]
    spread = means - mean[:, None]
    covariance = gram[1:, 1:] / gram[0, 0] - np.outer(mean, mean)
    within = covariance - (spread * shares) @ spread.T
    # Noise can leave Sigma_W indefinite where the classes are far apart (it is
    # small there): its eigenvalues are raised to a floor, a millionth of the
    # features' mean variance.
    values, vectors = np.linalg.eigh((within + within.T) / 2.0)
    floor = WITHIN_FLOOR * max(float(np.trace(covariance)) / covariance.shape[0], 0.0)
    values = np.maximum(values, max(floor, np.finfo(float).tiny))
    solved = (vectors / values) @ (vectors.T @ means)
    intercept = -0.5 * np.einsum("pk,pk->k", means, solved) + np.log(shares)
    return solved.T.copy(), intercept, ""


class MomentMulticlassClassifier(MomentLinearClassifier):
    r"""K-class moment classifier from class-sampled joint releases.

    X holds one release z of :math:`\tilde y_j\,w` per client, :math:`w = (1, x)`,
    y the class j the client drew (uniformly, independently of its data;
    :class:`~ldpfda.privacy.joint.ClassSignedFeatureMechanism`), so that the mean
    of the releases of the :math:`n_k` clients that drew k,

    .. math:: \hat c_k = \frac{1}{n_k} \sum_{i: j_i = k} z_i,

    is unbiased for :math:`c_k = E[\tilde y_k w]`, the cross moment of the binary
    moment classifier of k against the rest. With one G (public, or from the releases
    as for the binary joint release: :math:`z z^\top` estimates :math:`w w^\top` for
    every j) and one empirical-Bayes prior for every class (the binary classifier's:
    its own variance for the intercept row and for the slopes, by maximum marginal
    likelihood of all K columns), each column is a posterior mean

    .. math:: \hat\theta_k = T G (G T G + S_k)^{-1} (\hat c_k - a G e_0) + a e_0,
              \qquad a = 2/K - 1,

    :math:`S_k` the covariance of the releases of the clients that drew k over
    :math:`n_k`. :math:`\sum_k \tilde y_k = 2 - K`, so every :math:`c_k` holds
    :math:`a G e_0`, whose coefficients :math:`a e_0` do not change the argmax: only
    the rest is shrunk, each class's intercept towards the common one. The rule
    :math:`\hat y = \arg\max_k \hat\theta_k^\top w` is that of the least-squares
    regression of the indicator matrix (Fisher's discriminant directions).
    ``"ridge"`` solves :math:`(\hat G + \lambda D)\hat\Theta = \hat C` as the binary
    classifier does. ``coef_`` is (K, p), ``intercept_`` (K,).

    ``rule="lda"`` turns the same posterior means and G into linear discriminant
    analysis (:func:`discriminant_rule`): the least-squares rule can mask a class
    whose mean lies between others' (Hastie et al., Section 4.2), LDA cannot. Where
    the moments are too noisy for it (a class share not positive) the fit keeps
    least squares and says so in ``fallback_``; ``rule_`` is the rule used.

    References
    ----------
    T. Hastie, R. Tibshirani, J. Friedman, "The Elements of Statistical Learning",
    2nd ed., 2009, Sections 4.2-4.3; C. Morris, JASA 78, 1983.
    """

    #: The releases carry the constant coordinate and the labels (fixed).
    fit_intercept = True
    joint = True
    label_flip_rate = 0.0

    def __init__(
        self,
        *,
        n_classes: int = 3,
        regularization: str = "empirical-bayes",
        alpha: float = 0.1,
        threshold: str = "posterior",
        no_signal_fit: str = "average",
        mechanism: Mechanism | ProductMoments | None = None,
        gram: ArrayLike | None = None,
        public: ArrayLike | None = None,
        rule: str = "least-squares",
    ) -> None:
        self.n_classes = n_classes
        self.rule = rule
        self.regularization = regularization
        self.alpha = alpha
        self.threshold = threshold
        self.no_signal_fit = no_signal_fit
        self.mechanism = mechanism
        self.gram = gram
        self.public = public

    def fit(  # type: ignore[override]
        self, X: ArrayLike, y: ArrayLike
    ) -> MomentMulticlassClassifier:
        """Fit from the releases: their :class:`ReleaseMoments` (one chunk), then
        :meth:`fit_moments`."""
        self._check()
        k = check_int(self.n_classes, "n_classes", minimum=3)
        z = check_finite_array(X, "X", ndim=2)
        if z.shape[1] < 2:
            raise ValueError("X must have the constant column and a feature column")
        drawn = check_class_labels(y, k, "y")
        if drawn.size != z.shape[0]:
            raise ValueError(f"y has {drawn.size} entries for {z.shape[0]} rows")
        return self.fit_moments(ReleaseMoments.of(z, drawn.astype(np.int64), k))

    def fit_moments(self, moments: ReleaseMoments) -> MomentMulticlassClassifier:
        """Fit from the :class:`ReleaseMoments` of the releases (one group per
        class), summed chunk by chunk or by :meth:`fit`."""
        alpha = self._check()
        k = check_int(self.n_classes, "n_classes", minimum=3)
        check_choice(self.rule, "rule", MULTICLASS_RULES)
        counts = moments.count
        if counts.size != k:
            raise ValueError(f"the moments hold {counts.size} classes, expected {k}")
        # A class drawn by fewer than 2 clients has no estimable moment nor noise
        # level: its posterior mean is the prior's, the common score (below), so a
        # small federation with many classes still gets a model of the others.
        seen = np.flatnonzero(counts >= 2)
        if seen.size == 0:
            raise ValueError(
                "at least one class must be drawn by at least 2 clients to estimate "
                f"its moment, got draws per class {counts.tolist()}"
            )
        d = moments.mean.shape[1]
        cross = np.zeros((d, k))
        cross[:, seen] = moments.mean[seen].T
        n = counts[seen][:, None, None]
        noise = moments.scatter[seen] / (n - 1) / n
        gram, identified = self._estimate_gram(moments, d)
        # sum_k y~_k = 2 - K: the classes share the part (2/K - 1) G e_0 of their
        # cross moments, whose coefficients (2/K - 1) e_0 do not change the argmax.
        # Only the rest is shrunk, so that each class's intercept is shrunk towards
        # the common one (balanced classes: towards equal scores).
        common = 2.0 / k - 1.0
        theta = np.zeros((d, k))
        deviation = cross[:, seen] - common * gram[:, :1]
        theta[:, seen], shrinkage = self._solve(gram, deviation, noise, alpha)
        theta[0] += common
        if seen.size < k:
            unseen = np.flatnonzero(counts < 2).tolist()
            own = f"classes {unseen} drawn by fewer than 2 clients: the common score"
            self.fallback_ = "; ".join(filter(None, [self.fallback_, own]))
        self.rule_ = self.rule
        intercept: Any  # (K,), where the binary classifier's is a float
        if self.rule == "lda":
            coef, intercept, why = discriminant_rule(theta, gram)
            if why:
                self.rule_ = "least-squares"
                self.fallback_ = "; ".join(filter(None, [self.fallback_, why]))
        else:
            coef, intercept = theta[1:].T.copy(), theta[0].copy()
        self.coef_ = coef
        self.intercept_ = intercept
        self.n_features_in_ = d - 1
        self.classes_ = np.arange(k)
        self.cross_moment_ = cross
        self.class_counts_ = counts
        self.gram_ = gram
        self.noise_variance_ = float(np.trace(noise.mean(axis=0))) / d
        self.shrinkage_ = float(shrinkage)
        self.identified_ = identified
        return self

    def decision_function(self, X: ArrayLike) -> NDArray[np.float64]:
        r"""Scores :math:`\hat\theta_k^\top w`, shape (n, K)."""
        self._check_fitted()
        x = check_finite_array(X, "X", ndim=2)
        if x.shape[1] != self.coef_.shape[1]:
            raise ValueError(
                f"X has {x.shape[1]} features, expected {self.coef_.shape[1]}"
            )
        return x @ self.coef_.T + self.intercept_

    def predict(self, X: ArrayLike) -> NDArray[np.int8]:
        """The class of the largest score."""
        return np.argmax(self.decision_function(X), axis=1).astype(np.int8)

    def predict_proba(self, X: ArrayLike) -> NDArray[np.float64]:
        r"""The least-squares estimates :math:`(1 + \hat\theta_k^\top w)/2`, clipped to
        [0, 1] and normalised (uniform where all are 0); under ``rule_ = "lda"`` the
        discriminants' softmax, LDA's posterior."""
        scores = self.decision_function(X)
        if getattr(self, "rule_", "least-squares") == "lda":
            scores = scores - scores.max(axis=1, keepdims=True)
            e = np.exp(scores)
            return e / e.sum(axis=1, keepdims=True)
        p = np.clip((1.0 + scores) / 2.0, 0.0, 1.0)
        total = p.sum(axis=1, keepdims=True)
        uniform = np.full_like(p, 1.0 / p.shape[1])
        return np.where(total > 0, p / np.where(total > 0, total, 1.0), uniform)

    def to_linear_models(self) -> LinearModels:
        """The fit as a K-row :class:`~ldpfda.server.mrma.LinearModels`."""
        self._check_fitted()
        return LinearModels(self.coef_, np.asarray(self.intercept_))


class MomentSplitClassifier(MomentMulticlassClassifier):
    r"""K-class moment classifier from split releases
    (:class:`~ldpfda.privacy.joint.ClassSplitMechanism`, given as ``mechanism``):
    X holds each client's rows :math:`(1, z)`, y its label as randomized response
    reported it. Every client gives every class k the row
    :math:`\hat U_k = (2 R_k - 1)(1, z)`, unbiased for :math:`\tilde y_k w`, so
    :math:`\hat c_k` is the mean over all n clients and :math:`S_k` their covariance
    over n; the constant coordinate is not released, and :math:`z z^\top` estimates
    :math:`x x^\top` as for the reference release's features. The fit is
    :class:`MomentMulticlassClassifier`'s.
    """

    joint = False

    def _feature_mechanism(self) -> Mechanism | ProductMoments | None:
        return None if self.mechanism is None else self.mechanism.inner  # type: ignore[union-attr]

    def _released(self, moments: ReleaseMoments) -> int:
        # Every release is in every group.
        return int(moments.count.max())

    def fit(  # type: ignore[override]
        self, X: ArrayLike, y: ArrayLike
    ) -> MomentSplitClassifier:
        """Fit from the releases (rows (1, z), reported labels) as one chunk."""
        self._check()
        k = check_int(self.n_classes, "n_classes", minimum=3)
        if not hasattr(self.mechanism, "blocks"):
            raise ValueError(
                "mechanism must be the ClassSplitMechanism of the releases"
            )
        z = check_finite_array(X, "X", ndim=2)
        reported = check_class_labels(y, k, "y")
        if reported.size != z.shape[0]:
            raise ValueError(f"y has {reported.size} entries for {z.shape[0]} rows")
        blocks = self.mechanism.blocks(reported, z)  # type: ignore[union-attr]
        self.fit_moments(ReleaseMoments.of_blocks(blocks, z))
        return self


class FlipCorrectedLogisticRegression(_LinearClassifier):
    r"""L2-penalised logistic regression with labels flipped at a known rate.

    For labels flipped independently with probability :math:`\rho_i < 1/2`
    (randomized response: :math:`\rho = 1 - q`), Natarajan et al.'s loss

    .. math:: \tilde\ell(t, \tilde y) = \frac{(1-\rho)\,\ell(t, \tilde y)
              - \rho\,\ell(t, -\tilde y)}{1 - 2\rho}
              = \ell(t, \tilde y) - \frac{\rho}{1 - 2\rho}\,\tilde y\, t,
              \qquad \ell(t, \tilde y) = \log(1 + e^{-\tilde y t}),

    is unbiased for the clean loss but unbounded below, so the objective

    .. math:: \frac{1}{\sum_i s_i} \sum_i s_i\, \tilde\ell(b + \beta^\top x_i,
              \tilde y_i) + \frac{\alpha}{2}\big(\|\beta\|^2 + b^2\big)

    penalises all parameters, which makes it strongly convex (L-BFGS). With noisy
    features the fitted direction stays consistent up to attenuation when the noise is
    independent and isotropic. ``fit(..., flip_rates=...)`` gives one :math:`\rho_i`
    per sample; L-BFGS stops at 1000 iterations or tolerance :math:`10^{-8}`.

    References
    ----------
    N. Natarajan, I. S. Dhillon, P. Ravikumar, A. Tewari, "Learning with noisy labels",
    NeurIPS 2013, Lemma 1.
    """

    def __init__(
        self,
        *,
        alpha: float = 0.01,
        flip_rate: float = 0.0,
        fit_intercept: bool = True,
    ) -> None:
        self.alpha = alpha
        self.flip_rate = flip_rate
        self.fit_intercept = fit_intercept

    def fit(
        self,
        X: ArrayLike,
        y: ArrayLike,
        sample_weight: ArrayLike | None = None,
        flip_rates: ArrayLike | None = None,
    ) -> FlipCorrectedLogisticRegression:
        alpha = check_real(self.alpha, "alpha", low=0.0, low_open=True)
        x = check_finite_array(X, "X", ndim=2)
        labels = check_binary_labels(y, "y")
        n, p = x.shape
        if labels.size != n:
            raise ValueError(f"y has {labels.size} entries for {n} rows")
        if flip_rates is None:
            rate = check_real(
                self.flip_rate, "flip_rate", low=0.0, high=0.5, high_open=True
            )
            rho = np.full(n, rate)
        else:
            rho = check_finite_array(flip_rates, "flip_rates", ndim=1)
            if rho.size != n or np.any(rho < 0) or np.any(rho >= 0.5):
                raise ValueError("flip_rates must have one value in [0, 0.5) per row")
        if sample_weight is None:
            s = np.ones(n)
        else:
            s = check_finite_array(sample_weight, "sample_weight", ndim=1)
            if s.size != n or np.any(s < 0) or s.sum() <= 0:
                raise ValueError("sample_weight must be >= 0, one per row, not all 0")
        s = s / s.sum()
        signs = 2.0 * labels - 1.0
        kappa = rho / (1.0 - 2.0 * rho)
        design = self._augment(x)

        def objective(theta: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
            margin = signs * (design @ theta)
            value = float(s @ (-log_expit(margin) - kappa * margin))
            # d/dm [log(1+e^-m) - kappa m] = -expit(-m) - kappa
            grad_m = s * (-expit(-margin) - kappa) * signs
            value += 0.5 * alpha * float(theta @ theta)
            return value, design.T @ grad_m + alpha * theta

        result = minimize(
            objective,
            np.zeros(design.shape[1]),
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": 1000, "gtol": 1e-8, "ftol": 1e-8},
        )
        self._set_fit(result.x, p)
        self.n_iter_ = int(result.nit)
        return self

    def predict_proba(self, X: ArrayLike) -> NDArray[np.float64]:
        p1 = expit(self.decision_function(X))
        return np.column_stack([1.0 - p1, p1])


def as_weak_learner(estimator: Any) -> WeakLearner:
    """A hook fitting a fresh clone of ``estimator`` (labels None: joint releases)."""

    from sklearn.base import clone

    def learner(
        features: NDArray[np.float64], labels: NDArray[np.int8] | None
    ) -> LinearModels:
        return clone(estimator).fit(features, labels).to_linear_models()

    return learner
