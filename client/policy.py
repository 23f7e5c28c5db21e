"""What a node allows, decided by the node's operator, never by the run config.

In local DP the data owner trusts nobody, so everything that decides a node's privacy
comes from the node's own configuration (``flower-supernode --node-config``), which
only the host's operator sets: the run config, which the server's operator sends, can
ask, and the node refuses what its policy does not allow.

A *deployed* node (one with a ``data-path``) must declare a finite lifetime budget;
without one it answers no query. A simulated partition (no data file: the server's
operator simulates it) takes the run's epsilon as its budget, ``inf`` included, which
is for simulation only.

Node config keys
----------------
``privacy-budget`` (float)
    The lifetime epsilon of the node's client, over every run, session and version of
    its data file (:mod:`ldpfda.client.ledger`; required and finite on a deployed
    node).
``max-release-epsilon`` (float)
    The largest epsilon one release may spend (default: only the budget limits it).
``period-budget`` (float) and ``budget-period`` (``hour``, ``day``, ``week`` or seconds)
    An epsilon cap per period as well, as deployed device-side LDP systems keep (e.g.
    1 per day): the releases of the record within the last ``budget-period`` (default
    ``day``) may spend at most ``period-budget``, on top of the lifetime budget.
``features-public`` (bool)
    Whether the node's scaled features may be sent in the clear: only then does it
    take part in the label-only modes. Default false on a deployed node
    (feature-private releases only); a simulated partition, whose data the simulator
    draws, allows them.
``p2p`` (bool)
    Whether the node takes part in the peer-to-peer label mode (``label-p2p``), in
    which its randomized bit goes to the relay, the server, at its local epsilon, and
    is then forwarded to a peer. Same default as ``features-public``; it needs
    ``features-public`` too.
``state-dir`` (str)
    Where the node keeps its lifetime ledger and memoized releases (default
    ``$FLWR_HOME/ldpfda-node``, else ``~/.flwr/ldpfda-node``).

Every refusal goes back to the server as the generic code :data:`ERROR_POLICY`; the
node's own log says which rule refused what.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ldpfda.config import LABEL_MECHANISMS, Settings
from ldpfda.schema.queries import ERROR_POLICY

__all__ = ["MAX_NODE_EPSILON", "PERIODS", "NodePolicy", "PolicyRefusal"]

#: Names ``budget-period`` accepts, in seconds.
PERIODS = {"hour": 3600.0, "day": 86400.0, "week": 604800.0}

logger = logging.getLogger("flwr.ldpfda.node")

#: The largest epsilon a deployed node spends on one release. Beyond it a randomized
#: response flips with probability below 2^-32 (1/(1 + e^22) = 2.8e-10), which the
#: samplers' 52-bit uniforms realise only to a relative error of 2^-20 or worse; near
#: 37 the flip probability rounds to 0 and the release is deterministic.
MAX_NODE_EPSILON = 22.0


class PolicyRefusal(Exception):
    """A query the node's policy refuses; ``reason`` is for the node's log only."""

    code = ERROR_POLICY

    def __init__(self, reason: str) -> None:
        super().__init__("refused by the node's privacy policy")
        self.reason = reason


def _flag(node: dict[str, Any], key: str, *, default: bool) -> bool:
    value = node.get(key, default)
    if isinstance(value, str):
        if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise PolicyRefusal(f"node config {key} must be a bool, got {value!r}")
        return value.lower() in ("true", "1", "yes")
    return bool(value)


def _epsilon(node: dict[str, Any], key: str) -> float | None:
    value = node.get(key)
    if value is None or value == "":
        return None
    try:
        epsilon = float(value)
    except (TypeError, ValueError):
        raise PolicyRefusal(
            f"node config {key} must be a number, got {value!r}"
        ) from None
    if not epsilon > 0:
        raise PolicyRefusal(f"node config {key} must be > 0, got {value!r}")
    return epsilon


def _period(node: dict[str, Any]) -> float:
    value = node.get("budget-period", "day")
    if isinstance(value, str) and value in PERIODS:
        return PERIODS[value]
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not 0 < seconds < math.inf:
        raise PolicyRefusal(
            f"node config budget-period must be one of {sorted(PERIODS)} or a number "
            f"of seconds > 0, got {value!r}"
        )
    return seconds


@dataclass(frozen=True)
class NodePolicy:
    """The node's own privacy rules (see the module docstring).

    Attributes
    ----------
    deployed : bool
        The node holds a data file (a real host), not a simulated partition.
    budget : float
        Lifetime epsilon of the node's record.
    max_release_epsilon : float
    features_public : bool
    state_dir : Path
    p2p : bool
    period_budget : float
        Epsilon the record may spend within any ``period`` seconds (inf: no cap).
    period : float
    """

    deployed: bool
    budget: float
    max_release_epsilon: float
    features_public: bool
    state_dir: Path
    p2p: bool = False
    period_budget: float = math.inf
    period: float = PERIODS["day"]

    @classmethod
    def from_node_config(
        cls, node_config: dict[str, Any], settings: Settings
    ) -> NodePolicy:
        """The policy of a node; ``settings`` only give a simulated node its budget.

        Raises
        ------
        PolicyRefusal
            When a deployed node declares no finite budget, or a key is malformed.
        """
        node = dict(node_config)
        deployed = bool(node.get("data-path"))
        budget = _epsilon(node, "privacy-budget")
        if deployed and (budget is None or math.isinf(budget)):
            raise PolicyRefusal(
                "a node with a data file needs a finite privacy-budget in its node "
                f"config (got {node.get('privacy-budget')!r}); it answers nothing "
                "until its operator sets one"
            )
        if budget is None:
            budget = settings.epsilon  # a simulated partition, run by the simulator
        per_release = _epsilon(node, "max-release-epsilon") or math.inf
        home = os.environ.get("FLWR_HOME") or str(Path.home() / ".flwr")
        state = Path(str(node.get("state-dir") or Path(home) / "ldpfda-node"))
        return cls(
            deployed,
            budget,
            per_release,
            _flag(node, "features-public", default=not deployed),
            state,
            _flag(node, "p2p", default=not deployed),
            _epsilon(node, "period-budget") or math.inf,
            _period(node),
        )

    def check_run(self, settings: Settings) -> None:
        """Refuse a run whose releases this node does not allow.

        Raises
        ------
        PolicyRefusal
            For a label-only mode when the features are not public, an epsilon above
            the node's per-release cap (or :data:`MAX_NODE_EPSILON` on a deployed
            node), or ``epsilon = inf`` outside simulation.
        """
        eps = settings.epsilon
        if settings.mechanism in LABEL_MECHANISMS and not self.features_public:
            raise PolicyRefusal(
                f"privacy.mechanism {settings.mechanism!r} sends the features in the "
                "clear, and this node's features are private (features-public is not "
                "set)"
            )
        if settings.mechanism == "label-p2p" and not self.p2p:
            raise PolicyRefusal("this node does not take part in label-p2p (p2p)")
        if self.deployed and math.isinf(eps):
            raise PolicyRefusal("epsilon = inf (no noise) is for simulation only")
        if self.deployed and eps > MAX_NODE_EPSILON:
            raise PolicyRefusal(
                f"epsilon {eps:g} per release is above {MAX_NODE_EPSILON:g}, where "
                "randomized response is no longer sampled faithfully"
            )
        if eps > self.max_release_epsilon:
            raise PolicyRefusal(
                f"epsilon {eps:g} per release is above this node's "
                f"max-release-epsilon {self.max_release_epsilon:g}"
            )
