"""Reclaim: which running jobs a blocked job may preempt, and which of them to stop."""

from __future__ import annotations

from collections.abc import Iterator
from functools import reduce
from itertools import combinations
from operator import or_
from typing import TYPE_CHECKING

from toposched.core.job import JobState
from toposched.core.records import JobRecord
from toposched.placement.gang import GangRequest, Shortfall, node_gpus, place_gang, ring_gbps
from toposched.placement.tables import to_mask
from toposched.topology.cluster import Tier

if TYPE_CHECKING:
    from toposched.core.scheduler import Scheduler

EXHAUSTIVE_VICTIMS = 8
SMALL_VICTIM_SETS = 3


def _victim_sets(jobs: list[JobRecord]) -> Iterator[tuple[JobRecord, ...]]:
    """Sets of victims on one node to try: all of them when there are few, else every set of up
    to three and every prefix of the cheapest-first order (so a large node still finds room)."""
    if len(jobs) <= EXHAUSTIVE_VICTIMS:
        for size in range(1, len(jobs) + 1):
            yield from combinations(jobs, size)
        return
    for size in range(1, SMALL_VICTIM_SETS + 1):
        yield from combinations(jobs, size)
    for size in range(SMALL_VICTIM_SETS + 1, len(jobs) + 1):
        yield tuple(jobs[:size])


def victims_for(s: Scheduler, rec: JobRecord) -> list[JobRecord]:
    """Running jobs `rec` may preempt: work borrowed beyond another queue's guarantee (if
    `rec` is within its own), and lower-priority work of its own queue."""
    spec = rec.spec
    within = s.queues[spec.queue].within_guarantee(spec.min_workers * spec.gpus_per_worker)
    lower = s.policy.preempt_lower_priority and s.lowest_priority[spec.queue] < spec.priority
    if not (within or lower):
        return []
    # Other queues' jobs matter only if `rec` is within its guarantee; all of a queue's jobs
    # then count, in order, to tell where its guarantee ends and borrowing begins.
    running: dict[str, list[JobRecord]] = {}
    # Jobs holding GPUs, found through the GPUs (far fewer than the jobs kept for answers).
    for r in (s.jobs[name] for name in set(s.owner.values())):
        if r.state is not JobState.RUNNING:
            continue
        if r.spec.queue == spec.queue:
            if lower and r.spec.priority < spec.priority:
                running.setdefault(r.spec.queue, []).append(r)
        elif within:
            running.setdefault(r.spec.queue, []).append(r)
    out: list[JobRecord] = []
    for q in s.queues.values():
        jobs = sorted(
            running.get(q.name, ()), key=lambda r: (-r.spec.priority, r.started or 0.0, r.seq)
        )
        if q.name == spec.queue:
            out += jobs
            continue
        held = 0
        for r in jobs:
            held += r.gpus_held()
            if held > q.guaranteed:
                out.append(r)
    return out


def _cost(victims: tuple[JobRecord, ...]) -> tuple[int, int, int, int]:
    """Checkpointable work first, then lower priority, then fewer jobs, then fewer GPUs."""
    return (
        sum(1 for v in victims if not v.spec.checkpointable),
        max((v.spec.priority for v in victims), default=0),
        len(victims),
        sum(v.gpus_held() for v in victims),
    )


def plan_reclaim(
    s: Scheduler, rec: JobRecord, request: GangRequest
) -> tuple[list[JobRecord], dict[int, int]] | None:
    victims = victims_for(s, rec)
    if not victims:
        return None
    cap = s.capacity
    k = request.gpus
    owned: dict[int, dict[str, int]] = {}
    names = {v.name for v in victims}
    for (i, gpu), job in s.owner.items():
        if job in names:
            per = owned.setdefault(i, {})
            per[job] = per.get(job, 0) | 1 << gpu
    best: tuple[tuple[float, ...], list[JobRecord], dict[int, int]] | None = None
    for i, per in owned.items():
        if not cap.present[i]:
            continue
        everything = cap.free[i]
        for mask in per.values():
            everything |= mask
        everything &= ~s.unhealthy.get(i, 0)
        if everything.bit_count() < k:
            continue
        topology = cap.nodes[i].topology
        jobs = sorted((s.jobs[j] for j in per), key=lambda v: (_cost((v,)), v.name))
        for subset in _victim_sets(jobs):
            avail = cap.free[i]
            for v in subset:
                avail |= per[v.name]
            avail &= ~s.unhealthy.get(i, 0)
            if avail.bit_count() < k:
                continue
            gpus = node_gpus(topology, avail, k, cap.aware[i], request.mode)
            ring = ring_gbps(topology, gpus) or 0.0
            cost = _cost(subset)
            key = (cost[0], -ring, *cost[1:], i)
            if best is None or key < best[0]:
                best = (key, list(subset), {i: to_mask(gpus)})
    if best is not None:
        return best[1], best[2]
    if request.widest == Tier.NODE or request.workers == 1:
        return None
    return plan_reclaim_nodes(s, request, victims, owned)


def plan_reclaim_nodes(
    s: Scheduler, request: GangRequest, victims: list[JobRecord], owned: dict[int, dict[str, int]]
) -> tuple[list[JobRecord], dict[int, int]] | None:
    """A multi-node job: place it as if every candidate victim were gone, then preempt the
    victims that hold GPUs of that placement (the placement, not the victims, is optimised)."""
    everything = {i: reduce(or_, per.values(), 0) for i, per in owned.items()}
    with s.capacity.assuming_free(everything):
        found = place_gang(s.capacity, request, s.cluster.network_gbps)
    if isinstance(found, Shortfall):
        return None
    gpus = {s.capacity.index[n]: to_mask(g) for n, g in found.gpus_by_node().items()}
    chosen = [
        v
        for v in victims
        if any(owned.get(i, {}).get(v.name, 0) & mask for i, mask in gpus.items())
    ]
    return chosen, gpus
