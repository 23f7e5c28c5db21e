"""A host's ClientApp needs only numpy, scipy and flwr, and answers every query.

A child interpreter in which scikit-learn, scikit-fda, dp-accounting, Ray and pandas
cannot be imported loads ``ldpfda.client.client_app`` and answers every query kind, on
the functional design, in the default, the reference and the label-only modes; its
replies must equal those of this (full) install, to the last bit.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Context, Message, RecordDict

from ldpfda.client.client_app import app

from .support import app_config

HEAVY = ("sklearn", "skfda", "dp_accounting", "ray", "pandas")

#: (run-config overrides, queries with their request) of every query kind.
CASES = {
    "default": ({}, ["identify", "privatize", "evaluate"]),
    "reference": ({"privacy.mechanism": "reference"}, ["privatize", "evaluate"]),
    "label-cluster": ({"privacy.mechanism": "label-cluster"}, ["features", "label"]),
    "label-p2p": (
        {"privacy.mechanism": "label-p2p"},
        ["features", "p2p_randomize", "p2p_forward"],
    ),
}


def _request(kind: str, p: int) -> RecordDict:
    arrays = {
        "evaluate": {
            "model": {"coef": np.linspace(-1, 1, p), "intercept": np.array([0.1])}
        },
        "label": {"prior": {"q": np.array([0.3, 0.7])}},
        "p2p_randomize": {
            "p2p": {
                "local-epsilon": np.array([2.0]),
                "cluster-sizes": np.array([20, 30], dtype=np.int64),
            }
        },
        "p2p_forward": {"peers": {"labels": np.array([0, 1, 1] * 4, dtype=np.int8)}},
    }.get(kind, {})
    return RecordDict(
        {
            record: ArrayRecord({k: Array(np.asarray(v)) for k, v in values.items()})
            for record, values in arrays.items()
        }
    )


def answers(config_updates: dict, kinds: list[str]) -> dict[str, dict]:
    """Every reply array of ``kinds`` for simulated client 3 (each query on a fresh
    node state), as plain lists."""
    from flwr.supercore.task_identity import TaskIdentity

    # Messages take their run and source ids from the running task's identity.
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
    run_config = app_config() | {
        "data.dataset": "functional",
        "data.n-train": 30,
        "data.n-eval": 20,
        "fda.calibration-size": 200,
        "labeldp.min-cluster-size": 10,
        **config_updates,
    }
    out = {}
    for kind in kinds:
        # A fresh node state for each query: each asks for one release.
        context = Context(
            run_id=1,
            node_id=5,
            node_config={"partition-id": 3, "num-partitions": 50},
            state=RecordDict(),
            run_config=run_config,
        )
        reply = app(Message(_request(kind, 10), 5, f"query.{kind}"), context)
        if reply.has_error():
            out[kind] = {"error": reply.error.reason}
            continue
        out[kind] = {
            f"{name}.{key}": array.numpy().tolist()
            for name, record in reply.content.array_records.items()
            for key, array in record.items()
        }
    return out


CHILD = textwrap.dedent(
    """
    import importlib.abc, json, sys

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {heavy!r}:
                raise ImportError(f"{{name}} is not installed on this host")

    sys.meta_path.insert(0, Refuse())
    sys.path.insert(0, {root!r})
    from tests.flower.test_light_client import answers

    # What a deployed node builds from the run config on every query: the public
    # featurizer of the functional design (its own curves come from its data file).
    from ldpfda.config import Settings
    from ldpfda.datasets.population import public_featurizer

    public_featurizer(Settings(dataset="functional"))
    scipy = {{"scipy.interpolate", "scipy.special"}}
    scipy_loaded = {{"featurizer": sorted(scipy & set(sys.modules))}}
    result = {{}}
    for case, spec in json.loads(sys.argv[1]).items():
        result[case] = answers(*spec)
        scipy_loaded[case] = sorted(scipy & set(sys.modules))
    loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({heavy!r}))
    out = {{"answers": result, "heavy_loaded": loaded, "scipy": scipy_loaded}}
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def light_host():
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    code = CHILD.format(heavy=HEAVY, root=root)
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(CASES)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_host_loads_none_of_the_heavy_packages(light_host):
    assert light_host["heavy_loaded"] == []


def test_a_nodes_featurizer_loads_neither_scipy_interpolate_nor_special(light_host):
    """Every message starts a fresh ClientApp process on a deployed node, which builds
    the public featurizer: its basis (numpy's de Boor recursion) and its calibration
    curves (drawn without their labels) must not cost it the 0.4-0.6 s of importing
    either. The simulated clients of the cases that follow (default and reference
    first) sample labelled curves with scipy.special's logistic, but evaluate no
    basis with scipy."""
    assert light_host["scipy"]["featurizer"] == []
    assert "scipy.interpolate" not in light_host["scipy"]["reference"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_light_host_answers_every_query_as_the_full_install(light_host, case):
    light = light_host["answers"][case]
    full = answers(*CASES[case])
    assert set(light) == set(CASES[case][1])
    for kind, reply in light.items():
        assert "error" not in reply, (kind, reply)
        assert reply == full[kind], kind
