"""Node data files, simulated partitions and run-config parsing."""

from __future__ import annotations

import numpy as np
import pytest

from ldpfda.client.protocol import privatize, privatize_joint
from ldpfda.config import Settings, run_settings
from ldpfda.datasets.files import NodeData, load_node_data, save_node_data
from ldpfda.datasets.population import (
    design_test_set,
    public_featurizer,
    simulated_partition,
)
from ldpfda.engine import run_repeat
from ldpfda.privacy.random import derive_seed

from .support import app_config


@pytest.mark.parametrize("suffix", [".npz", ".csv"])
def test_round_trip_curves(tmp_path, suffix):
    grid = np.linspace(0, 1, 7)
    curves = np.random.default_rng(0).normal(size=(3, 7))
    path = save_node_data(tmp_path / f"d{suffix}", curves, [0, 1, 1], grid)
    data = load_node_data(path)
    np.testing.assert_array_equal(data.raw, curves)
    np.testing.assert_array_equal(data.grid, grid)
    np.testing.assert_array_equal(data.labels, [0, 1, 1])


@pytest.mark.parametrize("suffix", [".npz", ".csv"])
def test_round_trip_vectors_have_no_grid(tmp_path, suffix):
    path = save_node_data(tmp_path / f"v{suffix}", [[0.1, -0.2, 0.3, 0.4]], [1])
    data = load_node_data(path)
    assert data.grid is None and len(data) == 1
    np.testing.assert_array_equal(data.raw, [[0.1, -0.2, 0.3, 0.4]])


def test_csv_header_is_the_grid(tmp_path):
    path = tmp_path / "one.csv"
    path.write_text("label,0.0,0.5,1.0\n1,2.0,3.0,4.0\n", encoding="utf-8")
    data = load_node_data(path)
    np.testing.assert_array_equal(data.grid, [0.0, 0.5, 1.0])
    np.testing.assert_array_equal(data.raw, [[2.0, 3.0, 4.0]])


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("y,0.0,1.0\n1,2,3\n", "label"),
        ("label,0.0,1.0\n2,2,3\n", "labels must be in"),
        ("label,0.0,1.0\n1,nan,3\n", "NaN"),
        ("label,0.0,1.0\n1,x,3\n", "not a number"),
        ("label,1.0,0.0\n1,2,3\n", "increasing"),
        ("label,0.0,1.0\n", "at least one row"),
    ],
)
def test_bad_csv_is_refused(tmp_path, text, match):
    path = tmp_path / "bad.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        load_node_data(path)


def test_bad_npz_and_suffix_are_refused(tmp_path):
    np.savez(tmp_path / "a.npz", curves=np.zeros((1, 3)))
    with pytest.raises(ValueError, match="labels"):
        load_node_data(tmp_path / "a.npz")
    np.savez(tmp_path / "b.npz", curves=np.zeros((2, 3)), labels=[1], grid=[0, 1, 2])
    with pytest.raises(ValueError, match="labels has 1 entries for 2"):
        load_node_data(tmp_path / "b.npz")
    with pytest.raises(ValueError, match=r"\.npz or \.csv"):
        load_node_data(tmp_path / "c.txt")


def test_features_refuse_a_foreign_grid():
    settings = Settings(dataset="functional", calibration_size=50)
    featurizer, grid = public_featurizer(settings)
    curve = np.zeros((1, 50))
    with pytest.raises(ValueError, match="differs from the run's grid"):
        NodeData(curve, [1], np.linspace(0, 1, 50)).features(featurizer, grid)
    with pytest.raises(ValueError, match="has no grid"):
        NodeData(np.zeros((1, 100)), [1]).features(featurizer, grid)
    vector, none = public_featurizer(Settings())
    with pytest.raises(ValueError, match="vector data"):
        NodeData(np.zeros((1, 4)), [1], np.arange(4.0)).features(vector, none)


@pytest.mark.parametrize("dataset", ["vector", "functional"])
def test_partitions_are_the_engine_clients(dataset):
    settings = Settings.reference(
        dataset=dataset,
        n_train=6,
        n_eval=4,
        num_weak_models=2,
        subsample_size=3,
        n_test=50,
        calibration_size=100,
    )
    reference = run_repeat(settings, 1).payload
    seed = derive_seed(settings.seed, "clients", 1)
    for i in range(6):
        x, y = simulated_partition(settings, 1, i)
        alone = privatize(x, y, client_ids=[i], seed=seed, epsilon=settings.epsilon)
        np.testing.assert_array_equal(alone.features[0], reference.features[i])
        assert alone.labels[0] == reference.labels[i]
    with pytest.raises(ValueError, match="has no data"):
        simulated_partition(settings, 1, 10)
    x_test, y_test = design_test_set(settings, 1)
    assert x_test.shape[0] == y_test.size == 50
    # The default run: every partition, training or evaluation, releases jointly.
    joint = settings.replace(mechanism="joint-hybrid")
    releases = run_repeat(joint, 1).payload.releases
    for i in (0, 5, 6, 9):
        x, y = simulated_partition(joint, 1, i)
        alone = privatize_joint(
            x, y, client_ids=[i], seed=seed, epsilon=joint.epsilon
        ).releases
        np.testing.assert_array_equal(alone[0], releases[i])


def test_run_settings_split_and_refuse_typos():
    settings, flower = run_settings(app_config())
    assert isinstance(settings, Settings)
    assert flower["repeat"] == 0
    bad = app_config() | {"privacy.epsilonn": 1.0}
    with pytest.raises(ValueError, match="privacy.epsilonn"):
        run_settings(bad)
    with pytest.raises(ValueError, match="epsilon"):
        run_settings(app_config() | {"privacy.epsilon": -1.0})


def test_app_config_mirrors_settings():
    keys = {k for k in app_config() if not k.startswith("flower.")}
    assert keys == set(Settings().to_mapping())
