"""GPU-set selection in a node and gang placement on a cluster: the topology-aware objective,
the baselines, and the registry that names them."""

from toposched.placement.policies import POLICIES, NodePolicy, make_policy
from toposched.placement.request import (
    Mode,
    NodePlacement,
    NodeRequest,
    NotEnoughGPUs,
    PlacementError,
)
from toposched.placement.ring import ring_bandwidth

__all__ = [
    "POLICIES",
    "Mode",
    "NodePlacement",
    "NodePolicy",
    "NodeRequest",
    "NotEnoughGPUs",
    "PlacementError",
    "make_policy",
    "ring_bandwidth",
]
