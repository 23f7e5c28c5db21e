r"""A seeded statistical check of a dataset-level (epsilon, delta) claim.

A release :math:`M` of a whole training set is :math:`(\varepsilon,\delta)`-label-DP if,
for label-neighbouring datasets :math:`D, D'` and every event :math:`E`,
:math:`P(M(D) \in E) \le e^\varepsilon P(M(D') \in E) + \delta`. :func:`audit` runs the
mechanism ``n`` times on each dataset, evaluates a list of events on every output and,
for each event and both orders of the datasets, forms

.. math:: T = \frac{\hat p - e^\varepsilon \hat p' - \delta}
          {\sqrt{\hat p(1-\hat p)/n + e^{2\varepsilon}\hat p'(1-\hat p')/n}},

the standardised excess of the two independent binomial estimates (its numerator has
non-positive mean when the claim holds). The claim is **violated** when some :math:`T`
exceeds the Bonferroni normal quantile :math:`z = \Phi^{-1}(1-\alpha/m)` over the
:math:`m` tests: the tolerance comes from the sampling variance only. A mechanism that
satisfies the claim fails with probability at most about :math:`\alpha`; the fixed seed
makes the outcome reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import norm

Release = Callable[[np.ndarray, np.random.Generator], Any]
Event = Callable[[Any], bool]


@dataclass(frozen=True)
class AuditResult:
    max_statistic: float
    z: float
    worst: str
    frequencies: dict[str, tuple[float, float]]

    @property
    def violated(self) -> bool:
        return self.max_statistic > self.z


def audit(
    release: Release,
    labels: np.ndarray,
    labels_prime: np.ndarray,
    events: Sequence[tuple[str, Event]],
    *,
    epsilon: float,
    delta: float = 0.0,
    n: int,
    seed: int,
    alpha: float = 1e-4,
) -> AuditResult:
    """Check ``P(E|D) <= e^eps P(E|D') + delta`` for every event, both orders."""
    gen = np.random.default_rng(seed)
    hits = np.zeros((2, len(events)))
    for side, data in enumerate((labels, labels_prime)):
        for _ in range(n):
            out = release(data, gen)
            hits[side] += [bool(event(out)) for _, event in events]
    return compare(
        hits[0],
        hits[1],
        n,
        [name for name, _ in events],
        epsilon=epsilon,
        delta=delta,
        alpha=alpha,
    )


def compare(
    hits: np.ndarray,
    hits_prime: np.ndarray,
    n: int,
    names: Sequence[str],
    *,
    epsilon: float,
    delta: float = 0.0,
    alpha: float = 1e-4,
) -> AuditResult:
    """The test of :func:`audit` from event counts over ``n`` releases per dataset."""
    freq = np.vstack([np.asarray(hits, float), np.asarray(hits_prime, float)]) / n
    m = 2 * len(names)
    z = float(norm.isf(alpha / m))
    worst, worst_name = -math.inf, ""
    factor = math.exp(epsilon)
    for j, name in enumerate(names):
        for a, b in ((0, 1), (1, 0)):
            pa, pb = freq[a, j], freq[b, j]
            se = math.sqrt(pa * (1 - pa) / n + factor**2 * pb * (1 - pb) / n)
            excess = pa - factor * pb - delta
            stat = excess / se if se > 0 else (math.inf if excess > 0 else -math.inf)
            if stat > worst:
                worst, worst_name = stat, f"{name} ({'DD' if a == 0 else 'D'}')"
    frequencies = {
        name: (float(freq[0, j]), float(freq[1, j])) for j, name in enumerate(names)
    }
    return AuditResult(
        max_statistic=worst, z=z, worst=worst_name, frequencies=frequencies
    )
