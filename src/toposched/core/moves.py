"""Plans that move running jobs: elastic growth, and migrations that defragment; the GPUs are
chosen by the scheduler policy's placement (`place_gang`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import combinations

from toposched.core.records import JobRecord
from toposched.core.requests import gang_request, kept_type
from toposched.placement.capacity import Capacity
from toposched.placement.gang import (
    GangRequest,
    Placement,
    Shortfall,
    WorkerSlot,
    ring_gbps,
)
from toposched.placement.policies import GangPlacer
from toposched.placement.tables import to_mask
from toposched.topology.cluster import Tier, tier_of

MAX_MOVES = 3
# Nodes a migration plan tries to open, those with the most free GPUs first: each costs a
# placement per subset of its jobs, and on a large full cluster trying every node at every
# freed GPU was most of the scheduler's time. Clusters of at most this many nodes are unaffected.
MAX_NODES = 128


def placement_of(
    cap: Capacity, slots: Sequence[WorkerSlot], network: Mapping[Tier, float]
) -> Placement:
    """A placement from worker slots: each node's ring of the job's GPUs there, and the tier."""
    tier = tier_of(cap.nodes[cap.index[s.node]] for s in slots)
    rings: list[float] = [] if tier == Tier.NODE else [network[tier]]
    by_node: dict[str, list[int]] = {}
    for slot in slots:
        by_node.setdefault(slot.node, []).extend(slot.gpus)
    for node, gpus in by_node.items():
        ring = ring_gbps(cap.nodes[cap.index[node]].topology, tuple(sorted(gpus)))
        if ring is not None:
            rings.append(ring)
    return Placement(tuple(slots), min(rings) if rings else None, tier)


def plan_growth(
    cap: Capacity,
    rec: JobRecord,
    widest: Tier,
    network: Mapping[Tier, float],
    place_gang: GangPlacer,
) -> tuple[Placement, Placement] | None:
    """The most extra workers an elastic job can take from free GPUs without going wider than
    `widest`: (the extra GPUs, the whole placement after growing), or None."""
    current = rec.placement
    spec = rec.spec
    if current is None or spec.elastic is None:
        return None
    room = spec.max_workers - len(current.workers)
    own_nodes = {cap.index[s.node] for s in current.workers}
    for extra in range(room, 0, -1):
        request = gang_request(spec, extra, widest, kept_type(cap, spec, current))
        if widest == Tier.NODE:
            # Only the job's own node will do: hide every other node from the search.
            others = {i: cap.free[i] for i in cap.present_indices() if i not in own_nodes}
            found = place_gang(cap, request, network, others)
        else:
            found = place_gang(cap, request, network)
        if isinstance(found, Shortfall):
            continue
        whole = placement_of(cap, current.workers + found.workers, network)
        if whole.tier <= widest:
            return found, whole
    return None


@dataclass(frozen=True)
class Move:
    """Migrate `job` to `to` (already free), so that GPUs open up for a blocked job."""

    job: JobRecord
    to: Placement


def plan_defrag(
    cap: Capacity,
    request: GangRequest,
    movable: Mapping[int, Sequence[tuple[JobRecord, int]]],
    network: Mapping[Tier, float],
    place_gang: GangPlacer,
) -> tuple[list[Move], dict[int, int]] | None:
    """The fewest, smallest migrations that open a node for `request` (one node's worth).

    `movable[i]` lists checkpointable single-node jobs on node i with their GPU masks. Each
    moved job must find room elsewhere (never on node i); the plan returns the moves and the
    GPUs to reserve for the blocked job. Of more than MAX_NODES nodes, the MAX_NODES with the
    most free GPUs are tried.
    """
    k = request.gpus
    ruled_out = cap.ruled_out(request.where)
    tried = [i for i in movable if i not in ruled_out]  # the blocked job may not run elsewhere
    if len(tried) > MAX_NODES:
        tried = sorted(tried, key=lambda i: (-cap.free[i].bit_count(), i))[:MAX_NODES]
    best: tuple[tuple[float, ...], list[Move], dict[int, int]] | None = None
    for i in sorted(tried):
        jobs = movable[i]
        node = cap.nodes[i]
        for size in range(1, min(len(jobs), MAX_MOVES) + 1):
            for subset in combinations(jobs, size):
                opened = cap.free[i]
                for _, mask in subset:
                    opened |= mask
                if opened.bit_count() < k:
                    continue
                moves = _relocate(cap, i, [rec for rec, _ in subset], network, place_gang)
                if moves is None:
                    continue
                single = replace(request, widest=Tier.NODE)
                hidden = {j: cap.free[j] for j in cap.present_indices() if j != i}
                with cap.assuming_free({i: opened}):
                    found = place_gang(cap, single, network, hidden)
                if isinstance(found, Shortfall):
                    continue
                gpus = found.gpus_by_node()[node.name]
                key = (size, sum(m.bit_count() for _, m in subset), -(found.bandwidth_gbps or 0), i)
                if best is None or key < best[0]:
                    best = (key, moves, {i: to_mask(gpus)})
            if best is not None:
                break  # fewer moves always beat more
    return (best[1], best[2]) if best else None


def _relocate(
    cap: Capacity,
    source: int,
    jobs: Sequence[JobRecord],
    network: Mapping[Tier, float],
    place_gang: GangPlacer,
) -> list[Move] | None:
    """New homes for `jobs` off node `source`, taken one after another (undone before return)."""
    moves: list[Move] = []
    taken: list[tuple[int, int]] = []
    held: list[tuple[int, int, int]] = []  # CPUs and memory, so that the next move sees them
    try:
        for rec in jobs:
            spec = rec.spec
            current = rec.placement
            assert current is not None
            request = gang_request(
                spec, len(current.workers), Tier.NODE, kept_type(cap, spec, current)
            )
            found = place_gang(cap, request, network, {source: cap.free[source]})
            if isinstance(found, Shortfall):
                return None
            if (found.bandwidth_gbps or 0) < (current.bandwidth_gbps or 0):
                return None  # never make the moved job slower
            for node, gpus in found.gpus_by_node().items():
                j = cap.index[node]
                cap.take(j, to_mask(gpus))
                taken.append((j, to_mask(gpus)))
                workers = len(gpus) // spec.gpus_per_worker
                cap.hold(j, workers * spec.cpus, workers * spec.memory)
                held.append((j, workers * spec.cpus, workers * spec.memory))
            moves.append(Move(rec, found))
        return moves
    finally:
        for j, mask in taken:
            cap.give(j, mask)
        for j, cpus, memory in held:
            cap.hold(j, -cpus, -memory)
