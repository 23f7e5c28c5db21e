"""Label differential privacy via clustering (issue 5), in process.

Only the training labels are private; features, and so clusters built from them, are
public. The package releases a training set's labels under label DP and trains on them:

- :mod:`~ldpfda.labeldp.accounting` -- epsilon of each release and its inverse
  (defined in :mod:`ldpfda.privacy.label_accounting`);
- :mod:`~ldpfda.labeldp.transition` -- label channels and corrected losses;
- :mod:`~ldpfda.labeldp.mechanisms` -- :class:`ClusterRR` (trusted curator) and
  :class:`UniformRR`, returning a :class:`LabelRelease`;
- :mod:`~ldpfda.labeldp.selection` -- :class:`AutoClusterRR`, every parameter chosen
  from released statistics for a target epsilon;
- :mod:`~ldpfda.labeldp.learners` -- backward-, forward-corrected and plain multinomial
  logistic regression;
- :mod:`~ldpfda.labeldp.peer_to_peer` -- the peer-to-peer mechanism for binary labels
  and its exact (epsilon, delta) (defined in :mod:`ldpfda.privacy.peer_to_peer`);
- :mod:`~ldpfda.labeldp.dpsgd` -- the DP-SGD baseline with RDP accounting.

The names below are loaded from their submodule on first access, so importing a
light submodule (accounting, transition, peer_to_peer, mechanisms) does not import
scikit-learn or dp-accounting; the learners and DP-SGD do.

References
----------
H. Esfandiari, V. Mirrokni, U. Syed, S. Vassilvitskii, "Label differential privacy via
clustering", AISTATS 2022.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ldpfda.labeldp.accounting import (
        histogram_epsilon,
        histogram_sigma,
        resampling_epsilon,
        resampling_probability,
        uniform_rr_epsilon,
        uniform_rr_probability,
    )
    from ldpfda.labeldp.dpsgd import (
        DPSGDLogisticRegression,
        calibrate_noise_multiplier,
        dpsgd_epsilon,
    )
    from ldpfda.labeldp.learners import (
        DEFAULT_CS,
        BackwardCorrectedLogisticRegression,
        ForwardCorrectedLogisticRegression,
        NoisyLabelLogisticRegression,
    )
    from ldpfda.labeldp.mechanisms import (
        ClusterRR,
        LabelRelease,
        UniformRR,
        assign_clusters,
        cluster_distributions,
        cluster_label_counts,
        noisy_cluster_histograms,
    )
    from ldpfda.labeldp.peer_to_peer import (
        PeerToPeerRelease,
        p2p_epsilon,
        p2p_guarantee,
        p2p_local_epsilon,
        peer_to_peer_rr,
    )
    from ldpfda.labeldp.selection import (
        AutoClusterRR,
        choose_resampling,
        plan_histogram_share,
        predicted_accuracy,
        release_majority_share,
    )
    from ldpfda.labeldp.transition import (
        corrected_loss,
        corrected_targets,
        forward_probabilities,
        inverse_transition_matrices,
        transition_matrices,
    )

#: Where each public name is defined (loaded on first access).
_SUBMODULE_OF = {
    "histogram_epsilon": "accounting",
    "histogram_sigma": "accounting",
    "resampling_epsilon": "accounting",
    "resampling_probability": "accounting",
    "uniform_rr_epsilon": "accounting",
    "uniform_rr_probability": "accounting",
    "DPSGDLogisticRegression": "dpsgd",
    "calibrate_noise_multiplier": "dpsgd",
    "dpsgd_epsilon": "dpsgd",
    "DEFAULT_CS": "learners",
    "BackwardCorrectedLogisticRegression": "learners",
    "ForwardCorrectedLogisticRegression": "learners",
    "NoisyLabelLogisticRegression": "learners",
    "ClusterRR": "mechanisms",
    "LabelRelease": "mechanisms",
    "UniformRR": "mechanisms",
    "assign_clusters": "mechanisms",
    "cluster_distributions": "mechanisms",
    "cluster_label_counts": "mechanisms",
    "noisy_cluster_histograms": "mechanisms",
    "PeerToPeerRelease": "peer_to_peer",
    "p2p_epsilon": "peer_to_peer",
    "p2p_guarantee": "peer_to_peer",
    "p2p_local_epsilon": "peer_to_peer",
    "peer_to_peer_rr": "peer_to_peer",
    "AutoClusterRR": "selection",
    "choose_resampling": "selection",
    "plan_histogram_share": "selection",
    "predicted_accuracy": "selection",
    "release_majority_share": "selection",
    "corrected_loss": "transition",
    "corrected_targets": "transition",
    "forward_probabilities": "transition",
    "inverse_transition_matrices": "transition",
    "transition_matrices": "transition",
}

__all__ = [
    "DEFAULT_CS",
    "AutoClusterRR",
    "BackwardCorrectedLogisticRegression",
    "ClusterRR",
    "DPSGDLogisticRegression",
    "ForwardCorrectedLogisticRegression",
    "LabelRelease",
    "NoisyLabelLogisticRegression",
    "PeerToPeerRelease",
    "UniformRR",
    "assign_clusters",
    "calibrate_noise_multiplier",
    "choose_resampling",
    "cluster_distributions",
    "cluster_label_counts",
    "corrected_loss",
    "corrected_targets",
    "dpsgd_epsilon",
    "forward_probabilities",
    "histogram_epsilon",
    "histogram_sigma",
    "inverse_transition_matrices",
    "noisy_cluster_histograms",
    "p2p_epsilon",
    "p2p_guarantee",
    "p2p_local_epsilon",
    "peer_to_peer_rr",
    "plan_histogram_share",
    "predicted_accuracy",
    "release_majority_share",
    "resampling_epsilon",
    "resampling_probability",
    "transition_matrices",
    "uniform_rr_epsilon",
    "uniform_rr_probability",
]


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
