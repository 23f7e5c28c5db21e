r"""A scikit-learn classifier trained by the platform's default protocol.

Every client releases :math:`\tilde y\,(1, x)` once at its whole epsilon and the server
fits the moment classifier (``Settings()``, ``privacy.mechanism = "joint-hybrid"``);
with K > 2 classes every client releases a drawn class j and
:math:`\tilde y_j\,(1, x)` once, and the server fits the K-class moment classifier.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ldpfda._validation import check_choice
from ldpfda.config import (
    MULTICLASS_RELEASES,
    MULTICLASS_RULES,
    NO_SIGNAL_FITS,
    THRESHOLDS,
    Settings,
)
from ldpfda.engine.accountant import BudgetAccountant
from ldpfda.engine.estimator import _LocalDPClassifier, _Prepared
from ldpfda.engine.inprocess import ArrayClients
from ldpfda.engine.runner import run_keyed
from ldpfda.fda.features import Featurizer
from ldpfda.schema.spec import FederationSpec
from ldpfda.server.fitting import ProtocolResult

__all__ = ["JOINT_MECHANISMS", "LDPClassifier"]

#: Vector mechanisms of the joint release (``privacy.mechanism = "joint-<name>"``).
JOINT_MECHANISMS = ("hybrid", "piecewise", "duchi", "laplace")


class _Computed:
    """The clients' features, already computed by the fit's featurizer: each client
    computes them itself (once), the transport passes them on as they are."""

    def __init__(self, n_features: int) -> None:
        self._n = int(n_features)

    @property
    def n_features_out(self) -> int:
        return self._n

    def transform(self, X: Any) -> Any:
        return X


class LDPClassifier(_LocalDPClassifier):
    r"""Classifier (two or K classes) learned under local DP by the default protocol.

    ``fit`` treats every row (sample) of ``X`` as one client. Each client computes its
    scaled features :math:`x \in [-1, 1]^p` (B-spline coefficients of its curve,
    rescaled with bounds fixed in advance) and releases, once and at its whole
    ``epsilon``, the vector :math:`\tilde y\,(1, x)` with :math:`\tilde y = 2y - 1`
    through a vector mechanism (Hybrid by default: k sampled coordinates, each
    Piecewise or Duchi at :math:`\varepsilon / k`). The server fits the moment
    classifier (:class:`~ldpfda.server.learners.MomentLinearClassifier`): with
    :math:`w = (1, x)`,

    .. math::

        \hat\theta = (G^2 + \mu I)^{-1} G\, \hat c, \qquad
        \hat c = \frac1n \sum_i \widetilde{\tilde y_i w_i}, \qquad
        G = E[w w^\top],

    an unbiased estimate of the least-squares fit of :math:`\tilde y` on :math:`w`
    shrunk by empirical Bayes. :math:`G` is the second moment of the public curves'
    features when ``public_curves`` are given, else estimated from the releases with
    the mechanism's noise removed. Every client spends exactly ``epsilon``
    (``result_.privacy``). The fitted model classifies new, non-private data:
    :math:`\hat y = 1\{\hat\theta_0 + \hat\theta_{1:}^\top x > 0\}`.

    With K > 2 classes (labels of any type, sorted into ``classes_``) every client
    draws a class j uniformly at random, independently of its data, and releases j
    and :math:`\tilde y_j\,(1, x)`, :math:`\tilde y_j = 2\cdot 1\{y = j\} - 1`, once at
    its whole ``epsilon``
    (:class:`~ldpfda.privacy.joint.ClassSignedFeatureMechanism`). The mean of the
    releases that drew k estimates :math:`c_k = E[\tilde y_k w]` without bias, the
    server solves :math:`\hat\Theta = (G^2 + \mu I)^{-1} G \hat C` with one
    empirical-Bayes :math:`\mu` for all classes
    (:class:`~ldpfda.server.learners.MomentMulticlassClassifier`) and predicts the
    class of the largest score (``docs/estimators.md``, "K classes").

    Parameters
    ----------
    epsilon : float or None
        Per-client budget of one fit, in (0, inf] (inf: no noise, simulation only).
        None: the spec's ``release.epsilon``, else 5.0.
    mechanism : {"hybrid", "piecewise", "duchi", "laplace"}
        The vector mechanism of the joint release.
    threshold : {"posterior", "refit"}
        The moment classifier's intercept and slopes' scale: the empirical-Bayes
        posterior mean (default), or refitted by least squares along its slope
        direction (``server.threshold``; experiments/README.md, issue 18).
    no_signal_fit : {"fallback", "average"}
        Where the marginal likelihood detects no signal in the features (the
        slopes' prior variance at its floor): the posterior mean averaged over the
        prior variances (default), or the majority class of the released labels or
        the limit direction (``server.no-signal-fit``; experiments/README.md,
        "The default protocol at the limits").
    multiclass_rule : {"least-squares", "lda"}
        With K > 2 classes: the regression of the indicator matrix (default), or
        linear discriminant analysis from the same moments, which does not mask a
        class that lies between others (``server.multiclass-rule``;
        ``docs/estimators.md``, "K classes"). Ignored with two classes.
    multiclass_release : {"auto", "draw", "split"}
        With K > 2 classes: a class drawn at random and y~_j (1, x) at the whole
        epsilon ("draw"), the label by K-ary randomized response and x by the vector
        mechanism, the epsilon split to minimise the stated variance, so that every
        client informs every class ("split"), or the one of the two with the smaller
        stated variance ("auto", default: split from epsilon 3.25 to 4.5 on, by K and
        p; ``privacy.multiclass-release``, ``docs/estimators.md``). Ignored with two
        classes.
    input_type : {"curves", "vectors"}
        How a plain 2-D array is read: curves sampled on ``grid_points`` (default), or
        feature vectors already in [-1, 1] (values outside are clipped to it, as each
        client would clip its own). scikit-fda data, DataFrames of curves and
        LongCurves are curves whatever this says. See :mod:`ldpfda.engine.inputs` for
        every accepted form.
    spec : FederationSpec, path or None
        A federation spec fixing the basis, bounds, labels and epsilon; its
        ``release.protocol`` must be ``"default"``.
    featurizer : Featurizer or None
        Client-side map to [-1, 1]^p, fixed in advance; X is passed to it as is.
    n_basis, order : int or None
        B-spline basis of curves without a spec (None: 10 and 4, or an FDataBasis's
        own); must be None with a spec, which fixes every channel's basis.
    accountant : BudgetAccountant or None
        Charged ``epsilon`` per fit, before any release; a fit it cannot afford is
        refused with :class:`~ldpfda.BudgetExceededError`. None: the installed
        default accountant, if any (:meth:`BudgetAccountant.set_default`).
    random_state : int, Generator or None
        None (default) keys the clients' noise with fresh OS entropy
        (:func:`~ldpfda.privacy.random.run_seed`), so nobody can replay it. A fixed
        value makes the noise reproducible -- for simulation and tests only: noise
        whose seed is known protects nothing.

    Attributes
    ----------
    classes_ : ndarray of shape (K,)
    coef_ : ndarray of shape (1, p), or (K, p) for K > 2 classes
    intercept_ : ndarray of shape (1,), or (K,)
    epsilon_ : float
        What every client spent in this fit.
    featurizer_ : Featurizer
        The client-side map of this fit, applied again to predict.
    result_ : ProtocolResult
        The run's model and privacy summary (``result_.privacy``: what every client
        spent, by release).
    n_features_in_ : int
        Columns of X, when X is a 2-D array or DataFrame.

    Notes
    -----
    Every fit makes every client it is given release again: model selection
    (``GridSearchCV``, ``cross_val_score``) spends the budget once per fit a client
    takes part in. ``docs/estimators.md`` counts it; a
    :class:`~ldpfda.engine.accountant.BudgetAccountant` bounds it.

    References
    ----------
    N. Wang, X. Xiao, Y. Yang, J. Zhao, S. C. Hui, H. Shin, J. Shin, G. Yu, "Collecting
    and analyzing multidimensional data with local differential privacy", ICDE 2019
    (the Piecewise and Hybrid mechanisms).
    J. C. Duchi, M. I. Jordan, M. J. Wainwright, "Minimax optimal procedures for
    locally private estimation", JASA 113(521), 2018.
    """

    _protocol = "default"
    _multiclass = True

    def __init__(
        self,
        epsilon: float | None = None,
        mechanism: str = "hybrid",
        *,
        threshold: str = "posterior",
        no_signal_fit: str = "average",
        multiclass_rule: str = "least-squares",
        multiclass_release: str = "auto",
        input_type: str = "curves",
        spec: FederationSpec | str | None = None,
        featurizer: Featurizer | None = None,
        n_basis: int | None = None,
        order: int | None = None,
        accountant: BudgetAccountant | None = None,
        random_state: int | np.random.Generator | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.mechanism = mechanism
        self.threshold = threshold
        self.no_signal_fit = no_signal_fit
        self.multiclass_rule = multiclass_rule
        self.multiclass_release = multiclass_release
        self.input_type = input_type
        self.spec = spec
        self.featurizer = featurizer
        self.n_basis = n_basis
        self.order = order
        self.accountant = accountant
        self.random_state = random_state

    def fit(
        self,
        X: Any,
        y: ArrayLike | None = None,
        *,
        grid_points: ArrayLike | None = None,
        public_curves: Any = None,
        client_ids: ArrayLike | None = None,
    ) -> LDPClassifier:
        """Run the default protocol with one client per row of ``X``.

        Parameters
        ----------
        X : curves or vectors
            Any form of :mod:`ldpfda.engine.inputs`; one row (sample) per client.
        y : array-like of shape (n,), or None for LongCurves (their labels)
        grid_points : array-like, optional
            The grid of a 2-D array of curves.
        public_curves : optional
            Public, unlabeled samples drawn independently of every client, in the
            form of ``X`` (curves or vectors): they fix the rescaling bounds of curves
            without a spec, and give the moment classifier its feature second moment.
        client_ids : array-like of int, optional
            Each client's id (unique, >= 0), which keys its noise; ``0 .. n-1`` if
            None. Split with X by model selection (GridSearchCV), so a client keeps
            its id in every fold.
        """
        check_choice(self.mechanism, "mechanism", JOINT_MECHANISMS)
        check_choice(self.threshold, "threshold", THRESHOLDS)
        check_choice(self.no_signal_fit, "no_signal_fit", NO_SIGNAL_FITS)
        check_choice(self.multiclass_rule, "multiclass_rule", MULTICLASS_RULES)
        check_choice(self.multiclass_release, "multiclass_release", MULTICLASS_RELEASES)
        self._fit(X, y, grid_points, public_curves, client_ids)
        return self

    def _plan(self, data: _Prepared, epsilon: float, seed: int) -> Any:
        n, p = data.features.shape
        # n_train/n_eval size the embedded designs' simulations; run_protocol takes
        # its clients from the populations, and in the default protocol every one of
        # them releases.
        settings = Settings(
            epsilon=epsilon,
            mechanism=f"joint-{self.mechanism}",
            threshold=self.threshold,
            no_signal_fit=self.no_signal_fit,
            multiclass_rule=self.multiclass_rule,
            multiclass_release=self.multiclass_release,
            public_features=data.public is not None,
            num_weak_models=1,
            subsample_size=2,
            n_train=n,
            n_eval=1,
            n_test=1,
            repeats=1,
            seed=seed,
        )
        computed = _Computed(p)
        ids, features, labels = data.client_ids, data.features, data.labels
        everyone = ArrayClients(ids, features, labels, computed)
        nobody = ArrayClients(ids[:0], features[:0], labels[:0], computed)

        def run() -> ProtocolResult:
            return run_keyed(
                everyone,
                nobody,
                settings,
                seed,
                keep_payload=False,
                public=data.public,
                n_classes=int(data.classes.size),
            )

        return run
