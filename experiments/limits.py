"""Issue 18, utility: the default protocol at small epsilon, without public features
and without noise, on the vector design and on an unbalanced variant of it.

Per repeat, the clients release once with the default protocol (joint hybrid); the
server fits the moment classifier on those releases with the public features (where
no signal is detected, the posterior mean averaged over the prior variances), the same
with ``server.threshold = "refit"`` (intercept and slopes' scale refitted along the
posterior's slope direction), with ``server.no-signal-fit = "fallback"`` (where no
signal is detected, the majority class of the released labels), without the public
features, and with the intercept forced to 0 (a
diagnostic only: it is right for the balanced, centred design and not in general),
and the default's own slopes with its intercept set to 0 (where the diagnostic's loss
or gain comes from); the same clients without noise give the noiseless column.
``--label-shift`` moves the logit (-2.75: about 25 % positives).

    python -m ldpfda.experiments.limits --repeats 20
    python -m ldpfda.experiments.limits --repeats 20 --label-shift -2.75
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np

from ldpfda.config import Settings
from ldpfda.datasets.population import population_data, public_features
from ldpfda.engine import run_protocol
from ldpfda.engine.inprocess import ArrayClients
from ldpfda.experiments.common import mean_se
from ldpfda.privacy.random import derive_seed
from ldpfda.privacy.vector_mechanisms import ProductMoments, product_moments
from ldpfda.schema.payloads import JointPayload, LinearModels
from ldpfda.server.fitting import make_learner, model_error
from ldpfda.server.learners import MomentLinearClassifier
from ldpfda.server.mrma import fit_linear

COLUMNS = {
    "default": "default",
    "refit": "same releases, threshold refitted along the slopes",
    "fallback": "same releases, majority class (or limit direction) where no signal",
    "forced": "the same releases, intercept forced to 0",
    "slopes": "the default's slopes, its intercept set to 0",
    "no_public": "no public features",
    "noiseless": "noiseless (ε = ∞)",
    "non_private": "non-private",
    "majority": "majority class",
}


def repeat_errors(epsilon: float, repeat: int, label_shift: float) -> dict[str, float]:
    """Every column's test error in one repeat (3000 clients, 100,000 test points)."""
    # server_id 0: the population_data stream that honours label_shift.
    base = Settings(
        seed=2026, n_train=500, n_eval=2500, server_id=0, label_shift=label_shift
    )
    data = population_data(base, repeat)
    assert data.test is not None
    fz = data.featurizer
    train = ArrayClients(np.arange(500), *data.train, fz)
    evaluation = ArrayClients(500 + np.arange(2500), *data.evaluation, fz)
    test = (fz.transform(data.test[0]), data.test[1])
    public = public_features(base, repeat, featurizer=fz)
    seed = derive_seed(2026, "limits", repeat)
    out: dict[str, float] = {}
    for eps, name in ((epsilon, "default"), (math.inf, "noiseless")):
        settings = base.replace(epsilon=eps, public_features=True)
        result = run_protocol(
            train,
            evaluation,
            settings,
            seed=seed,
            server_rng=np.random.default_rng(0),
            test=test,
            public=public,
        )
        out[name] = result.test_errors["moment"]
        if name == "default":
            payload = result.payload
            # The default's own slopes, its intercept dropped.
            slopes = LinearModels(result.final.coef, np.zeros(1))
            out["slopes"] = model_error(slopes, *test)
    assert isinstance(payload, JointPayload)
    z = payload.releases
    same = base.replace(epsilon=epsilon, public_features=True)
    for column, settings, rows in (
        ("refit", same.replace(threshold="refit"), public),
        ("fallback", same.replace(no_signal_fit="fallback"), public),
        ("no_public", same.replace(public_features=False), None),
    ):
        fit = make_learner(payload, settings, rows, learner="moment").fit(z)
        out[column] = model_error(fit.to_linear_models(), *test)
    moments = product_moments(payload.release_mechanism().inner)
    features = ProductMoments(
        moments.offdiagonal[1:, 1:], moments.offset[1:], moments.slope[1:]
    )
    forced = MomentLinearClassifier(
        joint=True, fit_intercept=False, public=public, mechanism=features
    ).fit(z[:, 1:])
    out["forced"] = model_error(forced.to_linear_models(), *test)
    x_all = np.vstack([train.features(), evaluation.features()])
    y_all = np.concatenate([train.labels, evaluation.labels])
    out["non_private"] = model_error(fit_linear(x_all, y_all), *test)
    out["majority"] = float(np.mean(test[1] != int(y_all.mean() > 0.5)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--label-shift", type=float, default=0.0)
    parser.add_argument("--epsilons", default="0.5,1,2,5")
    args = parser.parse_args(argv)
    epsilons = [float(e) for e in args.epsilons.split(",")]
    paired = ("refit", "fallback", "slopes")
    heads = [f"default − {c}, paired" for c in paired]
    print(f"| ε | {' | '.join([*COLUMNS.values(), *heads])} |")
    print("|---" * (len(COLUMNS) + len(paired) + 1) + "|")
    for eps in epsilons:
        runs: list[dict[str, Any]] = [
            repeat_errors(eps, r, args.label_shift) for r in range(args.repeats)
        ]
        cells = [
            "{:.3f} ± {:.3f}".format(*mean_se([run[c] for run in runs]))
            for c in COLUMNS
        ] + [
            "{:+.3f} ± {:.3f}".format(
                *mean_se([run["default"] - run[c] for run in runs])
            )
            for c in paired
        ]
        print(f"| {eps:g} | {' | '.join(cells)} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
