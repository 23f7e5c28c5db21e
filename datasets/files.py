"""Node data files: what a host holds, in the format its SuperNode reads.

One file holds one row per curve (a Flower client node holds one row; a test set may
hold many):

``.npz``
    ``curves`` (n, T) or (T,): curve values on the grid, or feature vectors;
    ``labels`` (n,) or a scalar, in {0, 1}; ``grid`` (T,), strictly increasing, left
    out for vector data.
``.csv``
    A header ``label,<t_1>,...,<t_T>`` whose names are the grid points (names that are
    not numbers, ``label,x1,...``, for vector data), then one row per curve.

The featurizer is public and fixed by the run settings (see
:func:`ldpfda.datasets.population.public_featurizer`), so a file must be sampled on the
design's grid.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpfda._validation import check_binary_labels, check_finite_array
from ldpfda.fda.features import Featurizer

__all__ = [
    "NodeData",
    "load_node_data",
    "save_node_data",
]


@dataclass(frozen=True)
class NodeData:
    """Raw rows of a data file: ``raw`` (n, T) curve values on ``grid`` (feature
    vectors when ``grid`` is None) and ``labels`` in {0, 1}."""

    raw: NDArray[np.float64]
    labels: NDArray[np.int8]
    grid: NDArray[np.float64] | None = None

    def __post_init__(self) -> None:
        raw = check_finite_array(self.raw, "curves")
        if raw.ndim == 1:
            raw = raw[None, :]
        if raw.ndim != 2:
            raise ValueError(f"curves must be 1-D or 2-D, got shape {raw.shape}")
        labels = check_binary_labels(np.atleast_1d(np.asarray(self.labels)))
        if labels.size != raw.shape[0]:
            raise ValueError(
                f"labels has {labels.size} entries for {raw.shape[0]} curves"
            )
        grid = self.grid
        if grid is not None:
            grid = check_finite_array(grid, "grid", ndim=1)
            if grid.size != raw.shape[1]:
                raise ValueError(
                    f"curves have {raw.shape[1]} samples per curve but grid has "
                    f"{grid.size} points"
                )
            if grid.size > 1 and not np.all(np.diff(grid) > 0):
                raise ValueError("grid must be strictly increasing")
        object.__setattr__(self, "raw", raw)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "grid", grid)

    def __len__(self) -> int:
        return int(self.raw.shape[0])

    def features(
        self, featurizer: Featurizer, design_grid: ArrayLike | None
    ) -> NDArray:
        """Scaled coefficients of every row under the run's public ``featurizer``,
        fitted to ``design_grid`` (None for vector data); another grid is refused."""
        if design_grid is not None:
            expected = np.asarray(design_grid, dtype=float)
            if self.grid is None:
                raise ValueError("the run uses curves but the data file has no grid")
            if self.grid.shape != expected.shape or not np.allclose(
                self.grid, expected
            ):
                raise ValueError(
                    f"the data file's grid ({self.grid.size} points on "
                    f"[{self.grid[0]:g}, {self.grid[-1]:g}]) differs from the run's "
                    "grid "
                    f"({expected.size} points on [{expected[0]:g}, {expected[-1]:g}])"
                )
        elif self.grid is not None:
            raise ValueError("the run uses vector data but the data file has a grid")
        return featurizer.transform(self.raw)


def load_node_data(path: str | Path) -> NodeData:
    """Read a node's data file (``.npz`` or ``.csv``, see the module docstring)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as archive:
            missing = {"curves", "labels"} - set(archive.files)
            if missing:
                raise ValueError(f"{path} lacks the array(s) {sorted(missing)}")
            grid = archive["grid"] if "grid" in archive.files else None
            return NodeData(archive["curves"], archive["labels"], grid)
    if suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
        if len(rows) < 2:
            raise ValueError(f"{path} needs a header line and at least one row")
        header = [h.strip() for h in rows[0]]
        if not header or header[0] != "label":
            raise ValueError(f"the first column of {path} must be 'label'")
        try:
            table = np.array(
                [[float(v) for v in row] for row in rows[1:] if row], dtype=float
            )
        except ValueError as exc:
            raise ValueError(f"{path} holds a value that is not a number") from exc
        if table.ndim != 2 or table.shape[1] != len(header):
            raise ValueError(f"every row of {path} must have {len(header)} columns")
        try:  # numeric headers are the grid; names (x1, ...) mean vector data
            grid = np.array([float(name) for name in header[1:]])
        except ValueError:
            grid = None
        return NodeData(table[:, 1:], table[:, 0], grid)
    raise ValueError(f"data files must be .npz or .csv, got {path.name!r}")


def save_node_data(
    path: str | Path,
    curves: ArrayLike,
    labels: ArrayLike,
    grid: ArrayLike | None = None,
) -> Path:
    """Write rows to ``path`` in the ``.npz`` or ``.csv`` format that nodes read."""
    node_grid = cast(NDArray[np.float64] | None, grid)  # NodeData checks and converts
    data = NodeData(np.asarray(curves, dtype=float), np.asarray(labels), node_grid)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".npz":
        arrays: dict[str, Any] = {"curves": data.raw, "labels": data.labels}
        if data.grid is not None:
            arrays["grid"] = data.grid
        np.savez(path, **arrays)
    elif path.suffix.lower() == ".csv":
        names = (
            [repr(float(t)) for t in data.grid]
            if data.grid is not None
            else [f"x{k + 1}" for k in range(data.raw.shape[1])]
        )
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["label", *names])
            for label, row in zip(data.labels, data.raw, strict=True):
                writer.writerow([int(label), *(repr(float(v)) for v in row)])
    else:
        raise ValueError(f"data files must be .npz or .csv, got {path.name!r}")
    return path
