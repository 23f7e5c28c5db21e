"""Label differential privacy via clustering (issue 5), in process.

Only the training labels are private; features, and so clusters built from them, are
public. The names below load from their submodule on first access, so the light
submodules (accounting, transition, peer_to_peer, mechanisms) import neither
scikit-learn nor dp-accounting.
"""

import importlib
from typing import Any

#: Where each public name is defined (loaded on first access).
_SUBMODULE_OF = {
    name: submodule
    for submodule, names in {
        "accounting": "histogram_epsilon histogram_sigma resampling_epsilon "
        "resampling_probability uniform_rr_epsilon uniform_rr_probability",
        "dpsgd": "DPSGDLogisticRegression calibrate_noise_multiplier dpsgd_epsilon",
        "learners": "DEFAULT_CS BackwardCorrectedLogisticRegression "
        "ForwardCorrectedLogisticRegression NoisyLabelLogisticRegression",
        "mechanisms": "ClusterRR LabelRelease UniformRR assign_clusters "
        "cluster_distributions cluster_label_counts noisy_cluster_histograms",
        "peer_to_peer": "PeerToPeerRelease p2p_epsilon p2p_guarantee "
        "p2p_local_epsilon peer_to_peer_rr",
        "selection": "AutoClusterRR choose_resampling plan_histogram_share "
        "predicted_accuracy release_majority_share",
        "transition": "corrected_loss corrected_targets "
        "inverse_transition_matrices transition_matrices",
    }.items()
    for name in names.split()
}

__all__ = sorted(_SUBMODULE_OF)


def __getattr__(name: str) -> Any:
    try:
        submodule = _SUBMODULE_OF[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{submodule}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
