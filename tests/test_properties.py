"""Property-based tests: output ranges of every mechanism, and artifact validation."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ldpfda.privacy.laplace import LaplaceMechanism
from ldpfda.privacy.randomized_response import KaryRandomizedResponse
from ldpfda.privacy.vector_mechanisms import (
    DuchiMechanism,
    HybridMechanism,
    PiecewiseMechanism,
)
from ldpfda.server.artifacts import ArtifactError, read_models, write_models
from ldpfda.server.mrma import LinearModels

FAST = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
epsilons = st.floats(min_value=0.05, max_value=8.0)


@FAST
@given(
    epsilon=epsilons,
    p=st.integers(1, 6),
    data=st.data(),
    sampler=st.sampled_from(["discrete", "continuous"]),
    seed=st.integers(0, 2**32),
)
def test_laplace_outputs_stay_in_the_declared_range(epsilon, p, data, sampler, seed):
    mech = LaplaceMechanism(epsilon=epsilon, dimension=p, sampler=sampler)
    x = data.draw(arrays(np.float64, (20, p), elements=finite))
    z = mech.randomise(x, seed)
    low, high = mech.output_range()
    assert np.all(np.isfinite(z)) and np.all((low <= z) & (z <= high))
    if sampler == "discrete":  # every output is a grid point
        steps = (z - mech.lower) / mech.grid_step
        np.testing.assert_array_equal(steps, np.round(steps))


@FAST
@given(
    epsilon=epsilons, k=st.integers(2, 12), seed=st.integers(0, 2**32), data=st.data()
)
def test_randomized_response_outputs_are_categories(epsilon, k, seed, data):
    mech = KaryRandomizedResponse(epsilon=epsilon, n_categories=k)
    y = data.draw(arrays(np.int64, 30, elements=st.integers(0, k - 1)))
    out = mech.randomise(y, seed)
    assert out.shape == y.shape and np.all((0 <= out) & (out < k))


@FAST
@given(
    cls=st.sampled_from([DuchiMechanism, PiecewiseMechanism, HybridMechanism]),
    epsilon=epsilons,
    p=st.integers(1, 6),
    seed=st.integers(0, 2**32),
    data=st.data(),
)
def test_vector_mechanism_outputs_stay_in_the_declared_range(
    cls, epsilon, p, seed, data
):
    mech = cls(epsilon=epsilon, dimension=p)
    x = data.draw(arrays(np.float64, (20, p), elements=finite))
    z = mech.randomise(np.clip(x, -1, 1), seed)
    low, high = mech.output_range()
    assert np.all(np.isfinite(z)) and np.all((low - 1e-12 <= z) & (z <= high + 1e-12))


def _artifact(tmp_path, p: int) -> dict:
    models = LinearModels(np.arange(2.0 * p).reshape(2, p), np.array([0.5, -0.5]))
    path = write_models(
        tmp_path / "m.json", models, server=0, session="s", fingerprint="f" * 16
    )
    return json.loads(path.read_text())


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | finite | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@FAST
@given(
    key=st.sampled_from(
        [
            "format",
            "version",
            "kind",
            "server",
            "session",
            "dimension",
            "featurizer",
            "models",
        ]
    ),
    value=json_values,
)
def test_artifact_reader_accepts_valid_models_or_raises_artifact_error(
    tmp_path, key, value
):
    data = _artifact(tmp_path, 3)
    data[key] = value
    path = tmp_path / "mutated.json"
    path.write_text(json.dumps(data))
    try:
        artifact = read_models(path, dimension=3, fingerprint="f" * 16, session="s")
    except ArtifactError:
        return
    # Whatever was accepted is well formed.
    models = artifact.models
    assert isinstance(artifact.server, int) and artifact.server >= 0
    assert models.coef.shape[1] == 3 and np.all(np.isfinite(models.coef))
    assert np.all(np.isfinite(models.intercept))


@FAST
@given(cut=st.integers(0, 400))
def test_truncated_artifacts_raise_artifact_error(tmp_path, cut):
    text = json.dumps(_artifact(tmp_path, 3))
    path = tmp_path / "cut.json"
    path.write_text(text[: min(cut, len(text) - 1)])
    try:
        read_models(path, dimension=3, fingerprint="f" * 16, session="s")
    except ArtifactError:
        return
    raise AssertionError("a truncated artifact was accepted")


@FAST
@given(
    cls=st.sampled_from([PiecewiseMechanism, HybridMechanism]),
    epsilon=epsilons,
    p=st.integers(1, 5),
    seed=st.integers(0, 2**32),
)
def test_piecewise_outputs_lie_on_a_fixed_grid(cls, epsilon, p, seed):
    # Snapped outputs: the set of possible outputs does not depend on the input.
    from ldpfda.privacy.vector_mechanisms import piecewise_bound

    mech = cls(epsilon=epsilon, dimension=p)
    x = np.random.default_rng(seed).uniform(-1, 1, size=(200, p))
    y = mech.randomise(x, seed) / mech.scale
    c = piecewise_bound(epsilon=mech.coordinate_epsilon)
    step = 2 * c / mech.SNAP_CELLS
    pieces = np.abs(y[(y != 0) & (np.abs(np.abs(y) - c) > 1e-9)])
    if cls is HybridMechanism:  # its Duchi part releases +-B, not on the grid
        from ldpfda.privacy.vector_mechanisms import duchi_bound

        b = duchi_bound(epsilon=mech.coordinate_epsilon, dimension=1)
        pieces = pieces[np.abs(pieces - b) > 1e-9]
    index = (pieces + c) / step
    np.testing.assert_allclose(index, np.round(index), atol=1e-6)
