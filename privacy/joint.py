r"""Joint release of a client's label and features; randomized response with a prior.

:class:`SignedFeatureMechanism`
    Each training client releases the single vector

    .. math:: u = \tilde y\,(1, x) \in [-1, 1]^{p+1}, \qquad \tilde y = 2y - 1,

    once, with a vector mechanism at its *whole* epsilon. A linear classifier needs
    :math:`E[\tilde y\,(1, x)]` (and the second moment of the features, which does not
    involve the label: :math:`u u^\top = (1, x)(1, x)^\top`), so nothing is spent on
    parts the server cannot use, and the product :math:`\tilde y x` is perturbed once
    instead of multiplying the noise of a separately released label and separately
    released features.

    *Epsilon accounting.* :math:`(x, y) \mapsto u` is a fixed map into the box, so for
    any two clients :math:`(x, y), (x', y')` and any output set S,
    :math:`P(M(u) \in S) \le e^\varepsilon P(M(u') \in S)`: the release is
    epsilon-LDP for the pair, and it is the client's only release. One
    :class:`~ldpfda.privacy.ReleaseEvent` of the whole epsilon is charged.

:class:`RandomizedResponseWithPrior`
    Ghazi et al.'s RR-with-prior for a label, given a prior over the categories that is
    *public* for the client (see the class for what that requires under local DP).

References
----------
J. C. Duchi, M. I. Jordan, M. J. Wainwright, JASA 2018; N. Wang et al., ICDE 2019;
B. Ghazi, N. Golowich, R. Kumar, P. Manurangsi, C. Zhang, "Deep learning with label
differential privacy", NeurIPS 2021.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import (
    check_binary_labels,
    check_epsilon,
    check_finite_array,
    check_int,
)
from ldpfda.privacy.base import Mechanism, ReleaseEvent
from ldpfda.privacy.random import RandomLike, uniform
from ldpfda.privacy.vector_mechanisms import (
    VECTOR_MECHANISMS,
    ProductMoments,
    make_vector_mechanism,
    product_moments,
)

__all__ = [
    "RandomizedResponseWithPrior",
    "SignedFeatureMechanism",
    "rr_prior_support_size",
    "signed_features",
]


def signed_features(
    features: ArrayLike, labels: ArrayLike, *, fit_intercept: bool = True
) -> NDArray[np.float64]:
    r"""The vector a client releases jointly: :math:`\tilde y (1, x)`.

    Parameters
    ----------
    features : array of shape (n, p)
        Features already rescaled into [-1, 1].
    labels : array of shape (n,)
        Labels in {0, 1}.
    fit_intercept : bool
        Prepend the constant 1 (so the server also learns :math:`E[\tilde y]` and
        :math:`E[\tilde y x]` jointly).
    """
    x = check_finite_array(features, "features", ndim=2)
    y = check_binary_labels(labels)
    if y.size != x.shape[0]:
        raise ValueError(f"labels has {y.size} entries for {x.shape[0]} feature rows")
    if np.any(np.abs(x) > 1.0 + 1e-12):
        raise ValueError(
            "features must be rescaled into [-1, 1], got max |x| = "
            f"{np.abs(x).max():.6g}"
        )
    signs = 2.0 * y.astype(float) - 1.0
    if fit_intercept:
        x = np.hstack([np.ones((x.shape[0], 1)), x])
    return signs[:, None] * np.clip(x, -1.0, 1.0)


class SignedFeatureMechanism(Mechanism):
    r"""One release per client of :math:`\tilde y (1, x)` with a vector mechanism.

    ``values`` passed to :meth:`randomise` are the rows :math:`(y, x_1, \dots, x_p)`
    (label first, in {0, 1}; features in [-1, 1]); :meth:`release` takes them apart.
    The output estimates :math:`u = \tilde y(1, x)` without bias, so :meth:`bias` and
    :meth:`variance` refer to u. The mean of the releases estimates
    :math:`E[\tilde y(1, x)]` (:meth:`cross_moment`), and :meth:`second_moment`
    estimates :math:`E[(1, x)(1, x)^\top]` where the inner mechanism identifies it.

    Parameters
    ----------
    epsilon : float
        The client's whole budget, in (0, inf].
    n_features : int
        p.
    mechanism : {"hybrid", "piecewise", "duchi", "laplace"}
        The vector mechanism applied to u, of dimension p + 1 (p without intercept);
        see :func:`~ldpfda.privacy.vector_mechanisms.make_vector_mechanism`.
    fit_intercept : bool
        Release :math:`\tilde y(1, x)` (True) or :math:`\tilde y x` (False; only when
        the classes are known to be balanced and the features centred).

    References
    ----------
    N. Wang et al., ICDE 2019 (the mechanisms and their use for gradients of linear
    models); J. C. Duchi, M. I. Jordan, M. J. Wainwright, JASA 2018.
    """

    name = "signed_features"

    def __init__(
        self,
        *,
        epsilon: float,
        n_features: int,
        mechanism: str = "hybrid",
        fit_intercept: bool = True,
    ) -> None:
        super().__init__(epsilon=epsilon)
        self.n_features = check_int(n_features, "n_features", minimum=1)
        if mechanism not in VECTOR_MECHANISMS:
            raise ValueError(
                f"mechanism must be one of {VECTOR_MECHANISMS}, got {mechanism!r}"
            )
        if not isinstance(fit_intercept, bool):
            raise TypeError(
                f"fit_intercept must be a bool, got {type(fit_intercept).__name__}"
            )
        self.fit_intercept = fit_intercept
        self.inner = make_vector_mechanism(
            mechanism, epsilon=self.epsilon, dimension=self.dimension
        )

    @property
    def dimension(self) -> int:
        """Length of the released vector: p + 1 with intercept, else p."""
        return self.n_features + int(self.fit_intercept)

    def parameters(self) -> dict[str, Any]:
        return {
            "inner": self.inner.name,
            "fit_intercept": self.fit_intercept,
            **self.inner.parameters(),
        }

    def event(self) -> ReleaseEvent:
        return ReleaseEvent.of(self.name, self.epsilon, **self.parameters())

    def _encode(self, values: ArrayLike) -> NDArray[np.float64]:
        v = check_finite_array(values, "values", ndim=2)
        if v.shape[1] != self.n_features + 1:
            raise ValueError(
                f"values must have shape (n_clients, {self.n_features + 1}) "
                f"(label, then features), got {v.shape}"
            )
        return signed_features(v[:, 1:], v[:, 0], fit_intercept=self.fit_intercept)

    def randomise(
        self, values: ArrayLike, rng: RandomLike = None
    ) -> NDArray[np.float64]:
        return self.inner.randomise(self._encode(values), rng)

    def release(
        self, features: ArrayLike, labels: ArrayLike, rng: RandomLike = None
    ) -> NDArray[np.float64]:
        """Release ``(features, labels)`` of a batch of clients, one row per client."""
        u = signed_features(features, labels, fit_intercept=self.fit_intercept)
        if u.shape[1] != self.dimension:
            raise ValueError(
                f"features must have {self.n_features} columns, got "
                f"{u.shape[1] - int(self.fit_intercept)}"
            )
        return self.inner.randomise(u, rng)

    def bias(self, values: ArrayLike) -> NDArray[np.float64]:
        return self.inner.bias(self._encode(values))

    def variance(self, values: ArrayLike) -> NDArray[np.float64]:
        return self.inner.variance(self._encode(values))

    def output_range(self) -> tuple[float, float]:
        """Every coordinate of a release lies in this range (the inner mechanism's)."""
        return self.inner.output_range()  # type: ignore[attr-defined]

    def product_moments(self) -> ProductMoments:
        """Second-moment map of the inner mechanism (on u)."""
        return product_moments(self.inner)

    @staticmethod
    def cross_moment(released: ArrayLike) -> NDArray[np.float64]:
        r"""Unbiased estimate of :math:`E[\tilde y (1, x)]`: the mean release."""
        z = check_finite_array(released, "released", ndim=2)
        return z.mean(axis=0)

    def second_moment(
        self, released: ArrayLike
    ) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        r"""Estimate of :math:`E[(1, x)(1, x)^\top]` from the releases, and its mask.

        Since :math:`u u^\top = (1, x)(1, x)^\top`, the second moment of the releases
        identifies it through :func:`~ldpfda.privacy.vector_mechanisms.product_moments`;
        the constant entry is known to be 1. Entries the mechanism does not identify
        (e.g. all off-diagonal ones when one coordinate is sampled) are 0 and False in
        the mask.
        """
        estimate, mask = self.product_moments().second_moment(released)
        if self.fit_intercept:
            estimate[0, 0], mask[0, 0] = 1.0, True
        return estimate, mask


# --------------------------------------------------------------------------------------
# Randomized response with a prior
# --------------------------------------------------------------------------------------


def _check_prior(prior: ArrayLike, n: int, k: int) -> NDArray[np.float64]:
    pr = check_finite_array(prior, "prior")
    if pr.ndim == 1:
        pr = np.broadcast_to(pr, (n, pr.size))
    if pr.shape != (n, k):
        raise ValueError(f"prior must have shape ({k},) or ({n}, {k}), got {pr.shape}")
    if np.any(pr < 0) or not np.allclose(pr.sum(axis=1), 1.0, atol=1e-9):
        raise ValueError("prior rows must be probability vectors (>= 0, summing to 1)")
    return pr


def rr_prior_support_size(prior: ArrayLike, *, epsilon: float) -> NDArray[np.int64]:
    r"""The number :math:`k^*` of top-prior categories RR-with-prior answers among.

    .. math:: k^* = \arg\max_{1 \le k \le K} \frac{e^\varepsilon}{e^\varepsilon + k - 1}
              \sum_{j \in \mathrm{top}_k(\pi)} \pi_j

    (the probability that the answer is the true category, if the prior is right).
    Ties go to the smallest k. One value per row of ``prior``.

    References
    ----------
    B. Ghazi et al., "Deep learning with label differential privacy", NeurIPS 2021,
    Algorithm 2.
    """
    epsilon = check_epsilon(epsilon)
    pr = check_finite_array(prior, "prior")
    pr = pr[None, :] if pr.ndim == 1 else pr
    k = pr.shape[1]
    top = np.cumsum(-np.sort(-pr, axis=1), axis=1)
    sizes = np.arange(1, k + 1)
    if math.isinf(epsilon):
        return np.ones(pr.shape[0], dtype=np.int64)  # the truth is always reported
    # e^eps / (e^eps + k - 1) = 1 / (1 + (k - 1) e^-eps), finite for large eps.
    value = top / (1.0 + (sizes - 1) * math.exp(-epsilon))
    return np.argmax(value >= value.max(axis=1, keepdims=True) - 1e-15, axis=1) + 1


class RandomizedResponseWithPrior(Mechanism):
    r"""Randomized response restricted to the categories a prior deems likely.

    For a client with category y and prior :math:`\pi` (a probability vector over the K
    categories), let :math:`Y^*` be the :math:`k^*` categories of highest prior
    (:func:`rr_prior_support_size`). The client reports

    * y with probability :math:`e^\varepsilon/(e^\varepsilon + k^* - 1)` and each other
      member of :math:`Y^*` with probability :math:`1/(e^\varepsilon + k^* - 1)`, if
      :math:`y \in Y^*`;
    * a uniform member of :math:`Y^*` otherwise.

    **Privacy.** For a fixed prior every output has probability in
    :math:`[1/(e^\varepsilon+k^*-1),\, e^\varepsilon/(e^\varepsilon+k^*-1)]` whatever y
    (:math:`1/k^*` lies in between), so the label release is epsilon-DP. The guarantee
    is *for the label given the prior*: under local DP of the whole record the prior
    must be computed from information that is already public for the client -- truly
    public features, a server-published model applied to features the client has
    *already released* (post-processing), or nothing client-specific. A prior computed
    from the client's private features leaks them (two clients with different priors
    may get disjoint supports). The epsilon of the label release then adds to whatever
    the features cost (sequential composition).

    With K = 2 the mechanism is binary randomized response when
    :math:`\max \pi \le e^\varepsilon/(e^\varepsilon+1)` and otherwise reports the
    prior's favourite (no information, nothing spent in effect): for a binary task it
    cannot estimate :math:`E[\tilde y x]` better than RR; it pays off for K > 2, e.g.
    a category (cluster of x, y) released jointly under a public prior.

    :meth:`randomise` takes the per-client prior as ``prior=`` (rows) or a single prior
    for all; without one it is K-ary randomized response.

    Parameters
    ----------
    epsilon : float
        In (0, inf].
    n_categories : int
        K >= 2.

    References
    ----------
    B. Ghazi, N. Golowich, R. Kumar, P. Manurangsi, C. Zhang, "Deep learning with label
    differential privacy", NeurIPS 2021; H. Esfandiari, V. Mirrokni, U. Syed,
    S. Vassilvitskii, "Label differential privacy via clustering", AISTATS 2022.
    """

    name = "rr_with_prior"

    def __init__(self, *, epsilon: float, n_categories: int = 2) -> None:
        super().__init__(epsilon=epsilon)
        self.n_categories = check_int(n_categories, "n_categories", minimum=2)

    def parameters(self) -> dict[str, Any]:
        return {"n_categories": self.n_categories}

    def _check_values(self, values: ArrayLike) -> NDArray[np.int64]:
        y = np.asarray(values)
        if y.ndim != 1:
            raise ValueError(
                f"values must be 1-D (one category per client), got {y.shape}"
            )
        if y.dtype.kind not in "biuf":
            raise TypeError(f"values must be integer categories, got dtype {y.dtype}")
        bad = ~np.isin(y, np.arange(self.n_categories))
        if np.any(bad):
            raise ValueError(
                f"values must be in {{0, ..., {self.n_categories - 1}}}, "
                f"got {y[bad][0]!r}"
            )
        return y.astype(np.int64)

    def _prior(self, prior: ArrayLike | None, n: int) -> NDArray[np.float64]:
        k = self.n_categories
        if prior is None:
            return np.full((n, k), 1.0 / k)
        return _check_prior(prior, n, k)

    def _ranking(
        self, prior: NDArray[np.float64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Categories by decreasing prior (stable) and the support sizes k*."""
        order = np.argsort(-prior, axis=1, kind="stable")
        if self.is_private:
            sizes = rr_prior_support_size(prior, epsilon=self.epsilon)
        else:
            sizes = np.ones(prior.shape[0], dtype=np.int64)
        return order, sizes

    def transition_matrix(
        self, prior: ArrayLike | None = None, n: int = 1
    ) -> NDArray[np.float64]:
        """T[i, a, b] = P(report b | true category a) for client i, shape (n, K, K).

        ``prior`` holds one row per client (or one row for all ``n`` clients); None is
        the uniform prior (K-ary randomized response).
        """
        if prior is not None and np.ndim(prior) == 2:
            n = int(np.shape(prior)[0])
        pr = self._prior(prior, n)
        k = self.n_categories
        if not self.is_private:
            return np.broadcast_to(np.eye(k), (pr.shape[0], k, k)).copy()
        order, sizes = self._ranking(pr)
        rank = np.argsort(order, axis=1)
        support = rank < sizes[:, None]
        keep = 1.0 / (1.0 + (sizes - 1) * math.exp(-self.epsilon))
        other = np.where(sizes > 1, (1.0 - keep) / np.maximum(sizes - 1, 1), 0.0)
        cols = support[:, None, :].astype(float)
        t = np.where(
            support[:, :, None],
            cols * other[:, None, None],
            cols / sizes[:, None, None],
        )
        diag = np.arange(k)
        t[:, diag, diag] = np.where(support, keep[:, None], t[:, diag, diag])
        return t

    def randomise(
        self,
        values: ArrayLike,
        rng: RandomLike = None,
        *,
        prior: ArrayLike | None = None,
    ) -> NDArray[np.int64]:
        y = self._check_values(values)
        n = y.size
        pr = self._prior(prior, n)
        if not self.is_private:
            return y.copy()
        u = uniform(rng, (n,))
        order, sizes = self._ranking(pr)
        position = np.argmax(order == y[:, None], axis=1)
        inside = position < sizes
        keep = 1.0 / (1.0 + (sizes - 1) * math.exp(-self.epsilon))
        other = np.where(sizes > 1, (1.0 - keep) / np.maximum(sizes - 1, 1), 0.0)
        # Inside the support: keep y below `keep`, else step to another member.
        step = np.where(
            other > 0, np.floor((u - keep) / np.where(other > 0, other, 1.0)), 0
        ).astype(np.int64)
        step = np.clip(step, 0, np.maximum(sizes - 2, 0))
        slot = np.where(step >= position, step + 1, step)  # skip y's own slot
        inside_report = np.where(u < keep, position, slot)
        # Outside: a uniform member of the support.
        outside_report = np.minimum((u * sizes).astype(np.int64), sizes - 1)
        report_slot = np.where(inside, inside_report, outside_report)
        return order[np.arange(n), report_slot]

    def bias(self, values: ArrayLike, prior: ArrayLike | None = None) -> NDArray:
        """Bias of the reported one-hot indicator, shape (n, K)."""
        y = self._check_values(values)
        t = self.transition_matrix(prior, n=y.size)
        return t[np.arange(y.size), y] - np.eye(self.n_categories)[y]

    def variance(self, values: ArrayLike, prior: ArrayLike | None = None) -> NDArray:
        """Variance of the reported one-hot indicator, shape (n, K)."""
        y = self._check_values(values)
        p = self.transition_matrix(prior, n=y.size)[np.arange(y.size), y]
        return p * (1.0 - p)
