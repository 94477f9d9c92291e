"""Reservations: the GPUs kept for the first blocked job, so that backfill cannot starve it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from toposched.core.job import JobState
from toposched.core.records import JobRecord
from toposched.core.validate import InvariantViolation
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
    cap = s.capacity
    k = request.gpus
    # First the nodes whose GPUs free up soonest (fewest GPUs to wait for among equals); only
    # those compete on the ring they would give.
    soonest: list[tuple[float, int, int, int]] = []
    for i in cap.present_indices():
        healthy = full_mask(cap.nodes[i].size) & ~s.unhealthy.get(i, 0)
        if healthy.bit_count() < k:
            continue
        found = _node_frees(s, i, k, healthy)
        if found is None:
            continue
        latest, released, avail = found
        until = max(s.now, latest)
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
    return reserve_nodes(s, rec, request, s.node_jobs)


Frees = tuple[float, int, int]  # (latest end of the jobs waited for, their GPUs, GPUs then free)


def _node_frees(s: Scheduler, i: int, k: int, healthy: int) -> Frees | None:
    """How node `i` comes to have `k` free GPUs: its jobs end in order of their expected end
    (-inf: none waited for). Kept until the node's jobs change (`Scheduler.node_stamp`), unless
    one of them is being stopped: its end is now, whose order among the others moves."""
    stamp = s.node_stamp.get(i, 0)
    kept = s.frees_memo.get((i, k))
    if (
        kept is not None
        and kept[0] == stamp
        and kept[1] == s.capacity.free[i]
        and kept[2] == healthy
    ):
        if s.validate and kept[3] != _count_frees(s, i, k, healthy)[0]:
            raise InvariantViolation(f"node {i}: a kept reservation answer is stale")
        return kept[3]
    found, now_matters = _count_frees(s, i, k, healthy)
    if not now_matters:
        s.frees_memo[(i, k)] = (stamp, s.capacity.free[i], healthy, found)
    return found


def _count_frees(s: Scheduler, i: int, k: int, healthy: int) -> tuple[Frees | None, bool]:
    avail, latest, released = s.capacity.free[i], -math.inf, 0
    if avail.bit_count() >= k:
        return (latest, released, avail), False
    jobs = s.node_jobs.get(i, {})
    holders = s.holders
    ends = sorted((end_estimate(s, holders[job]), job) for job in jobs)
    now_matters = any(holders[job].state is JobState.STOPPING for job in jobs)
    for end, job in ends:
        avail |= jobs[job] & healthy
        latest = max(latest, end)
        released += jobs[job].bit_count()
        if avail.bit_count() >= k:
            return (latest, released, avail), now_matters
    return None, now_matters


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
