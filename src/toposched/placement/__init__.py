"""GPU-set selection inside a node: the exact topology-aware objective and baseline policies."""

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
