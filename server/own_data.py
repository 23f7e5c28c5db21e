"""A run on the hosts' own curves: the federation spec and the server's public files.

With ``flower.spec`` the run's features are what the spec makes of each host's own
file (the nodes hold the same spec and refuse any query under another). The server
never falls back on an embedded design: the public second moment comes from the public
calibration curves of ``flower.public-data``, the test set from ``flower.test-data``
(files in the formats of :mod:`ldpfda.datasets.readers`), each featurized by the spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpfda.config import Settings
from ldpfda.server.options import FlowerOptions

__all__ = ["RunData", "run_data"]


@dataclass
class RunData:
    """What the server needs of the run's data: the featurizer (its width), the
    public features of the moment fit, the test set and the spec's hash."""

    featurizer: Any
    public: NDArray[np.float64] | None
    test: tuple[NDArray[np.float64], NDArray[np.int8]] | None
    spec_hash: str | None = None
    #: Where the moment classifier's feature second moment comes from, for the report.
    moment_source: str = "releases"

    def second_moment(self) -> dict[str, Any]:
        """The report's ``second_moment`` block: its source and how many public
        feature vectors it is taken from (0: from the releases)."""
        n = 0 if self.public is None else int(self.public.shape[0])
        return {"source": self.moment_source if n else "releases", "public_rows": n}


def _featurize(spec: Any, path: str) -> tuple[NDArray[np.float64], NDArray[np.int8]]:
    got = spec.featurize_file(path)[1]
    return got.features, got.labels.astype(np.int8)


def run_data(settings: Settings, options: FlowerOptions) -> RunData:
    """The run's :class:`RunData`: from the spec and the server's public files when
    the run has ``flower.spec``, else from the embedded design.

    Raises
    ------
    ValueError
        For a spec run whose moment fit needs public features and has no
        ``flower.public-data``, or whose spec does not match the run's settings.
    """
    from ldpfda.datasets.population import public_features, public_featurizer
    from ldpfda.server.report import test_set

    needs_public = settings.public_features and not settings.label_release
    if not options.spec:
        featurizer, _ = public_featurizer(settings, options.repeat)
        public = None
        if needs_public:
            public = public_features(settings, options.repeat, featurizer=featurizer)
        source = "the embedded design's public calibration draws"
        return RunData(featurizer, public, test_set(settings, options), None, source)
    from ldpfda.schema.spec import FederationSpec

    spec = FederationSpec.load(options.spec)
    if len(spec.labels) != 2:
        raise ValueError(
            f"{options.spec}: the run's protocols take 2 labels, the spec has "
            f"{len(spec.labels)}: {spec.labels}"
        )
    public = None
    if needs_public:
        if not options.public_data:
            raise ValueError(
                "a run with flower.spec fits the public second moment from public "
                "calibration curves: set flower.public-data to their file, or set "
                "privacy.public-features = false to estimate it from the releases"
            )
        public = _featurize(spec, options.public_data)[0]
    # The embedded design's test set ("design", the default) has no place in a run
    # on the hosts' own curves: only a file gives one.
    own_test = options.test_data not in ("", "design")
    test = _featurize(spec, options.test_data) if own_test else None
    source = f"flower.public-data ({options.public_data})"
    return RunData(spec.featurizer(), public, test, spec.hash, source)
