"""The study's data loading and configuration (no download, no real data needed)."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest

from ldpfda.experiments.labeldp.data import load_fashion_mnist, read_idx
from ldpfda.experiments.labeldp.run import DEFAULT_CONFIG, load_config, make_tasks


def _write_idx(path, array: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        struct.pack(">I", d) for d in array.shape
    )
    with gzip.open(path, "wb") as handle:
        handle.write(header + array.astype(np.uint8).tobytes())


def test_read_idx_round_trip(tmp_path):
    images = np.arange(2 * 3 * 4).reshape(2, 3, 4) % 256
    _write_idx(tmp_path / "x.gz", images)
    np.testing.assert_array_equal(read_idx(tmp_path / "x.gz"), images)


def test_fashion_loader_reads_a_given_folder(tmp_path):
    gen = np.random.default_rng(0)
    for prefix, n in (("train", 5), ("t10k", 3)):
        _write_idx(
            tmp_path / f"{prefix}-images-idx3-ubyte.gz",
            gen.integers(0, 256, size=(n, 28, 28)),
        )
        _write_idx(
            tmp_path / f"{prefix}-labels-idx1-ubyte.gz", gen.integers(0, 10, size=n)
        )
    xtr, ytr, xte, yte = load_fashion_mnist(tmp_path)
    assert xtr.shape == (5, 784) and xte.shape == (3, 784)
    assert 0.0 <= xtr.min() and xtr.max() <= 1.0
    assert ytr.dtype == np.int64 and yte.shape == (3,)


def test_fashion_loader_never_downloads(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        load_fashion_mnist(tmp_path)


def test_read_idx_rejects_other_files(tmp_path):
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="IDX"):
        read_idx(tmp_path / "bad")


@pytest.mark.parametrize("quick", [True, False])
def test_config_and_task_list(quick):
    settings = load_config(DEFAULT_CONFIG, quick)
    tasks = make_tasks(settings)
    keys = [t["key"] for t in tasks]
    assert len(keys) == len(set(keys))
    n_eps, n_trials = len(settings["epsilons"]), settings["trials"]
    main = [t for t in tasks if t["study"] == "main" and t["method"] != "nonprivate"]
    assert len(main) == len(settings["datasets"]) * n_eps * n_trials * 4
    if not quick:
        assert settings["epsilons"] == [0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0]
        assert n_trials == 5
        assert settings["ablation_clusters"] == [1, 2, 5, 10, 20, 50, 100, 200]


def test_cluster_majority_ceiling():
    from ldpfda.experiments.labeldp.oracle import cluster_majority_accuracy

    # Two clusters at -5 and +5; the left one holds labels 0, 0, 1 and the right one
    # 2, 2, 2: test points are labelled 0 on the left and 2 on the right.
    x = np.array([[-5.0], [-5.1], [-4.9], [5.0], [5.1], [4.9]])
    y = np.array([0, 0, 1, 2, 2, 2])
    clusters = np.array([0, 0, 0, 1, 1, 1])
    x_test = np.array([[-4.0], [-6.0], [6.0], [0.5]])
    y_test = np.array([0, 1, 2, 2])
    acc = cluster_majority_accuracy(x, y, clusters, x_test, y_test, n_classes=3)
    assert acc == pytest.approx(3 / 4)
