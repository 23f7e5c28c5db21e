"""Node data files: what a host holds, in the format its SuperNode reads.

Data file format
----------------
A node's data is one file, ``.npz`` or ``.csv``, holding one row per curve (a Flower
client node holds exactly one row: it *is* one client of the protocol; a test set may
hold many rows).

``.npz`` (``numpy.savez``)
    ``curves``: float array of shape ``(n, T)`` (or ``(T,)`` for one curve), the values
    of each curve on the grid, or the feature vectors for vector data;
    ``labels``: integer array of shape ``(n,)`` (or a scalar) with values in {0, 1};
    ``grid``: float array of shape ``(T,)``, strictly increasing sampling points. Leave
    ``grid`` out for vector data (the ``vector`` design).

``.csv`` (comma-separated, one header line)
    The first column is ``label``; every other column holds one sampling point, and its
    header is that point's position on the grid (``label,0.0,0.0101,...``). For vector
    data the headers are names that are not numbers (``label,x1,x2,x3,x4``) and no grid
    is attached.

The featurizer that turns raw rows into scaled coefficients is public and the same for
every client and the server: it is fixed by the run settings (the embedded design named
by ``data.dataset``, its grid, and public calibration curves drawn from the run seed),
exactly as the in-process engine builds it. A data file must therefore be sampled on
that design's grid. The server's public, unlabeled features (the feature second moment
of the moment classifier, :func:`ldpfda.datasets.population.public_features`) come
from the same public information; no node is asked for them.

In a multi-server session (``data.server-id >= 0``, :mod:`ldpfda.server.multiserver`)
every server has its own population, drawn from the design shifted by
``data.feature-shift`` and ``data.label-shift`` on the server's own data stream, while
the featurizer is shared by all servers: it is calibrated on the public stream of the
unshifted design (:func:`ldpfda.datasets.population.population_data`).
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
    """Raw rows of a data file.

    Attributes
    ----------
    raw : ndarray of shape (n, T)
        Curve values on ``grid`` (or feature vectors when ``grid`` is None).
    labels : ndarray of shape (n,)
        Labels in {0, 1}.
    grid : ndarray of shape (T,) or None
        Sampling points of the curves; None for vector data.
    """

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
        """Scaled coefficients of every row under the public ``featurizer``.

        Parameters
        ----------
        featurizer : Featurizer
            The run's public featurizer (see :func:`public_featurizer`).
        design_grid : array-like or None
            The grid the featurizer was fitted to (None for vector data); a file on a
            different grid is refused with a ``ValueError``.
        """
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
        return NodeData(table[:, 1:], table[:, 0], _grid_from_header(header[1:]))
    raise ValueError(f"data files must be .npz or .csv, got {path.name!r}")


def _grid_from_header(names: list[str]) -> NDArray[np.float64] | None:
    try:
        return np.array([float(name) for name in names])
    except ValueError:
        return None


def save_node_data(
    path: str | Path,
    curves: ArrayLike,
    labels: ArrayLike,
    grid: ArrayLike | None = None,
) -> Path:
    """Write rows to ``path`` in the ``.npz`` or ``.csv`` format that nodes read."""
    # NodeData.__post_init__ turns any array-like grid into a checked float array.
    node_grid = cast(NDArray[np.float64] | None, grid)
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
