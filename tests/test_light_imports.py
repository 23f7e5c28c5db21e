"""A client host needs numpy, scipy (and flwr) only: no scikit-learn, scikit-fda,
dp-accounting, ray or pandas.

A fresh interpreter with an import hook that refuses those packages computes a client's
features and every client-side release; the numbers must equal the ones computed here,
with everything installed (the scikit-learn transformer included).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ldpfda.datasets.synthetic import make_design

HEAVY = ("sklearn", "skfda", "dp_accounting", "ray", "pandas")

# Installed before anything else in the child: refuses the heavy packages and all their
# submodules, as if they were not installed.
PRELUDE = f"""
import importlib.abc
import sys

HEAVY = {HEAVY!r}


class _Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY:
            message = f"No module named {{name!r}} (refused)"
            raise ModuleNotFoundError(message, name=name)
        return None


sys.meta_path.insert(0, _Refuse())
"""

CLIENT = """
import importlib
import pkgutil

import numpy as np

for name in HEAVY:
    try:
        importlib.import_module(name)
    except ImportError:
        pass
    else:
        raise SystemExit(f"the import hook let {name} through")

import ldpfda.client.labeldp_protocol as labeldp_protocol
import ldpfda.client.protocol as protocol
import ldpfda.fda
import ldpfda.fda.features as features
import ldpfda.privacy
from ldpfda.datasets.synthetic import make_design

for info in pkgutil.iter_modules(ldpfda.privacy.__path__):
    importlib.import_module(f"ldpfda.privacy.{info.name}")
# The label-DP names a client needs still resolve from ldpfda.labeldp, lazily.
import ldpfda.labeldp.accounting
import ldpfda.labeldp.mechanisms
import ldpfda.labeldp.peer_to_peer
import ldpfda.labeldp.transition
from ldpfda.labeldp import p2p_guarantee, resampling_probability

for heavy_name in ("DPSGDLogisticRegression", "ForwardCorrectedLogisticRegression"):
    try:
        getattr(ldpfda.labeldp, heavy_name)
    except ImportError:
        pass
    else:
        raise SystemExit(f"{heavy_name} imported without its dependencies")
try:
    ldpfda.fda.BSplineProjector
except ImportError:
    pass
else:
    raise SystemExit("BSplineProjector imported without scikit-learn")

design = make_design("functional")
public, _ = design.sample(300, rng=1)
curves, labels = design.sample(40, rng=2)
featurizer = features.CurveFeaturizer.calibrated(
    public, design.grid_points, n_basis=10, order=4
)
x = featurizer.transform(curves)
ids = np.arange(100, 140)
joint = protocol.privatize_joint(x, labels, client_ids=ids, seed=3, epsilon=5.0)
prior = np.array([0.2, 0.3, 0.5])
released = labeldp_protocol.release_labels(
    labels.astype(np.int64) + 1, prior, client_ids=ids, seed=3, epsilon=1.0
)
bits = labeldp_protocol.p2p_randomize(
    labels, client_ids=ids, seed=3, local_epsilon=2.0, cluster_sizes=[20, 20]
)
eps, delta = p2p_guarantee(local_epsilon=2.0, cluster_sizes=[20, 20])
lam = resampling_probability(epsilon=1.0, q_min=0.2)

loaded = sorted({name.split(".")[0] for name in sys.modules} & set(HEAVY))
if loaded:
    raise SystemExit(f"heavy packages loaded: {loaded}")
np.savez(
    OUT,
    features=x,
    joint=joint.releases,
    released=released,
    bits=bits,
    guarantee=np.array([eps, delta, lam]),
)
"""


def _run_client(out) -> None:
    code = PRELUDE + f"OUT = {str(out)!r}\n" + textwrap.dedent(CLIENT)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def light_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("light") / "client.npz"
    _run_client(out)
    with np.load(out) as archive:
        return dict(archive)


def test_client_side_runs_without_the_heavy_packages(light_run):
    assert light_run["features"].shape == (40, 10)
    assert np.all(np.abs(light_run["features"]) <= 1.0)
    assert light_run["joint"].shape == (40, 11)


def test_light_client_numbers_equal_the_full_install(light_run):
    from ldpfda.client.labeldp_protocol import p2p_randomize, release_labels
    from ldpfda.client.protocol import privatize_joint
    from ldpfda.fda import BSplineProjector, CoefficientScaler, CurveFeaturizer
    from ldpfda.labeldp import p2p_guarantee, resampling_probability

    design = make_design("functional")
    public, _ = design.sample(300, rng=1)
    curves, labels = design.sample(40, rng=2)
    projector = BSplineProjector(n_basis=10, order=4).fit(public, design.grid_points)
    scaler = CoefficientScaler.from_public(projector.transform(public))
    x = CurveFeaturizer(projector, scaler).transform(curves)
    assert np.array_equal(light_run["features"], x)
    ids = np.arange(100, 140)
    joint = privatize_joint(x, labels, client_ids=ids, seed=3, epsilon=5.0)
    assert np.array_equal(light_run["joint"], joint.releases)
    released = release_labels(
        labels.astype(np.int64) + 1,
        np.array([0.2, 0.3, 0.5]),
        client_ids=ids,
        seed=3,
        epsilon=1.0,
    )
    assert np.array_equal(light_run["released"], released)
    bits = p2p_randomize(
        labels, client_ids=ids, seed=3, local_epsilon=2.0, cluster_sizes=[20, 20]
    )
    assert np.array_equal(light_run["bits"], bits)
    eps, delta = p2p_guarantee(local_epsilon=2.0, cluster_sizes=[20, 20])
    lam = resampling_probability(epsilon=1.0, q_min=0.2)
    assert np.array_equal(light_run["guarantee"], [eps, delta, lam])


def test_lazy_labeldp_names_are_the_submodule_objects():
    import importlib

    import ldpfda.labeldp as labeldp

    assert set(labeldp.__all__) == set(labeldp._SUBMODULE_OF)
    for name, submodule in labeldp._SUBMODULE_OF.items():
        module = importlib.import_module(f"ldpfda.labeldp.{submodule}")
        assert getattr(labeldp, name) is getattr(module, name)
    assert set(labeldp.__all__) <= set(dir(labeldp))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        labeldp.nothing  # noqa: B018


def test_moved_label_helpers_are_reexported_not_copied():
    from ldpfda.labeldp import accounting, mechanisms, peer_to_peer, transition
    from ldpfda.privacy import label_accounting, labels
    from ldpfda.privacy import peer_to_peer as privacy_p2p

    assert mechanisms.check_labels is labels.check_labels
    assert transition.check_distributions is labels.check_distributions
    for name in accounting.__all__:
        assert getattr(accounting, name) is getattr(label_accounting, name)
    for name in peer_to_peer.__all__:
        assert getattr(peer_to_peer, name) is getattr(privacy_p2p, name)
