"""Peer-to-peer RR for binary labels: :mod:`ldpfda.privacy.peer_to_peer`.

The mechanism and its exact (epsilon, delta) live with the other mechanisms (a client
runs them); they are re-exported here under their historical names.
"""

from ldpfda.privacy.peer_to_peer import (
    PeerToPeerRelease,
    count_distributions,
    hockey_stick_epsilon,
    p2p_epsilon,
    p2p_guarantee,
    p2p_local_epsilon,
    peer_to_peer_rr,
)

__all__ = [
    "PeerToPeerRelease",
    "count_distributions",
    "hockey_stick_epsilon",
    "p2p_epsilon",
    "p2p_guarantee",
    "p2p_local_epsilon",
    "peer_to_peer_rr",
]
