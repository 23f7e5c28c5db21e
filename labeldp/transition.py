r"""Transition matrices of cluster resampling and the losses that correct for them.

Resampling a label with probability :math:`\lambda` from the cluster distribution
:math:`q_c` is the label channel

.. math:: T_c(\lambda) = (1-\lambda) I + \lambda\, \mathbf 1 q_c^\top, \qquad
          T_c[y, \tilde y] = P(\tilde y \mid y, c),

with, because :math:`q_c^\top \mathbf 1 = 1` (Sherman-Morrison), the inverse
:math:`T_c(\lambda)^{-1} = (I - \lambda\, \mathbf 1 q_c^\top)/(1-\lambda)` for
:math:`\lambda < 1`. Two corrections follow:

* **backward**: the corrected loss
  :math:`\tilde\ell(h,x,\tilde y) = \sum_y [T_c(\beta)^{-1}]_{\tilde y y}\,\ell(h,x,y)
  = (\ell(h,x,\tilde y) - \beta\, q_c^\top \ell(h,x,\cdot))/(1-\beta)`;
* **forward**: model the noisy label by
  :math:`P(\tilde y \mid x) = [T_c(\beta)^\top p_h(x)]_{\tilde y}
  = (1-\beta)\,p_h(\tilde y \mid x) + \beta\, q_c(\tilde y)`.

:math:`\beta \in [0, \lambda]` stands for :math:`\lambda` in the correction:
:math:`\beta = \lambda` removes the effect of resampling in expectation,
:math:`E_{\tilde y \sim T_c(\lambda)[y,\cdot]}[\tilde\ell(h,x,\tilde y)] = \ell(h,x,y)`,
and :math:`\beta = 0` is the plain loss on the noisy labels.

References
----------
N. Natarajan, I. Dhillon, P. Ravikumar, A. Tewari, "Learning with noisy labels",
NeurIPS 2013. G. Patrini, A. Rozza, A. K. Menon, R. Nock, L. Qu, "Making deep neural
networks robust to label noise: a loss correction approach", CVPR 2017.
H. Esfandiari et al., "Label differential privacy via clustering", AISTATS 2022.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import check_finite_array, check_real
from ldpfda.privacy.labels import check_distributions, check_labels

__all__ = [
    "check_distributions",
    "corrected_loss",
    "corrected_targets",
    "inverse_transition_matrices",
    "transition_matrices",
]


def _check_beta(beta: float, *, inverse: bool) -> float:
    return check_real(beta, "beta", low=0.0, high=1.0, high_open=inverse)


def transition_matrices(distributions: ArrayLike, beta: float) -> NDArray[np.float64]:
    r"""Channels :math:`T_c(\beta) = (1-\beta) I + \beta \mathbf 1 q_c^\top`, (C, K, K).

    Row :math:`y` is the law of the reported label when the true label is :math:`y`.
    """
    q = check_distributions(distributions)
    b = _check_beta(beta, inverse=False)
    return (1.0 - b) * np.eye(q.shape[1])[None, :, :] + b * q[:, None, :]


def inverse_transition_matrices(
    distributions: ArrayLike, beta: float
) -> NDArray[np.float64]:
    r"""Inverses :math:`T_c(\beta)^{-1} = (I - \beta \mathbf 1 q_c^\top)/(1-\beta)`.

    Defined for :math:`\beta < 1`; shape (C, K, K).
    """
    q = check_distributions(distributions)
    b = _check_beta(beta, inverse=True)
    return (np.eye(q.shape[1])[None, :, :] - b * q[:, None, :]) / (1.0 - b)


def corrected_targets(
    noisy_labels: ArrayLike, clusters: ArrayLike, distributions: ArrayLike, beta: float
) -> NDArray[np.float64]:
    r"""Rows :math:`[T_{c_i}(\beta)^{-1}]_{\tilde y_i, \cdot}` (backward correction).

    .. math:: a_i = \frac{e_{\tilde y_i} - \beta\, q_{c_i}}{1-\beta}

    Each row sums to 1, so with the cross-entropy the corrected loss
    :math:`\operatorname{logsumexp}(z_i) - a_i^\top z_i` is convex in the logits.
    Shape (n, K).
    """
    q = check_distributions(distributions)
    b = _check_beta(beta, inverse=True)
    c = check_labels(clusters, q.shape[0], "clusters")
    y = check_labels(noisy_labels, q.shape[1], "noisy_labels")
    if y.shape != c.shape:
        raise ValueError(
            f"noisy_labels and clusters differ in length: {y.size} != {c.size}"
        )
    return (np.eye(q.shape[1])[y] - b * q[c]) / (1.0 - b)


def corrected_loss(
    losses: ArrayLike,
    noisy_labels: ArrayLike,
    clusters: ArrayLike,
    distributions: ArrayLike,
    beta: float,
) -> NDArray[np.float64]:
    r"""Backward-corrected loss of every example, shape (n,).

    .. math:: \tilde\ell_i = \sum_y [T_{c_i}(\beta)^{-1}]_{\tilde y_i y}\,\ell_{iy}

    ``losses`` holds :math:`\ell(h, x_i, y)` for every example and label, shape (n, K);
    ``beta`` is in [0, 1) (:math:`\beta = \lambda` is unbiased).
    """
    ell = check_finite_array(losses, "losses", ndim=2)
    a = corrected_targets(noisy_labels, clusters, distributions, beta)
    if ell.shape != a.shape:
        raise ValueError(f"losses must have shape {a.shape}, got {ell.shape}")
    return np.einsum("ik,ik->i", a, ell)
