"""Reservations: the GPUs kept for the first blocked job, so that backfill cannot starve it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from toposched.core.job import JobState
from toposched.core.records import JobRecord
from toposched.placement.capacity import Capacity, full_mask
from toposched.placement.gang import GangRequest, node_domain, node_gpus, ring_gbps
from toposched.placement.tables import to_mask
from toposched.topology.cluster import Tier

if TYPE_CHECKING:
    from toposched.core.scheduler import Scheduler


@dataclass
class Reservation:
    """GPUs kept for the first blocked job; `until` is when they are expected to be free."""

    job: str
    gpus: dict[int, int]
    until: float
    awaiting: set[str] = field(default_factory=set)
    _text: str = field(default="", repr=False, compare=False)

    def holds_free(self, capacity: Capacity) -> bool:
        """Whether any reserved GPU is free now (else keeping it from others changes nothing)."""
        return any(capacity.free[i] & mask for i, mask in self.gpus.items())

    def describe(self, capacity: Capacity) -> str:
        if not self._text:  # the GPUs and the time never change once reserved
            self._text = self._describe(capacity)
        return self._text

    def _describe(self, capacity: Capacity) -> str:
        parts = []
        for i, mask in sorted(self.gpus.items()):
            gpus = ",".join(str(g) for g in range(capacity.nodes[i].size) if mask >> g & 1)
            parts.append(f"{capacity.nodes[i].name} GPUs {gpus}")
        when = "when running jobs end" if math.isinf(self.until) else f"by t={self.until:g}"
        return f"reserved {'; '.join(parts)} ({when})"


def end_estimate(s: Scheduler, rec: JobRecord) -> float:
    """When a job holding GPUs is expected to give them back: now if it is being stopped."""
    if rec.state is JobState.STOPPING:
        return s.now
    return rec.expected_end(s.policy.default_runtime_s)


def reserve(s: Scheduler, rec: JobRecord, request: GangRequest) -> Reservation | None:
    """The GPUs that free up first for `rec` (one node if it fits in one, else whole nodes)."""
    by_node = s.node_jobs
    cap = s.capacity
    k = request.gpus
    holders = s.holders
    # First the nodes whose GPUs free up soonest (fewest GPUs to wait for among equals); only
    # those compete on the ring they would give.
    soonest: list[tuple[float, int, int, int]] = []
    for i in cap.present_indices():
        healthy = full_mask(cap.nodes[i].size) & ~s.unhealthy.get(i, 0)
        if healthy.bit_count() < k:
            continue
        avail, until, released = cap.free[i], s.now, 0
        if avail.bit_count() < k:
            jobs = by_node.get(i, {})
            for end, job in sorted((end_estimate(s, holders[job]), job) for job in jobs):
                avail |= by_node[i][job] & healthy
                until = max(until, end)
                released += by_node[i][job].bit_count()
                if avail.bit_count() >= k:
                    break
        if avail.bit_count() < k:
            continue
        if soonest and (until, released) > soonest[0][:2]:
            continue
        if soonest and (until, released) < soonest[0][:2]:
            soonest = []
        soonest.append((until, released, i, avail))
    best: tuple[tuple[float, ...], Reservation] | None = None
    for until, released, i, avail in soonest:
        topology = cap.nodes[i].topology
        gpus = node_gpus(topology, avail, k, cap.aware[i], request.mode)
        key = (until, released, -(ring_gbps(topology, gpus) or 0.0), i)
        if best is None or key < best[0]:
            best = (key, Reservation(rec.name, {i: to_mask(gpus)}, until))
    if best is not None:
        return best[1]
    if request.widest == Tier.NODE:
        return None
    return reserve_nodes(s, rec, request, by_node)


def reserve_nodes(
    s: Scheduler, rec: JobRecord, request: GangRequest, by_node: dict[int, dict[str, int]]
) -> Reservation | None:
    cap = s.capacity
    g = request.gpus_per_worker
    domains: dict[tuple[str, ...], list[tuple[float, int, int, int]]] = {}
    for i in cap.present_indices():
        healthy = full_mask(cap.nodes[i].size) & ~s.unhealthy.get(i, 0)
        if healthy.bit_count() < g:
            continue
        jobs = by_node.get(i, {})
        until = max((end_estimate(s, s.jobs[j]) for j in jobs), default=s.now)
        busy = sum(m.bit_count() for m in jobs.values())
        key = node_domain(cap.nodes[i], request.widest)
        domains.setdefault(key, []).append((until, busy, i, healthy))
    best: tuple[tuple[float, ...], Reservation] | None = None
    for members in domains.values():
        members.sort()
        held, chosen = 0, []
        for until, busy, i, healthy in members:
            chosen.append((until, busy, i, healthy))
            held += healthy.bit_count() // g
            if held >= request.workers:
                break
        if held < request.workers:
            continue
        rank = (max(c[0] for c in chosen), sum(c[1] for c in chosen), min(c[2] for c in chosen))
        if best is None or rank < best[0]:
            best = (rank, Reservation(rec.name, {c[2]: c[3] for c in chosen}, rank[0]))
    return best[1] if best else None
