r"""One validated settings object for the in-process CLI and the Flower apps.

Keys are kebab-case and grouped by topic, as in ``[tool.flwr.app.config]``
(``privacy.epsilon = 5.0``, ``fda.n-basis = 10``, ``seed = 0``); the group prefix may be
left out (``epsilon``, ``n-basis``, ...). The default protocol is the joint release:
every client releases :math:`\tilde y\,(1, x)`, :math:`\tilde y = 2y - 1`, once with
the hybrid mechanism at its whole epsilon, and the server fits the moment classifier.
The reference MRMA protocol is ``privacy.mechanism = "reference"``
(:meth:`Settings.reference`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any

from ldpfda._validation import check_epsilon, check_int, check_real

__all__ = [
    "DATASETS",
    "DESIGNS",
    "FLOWER_PREFIX",
    "LABEL_CORRECTIONS",
    "LABEL_MECHANISMS",
    "MAX_CALIBRATION",
    "MAX_CLIENTS",
    "MAX_SEED",
    "MAX_TEST",
    "MECHANISMS",
    "SERVER_METHODS",
    "SettingError",
    "SettingTypeError",
    "Settings",
    "WEAK_LEARNERS",
    "run_settings",
    "setting",
    "settings_markdown",
    "settings_table",
]

#: The embedded simulation designs (:mod:`ldpfda.datasets.synthetic`); a multi-server
#: session shifts them per server.
DESIGNS = ("vector", "functional")
#: Every dataset of the in-process engine: the designs and ``wearable``, daily heart
#: rate of :func:`~ldpfda.datasets.wearable.make_wearable` featurized by the spec the
#: package ships (:mod:`ldpfda.datasets.wearable_spec`).
DATASETS = (*DESIGNS, "wearable")

#: The most clients of one group (``n_train``, ``n_eval``) the in-process engine
#: simulates: it keeps a ledger row and a release of every client in memory, about
#: 400 MB per 10^6 clients (``ldpfda benchmark``), so 10^7 is about 4 GB.
MAX_CLIENTS = 10_000_000
#: The most clean test points: the scaled test set is held in memory at once.
MAX_TEST = 10_000_000
#: The most public calibration curves (drawn and projected at once).
MAX_CALIBRATION = 1_000_000
#: Run seeds are 64-bit: :func:`~ldpfda.privacy.random.derive_seed` keys every stream
#: with the seed's low 64 bits, so a larger seed would alias a smaller one.
MAX_SEED = 2**64 - 1
#: Grid points of the functional design (``FunctionalDesign().n_points``; tested).
FUNCTIONAL_GRID_POINTS = 100
#: Samples in a day of the sparsest device of the wearable generator (one every 10
#: minutes): more basis functions than that would be fit from the penalty alone.
WEARABLE_MAX_BASIS = 144
#: Conditions of the wearable generator (``len(datasets.wearable.CONDITIONS)``; tested).
WEARABLE_MAX_CLASSES = 5
_LIMITS = {
    "n_classes": "the wearable generator's conditions",
    "n_train": "the most clients of a group the in-process engine simulates, "
    "about 4 GB",
    "n_eval": "the most clients of a group the in-process engine simulates, about 4 GB",
    "n_test": "the most clean test points held in memory",
    "calibration_size": "the most public calibration curves drawn at once",
    "seed": "run seeds are 64-bit",
}
#: Label-only modes (features public, the server fits one corrected logistic
#: regression, :mod:`ldpfda.server.labels`): ``label-uniform``, K-ary randomized
#: response; ``label-cluster``, pilots' K-RR labels give every cluster a prior that the
#: others randomize with; ``label-p2p``, the peer-to-peer mechanism for binary labels.
LABEL_MECHANISMS = ("label-uniform", "label-cluster", "label-p2p")
#: What clients release: ``joint-<vector mechanism>`` (one release of
#: :math:`\tilde y (1, x)` at the whole epsilon, see
#: :class:`~ldpfda.privacy.joint.SignedFeatureMechanism`), ``reference`` (Laplace on
#: the coefficients and randomized response on the label, epsilon split between them)
#: or a label-only mode.
MECHANISMS = (
    *(f"joint-{m}" for m in ("hybrid", "piecewise", "duchi", "laplace")),
    "reference",
    *LABEL_MECHANISMS,
)
LABEL_CORRECTIONS = ("forward", "backward")
SERVER_METHODS = ("auto", "moment", "mrma")
#: The moment classifier's intercept and slope scale (``MomentLinearClassifier``).
THRESHOLDS = ("posterior", "refit")
#: What the moment classifier does where it detects no signal in the features.
NO_SIGNAL_FITS = ("fallback", "average")
#: The K-class moment classifier's decision rule (``MomentMulticlassClassifier``).
MULTICLASS_RULES = ("least-squares", "lda")
#: The K-class joint release (``ldpfda.schema.releases.joint_mechanism``).
MULTICLASS_RELEASES = ("auto", "draw", "split")
WEAK_LEARNERS = ("auto", "logistic", "svm", "moment", "natarajan")


class SettingError(ValueError):
    """A setting is invalid; ``name`` is the field at fault (its CLI flag is
    ``--`` + ``name`` in kebab case, its key :meth:`Settings.key`)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


class SettingTypeError(SettingError, TypeError):
    """A setting holds a value of the wrong type."""


@contextmanager
def _about(name: str) -> Iterator[None]:
    """Turn a validator's ``ValueError``/``TypeError`` into one naming ``name``."""
    try:
        yield
    except SettingError:
        raise
    except TypeError as exc:
        raise SettingTypeError(name, str(exc)) from None
    except ValueError as exc:
        raise SettingError(name, str(exc)) from None


def setting(
    default: Any, group: str | None, help: str, *, choices: tuple[str, ...] = ()
) -> Any:
    """A field of :class:`Settings` with its group (the key's prefix), help and choices.

    The one declaration of a setting: its run-config key, CLI flag, docs table row
    (:func:`settings_markdown`) and default all come from it.
    """
    return field(
        default=default, metadata={"group": group, "help": help, "choices": choices}
    )


@dataclass(frozen=True)
class Settings:
    """Settings of a run, validated on construction.

    Each field's meaning is its help (``docs/settings.md``). ``method="moment"``: every
    client releases once and the server fits one moment classifier; ``"mrma"``:
    training clients release, the server fits weak models, every evaluation client
    answers one feedback bit, then reversal, selection and averaging. A server of a
    multi-server session (``server_id >= 0``, :mod:`ldpfda.server.multiserver`) draws
    its population from its own (shifted) data stream.
    """

    epsilon: float = setting(
        5.0,
        "privacy",
        "each client's total budget, spent once ('inf': non-private, simulation only)",
    )
    mechanism: str = setting(
        "joint-hybrid",
        "privacy",
        "what clients release: joint-<vector mechanism> (one release of y~(1, x)), "
        "'reference' (Laplace + randomized response, as MRMA) or a label-only mode",
        choices=MECHANISMS,
    )
    method: str = setting(
        "auto",
        "server",
        "server method: the moment classifier on every release, or MRMA ('auto': "
        "moment for joint releases, MRMA for the reference release)",
        choices=SERVER_METHODS,
    )
    threshold: str = setting(
        "posterior",
        "server",
        "the moment classifier's intercept and slopes' scale: 'posterior' (the "
        "empirical-Bayes posterior mean) or 'refit' (least squares along the "
        "posterior's slope direction; experiments/README.md, issue 18)",
        choices=THRESHOLDS,
    )
    no_signal_fit: str = setting(
        "average",
        "server",
        "the moment classifier where the marginal likelihood puts the slopes' prior "
        "variance at its floor (no signal detected): 'average' (the posterior mean "
        "averaged over the prior variances; experiments/README.md) or 'fallback' (the "
        "majority class of the released labels, or the limit direction G S^-1 c)",
        choices=NO_SIGNAL_FITS,
    )
    multiclass_rule: str = setting(
        "least-squares",
        "server",
        "the K-class (K > 2) moment classifier's rule: 'least-squares' (regression of "
        "the indicator matrix) or 'lda' (linear discriminant analysis from the same "
        "moments: no masking of classes that lie between others; docs/estimators.md)",
        choices=MULTICLASS_RULES,
    )
    multiclass_release: str = setting(
        "auto",
        "privacy",
        "the K-class (K > 2) joint release: 'draw' (a class drawn at random and "
        "y~_j (1, x) at the whole epsilon), 'split' (the label by K-ary randomized "
        "response and x by the vector mechanism, the epsilon split to minimise the "
        "variance: every client informs every class) or 'auto' (the one of the two "
        "with the smaller stated variance: split from epsilon 3.25 to 4.5 on, by K "
        "and p; docs/estimators.md)",
        choices=MULTICLASS_RELEASES,
    )
    label_share: float | None = setting(
        None,
        "privacy",
        "share of a training client's epsilon on its label, reference release only "
        "('reference': 1/(p+1))",
    )
    n_basis: int = setting(
        10, "fda", "B-spline basis size p (functional and wearable data)"
    )
    order: int = setting(4, "fda", "B-spline order (4 = cubic)")
    calibration_size: int = setting(
        1000,
        "fda",
        "public calibration curves (vectors): the moment classifier's public features, "
        "and the functional design's rescaling bounds",
    )
    num_weak_models: int = setting(50, "mrma", "M, MRMA's weak classifiers")
    subsample_size: int = setting(
        50, "mrma", "payloads each weak classifier is trained on"
    )
    cutoff: float = setting(0.2, "mrma", "c of the selection rule |1/2 - e| > 1/2 - c")
    weak_learner: str = setting(
        "auto",
        "mrma",
        "MRMA's weak learner ('auto': moment for joint releases, logistic for the "
        "reference release)",
        choices=WEAK_LEARNERS,
    )
    normalize_models: bool = setting(
        True, "mrma", "scale every weak model to unit norm before averaging"
    )
    n_clusters: int = setting(
        10,
        "labeldp",
        "label-cluster / label-p2p: k-means clusters of the public features",
    )
    pilot_share: float = setting(
        0.2,
        "labeldp",
        "label-cluster: share of each cluster releasing K-RR labels for its prior",
    )
    min_cluster_size: int = setting(
        10, "labeldp", "label-p2p: smallest cluster s (delta = 1/s^2)"
    )
    correction: str = setting(
        "forward",
        "labeldp",
        "label-only modes: the corrected loss",
        choices=LABEL_CORRECTIONS,
    )
    dataset: str = setting(
        "vector",
        "data",
        "embedded dataset: a simulation design, or 'wearable' (daily heart rate "
        "featurized by the shipped wearable spec, fda.n-basis and fda.order its basis)",
        choices=DATASETS,
    )
    n_classes: int = setting(
        2,
        "data",
        "classes K of the embedded dataset: 2, or with dataset 'wearable' its first "
        "3 to 5 conditions (K > 2: the moment protocol of a joint release, MRMA on "
        "the reference release or a label-only mode)",
    )
    public_features: bool = setting(
        True,
        "data",
        "the moment classifier's feature second moment from public, unlabeled "
        "features (false: from the releases)",
    )
    n_train: int = setting(
        500, "data", "training clients (every client releases in a moment run)"
    )
    n_eval: int = setting(2500, "data", "evaluation clients")
    n_test: int = setting(100_000, "data", "clean test points of the design")
    repeats: int = setting(20, "data", "repeats of a simulation")
    server_id: int = setting(
        -1, "data", "this server's index in a multi-server session (-1: single server)"
    )
    feature_shift: float = setting(
        0.0, "data", "feature shift of this server's population (multi-server sessions)"
    )
    label_shift: float = setting(
        0.0, "data", "label shift of this server's population (multi-server sessions)"
    )
    seed: int = setting(0, None, "run seed of every derived stream")

    def __post_init__(self) -> None:
        set_ = object.__setattr__

        def integer(name: str, minimum: int, maximum: int | None = None) -> int:
            with _about(name):
                value = check_int(getattr(self, name), name, minimum=minimum)
                if maximum is not None and value > maximum:
                    raise ValueError(
                        f"{name} must be <= {maximum} ({_LIMITS[name]}), got {value}"
                    )
                set_(self, name, value)
            return int(getattr(self, name))

        def real(name: str, **bounds: Any) -> None:
            with _about(name):
                set_(self, name, check_real(getattr(self, name), name, **bounds))

        def choice(name: str) -> None:
            choices = _FIELDS[name].metadata["choices"]
            if getattr(self, name) not in choices:
                raise SettingError(
                    name,
                    f"{name} must be one of {choices}, got {getattr(self, name)!r}",
                )

        with _about("epsilon"):
            set_(self, "epsilon", check_epsilon(self.epsilon))
        if self.label_share is not None:
            real("label_share", low=0.0, high=1.0, low_open=True, high_open=True)
        order = integer("order", 1)
        if integer("n_basis", 1) < order:
            raise SettingError(
                "n_basis", f"n_basis must be >= order ({order}), got {self.n_basis}"
            )
        integer("calibration_size", 2, MAX_CALIBRATION)
        integer("num_weak_models", 1)
        integer("subsample_size", 2)
        real("cutoff", low=0.0, high=0.5)
        # Every field declared with choices (server.threshold was missed when each
        # was named here by hand).
        for name, declared in _FIELDS.items():
            if declared.metadata["choices"]:
                choice(name)
        if self.joint_release and self.protocol == "mrma" and self.learner != "moment":
            raise SettingError(
                "weak_learner",
                f"weak_learner {self.weak_learner!r} needs released labels; with "
                f"mechanism {self.mechanism!r} use weak_learner 'moment' (or 'auto')",
            )
        if self.mechanism != "reference" and self.label_share is not None:
            raise SettingError(
                "label_share",
                f"label_share applies to the reference release only, got "
                f"label_share={self.label_share!r} with mechanism {self.mechanism!r}",
            )
        for name in ("normalize_models", "public_features"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise SettingTypeError(
                    name, f"{name} must be a bool, got {type(value).__name__}"
                )
        self._check_dataset()
        integer("n_classes", 2, WEARABLE_MAX_CLASSES)
        self._check_classes()
        integer("n_train", 2, MAX_CLIENTS)
        integer("n_eval", 1, MAX_CLIENTS)
        if self.protocol == "mrma":
            self._check_mrma()
        # The labeldp.* keys; population bounds only for a label-only mode.
        integer("n_clusters", 1)
        real("pilot_share", low=0.0, high=1.0, low_open=True, high_open=True)
        integer("min_cluster_size", 1)
        if self.label_release:
            self._check_label_only()
        integer("n_test", 1, MAX_TEST)
        integer("repeats", 1)
        integer("server_id", -1)
        for name in ("feature_shift", "label_shift"):
            real(name)
            if getattr(self, name) != 0.0 and self.server_id < 0:
                raise SettingError(
                    name,
                    f"{name} describes a server's population in a multi-server "
                    f"session and needs server_id >= 0, got {name}="
                    f"{getattr(self, name)!r} with server_id={self.server_id}",
                )
        for name in ("feature_shift", "label_shift"):
            if self.dataset == "wearable" and getattr(self, name) != 0.0:
                raise SettingError(
                    name,
                    "dataset 'wearable' has no shifted populations: its servers of a "
                    f"multi-server session draw their own subjects; use one of "
                    f"{DESIGNS} for {name}, got {getattr(self, name)!r}",
                )
        integer("seed", 0, MAX_SEED)

    def _check_dataset(self) -> None:
        """The basis a curve dataset can carry (the vector design has none)."""
        if self.dataset == "functional" and self.n_basis > FUNCTIONAL_GRID_POINTS:
            raise SettingError(
                "n_basis",
                f"n_basis must be <= {FUNCTIONAL_GRID_POINTS} (the functional "
                f"design's grid points) with dataset 'functional', got {self.n_basis}",
            )
        if self.dataset == "wearable":
            if self.n_basis > WEARABLE_MAX_BASIS:
                raise SettingError(
                    "n_basis",
                    f"n_basis must be <= {WEARABLE_MAX_BASIS} (a day's samples of "
                    f"the sparsest wearable device, one every 10 minutes) with "
                    f"dataset 'wearable', got {self.n_basis}",
                )
            if self.order < 3:
                raise SettingError(
                    "order",
                    "order must be >= 3 with dataset 'wearable': its spec bridges "
                    "device-off gaps with a roughness penalty, which needs a "
                    f"second derivative; got {self.order}",
                )

    def _check_classes(self) -> None:
        """K > 2 classes: the wearable dataset's conditions, the K-class default."""
        if self.n_classes == 2:
            return
        if self.dataset != "wearable":
            raise SettingError(
                "n_classes",
                f"n_classes > 2 needs dataset 'wearable' (the designs are binary), "
                f"got n_classes={self.n_classes} with dataset {self.dataset!r}",
            )
        self.check_n_classes(self.n_classes)

    def check_n_classes(self, n_classes: int) -> None:
        """Refuse K > 2 classes (the data's or a spec's) in a run of these settings
        without a K-class method: the moment protocol of a joint release, MRMA on the
        reference release with a logistic or svm weak learner, or a label-only mode;
        each runs alike in process and on Flower."""
        if n_classes == 2:
            return
        joint = self.joint_release and self.protocol == "moment"
        reference = self.mechanism == "reference" and self.protocol == "mrma"
        if not (joint or reference or self.label_release):
            raise SettingError(
                "n_classes",
                f"n_classes = {n_classes}: K > 2 classes need the moment protocol "
                f"of a joint release (privacy.mechanism joint-*, server.method auto "
                f"or moment), MRMA on the reference release or a label-only mode, "
                f"got mechanism {self.mechanism!r} with protocol {self.protocol!r}",
            )
        if reference and self.learner not in ("logistic", "svm"):
            raise SettingError(
                "n_classes",
                f"n_classes = {n_classes}: K-class MRMA takes the weak learner "
                f"'logistic' or 'svm', got {self.learner!r}",
            )

    def _check_mrma(self) -> None:
        """Sizes only MRMA uses: its subsamples and its evaluation subgroups."""
        if self.subsample_size > self.n_train:
            raise SettingError(
                "subsample_size",
                f"subsample_size must be <= n_train ({self.n_train}), "
                f"got {self.subsample_size}",
            )
        if self.num_weak_models > self.n_eval:
            raise SettingError(
                "num_weak_models",
                f"num_weak_models must be <= n_eval ({self.n_eval}): MRMA evaluates "
                "each weak model on its own subgroup of evaluation clients, got "
                f"{self.num_weak_models}",
            )

    def _check_label_only(self) -> None:
        if self.method != "auto":
            raise SettingError(
                "method",
                f"mechanism {self.mechanism!r} trains one corrected model; method must "
                f"be 'auto', got {self.method!r}",
            )
        if math.isinf(self.epsilon):
            raise SettingError(
                "epsilon",
                f"mechanism {self.mechanism!r} needs a finite epsilon, got inf",
            )
        total = self.n_train + self.n_eval
        for name in ("n_clusters", "min_cluster_size"):
            if getattr(self, name) > total:
                raise SettingError(
                    name,
                    f"{name} must be <= the number of clients n_train + n_eval "
                    f"({total}), got {getattr(self, name)}",
                )

    @property
    def is_private(self) -> bool:
        return not math.isinf(self.epsilon)

    @property
    def joint_release(self) -> bool:
        r"""True for a joint release of :math:`\tilde y\,(1, x)` (``joint-*``)."""
        return self.mechanism.startswith("joint-")

    @property
    def label_release(self) -> bool:
        """True for a label-only mode (:data:`LABEL_MECHANISMS`, public features)."""
        return self.mechanism in LABEL_MECHANISMS

    @property
    def vector_mechanism(self) -> str:
        """The vector mechanism of a joint release (``"hybrid"``, ...)."""
        if not self.joint_release:
            raise ValueError(f"mechanism {self.mechanism!r} has no vector mechanism")
        return self.mechanism.removeprefix("joint-")

    @property
    def protocol(self) -> str:
        """:attr:`method` with ``"auto"`` resolved: ``"moment"``, ``"mrma"`` or
        ``"label"`` (every label-only mode)."""
        if self.label_release:
            return "label"
        if self.method != "auto":
            return self.method
        return "moment" if self.joint_release else "mrma"

    @property
    def learner(self) -> str:
        """:attr:`weak_learner` with ``"auto"`` resolved."""
        if self.weak_learner != "auto":
            return self.weak_learner
        return "moment" if self.joint_release else "logistic"

    @classmethod
    def reference(cls, **changes: Any) -> Settings:
        """The reference MRMA protocol (``mechanism="reference"``) with ``changes``."""
        return cls(**{"mechanism": "reference", **changes})

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    @staticmethod
    def key(name: str) -> str:
        """The kebab-case, grouped configuration key of field ``name``."""
        group = _FIELDS[name].metadata["group"]
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
        changes: dict[str, Any] = {}
        unknown = []
        for key, value in mapping.items():
            leaf = key.rsplit(".", 1)[-1]
            name = leaf.replace("-", "_")
            if (
                "_" in leaf
                or name not in _FIELDS
                or (key.count(".") and cls.key(name) != key)
            ):
                unknown.append(key)
                continue
            if name == "label_share" and value in ("", None, "reference"):
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


_FIELDS = {f.name: f for f in fields(Settings)}


def settings_table() -> list[dict[str, Any]]:
    """Every setting: its key, type, default, choices and help, in declaration order."""
    defaults = Settings().to_mapping()
    return [
        {
            "name": f.name,
            "key": Settings.key(f.name),
            "type": str(f.type).replace(" | None", ""),
            "default": defaults[Settings.key(f.name)],
            "choices": f.metadata["choices"],
            "help": f.metadata["help"],
        }
        for f in fields(Settings)
    ]


def settings_markdown() -> str:
    """The settings as a Markdown table (``docs/settings.md`` is this, verbatim)."""
    lines = [
        "# Settings",
        "",
        "Every run setting, as `[tool.flwr.app.config]` and `--run-config` take it",
        "(the group prefix may be left out in process). Generated from",
        "`ldpfda.config.Settings` by `python -m ldpfda.config`; a test keeps it "
        "current.",
        "",
        "| key | type | default | meaning |",
        "|---|---|---|---|",
    ]
    for row in settings_table():
        meaning = row["help"]
        if row["choices"]:
            meaning += "; one of " + ", ".join(f"`{c}`" for c in row["choices"])
        default = (
            str(row["default"]).lower()
            if isinstance(row["default"], bool)
            else row["default"]
        )
        lines.append(f"| `{row['key']}` | {row['type']} | `{default}` | {meaning} |")
    return "\n".join(lines) + "\n"


#: Run-config keys that start with this prefix belong to the Flower apps, not Settings.
FLOWER_PREFIX = "flower."


def run_settings(run_config: Mapping[str, Any]) -> tuple[Settings, dict[str, Any]]:
    """Split a Flower run config into validated :class:`Settings` and Flower-only keys.

    Keys starting with ``flower.`` are returned (prefix removed) for the apps; every
    other key is parsed by :meth:`Settings.from_mapping`, the parser of the in-process
    CLI, so an unknown or invalid setting fails the same way in both.
    """
    flower = {
        k.removeprefix(FLOWER_PREFIX): v
        for k, v in run_config.items()
        if k.startswith(FLOWER_PREFIX)
    }
    settings = Settings.from_mapping(
        {k: v for k, v in run_config.items() if not k.startswith(FLOWER_PREFIX)}
    )
    return settings, flower


if __name__ == "__main__":  # pragma: no cover - regenerates docs/settings.md
    print(settings_markdown(), end="")
