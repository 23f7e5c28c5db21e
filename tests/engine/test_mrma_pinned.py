"""MRMAClassifier's numbers, pinned bit for bit from before the estimators shared their
input handling: the refactor must not move a single release or weak model.

The fits go through OpenBLAS, whose kernel (chosen by CPU) moves the last bits, so the
pins are for the kernel that tests/conftest.py fixes on x86-64 (Haswell's): they were
re-taken under it when CI's machines changed CPU family, from the same code (the pins
taken before still hold under OpenBLAS's SkylakeX kernel)."""

from __future__ import annotations

import platform

import numpy as np
import pytest
import skfda
from threadpoolctl import threadpool_info

from ldpfda.datasets import FunctionalDesign, VectorDesign
from ldpfda.engine.estimator import MRMAClassifier

#: (coef_, intercept_, decision_function on the first five rows), as float.hex.
PINNED = {
    "A": (
        [
            "0x1.551006e33cb2ap-2",
            "0x1.7d78529f6954ep-6",
            "0x1.baee16819851ep-4",
            "0x1.0f942b9d949cep-4",
        ],
        "0x1.3a75d91181b7ap-2",
        [
            "0x1.cb32caee6b7e0p-3",
            "0x1.2d4e31ebe7099p-1",
            "0x1.6f64407e56c06p-2",
            "0x1.0f6a90b5607c2p-1",
            "0x1.fd50d88782dcap-2",
        ],
    ),
    "B": (
        [
            "0x1.9386210e96ca4p-1",
            "-0x1.beb0ecbc6c24fp-2",
            "0x1.3932489e3f119p-2",
            "-0x1.96f9a95e355a2p-3",
        ],
        "0x1.045c5aa534ea6p-5",
        [
            "0x1.7083621b8a6d8p-2",
            "0x1.1daeb64bfc1eap-3",
            "0x1.c9fb74ca49c25p-4",
            "0x1.457e2240f288cp+0",
            "0x1.e7b71d1b19f54p-2",
        ],
    ),
    "C": (
        [
            "-0x1.3a89c9badc856p-4",
            "0x1.7820933ce8eedp-5",
            "0x1.278fa35a9cdcdp-3",
            "-0x1.2b3d054878e49p-5",
            "0x1.4f90866c8320cp-6",
            "0x1.2ff5d0196331fp-7",
            "-0x1.306f3b0b8d975p-4",
            "-0x1.6f2fb1d2225fdp-4",
            "0x1.2aad41dbb8a9cp-3",
            "-0x1.0e3b346904f48p-4",
        ],
        "0x1.4fad31ede60b5p-4",
        [
            "0x1.cb99bbf4933e8p-3",
            "0x1.43db0b66e7712p-3",
            "0x1.c7cb1d9f1ba04p-4",
            "0x1.6cbceb5d9882ep-6",
            "0x1.ac10b0b4786d0p-7",
        ],
    ),
    "E": (
        [
            "0x1.d9a59865af922p-8",
            "-0x1.df246a84f30c8p-6",
            "-0x1.759b5c350bac3p-7",
            "-0x1.1a7686eb6d280p-6",
        ],
        "-0x1.1284f93d3530ap-6",
        [
            "0x1.a725ceb2bb6b2p-6",
            "-0x1.7ead7dbddcf1cp-5",
            "-0x1.0319a2d4bad20p-5",
            "0x1.62827c4473116p-6",
            "-0x1.b6f2770ac3ca8p-8",
        ],
    ),
    "F": (
        [
            "0x1.7a39007d4889ep-5",
            "0x1.80130a674a0a4p-3",
            "0x1.83953b088c640p-10",
            "0x1.338c61537ace0p-3",
            "0x1.79f390f7d8ff6p-5",
            "-0x1.25601111372adp-2",
            "-0x1.e00a9ca68429cp-5",
            "-0x1.415b33c4e1c5dp-2",
        ],
        "-0x1.0d231c57058fap-3",
        [
            "0x1.e61df04c3e966p-3",
            "0x1.650ddcfd32332p-3",
            "-0x1.dc8f21dde2ee4p-3",
            "-0x1.476e8c98d31bap-1",
            "-0x1.172716a78d8d6p-2",
        ],
    ),
}
# D is C's fit on the same curves given as FDataGrid: the same numbers.
PINNED["D"] = PINNED["C"]


def _case(name: str):
    """The estimator, its fit arguments and the rows it is scored on, per case."""
    x, y = VectorDesign().sample(900, 0)
    design = FunctionalDesign()
    curves, labels = design.sample(900, 0)
    public, _ = design.sample(200, 1)
    grid = design.grid_points
    vectors = {"input_type": "vectors"}
    if name == "A":
        return MRMAClassifier(
            epsilon=3.0, n_estimators=10, random_state=5, **vectors
        ), (
            (x, y),
            {},
            x,
        )
    if name == "B":
        x2, y2 = VectorDesign().sample(1200, 0)
        model = MRMAClassifier(
            epsilon=float("inf"), n_estimators=10, random_state=0, **vectors
        )
        return model, ((x2, np.where(y2 == 1, "sick", "healthy")), {}, x2)
    if name == "C":
        model = MRMAClassifier(epsilon=5.0, n_estimators=10, random_state=1)
        fit = {"grid_points": grid, "public_curves": public}
        return model, ((curves, labels), fit, curves)
    if name == "D":
        model = MRMAClassifier(epsilon=5.0, n_estimators=10, random_state=1)
        fdata = skfda.FDataGrid(curves, grid)
        fit = {"public_curves": skfda.FDataGrid(public, grid)}
        return model, ((fdata, labels), fit, fdata)
    if name == "E":
        model = MRMAClassifier(
            epsilon=2.0,
            n_estimators=12,
            weak_learner="svm",
            label_share=0.3,
            normalize_models=False,
            random_state=np.random.default_rng(7),
            **vectors,
        )
        return model, ((x, y), {}, x)
    model = MRMAClassifier(
        epsilon=4.0,
        n_estimators=8,
        n_basis=8,
        order=3,
        cutoff=0.1,
        subsample_size=30,
        eval_fraction=0.7,
        random_state=11,
    )
    fit = {"grid_points": grid, "public_curves": public}
    return model, ((curves, labels), fit, curves)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_mrma_numbers_are_unchanged_bit_for_bit(name):
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("the pins are float.hex under OpenBLAS's Haswell kernel (x86-64)")
    kernels = {
        i.get("architecture")
        for i in threadpool_info()
        if i["prefix"] == "libscipy_openblas"
    }
    assert kernels == {"Haswell"}, f"OpenBLAS runs {kernels}: see tests/conftest.py"
    model, (args, kwargs, rows) = _case(name)
    model.fit(*args, **kwargs)
    coef, intercept, decision = PINNED[name]
    assert [float(v).hex() for v in model.coef_[0]] == coef
    assert float(model.intercept_[0]).hex() == intercept
    assert [float(v).hex() for v in model.decision_function(rows)[:5]] == decision
