r"""The federation spec the package ships for the wearable heart-rate channel.

:data:`WEARABLE_SPEC` is a federation spec (:mod:`ldpfda.schema.spec`) for one day of
heart rate per subject as :func:`~ldpfda.datasets.wearable.make_wearable` records it:
time in minutes on the domain [0, 1440] (the generator's timestamps lie in
[0, 1440)), the channel ``heart_rate`` in bpm, 10 cubic B-splines with equispaced
knots and a roughness penalty of :data:`PENALTY` min^3 (it bridges device-off
stretches, so every curve with :data:`MIN_POINTS` observed points is usable), the
labels ``healthy`` and ``blunted`` (two classes, the generator's default), and the
default release at epsilon 5.

Its rescaling bounds are fixed in advance, from public data only: the 5 % and 95 %
quantiles of every coefficient over :data:`CALIBRATION_SUBJECTS` public calibration
subjects, ``make_wearable(1000, seed=PUBLIC_SEED_BASE)``, rounded outwards to 0.01
bpm. Seeds from :data:`PUBLIC_SEED_BASE` = 2^63 up are reserved for public
calibration curves: every seed the engine draws private subjects from is a 63-bit
:func:`~ldpfda.privacy.random.derive_seed` value, below that range, so the public and
the private subjects never share a stream. Value bounds (say [40, 200] bpm, the
generator's clipping range) would be data-independent too, but the least-squares map
widens them so much that a day's curve fills a sliver of [-1, 1]^p and the privacy
noise drowns the classes (a test error of 0.5 at every epsilon up to 10 on three
tuning seeds; 0.16 to 0.26 with these bounds at epsilon 5 to 1, about 9 % of the
coordinates clipped). The basis, penalty and quantile were chosen on seeds 101-103
(``make_wearable`` seeds of training, calibration and test subjects), disjoint from
the seeds the reported runs use.

:func:`wearable_spec` is :data:`WEARABLE_SPEC` for the default basis and builds the
spec for another one (the engine's ``fda.n-basis`` and ``fda.order``) by the same
recipe, :func:`calibrated_spec`; a test checks that the recipe still gives the shipped
text, which this command writes::

    python -m ldpfda.datasets.wearable_spec > wearable.toml
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import numpy as np

from ldpfda.datasets.wearable import CONDITIONS, DAY_MINUTES, make_wearable
from ldpfda.schema.spec import Bounds, FederationSpec, init_spec

__all__ = [
    "CALIBRATION_SUBJECTS",
    "MIN_POINTS",
    "PENALTY",
    "PUBLIC_SEED_BASE",
    "QUANTILE",
    "WEARABLE_SPEC",
    "calibrated_spec",
    "wearable_spec",
    "wearable_spec_text",
]

#: Seeds of ``make_wearable`` from here up draw public calibration subjects only.
PUBLIC_SEED_BASE = 2**63
#: Public calibration subjects that fix the shipped bounds.
CALIBRATION_SUBJECTS = 1000
#: Roughness penalty lambda, in min^3: a mild smoother that bridges gaps.
PENALTY = 1.0e4
#: Observed points a day needs (two hours of 5-minute samples).
MIN_POINTS = 24
#: Quantile of the calibration coefficients at either end of the bounds.
QUANTILE = 0.05
#: The shipped spec's basis.
N_BASIS, ORDER = 10, 4


def _outwards(values: np.ndarray, direction: int) -> tuple[float, ...]:
    """Round to 0.01 away from the inside of the bounds (floor low, ceil high)."""
    rounder = math.floor if direction < 0 else math.ceil
    return tuple(round(rounder(v * 100.0) / 100.0, 2) for v in values.tolist())


@functools.lru_cache(maxsize=8)
def wearable_spec(n_basis: int = N_BASIS, order: int = ORDER) -> FederationSpec:
    """The wearable spec with ``n_basis`` B-splines of ``order``: the shipped
    :data:`WEARABLE_SPEC` for the default basis, else :func:`calibrated_spec`."""
    if (n_basis, order) == (N_BASIS, ORDER):
        return FederationSpec.loads(WEARABLE_SPEC)
    return calibrated_spec(n_basis, order)


@functools.lru_cache(maxsize=8)
def calibrated_spec(n_basis: int = N_BASIS, order: int = ORDER) -> FederationSpec:
    """The module's recipe: bounds from the public calibration subjects only."""
    calibration = make_wearable(CALIBRATION_SUBJECTS, seed=PUBLIC_SEED_BASE)
    draft = init_spec(
        calibration,
        domain=(0.0, DAY_MINUTES),
        unit="min",
        channel_units="bpm",
        epsilon=5.0,
        n_basis=n_basis,
        order=order,
        penalty=PENALTY,
        labels=CONDITIONS[:2],
        protocol="default",
        min_points=MIN_POINTS,
        quantile=QUANTILE,
    )
    low, high = draft.coefficient_bounds(0)
    bounds = Bounds.coefficients(_outwards(low, -1), _outwards(high, +1))
    return replace(draft, channels=(replace(draft.channels[0], bounds=bounds),))


def wearable_spec_text(n_basis: int = N_BASIS, order: int = ORDER) -> str:
    """:func:`wearable_spec` as TOML, with a header that says where it comes from."""
    header = (
        "# The wearable heart-rate spec of ldpfda (ldpfda.datasets.wearable_spec):\n"
        "# one day of heart rate per subject, minutes since midnight. Bounds: 5 % and\n"
        f"# 95 % quantiles of {CALIBRATION_SUBJECTS} public calibration subjects,\n"
        "# make_wearable(1000, seed=2**63), rounded outwards.\n"
    )
    return header + calibrated_spec(n_basis, order).dumps()


#: The shipped spec (the default basis), as a file would hold it.
WEARABLE_SPEC = """\
# The wearable heart-rate spec of ldpfda (ldpfda.datasets.wearable_spec):
# one day of heart rate per subject, minutes since midnight. Bounds: 5 % and
# 95 % quantiles of 1000 public calibration subjects,
# make_wearable(1000, seed=2**63), rounded outwards.
# Federation spec of ldpfda: what every party agrees on before any
# private data is seen. Its hash identifies it: ldpfda spec check FILE
format-version = 1
labels = ["healthy", "blunted"]
min-points = 24

[domain]
start = 0.0
end = 1440.0
unit = "min"

[release]
protocol = "default"
epsilon = 5.0

[[channels]]
name = "heart_rate"
unit = "bpm"

[channels.basis]
order = 4
n-basis = 10
penalty = 10000.0

[channels.bounds]
coefficient-low = [48.26, 48.04, 44.93, 50.14, 58.7, 62.14, 61.58, 55.34, 51.48, 47.77]
coefficient-high = [
    68.59, 66.65, 65.03, 76.98, 88.62, 97.69, 95.76, 84.98, 74.61, 71.29,
]
"""

if __name__ == "__main__":  # pragma: no cover - regenerates WEARABLE_SPEC
    print(wearable_spec_text(), end="")
