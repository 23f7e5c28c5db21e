"""Driver of the real-data study: UCR/UEA curves and the Pima table, one row a client.

Every repeat shuffles a data set and splits it, by sizes that :class:`SplitRule` fixes
from the data set's size alone, into public calibration rows (they fix the rescaling
bounds), training and evaluation clients and clean test rows; the rule also sizes
MRMA's ensemble by the evaluation group. Univariate curves are projected on a B-spline
basis and rescaled, multivariate curves channel by channel (:class:`ChannelFeaturizer`),
tabular rows only rescaled, irregular curves projected by least squares on their own
points and then rescaled (:func:`irregular_coefficients`). :func:`split_real` is the
split both this study and the K-class one (:mod:`ldpfda.experiments.kclass`) use.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda.config import Settings
from ldpfda.datasets.real import RealDataset, irregular_long_form, load_real
from ldpfda.engine.inprocess import ArrayClients
from ldpfda.experiments.common import evaluate
from ldpfda.fda.features import CurveFeaturizer, Featurizer, VectorFeaturizer
from ldpfda.fda.irregular import IrregularProjection
from ldpfda.fda.scaling import CoefficientScaler
from ldpfda.privacy.random import derive_seed

__all__ = [
    "ChannelFeaturizer",
    "RealRepeat",
    "SplitRule",
    "irregular_coefficients",
    "make_real_featurizer",
    "run_point",
    "split_real",
]


class ChannelFeaturizer:
    """Project every channel of multivariate curves and concatenate the coefficients.

    Channel c of curves of shape (n, C, T) goes through ``featurizers[c]`` (a
    :class:`~ldpfda.fda.CurveFeaturizer`), giving ``C * n_basis`` features in [-1, 1].
    """

    def __init__(self, featurizers: list[CurveFeaturizer]) -> None:
        self.featurizers = list(featurizers)

    @property
    def n_features_out(self) -> int:
        return sum(f.n_features_out for f in self.featurizers)

    def transform(self, X: Any) -> NDArray[np.float64]:
        x = np.asarray(X, dtype=float)
        if x.ndim != 3 or x.shape[1] != len(self.featurizers):
            raise ValueError(
                f"curves must have shape (n, {len(self.featurizers)}, T), got {x.shape}"
            )
        return np.hstack(
            [f.transform(x[:, c, :]) for c, f in enumerate(self.featurizers)]
        )

    @classmethod
    def calibrated(
        cls,
        public_curves: NDArray[np.float64],
        grid: NDArray[np.float64],
        *,
        n_basis: int,
        order: int,
    ) -> ChannelFeaturizer:
        """One calibrated :class:`CurveFeaturizer` per channel of ``public_curves``."""
        return cls(
            [
                CurveFeaturizer.calibrated(
                    public_curves[:, c, :], grid, n_basis=n_basis, order=order
                )
                for c in range(public_curves.shape[1])
            ]
        )


def make_real_featurizer(
    data: RealDataset, public: NDArray[np.float64], settings: Settings
) -> Featurizer:
    """The featurizer of ``data``, calibrated on the public rows ``public``."""
    if data.is_tabular or data.times is not None:
        scaler = CoefficientScaler.from_public(public)
        return VectorFeaturizer(scaler, public.shape[1])
    if public.ndim == 3:
        return ChannelFeaturizer.calibrated(
            public, data.grid, n_basis=settings.n_basis, order=settings.order
        )
    return CurveFeaturizer.calibrated(
        public, data.grid, n_basis=settings.n_basis, order=settings.order
    )


@dataclass(frozen=True)
class SplitRule:
    """How a real data set (or a simulated federation, :meth:`federation`) is split
    and how MRMA is sized, from its size alone."""

    calibration_fraction: float = 0.1
    min_calibration: int = 20
    train_fraction: float = 0.4
    eval_fraction: float = 0.3
    evaluators_per_model: int = 20
    min_models: int = 5
    max_models: int = 50
    max_subsample: int = 50

    @classmethod
    def from_mapping(cls, mapping: dict[str, Any] | None) -> SplitRule:
        return cls(**{k.replace("-", "_"): v for k, v in (mapping or {}).items()})

    def sizes(self, n: int) -> tuple[int, int, int, int]:
        """(calibration, train, eval, test) sizes for a data set of ``n`` rows."""
        n_cal = max(self.min_calibration, int(round(self.calibration_fraction * n)))
        rest = n - n_cal
        n_train = int(round(self.train_fraction * rest))
        n_eval = int(round(self.eval_fraction * rest))
        n_test = rest - n_train - n_eval
        if min(n_train, n_eval, n_test) < 2:
            raise ValueError(f"a data set of {n} rows is too small for this split")
        return n_cal, n_train, n_eval, n_test

    def federation(self, n: int) -> dict[str, int]:
        """Group sizes and MRMA's ensemble of a simulated federation of ``n`` clients,
        as Settings changes: ``round(train_fraction * n)`` (at least 2) train, the
        others evaluate, MRMA sized by :meth:`mrma`."""
        n_train = max(2, int(round(self.train_fraction * n)))
        if n - n_train < 1:
            raise ValueError(f"a federation of {n} clients is too small for this split")
        return {
            "n_train": n_train,
            "n_eval": n - n_train,
            **self.mrma(n_train, n - n_train),
        }

    def mrma(self, n_train: int, n_eval: int) -> dict[str, int]:
        """MRMA's ensemble for these group sizes, as Settings changes.

        ``clip(n_eval // evaluators_per_model, min_models, max_models)`` weak models (at
        most ``n_eval``), each on ``min(max_subsample, n_train // 2)`` payloads.
        """
        m = min(
            max(n_eval // self.evaluators_per_model, self.min_models), self.max_models
        )
        return {
            "num_weak_models": min(m, n_eval),
            "subsample_size": max(2, min(self.max_subsample, n_train // 2)),
        }


@functools.lru_cache(maxsize=8)
def _load(name: str) -> RealDataset:
    return load_real(name)


def irregular_coefficients(
    data: RealDataset, n_basis: int, order: int
) -> NDArray[np.float64]:
    """B-spline coefficients (n, ``n_basis``) of irregular curves, each fitted by least
    squares on its own points (:class:`~ldpfda.fda.irregular.IrregularProjection`)."""
    projection = IrregularProjection.equispaced((0.0, 1.0), n_basis, order)
    fit = projection.fit_curves(*irregular_long_form(data))
    if not (
        fit.usable.all() and np.array_equal(fit.curve_ids, np.arange(data.n_samples))
    ):
        bad = np.flatnonzero(~fit.usable)
        raise ValueError(f"{data.name}: curves {bad.tolist()} do not determine "
                         f"{n_basis} coefficients of order {order}")  # fmt: skip
    return fit.coefficients


@dataclass(frozen=True)
class RealRepeat:
    """One repeat's split of a real data set: ``settings`` sized by the split rule,
    the training and evaluation clients, the clean scaled test set, the public
    calibration rows scaled, the client and server seeds, the split sizes and the
    number of classes."""

    settings: Settings
    train: ArrayClients
    evaluation: ArrayClients
    test: tuple[NDArray[np.float64], NDArray[np.int8]]
    public: NDArray[np.float64]
    seed: int
    server_seed: int
    sizes: dict[str, int]
    n_classes: int


def split_real(
    settings: Settings, repeat: int, *, dataset: str, rule: SplitRule | None = None
) -> RealRepeat:
    """Shuffle ``dataset`` for repeat ``repeat`` and split it by ``rule``; irregular
    curves become their least-squares coefficients (:func:`irregular_coefficients`)
    before the calibration rows fix the bounds."""
    rule = rule or SplitRule()
    data = _load(dataset)
    n_cal, n_train, n_eval, n_test = rule.sizes(data.n_samples)
    rng = np.random.default_rng(derive_seed(settings.seed, "data", dataset, repeat))
    order = rng.permutation(data.n_samples)
    cal, tr, ev, te = np.split(order, np.cumsum([n_cal, n_train, n_eval]))
    settings = settings.replace(
        n_train=n_train, n_eval=n_eval, n_test=n_test, **rule.mrma(n_train, n_eval)
    )
    x, y = data.curves, data.labels
    if data.times is not None:
        x = irregular_coefficients(data, settings.n_basis, settings.order)
    featurizer = make_real_featurizer(data, x[cal], settings)
    return RealRepeat(
        settings,
        ArrayClients(np.arange(n_train), x[tr], y[tr], featurizer),
        ArrayClients(n_train + np.arange(n_eval), x[ev], y[ev], featurizer),
        (featurizer.transform(x[te]), y[te]),
        featurizer.transform(x[cal]),
        derive_seed(settings.seed, "clients", dataset, repeat),
        derive_seed(settings.seed, "server", dataset, repeat),
        {
            "n_calibration": n_cal,
            "n_train": n_train,
            "n_eval": n_eval,
            "n_test": n_test,
            "subsample_size": settings.subsample_size,
        },
        data.n_classes,
    )


def run_point(
    settings: Settings,
    repeat: int,
    baselines: dict[str, dict[str, Any]] | None = None,
    *,
    dataset: str,
    rule: SplitRule | None = None,
) -> tuple[dict[str, float], dict[str, Any]]:
    """Errors of every method in repeat ``repeat`` on the real data set ``dataset``.

    ``settings`` supplies epsilon, the basis (``n_basis``, ``order``), the cut-off and
    the weak learner; the split sizes and MRMA's ``num_weak_models`` and
    ``subsample_size`` follow ``rule``.
    """
    split = split_real(settings, repeat, dataset=dataset, rule=rule)
    errors, extra = evaluate(
        split.train,
        split.evaluation,
        split.test,
        split.settings,
        seed=split.seed,
        server_rng=np.random.default_rng(split.server_seed),
        baselines=baselines,
        public=split.public,
    )
    extra.update(split.sizes)
    return errors, extra
