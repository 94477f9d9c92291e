"""The gang request the placers get for a job: its shape, its nodes, and its GPU type."""

from __future__ import annotations

from toposched.core.job import JobSpec
from toposched.placement.capacity import Capacity
from toposched.placement.gang import GangRequest, Placement
from toposched.placement.request import Mode
from toposched.placement.typed import narrowed
from toposched.topology.cluster import Tier


def gang_request(
    spec: JobSpec,
    workers: int,
    widest: Tier,
    only_type: str | None = None,
    mode: Mode = Mode.PACK,
    extra_nodes: int | None = None,
) -> GangRequest:
    """`workers` of `spec` no wider apart than `widest`; on GPU type `only_type` alone if given;
    `mode` for 1-GPU jobs; on at most `extra_nodes` nodes more than the fewest it needs."""
    where = spec.where if only_type is None else narrowed(spec.where, only_type)
    return GangRequest(
        workers,
        spec.gpus_per_worker,
        widest,
        mode,
        where=where,
        model=spec.model,
        fit=spec.fit,
        mixed_types=spec.mixed_types,
        topology=spec.topology,
        extra_nodes=extra_nodes,
        level=spec.topology_level,
        prefer=spec.topology_prefer,
    )


def kept_type(cap: Capacity, spec: JobSpec, placement: Placement | None) -> str | None:
    """The GPU type a running gang keeps when it grows or moves: its own, unless it accepts
    mixed types or the cluster has one type only."""
    if spec.mixed_types or placement is None or len(cap.gpu_types) < 2:
        return None
    first = placement.workers[0].node
    return cap.nodes[cap.index[first]].hardware.gpu_type
