"""Reservations: the GPUs kept for the first blocked job, so that backfill cannot starve it."""

from __future__ import annotations

import heapq
import math
from dataclasses import replace

from toposched.core.books import Books
from toposched.core.errors import InvariantViolation
from toposched.core.job import JobState
from toposched.core.records import JobRecord, Reservation
from toposched.placement.capacity import full_mask
from toposched.placement.gang import (
    GangRequest,
    node_domain,
    node_gpus,
    ring_gbps,
    room_when_empty,
    split_limit,
)
from toposched.placement.levels import level_index
from toposched.placement.tables import to_mask
from toposched.placement.typed import narrowed, one_type_each
from toposched.topology.cluster import Tier

Frees = tuple[float, int, int]  # (latest end of the jobs waited for, their GPUs, GPUs then free)


def end_estimate(books: Books, rec: JobRecord, default_runtime_s: float | None) -> float:
    """When a job holding GPUs is expected to give them back: now if it is being stopped."""
    if rec.state is JobState.STOPPING:
        return books.now
    return rec.expected_end(default_runtime_s)


def describe(books: Books, res: Reservation, default_runtime_s: float | None) -> str:
    """The reservation in words, with the jobs on its GPUs now and their expected ends."""
    cap = books.capacity
    holders: dict[str, float] = {}
    for i, mask in res.gpus.items():
        for gpu in range(cap.nodes[i].size):
            job = books.owner.get((i, gpu)) if mask >> gpu & 1 else None
            if job is not None and job not in holders:
                holders[job] = end_estimate(books, books.jobs[job], default_runtime_s)
    return res.describe(cap, holders)


def _earlier(a: Reservation, b: Reservation) -> bool:
    """`a` is expected to start its job first (ties: the one on the lower-numbered nodes)."""
    return (a.until, sorted(a.gpus)) < (b.until, sorted(b.gpus))


def _first_to_hold(
    members: list[tuple[float, int, int, int, int]], workers: int, limit: int | None
) -> list[tuple[float, int, int, int]] | None:
    """The nodes that hold `workers` soonest, at most `limit` of them: `members` are (until,
    busy GPUs, index, healthy mask, workers held when empty) in order of `until`. As each node
    frees up, the `limit` that hold the most are kept (on ties, the earlier)."""
    kept: list[tuple[int, int, tuple[float, int, int, int]]] = []  # (holds, -order, node)
    held = 0
    for order, (until, busy, i, healthy, holds) in enumerate(members):
        entry = (holds, -order, (until, busy, i, healthy))
        if limit is None or len(kept) < limit:
            heapq.heappush(kept, entry)
            held += holds
        elif entry[0] > kept[0][0]:
            held += holds - heapq.heapreplace(kept, entry)[0]
        if held >= workers:
            return sorted(node for _, _, node in kept)
    return None


class Reserver:
    """Finds the GPUs that free up first for a blocked job. How each node comes to free k GPUs
    is remembered until its jobs change (`Books.node_stamp`); with `validate`, every
    remembered answer is checked against a fresh one."""

    def __init__(self, books: Books, default_runtime_s: float | None, validate: bool) -> None:
        self.books = books
        self.default_runtime_s = default_runtime_s
        self.validate = validate
        self.memo: dict[tuple[int, int], tuple[int, int, int, Frees | None]] = {}

    def end_estimate(self, rec: JobRecord) -> float:
        """When a job holding GPUs is expected to give them back: now if it is being stopped."""
        return end_estimate(self.books, rec, self.default_runtime_s)

    def reserve(self, rec: JobRecord, request: GangRequest) -> Reservation | None:
        """The GPUs that free up first for `rec` (one node if it fits in one, else whole nodes),
        all of one GPU type where the gang runs on one (as placement/typed.py places it): GPUs
        kept on nodes of a type it cannot fill would keep others off them for nothing."""
        types = one_type_each(self.books.capacity, request)
        if not types:
            return self._reserve(rec, request)
        best: Reservation | None = None
        for gpu_type in types:
            found = self._reserve(rec, replace(request, where=narrowed(request.where, gpu_type)))
            if found is not None and (best is None or _earlier(found, best)):
                best = found
        return best

    def _reserve(self, rec: JobRecord, request: GangRequest) -> Reservation | None:
        cap = self.books.capacity
        k = request.gpus
        ruled_out = cap.ruled_out(request.where)
        # First the nodes whose GPUs free up soonest (fewest GPUs to wait for among equals); only
        # those compete on the ring they would give.
        soonest: list[tuple[float, int, int, int]] = []
        for i in cap.present_indices():
            if i in self.books.cordoned or i in ruled_out:
                continue  # its GPUs will not free up for others, or the job may not use them
            healthy = full_mask(cap.nodes[i].size) & ~self.books.unhealthy.get(i, 0)
            if healthy.bit_count() < k or room_when_empty(cap, i, request) < request.workers:
                continue
            found = self._node_frees(i, k, healthy)
            if found is None:
                continue
            latest, released, avail = found
            until = max(self.books.now, latest)
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
        return self.reserve_nodes(rec, request)

    def _node_frees(self, i: int, k: int, healthy: int) -> Frees | None:
        """How node `i` comes to have `k` free GPUs: its jobs end in order of their expected end
        (-inf: none waited for). Kept until the node's jobs change (`Books.node_stamp`), unless
        one of them is being stopped: its end is now, whose order among the others moves."""
        stamp = self.books.node_stamp.get(i, 0)
        kept = self.memo.get((i, k))
        if (
            kept is not None
            and kept[0] == stamp
            and kept[1] == self.books.capacity.free[i]
            and kept[2] == healthy
        ):
            if self.validate and kept[3] != self._count_frees(i, k, healthy)[0]:
                raise InvariantViolation(f"node {i}: a kept reservation answer is stale")
            return kept[3]
        found, now_matters = self._count_frees(i, k, healthy)
        if not now_matters:
            self.memo[(i, k)] = (stamp, self.books.capacity.free[i], healthy, found)
        return found

    def _count_frees(self, i: int, k: int, healthy: int) -> tuple[Frees | None, bool]:
        avail, latest, released = self.books.capacity.free[i], -math.inf, 0
        if avail.bit_count() >= k:
            return (latest, released, avail), False
        jobs = self.books.node_jobs.get(i, {})
        holders = self.books.holders
        ends = sorted((self.end_estimate(holders[job]), job) for job in jobs)
        now_matters = any(holders[job].state is JobState.STOPPING for job in jobs)
        for end, job in ends:
            avail |= jobs[job] & healthy
            latest = max(latest, end)
            released += jobs[job].bit_count()
            if avail.bit_count() >= k:
                return (latest, released, avail), now_matters
        return None, now_matters

    def reserve_nodes(self, rec: JobRecord, request: GangRequest) -> Reservation | None:
        """Whole nodes of one domain the job accepts (of the level it requires, if it names
        one), those that free up first; no more of them than its split limit allows
        (placement/gang.py), or it could not start on them."""
        cap = self.books.capacity
        at = None if request.level is None else level_index(cap.levels, request.level)
        if at is not None and request.widest < Tier.CLUSTER:
            at = min(at, int(request.widest) - 1)  # level i is as wide as tier i + 1
        limit = None
        if request.extra_nodes is not None:
            limit = split_limit(cap, request, request.widest)
        g = request.gpus_per_worker
        ruled_out = cap.ruled_out(request.where)
        domains: dict[tuple[str, ...], list[tuple[float, int, int, int, int]]] = {}
        for i in cap.present_indices():
            if i in self.books.cordoned or i in ruled_out:
                continue
            healthy = full_mask(cap.nodes[i].size) & ~self.books.unhealthy.get(i, 0)
            holds = min(healthy.bit_count() // g, room_when_empty(cap, i, request))
            if not holds:
                continue
            jobs = self.books.node_jobs.get(i, {})
            until = max(
                (self.end_estimate(self.books.jobs[j]) for j in jobs), default=self.books.now
            )
            busy = sum(m.bit_count() for m in jobs.values())
            key = (
                cap.domains[i][at] if at is not None else node_domain(cap.nodes[i], request.widest)
            )
            domains.setdefault(key, []).append((until, busy, i, healthy, holds))
        best: tuple[tuple[float, ...], Reservation] | None = None
        for members in domains.values():
            members.sort()
            chosen = _first_to_hold(members, request.workers, limit)
            if chosen is None:
                continue
            rank = (max(c[0] for c in chosen), sum(c[1] for c in chosen), min(c[2] for c in chosen))
            if best is None or rank < best[0]:
                best = (rank, Reservation(rec.name, {c[2]: c[3] for c in chosen}, rank[0]))
        return best[1] if best else None
