"""The step time a placer gets on a cluster of several GPU types."""

from __future__ import annotations

from collections.abc import Sequence

from toposched.perf import PerfModel
from toposched.perf.steptime import step_time
from toposched.perf.typespeeds import TypeSpeeds
from toposched.placement.by_model import Share, StepTime
from toposched.topology.cluster import Tier
from toposched.topology.node import NodeTopology


def mixed_step_time(
    perf: PerfModel,
    speeds: TypeSpeeds,
    type_of: dict[NodeTopology, str],
    *,
    framework: str,
    network: str,
) -> StepTime:
    """A placer's step time where GPU types differ: each prediction uses the slowest catalog
    type among the nodes of the placement's topologies (`type_of`: every node of a topology
    counted at its slowest type, since a step time sees topologies, not nodes). With one type
    it is that type's own step time."""
    types = sorted(set(type_of.values()))
    per_type = {t: step_time(perf, t, framework=framework, network=network) for t in types}
    if len(per_type) == 1:
        return per_type[types[0]]

    def predict(model: str, shares: Sequence[Share], tier: Tier) -> float | None:
        gpu_type = speeds.slowest(model, (type_of[topology] for topology, _ in shares))
        return per_type[gpu_type](model, shares, tier)

    return predict
