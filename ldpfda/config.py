"""One validated settings object for the in-process CLI and the Flower apps.

Keys are kebab-case and grouped by topic, as in ``[tool.flwr.app.config]``::

    privacy.epsilon = 5.0        fda.n-basis = 10        mrma.num-weak-models = 50
    data.dataset = "vector"      seed = 0

The group prefix may be left out (``epsilon``, ``n-basis``, ...).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any

from ldpfda._validation import check_epsilon, check_int, check_real

__all__ = ["DATASETS", "Settings"]

DATASETS = ("vector", "functional")
_GROUPS = {
    "epsilon": "privacy",
    "label_share": "privacy",
    "n_basis": "fda",
    "order": "fda",
    "calibration_size": "fda",
    "num_weak_models": "mrma",
    "subsample_size": "mrma",
    "cutoff": "mrma",
    "weak_learner": "mrma",
    "normalize_models": "mrma",
    "dataset": "data",
    "n_train": "data",
    "n_eval": "data",
    "n_test": "data",
    "repeats": "data",
    "seed": None,
}


@dataclass(frozen=True)
class Settings:
    """Settings of an MRMA run, validated on construction.

    Attributes
    ----------
    epsilon : float
        Each client's total budget (training clients split it over coefficients and
        label; evaluation clients spend it on one feedback bit). ``inf`` = non-private.
    label_share : float or None
        Share of a training client's epsilon on its label; None = reference 1/(p+1).
    n_basis, order : int
        B-spline basis size p and order (4 = cubic), functional data only.
    calibration_size : int
        Number of public calibration curves that fix the rescaling bounds.
    num_weak_models, subsample_size : int
        M weak classifiers, each trained on this many payloads.
    cutoff : float
        c of the selection rule ``|1/2 - e| > 1/2 - c``.
    weak_learner : {"logistic", "svm"}
    normalize_models : bool
        Scale every weak model to unit norm before averaging (see
        :func:`ldpfda.server.mrma.average_models`); False averages raw coefficients.
    dataset : {"vector", "functional"}
        Embedded design.
    n_train, n_eval, n_test, repeats : int
    seed : int
    """

    epsilon: float = 5.0
    label_share: float | None = None
    n_basis: int = 10
    order: int = 4
    calibration_size: int = 1000
    num_weak_models: int = 50
    subsample_size: int = 50
    cutoff: float = 0.2
    weak_learner: str = "logistic"
    normalize_models: bool = True
    dataset: str = "vector"
    n_train: int = 500
    n_eval: int = 2500
    n_test: int = 100_000
    repeats: int = 20
    seed: int = 0

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "epsilon", check_epsilon(self.epsilon))
        if self.label_share is not None:
            set_(
                self,
                "label_share",
                check_real(
                    self.label_share,
                    "label_share",
                    low=0.0,
                    high=1.0,
                    low_open=True,
                    high_open=True,
                ),
            )
        order = check_int(self.order, "order", minimum=1)
        set_(self, "order", order)
        n_basis = check_int(self.n_basis, "n_basis", minimum=1)
        if n_basis < order:
            raise ValueError(f"n_basis must be >= order ({order}), got {n_basis}")
        set_(self, "n_basis", n_basis)
        set_(
            self,
            "calibration_size",
            check_int(self.calibration_size, "calibration_size", minimum=2),
        )
        m = check_int(self.num_weak_models, "num_weak_models", minimum=1)
        set_(self, "num_weak_models", m)
        set_(
            self,
            "subsample_size",
            check_int(self.subsample_size, "subsample_size", minimum=2),
        )
        set_(self, "cutoff", check_real(self.cutoff, "cutoff", low=0.0, high=0.5))
        if self.weak_learner not in ("logistic", "svm"):
            raise ValueError(
                f"weak_learner must be 'logistic' or 'svm', got {self.weak_learner!r}"
            )
        if not isinstance(self.normalize_models, bool):
            raise TypeError(
                f"normalize_models must be a bool, got {type(self.normalize_models).__name__}"
            )
        if self.dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {DATASETS}, got {self.dataset!r}")
        n_train = check_int(self.n_train, "n_train", minimum=2)
        set_(self, "n_train", n_train)
        if self.subsample_size > n_train:
            raise ValueError(
                f"subsample_size must be <= n_train ({n_train}), got {self.subsample_size}"
            )
        set_(self, "n_eval", check_int(self.n_eval, "n_eval", minimum=m))
        set_(self, "n_test", check_int(self.n_test, "n_test", minimum=1))
        set_(self, "repeats", check_int(self.repeats, "repeats", minimum=1))
        set_(self, "seed", check_int(self.seed, "seed", minimum=0))

    @property
    def is_private(self) -> bool:
        return not math.isinf(self.epsilon)

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    @staticmethod
    def key(name: str) -> str:
        """The kebab-case, grouped configuration key of field ``name``."""
        group = _GROUPS[name]
        kebab = name.replace("_", "-")
        return kebab if group is None else f"{group}.{kebab}"

    @classmethod
    def from_mapping(
        cls, mapping: dict[str, Any], *, base: Settings | None = None
    ) -> Settings:
        """Settings from kebab-case keys (``privacy.epsilon`` or ``epsilon``).

        Unknown keys are refused with a ``ValueError`` naming them, so a typo in a run
        config does not silently fall back to a default.
        """
        names = {f.name for f in fields(cls)}
        changes: dict[str, Any] = {}
        unknown = []
        for key, value in mapping.items():
            leaf = key.rsplit(".", 1)[-1]
            name = leaf.replace("-", "_")
            if (
                "_" in leaf
                or name not in names
                or (key.count(".") and cls.key(name) != key)
            ):
                unknown.append(key)
                continue
            if name == "label_share" and (
                value == "" or value is None or value == "reference"
            ):
                value = None
            elif name == "epsilon" and isinstance(value, str):
                value = float(value)
            changes[name] = value
        if unknown:
            raise ValueError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        return dataclasses.replace(base or cls(), **changes)

    def to_mapping(self) -> dict[str, Any]:
        """Grouped kebab-case keys; ``label_share=None`` is written as 'reference'."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[self.key(f.name)] = "reference" if value is None else value
        return out
