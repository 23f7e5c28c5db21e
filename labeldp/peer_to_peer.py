"""Peer-to-peer RR of binary labels, from :mod:`ldpfda.privacy.peer_to_peer` (where a
client runs it), under its historical names."""

from ldpfda.privacy.peer_to_peer import (
    PeerToPeerRelease,
    hockey_stick_epsilon,
    p2p_epsilon,
    p2p_guarantee,
    p2p_local_epsilon,
    peer_to_peer_rr,
)

__all__ = [
    "PeerToPeerRelease",
    "hockey_stick_epsilon",
    "p2p_epsilon",
    "p2p_guarantee",
    "p2p_local_epsilon",
    "peer_to_peer_rr",
]
