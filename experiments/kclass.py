"""Issue 17: the K-class default protocol against one-vs-rest at the same total epsilon.

A 3-class toy (:func:`three_class_toy`): every client holds a feature vector in
[-1, 1]^p and one of K labels, and spends ``epsilon`` in total. Columns:

- ``k-class``: the default protocol for K classes, one release per client at its whole
  epsilon (a drawn class j and y~_j (1, x), the K-class moment classifier);
- ``one-vs-rest``: K runs of the binary default protocol, run k on the labels
  1{y = k} at epsilon / K, each client releasing once per run (K releases, epsilon in
  total), the class of the largest of the K scores;
- ``non-private``: multinomial logistic regression on the clean training data;
- ``majority``: the most frequent training class.

Both private columns take the feature second moment from the same public, unlabeled
sample. Test errors on a clean test set, mean and standard error over the repeats.

``--mrma`` prints the ablation of K-class MRMA's rule instead (:func:`mrma_ablation`,
columns :data:`MRMA_METHODS`): the reference release (K-ary randomized response on the
label), ``--eval`` evaluation clients besides the training ones, each spending
``epsilon``. ``mrma`` is the rule of the method for K > 2 (no reversal, weights by
estimated accuracy above 1/K, cut-off c = 0.2); ``negation`` carries the binary rule
over literally (a model below chance is negated and weighted by its distance from
chance); ``above-chance`` drops the cut-off (c = 1/2: every model above chance,
weighted); ``averaging``, ``voting`` and ``naive`` are the baselines.

``--moments`` prints where the two releases part instead (:func:`class_moment_errors`):
the squared error of the K class moments c_k = E[y~_k (1, x)] estimated from the
K-class release against that from K binary releases at epsilon / K, on the same
clients, for the toy and for the wearable default's features with K conditions (every
client of its study federation). No model is fitted: it separates the release from
the fit.
Run ``python -m ldpfda.experiments.kclass --help``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from ldpfda.client.protocol import privatize_joint
from ldpfda.config import MULTICLASS_RULES, Settings
from ldpfda.engine import run_protocol
from ldpfda.engine.inprocess import ArrayClients
from ldpfda.engine.runner import run_keyed
from ldpfda.experiments.common import mean_se
from ldpfda.fda.features import VectorFeaturizer
from ldpfda.fda.scaling import CoefficientScaler
from ldpfda.privacy.random import derive_seed
from ldpfda.server.fitting import ProtocolResult, model_error
from ldpfda.server.learners import MomentMulticlassClassifier, class_moments
from ldpfda.server.mrma import (
    average_models,
    fit_linear,
    mrma_weights,
    reverse_models,
)

__all__ = [
    "METHODS",
    "class_moment_errors",
    "MRMA_METHODS",
    "ToyData",
    "compare",
    "main",
    "mrma_ablation",
    "one_vs_rest",
    "release_and_fit",
    "three_class_toy",
]

METHODS = ("k-class", "one-vs-rest", "non-private", "majority")
MRMA_METHODS = (
    "mrma",
    "negation",
    "above-chance",
    "averaging",
    "voting",
    "naive",
    "non_private",
    "majority",
)

ToyData = tuple[NDArray[np.float64], NDArray[np.int8]]


def three_class_toy(
    n: int, seed: int, *, n_features: int = 10, spread: float = 0.45
) -> ToyData:
    """``n`` clients of a 3-class toy: Gaussian classes in [-1, 1]^p, clipped.

    Class probabilities (0.4, 0.35, 0.25); class k has mean ``0.3 m_k`` with fixed
    sign patterns m_k in {-1, 1}^p (half of the coordinates shared by two classes) and
    standard deviation ``spread`` in every coordinate.
    """
    rng = np.random.default_rng(seed)
    base = np.resize([1.0, -1.0], n_features)
    means = 0.3 * np.stack([base, np.roll(base, 1), -np.roll(base, n_features // 2)])
    means[2, : n_features // 2] = base[: n_features // 2] * 0.3
    y = rng.choice(3, size=n, p=[0.4, 0.35, 0.25]).astype(np.int8)
    x = means[y] + spread * rng.standard_normal((n, n_features))
    return np.clip(x, -1.0, 1.0), y


def release_and_fit(
    train: ArrayClients,
    evaluation: ArrayClients,
    settings: Settings,
    n_classes: int,
    seed: int,
    public: NDArray[np.float64] | None,
) -> ProtocolResult:
    """One run of ``settings`` with K = ``n_classes`` labels, client noise and server
    randomness keyed by ``seed``; in a moment run every client releases."""
    return run_keyed(
        train,
        evaluation,
        settings,
        seed,
        keep_payload=False,
        public=public,
        n_classes=n_classes,
    )


def one_vs_rest(
    train: ArrayClients,
    evaluation: ArrayClients,
    settings: Settings,
    n_classes: int,
    x_test: NDArray[np.float64],
    *,
    seed: int,
    public: NDArray[np.float64] | None,
) -> tuple[NDArray[np.float64], float]:
    """Scores (n_test, K) of one-vs-rest: K binary runs of ``settings`` at
    ``settings.epsilon / K``, run k on the labels 1{y = k} (every client releasing
    once per run); and the most any client spent over the K runs. Predict the class
    of the largest score."""
    per_run = settings.replace(epsilon=settings.epsilon / n_classes)
    scores = np.zeros((len(x_test), n_classes))
    spent = 0.0
    for c in range(n_classes):
        binary = release_and_fit(
            _one_label(train, c),
            _one_label(evaluation, c),
            per_run,
            2,
            derive_seed(seed, c),
            public,
        )
        scores[:, c] = binary.final.decision_function(x_test)[:, 0]
        spent += binary.privacy["max_spent"]
    return scores, spent


def _one_label(clients: ArrayClients, c: int) -> ArrayClients:
    return dataclasses.replace(clients, labels=(clients.labels == c).astype(np.int8))


def compare(
    epsilon: float,
    repeat: int,
    *,
    n_clients: int = 3000,
    n_public: int = 1000,
    n_test: int = 20_000,
    seed: int = 0,
) -> dict[str, float]:
    """Test errors of every column of :data:`METHODS` on one repeat at total
    ``epsilon``, and the largest epsilon any client spent in each private column."""
    x, y = three_class_toy(n_clients, derive_seed(seed, "train", repeat))
    public, _ = three_class_toy(n_public, derive_seed(seed, "public", repeat))
    x_test, y_test = three_class_toy(n_test, derive_seed(seed, "test", repeat))
    k = 3
    run_seed = derive_seed(seed, "run", repeat)
    ids = np.arange(y.size, dtype=np.int64)
    featurizer = VectorFeaturizer(CoefficientScaler(-1.0, 1.0), x.shape[1])
    clients = ArrayClients(ids, x, y, featurizer)
    nobody = ArrayClients(ids[:0], x[:0], y[:0], featurizer)
    settings = Settings(
        epsilon=epsilon, n_train=y.size, n_eval=1, n_test=1, repeats=1, seed=run_seed
    )
    joint = release_and_fit(clients, nobody, settings, k, run_seed, public)
    scores, spent = one_vs_rest(
        clients, nobody, settings, k, x_test, seed=run_seed, public=public
    )
    majority = np.bincount(y, minlength=k).argmax()
    return {
        "k-class": model_error(joint.final, x_test, y_test),
        "one-vs-rest": float(np.mean(scores.argmax(axis=1) != y_test)),
        "non-private": model_error(fit_linear(x, y), x_test, y_test),
        "majority": float(np.mean(y_test != majority)),
        "k-class spent": float(joint.privacy["max_spent"]),
        "one-vs-rest spent": spent,
    }


def mrma_ablation(
    epsilon: float,
    repeat: int,
    *,
    n_clients: int = 3000,
    n_eval: int = 500,
    n_test: int = 20_000,
    seed: int = 0,
) -> dict[str, float]:
    """Test errors of every column of :data:`MRMA_METHODS` on one repeat of K-class
    MRMA (``n_clients`` training and ``n_eval`` evaluation clients), and the largest
    and smallest epsilon any client spent."""
    k = 3
    x, y = three_class_toy(n_clients + n_eval, derive_seed(seed, "train", repeat))
    x_test, y_test = three_class_toy(n_test, derive_seed(seed, "test", repeat))
    ids = np.arange(y.size, dtype=np.int64)
    featurizer = VectorFeaturizer(CoefficientScaler(-1.0, 1.0), x.shape[1])
    settings = Settings.reference(
        epsilon=epsilon, n_train=n_clients, n_eval=n_eval, n_test=1, repeats=1
    )
    train, held = slice(0, n_clients), slice(n_clients, None)
    run_seed = derive_seed(seed, "run", repeat)
    result = run_protocol(
        ArrayClients(ids[train], x[train], y[train], featurizer),
        ArrayClients(ids[held], x[held], y[held], featurizer),
        settings,
        seed=derive_seed(run_seed, "clients"),
        server_rng=np.random.default_rng(derive_seed(run_seed, "server")),
        test=(x_test, y_test),
        clean_train=(x[train], y[train]),
        keep_payload=False,
        n_classes=k,
    )
    e, cutoff = result.estimated_errors, settings.cutoff
    negated, _ = reverse_models(result.weak, e, n_classes=k)
    variants = {
        "negation": (negated, mrma_weights(e, cutoff=cutoff, n_classes=k)[0]),
        "above-chance": (
            result.weak,
            mrma_weights(e, cutoff=0.5, reversal=False, n_classes=k)[0],
        ),
    }
    out = {m: result.test_errors[m] for m in MRMA_METHODS if m in result.test_errors}
    for name, (models, weights) in variants.items():
        final = average_models(models, weights, n_classes=k)
        out[name] = model_error(final, x_test, y_test)
    majority = np.bincount(y[train], minlength=k).argmax()
    out["majority"] = float(np.mean(y_test != majority))
    out["max spent"] = float(result.privacy["max_spent"])
    out["min spent"] = float(result.privacy["min_spent"])
    return out


def class_moment_errors(
    x: NDArray[np.float64],
    y: NDArray[np.int8],
    epsilon: float,
    n_classes: int,
    seed: int,
) -> tuple[float, float]:
    """Squared errors (summed over the K (p + 1) entries) of the class moments
    :math:`c_k = E[\tilde y_k (1, x)]` of the clients ``(x, y)``: from one K-class
    release per client at ``epsilon`` (the mean of the releases of the clients that
    drew k), and from K binary releases per client at ``epsilon / K`` (run k on the
    labels 1{y = k}). Client noise keyed by ``seed``."""
    k, n = n_classes, y.size
    ids = np.arange(n)
    w = np.hstack([np.ones((n, 1)), x])
    truth = w.T @ np.where(y[:, None] == np.arange(k), 1.0, -1.0) / n
    joint = privatize_joint(
        x, y, client_ids=ids, seed=seed, epsilon=epsilon, n_classes=k
    )
    k_class = np.stack(
        [joint.releases[joint.classes == c].mean(axis=0) for c in range(k)], axis=1
    )
    one_vs_rest = np.stack(
        [
            privatize_joint(
                x,
                (y == c).astype(np.int8),
                client_ids=ids,
                seed=derive_seed(seed, "one-vs-rest", c),
                epsilon=epsilon / k,
            ).releases.mean(axis=0)
            for c in range(k)
        ],
        axis=1,
    )
    return float(((k_class - truth) ** 2).sum()), float(
        ((one_vs_rest - truth) ** 2).sum()
    )


def _wearable_settings(n_classes: int, n_test: int = 1) -> Settings:
    """The K-class study's wearable federation (conf/kclass.toml)."""
    return Settings(
        dataset="wearable",
        n_classes=n_classes,
        n_basis=10,
        order=4,
        calibration_size=1000,
        n_train=500,
        n_eval=2500,
        n_test=n_test,
    )


def _wearable_clients(n_classes: int) -> ToyData:
    """Every client (training and evaluation) of the K-class study's wearable
    federation, repeat 0: features by the shipped spec, and the conditions."""
    from ldpfda.experiments.synthetic import draw_repeat

    data = draw_repeat(_wearable_settings(n_classes), 0)
    x = np.vstack([data.train.features(), data.evaluation.features()])
    y = np.concatenate([data.train.labels, data.evaluation.labels]).astype(np.int8)
    return x, y


def _moments_table(args: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    sets = {
        "toy": three_class_toy(args.clients, derive_seed(args.seed, "moments")),
        "wearable-3": _wearable_clients(3),
        "wearable-5": _wearable_clients(5),
    }
    rows: dict[str, list[dict[str, float]]] = {}
    print(
        "squared error of the class moments, K-class release / K binary releases at "
        f"eps/K, mean over {args.repeats} noise draws on the same clients"
    )
    print(f"{'eps':>5} " + " ".join(f"{name:>11}" for name in sets))
    for eps in args.epsilon:
        cells = []
        for name, (x, y) in sets.items():
            k = int(y.max()) + 1
            pairs = np.array(
                [
                    class_moment_errors(x, y, eps, k, derive_seed(args.seed, name, r))
                    for r in range(args.repeats)
                ]
            )
            rows.setdefault(name, []).append(
                {
                    "epsilon": eps,
                    "k-class": pairs[:, 0].mean(),
                    "ovr": pairs[:, 1].mean(),
                }
            )
            cells.append(f"{pairs[:, 0].mean() / pairs[:, 1].mean():>11.2f}")
        print(f"{eps:>5g} " + " ".join(cells))
    return rows


def ordered_toy(n: int, seed: int, *, n_features: int = 10) -> ToyData:
    """``n`` clients of 3 ordered classes: class 1's mean lies between the means of
    0 and 2 along one direction (as intensity levels or stages do), the other
    coordinates are noise; standard deviation 0.3 in every coordinate, clipped."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n).astype(np.int8)
    x = 0.3 * rng.standard_normal((n, n_features))
    x[:, : n_features // 2] += 0.3 * (y[:, None] - 1.0)
    return np.clip(x, -1.0, 1.0), y


#: How much closer (total variation) LDA's predicted class shares must be to the
#: estimated ones for the "by shares" choice of :func:`rule_errors` to take LDA.
SHARE_MARGIN = 0.05


def rule_errors(
    train: ToyData,
    test: ToyData,
    public: NDArray[np.float64],
    epsilon: float,
    n_classes: int,
    seed: int,
) -> dict[str, float]:
    """Test errors of the K-class moment classifier's two rules on the same
    releases (one K-class joint release per client at ``epsilon``), and of a choice
    between them from released quantities that was tried and not adopted
    (``"by shares"``: LDA where its predicted class shares on the public features are
    closer, in total variation, to the shares the releases estimate by more than
    :data:`SHARE_MARGIN`)."""
    (x, y), (x_test, y_test) = train, test
    payload = privatize_joint(
        x,
        y,
        client_ids=np.arange(y.size),
        seed=seed,
        epsilon=epsilon,
        n_classes=n_classes,
    )
    inner = payload.release_mechanism().inner
    errors, predicted = {}, {}
    for rule in MULTICLASS_RULES:
        model = MomentMulticlassClassifier(
            n_classes=n_classes, public=public, mechanism=inner, rule=rule
        ).fit(payload.releases, np.asarray(payload.classes))
        errors[rule] = float(np.mean(model.predict(x_test) != y_test))
        predicted[rule] = np.bincount(model.predict(public), minlength=n_classes)
        if rule == "least-squares":
            # The class shares the releases estimate.
            theta = np.vstack([model.intercept_, model.coef_.T])
            shares = class_moments(theta, model.gram_)[0]
    shares = np.clip(shares, 0.0, None) / max(np.clip(shares, 0.0, None).sum(), 1e-12)
    tv = {
        r: 0.5 * float(np.abs(c / len(public) - shares).sum())
        for r, c in predicted.items()
    }
    lda = tv["lda"] < tv["least-squares"] - SHARE_MARGIN
    errors["by shares"] = errors["lda" if lda else "least-squares"]
    return errors


def _rules_table(args: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    from ldpfda.experiments.synthetic import draw_repeat

    Drawn = tuple[ToyData, ToyData, NDArray[np.float64]]

    def toy(make: Callable[[int, int], ToyData], name: str) -> Callable[[int], Drawn]:
        """Repeat r of a toy: training clients, test points, public features."""

        def draw(r: int) -> Drawn:
            def seed(part: str) -> int:
                return derive_seed(args.seed, name, part, r)

            public = make(1000, seed("public"))[0]
            return make(args.clients, seed("train")), make(20_000, seed("test")), public

        return draw

    def wearable(k: int, r: int) -> Drawn:
        data = draw_repeat(_wearable_settings(k, n_test=20_000), r)
        x = np.vstack([data.train.features(), data.evaluation.features()])
        y = np.concatenate([data.train.labels, data.evaluation.labels])
        return (x, y.astype(np.int8)), data.test, data.public

    sets: dict[str, Callable[[int], Drawn]] = {
        "three-class toy": toy(three_class_toy, "toy"),
        "ordered toy": toy(ordered_toy, "ordered"),
        "wearable-3": functools.partial(wearable, 3),
        "wearable-5": functools.partial(wearable, 5),
    }
    print(
        "test error of the K-class moment classifier's rules on the same releases, "
        f"mean +- s.e. over {args.repeats} repeats"
    )
    print(
        f"{'data':>16} {'eps':>5} {'least squares':>15} {'LDA':>15} {'by shares':>15}"
    )
    rows: dict[str, list[dict[str, float]]] = {}
    for name, make in sets.items():
        repeats = [make(r) for r in range(args.repeats)]
        for eps in args.epsilon:
            runs = [
                rule_errors(
                    train,
                    test,
                    public,
                    eps,
                    int(train[1].max()) + 1,
                    derive_seed(args.seed, "rules", name, r, f"{eps:g}"),
                )
                for r, (train, test, public) in enumerate(repeats)
            ]
            rows[f"{name} {eps:g}"] = runs
            cells = [
                "{:.3f} +- {:.3f}".format(*mean_se([run[key] for run in runs]))
                for key in (*MULTICLASS_RULES, "by shares")
            ]
            print(f"{name:>16} {eps:>5g} " + " ".join(f"{c:>15}" for c in cells))
    return rows


def _mrma_table(args: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    rows: dict[str, list[dict[str, float]]] = {}
    print(
        f"3-class toy, K-class MRMA, {args.clients} training + {args.eval} evaluation "
        f"clients, {args.repeats} repeats: test error"
    )
    print(f"{'eps':>5} " + " ".join(f"{m:>15}" for m in MRMA_METHODS) + "  spent")
    for eps in args.epsilon:
        runs = [
            mrma_ablation(
                eps, r, n_clients=args.clients, n_eval=args.eval, seed=args.seed
            )
            for r in range(args.repeats)
        ]
        rows[f"{eps:g}"] = runs
        cells = []
        for method in MRMA_METHODS:
            mean, se = mean_se([run[method] for run in runs])
            cells.append(f"{mean:>7.3f} +- {se:.3f}")
        low = min(run["min spent"] for run in runs)
        high = max(run["max spent"] for run in runs)
        print(f"{eps:>5g} " + " ".join(cells) + f"  {low:g}..{high:g}")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ldpfda.experiments.kclass", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--epsilon", type=float, nargs="+", default=[1, 2, 3, 5, 10])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--clients", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", help="write every repeat's errors as JSON here")
    parser.add_argument(
        "--mrma", action="store_true", help="the K-class MRMA ablation instead"
    )
    parser.add_argument("--eval", type=int, default=500, help="MRMA's evaluators")
    parser.add_argument(
        "--moments",
        action="store_true",
        help="the class moments' error, K-class release against one-vs-rest's, instead",
    )
    parser.add_argument(
        "--rules",
        action="store_true",
        help="the K-class fit's least-squares and LDA rules on the same releases",
    )
    args = parser.parse_args(argv)
    if args.rules:
        _write(args.output, _rules_table(args))
        return 0
    if args.mrma:
        _write(args.output, _mrma_table(args))
        return 0
    if args.moments:
        _write(args.output, _moments_table(args))
        return 0
    rows: dict[str, list[dict[str, float]]] = {}
    header = f"{'eps':>5} " + " ".join(f"{m:>17}" for m in METHODS) + "  spent (k, ovr)"
    print(f"3-class toy, {args.clients} clients, {args.repeats} repeats: test error")
    print(header)
    for eps in args.epsilon:
        runs = [
            compare(eps, r, n_clients=args.clients, seed=args.seed)
            for r in range(args.repeats)
        ]
        rows[f"{eps:g}"] = runs
        cells = []
        for method in METHODS:
            mean, se = mean_se([run[method] for run in runs])
            cells.append(f"{mean:>9.3f} +- {se:.3f}")
        spent = (
            max(run["k-class spent"] for run in runs),
            max(run["one-vs-rest spent"] for run in runs),
        )
        print(f"{eps:>5g} " + " ".join(cells) + f"  {spent[0]:g}, {spent[1]:g}")
    _write(args.output, rows)
    return 0


def _write(path: str | None, rows: dict[str, list[dict[str, float]]]) -> None:
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    sys.exit(main())
