"""What the clusters' labels are worth: the clean cluster-majority classifier.

    python -m ldpfda.experiments.labeldp.oracle [--dataset NAME] [--clusters 100 200]

Every test image gets the **clean** majority training label of its nearest k-means
centroid: not a private method, but how far the cluster-level label information alone
goes (all that ClusterRR passes on when lambda is near 1). Uses the clusterings cached
by ``run`` (same seeds) and prints accuracies normalized by the study's non-private one.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from ldpfda.experiments.labeldp import run


def cluster_majority_accuracy(
    x_train: np.ndarray,
    y_train: np.ndarray,
    clusters: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    n_classes: int,
) -> float:
    """Test accuracy of nearest-centroid assignment + the cluster's majority label."""
    n_clusters = int(clusters.max()) + 1
    sizes = np.bincount(clusters, minlength=n_clusters)[:, None]
    sums = np.zeros((n_clusters, x_train.shape[1]))
    np.add.at(sums, clusters, x_train)
    centroids = sums / np.maximum(sizes, 1)
    counts = np.zeros((n_clusters, n_classes), dtype=np.int64)
    np.add.at(counts, (clusters, y_train), 1)
    majority = counts.argmax(axis=1)
    # Squared distances without an (n_test, C, p) array.
    dist = (
        (x_test**2).sum(axis=1)[:, None]
        - 2.0 * x_test @ centroids.T
        + (centroids**2).sum(axis=1)[None, :]
    )
    dist[:, sizes[:, 0] == 0] = np.inf
    return float(np.mean(majority[dist.argmin(axis=1)] == y_test))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__.splitlines()[0]
    )
    parser.add_argument("--dataset", default="fashion_mnist")
    parser.add_argument("--clusters", type=int, nargs="+", default=[100, 200])
    parser.add_argument("--config", type=Path, default=run.DEFAULT_CONFIG)
    args = parser.parse_args(argv)
    settings = run.load_config(args.config, quick=False)
    data = run._dataset(args.dataset, settings)
    # The study's own non-private point, so the normalizer is the same.
    task = run.make_task(args.dataset, "main", "nonprivate", float("inf"), None, 0)
    nonprivate = run.run_task(task, settings)[0]["accuracy"]
    print(f"{args.dataset}: non-private logistic regression {nonprivate:.4f}")
    for n_clusters in args.clusters:
        accs = [
            cluster_majority_accuracy(
                data.x_train,
                data.y_train,
                run._clusters(args.dataset, n_clusters, trial, settings),
                data.x_test,
                data.y_test,
                data.n_classes,
            )
            for trial in range(settings["trials"])
        ]
        print(
            f"{n_clusters:4d} clusters: clean cluster-majority accuracy "
            f"{np.mean(accs):.4f} (trials {', '.join(f'{a:.4f}' for a in accs)}), "
            f"normalized {np.mean(accs) / nonprivate:.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
