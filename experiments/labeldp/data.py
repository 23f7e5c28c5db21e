"""Data of the label-DP study: Fashion-MNIST from local IDX files, and digits.

Nothing here downloads: Fashion-MNIST is read from the IDX files of Debian's
``dataset-fashion-mnist`` package or from a folder the user names; the digits ship
inside scikit-learn. Features are public under label DP, so the PCA projection, the
scaling and the k-means clusters are fitted on training features at no privacy cost.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from sklearn.datasets import load_digits
from sklearn.decomposition import PCA
from sklearn.model_selection import train_test_split

__all__ = [
    "DEFAULT_FASHION_DIR",
    "Dataset",
    "load_dataset",
    "load_fashion_mnist",
    "read_idx",
]

#: Where Debian's ``dataset-fashion-mnist`` package puts the files.
DEFAULT_FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
_FASHION_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


@dataclass(frozen=True)
class Dataset:
    """A train/test split with model features and clustering features.

    ``x_*`` feed the classifiers (centred, one common scale); ``cluster_*`` feed
    k-means (unscaled projections, so that distances keep the geometry of the inputs).
    """

    x_train: NDArray[np.float64]
    y_train: NDArray[np.int64]
    x_test: NDArray[np.float64]
    y_test: NDArray[np.int64]
    cluster_train: NDArray[np.float64]
    n_classes: int


def read_idx(path: str | os.PathLike[str]) -> NDArray:
    """Read an IDX file of unsigned bytes (optionally gzipped) into its stated shape."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        raw = handle.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path} is not an IDX file (bad magic number)")
    if raw[2] != 0x08:  # Fashion-MNIST holds unsigned bytes only
        raise ValueError(f"{path}: IDX element type 0x{raw[2]:02x} is not 0x08 (uint8)")
    ndim = raw[3]
    header = 4 + 4 * ndim
    shape = tuple(
        int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)
    )
    data = np.frombuffer(raw, dtype=np.uint8, offset=header)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header says {shape}, file holds {data.size} values")
    return data.reshape(shape)


def _find(folder: Path, stem: str) -> Path:
    for name in (stem + ".gz", stem, stem.replace("-idx", ".idx")):
        candidate = folder / name
        if candidate.exists():
            return candidate
    raise FileNotFoundError(
        f"{stem}(.gz) not found in {folder}; install Debian's dataset-fashion-mnist "
        "package or pass the folder that holds the Fashion-MNIST IDX files "
        "(nothing is downloaded)"
    )


def load_fashion_mnist(
    folder: str | os.PathLike[str] | None = None,
) -> tuple[NDArray, NDArray, NDArray, NDArray]:
    """Raw Fashion-MNIST: images as (n, 784) floats in [0, 1] and int labels."""
    base = Path(folder) if folder is not None else DEFAULT_FASHION_DIR
    arrays = {key: read_idx(_find(base, stem)) for key, stem in _FASHION_FILES.items()}
    xtr = arrays["train_images"].reshape(len(arrays["train_images"]), -1) / 255.0
    xte = arrays["test_images"].reshape(len(arrays["test_images"]), -1) / 255.0
    ytr, yte = arrays["train_labels"], arrays["test_labels"]
    return xtr, ytr.astype(np.int64), xte, yte.astype(np.int64)


def _subsample(x: NDArray, y: NDArray, size: int | None, seed: int) -> tuple:
    if size is None or size >= len(y):
        return x, y
    index, _ = train_test_split(
        np.arange(len(y)), train_size=size, stratify=y, random_state=seed
    )
    return x[np.sort(index)], y[np.sort(index)]


def load_dataset(
    name: str,
    *,
    n_components: int | None = 50,
    fashion_dir: str | os.PathLike[str] | None = None,
    train_size: int | None = None,
    test_size: int | None = None,
    seed: int = 0,
) -> Dataset:
    """Load ``"fashion_mnist"`` or ``"digits"`` with public-feature preprocessing.

    Fashion-MNIST: PCA to ``n_components`` fitted on the training images (k-means uses
    the PCA scores, the classifiers the same scores centred and divided by one common
    scale). Digits: a fixed stratified 75/25 split (``seed``); k-means uses the raw
    pixels / 16, the classifiers their centred version divided by one common scale.
    ``train_size`` / ``test_size`` take stratified subsamples (quick runs).
    """
    if name == "fashion_mnist":
        xtr, ytr, xte, yte = load_fashion_mnist(fashion_dir)
    elif name == "digits":
        bunch = load_digits()
        x, y = bunch.data / 16.0, bunch.target.astype(np.int64)
        xtr, xte, ytr, yte = train_test_split(
            x, y, test_size=0.25, stratify=y, random_state=seed
        )
    else:
        raise ValueError(f"name must be 'fashion_mnist' or 'digits', got {name!r}")
    xtr, ytr = _subsample(xtr, ytr, train_size, seed)
    xte, yte = _subsample(xte, yte, test_size, seed + 1)
    ctr, cte = xtr, xte
    if name == "fashion_mnist":
        pca = PCA(n_components=n_components, random_state=seed).fit(xtr)
        ctr, cte = pca.transform(xtr), pca.transform(xte)
    # One scale for all columns (unit average variance), not one per column: the ridge
    # penalty then shrinks the minor, noise-dominated directions most (README).
    center = ctr.mean(axis=0)
    scale = float(np.sqrt(np.mean(ctr.var(axis=0))))
    scale = scale if scale > 0 else 1.0
    return Dataset(
        x_train=(ctr - center) / scale,
        y_train=np.asarray(ytr, dtype=np.int64),
        x_test=(cte - center) / scale,
        y_test=np.asarray(yte, dtype=np.int64),
        cluster_train=np.asarray(ctr, dtype=np.float64),
        n_classes=10,
    )
