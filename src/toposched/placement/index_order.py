"""The `index-order` policy: the lowest free GPU indices, and first fit across nodes (a baseline:
what a plain device plugin and a topology-unaware scheduler do)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from toposched.placement.capacity import Capacity
from toposched.placement.gang import (
    GangRequest,
    Placement,
    Shortfall,
    WorkerSlot,
    node_domain,
    ring_gbps,
    slots_of,
)
from toposched.placement.request import NodePlacement, NodeRequest
from toposched.placement.ring import placed
from toposched.placement.tables import from_mask
from toposched.topology.cluster import Tier, tier_of


@dataclass(frozen=True)
class IndexOrder:
    """The `index-order` policy: the lowest free indices (what a plain device plugin does)."""

    def place(self, request: NodeRequest) -> NodePlacement:
        return placed(request.topology, request.free[: request.gpus])


def first_fit(
    cap: Capacity,
    request: GangRequest,
    network: Mapping[Tier, float],
    exclude: Mapping[int, int] | None = None,
) -> Placement | Shortfall:
    """The gang on the lowest-numbered nodes with room, the lowest free GPU indices on each."""
    g, k = request.gpus_per_worker, request.gpus
    hidden = cap.hidden_for(
        request.where, exclude, request.fit, g, lambda i, free, n: from_mask(free)[:n]
    )
    for i in cap.present_indices():
        free = cap.free[i] & ~hidden.get(i, 0)
        if free.bit_count() >= k:
            gpus = from_mask(free)[:k]
            one = slots_of(cap.nodes[i].name, gpus, g)
            return Placement(tuple(one), ring_gbps(cap.nodes[i].topology, gpus), Tier.NODE)
    if request.widest == Tier.NODE or request.workers == 1:
        return Shortfall(_short_on_one_node(cap, request, exclude))
    # Across nodes: the first domain (in node order) of the narrowest tier that has room,
    # filled in node order. Locality is a constraint, so even first fit honours it.
    for tier in (Tier.RACK, Tier.POD, Tier.CLUSTER):
        if tier > request.widest:
            break
        domains: dict[tuple[str, ...], list[int]] = {}
        for i in cap.present_indices():
            domains.setdefault(node_domain(cap.nodes[i], tier), []).append(i)
        for members in domains.values():
            found = _fill_in_order(cap, members, request, network, hidden)
            if found is not None:
                return found
    return Shortfall(
        f"needs {request.workers} workers x {g} GPUs{request.fit.asked()}; first fit found no room"
    )


def _short_on_one_node(
    cap: Capacity, request: GangRequest, exclude: Mapping[int, int] | None
) -> str:
    """Why no node took the gang: its GPUs, or, where a node it may use has them free, the CPUs
    or memory its workers ask (a job told only of GPUs would wait for GPUs that are there)."""
    k = request.gpus
    if request.fit.sized:
        hidden = cap.hidden(request.where, exclude)
        if any((cap.free[i] & ~hidden.get(i, 0)).bit_count() >= k for i in cap.present_indices()):
            return (
                f"needs {request.workers} worker(s) with {request.fit.describe()} each on one "
                f"node; first fit found {k} free GPUs only on nodes without room for them"
            )
    return f"needs {k} GPUs on one node; first fit found none"


def _fill_in_order(
    cap: Capacity,
    members: list[int],
    request: GangRequest,
    network: Mapping[Tier, float],
    exclude: Mapping[int, int],
) -> Placement | None:
    g = request.gpus_per_worker
    slots: list[WorkerSlot] = []
    rings: list[float] = []
    left = request.workers
    for i in members:
        free = cap.free[i] & ~exclude.get(i, 0)
        take = min(left, free.bit_count() // g)
        if take:
            gpus = from_mask(free)[: take * g]
            slots.extend(slots_of(cap.nodes[i].name, gpus, g))
            ring = ring_gbps(cap.nodes[i].topology, gpus)
            if ring is not None:
                rings.append(ring)
            left -= take
        if not left:
            tier = tier_of(cap.nodes[cap.index[s.node]] for s in slots)
            return Placement(tuple(slots), min([network[tier], *rings]), tier)
    return None
