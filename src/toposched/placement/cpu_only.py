"""Workers without GPUs (`gpus_per_worker=0`): placed by the free CPUs and memory of nodes alone."""

from __future__ import annotations

from collections.abc import Collection

from toposched.placement.capacity import Capacity
from toposched.placement.gang import GangRequest, Placement, Shortfall, WorkerSlot, node_domain
from toposched.topology.cluster import Tier, tier_of

WITHIN = {
    Tier.NODE: "on one node",
    Tier.RACK: "within one rack",
    Tier.POD: "within one pod",
    Tier.CLUSTER: "in the cluster",
}


def place_cpu_only(
    cap: Capacity, request: GangRequest, closed: Collection[int]
) -> Placement | Shortfall:
    """`request.workers` workers of `request.fit` on the present nodes `request.where` admits,
    leaving out `closed` ones (cordoned), no wider apart than `request.widest`: the first
    domain (node, rack or pod, in node order) with room for them all, filled node by node.
    There is no ring to weigh, and first fit leaves the other nodes' CPUs whole."""
    want = request.workers
    tier = request.widest if want > 1 else Tier.NODE
    domains: dict[tuple[str, ...], list[tuple[int, int]]] = {}
    usable = 0
    for i in cap.present_indices():
        if i in closed or not request.where.admits(cap.nodes[i], cap.labels[i]):
            continue
        usable += 1
        room = cap.room(i, request.fit)  # None: the node does not count its CPUs or memory
        room = want if room is None else min(room, want)
        if room:
            domains.setdefault(node_domain(cap.nodes[i], tier), []).append((i, room))
    best = 0
    for members in domains.values():
        total = sum(room for _, room in members)
        if total >= want:
            return _fill(cap, members, want)
        best = max(best, total)
    if not usable:
        return Shortfall("no node it may use: each is cordoned, or ruled out by labels or taints")
    return Shortfall(
        f"needs {want} worker(s) with {request.fit.describe()} each {WITHIN[tier]}; "
        f"there is room for {best}"
    )


def _fill(cap: Capacity, members: list[tuple[int, int]], want: int) -> Placement:
    slots: list[WorkerSlot] = []
    for i, room in members:
        take = min(room, want - len(slots))
        slots.extend(WorkerSlot(cap.nodes[i].name, ()) for _ in range(take))
        if len(slots) == want:
            break
    used = {slot.node for slot in slots}
    tier = tier_of(cap.nodes[cap.index[name]] for name in used)
    return Placement(tuple(slots), None, tier)
