"""The job order: one definition per policy, the waiting lists filed by it, and each job's level.

The policy's `JobOrder` says how waiting jobs rank. Its `job_key` holds a job's own terms, and
`rank` adds its queue's (whether the job fits in the queue's guarantee, how far below its share
the queue is). Jobs of one (queue, shape) list share the queue's terms, so each list is kept in
`job_key` order, and a cycle merges the lists' heads by `rank` (`PendingJobs.order`).

Jobs of one shape (minimum workers, GPUs per worker, the widest tier their locality allows now)
place alike, so a cycle can judge a whole list by its first job. A job's tier widens while it
waits (`node,rack@600`), and a demoted job is promoted after a long wait: it is filed again
when that happens.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from toposched.core.books import Books
from toposched.core.demotion import Demotions
from toposched.core.job import NO_NEEDS, Needs
from toposched.core.policy import Order, SchedulerPolicy
from toposched.core.records import JobRecord, QueueRecord, Said
from toposched.topology.cluster import Tier

# Workers, GPUs each, widest tier, what it needs of nodes besides GPUs (None for nothing: a
# Needs hashes in Python, and a cycle hashes shapes several times per job it looks at, so the
# common case is keyed by a value that hashes in C).
Shape = tuple[int, int, Tier, Needs | None]
Key = tuple[str, Shape]  # (queue, shape)
# Service reaches a threshold at this fraction of it: a sum of runs that rounds to just below
# (3,599.9999999999995 GPU-s for 3,600) must count, as the demotion heap timed it.
_REACHED = 1 - 1e-9
Rank = tuple[float, ...]
Entry = tuple[Any, ...]  # a list entry: the job key, then the job's name


class JobOrder(Protocol):
    """How waiting jobs rank, best first (lower ranks go first)."""

    def job_key(self, rec: JobRecord, level: int) -> Rank:
        """The job's own terms, in their place in the rank."""
        ...

    def rank(self, rec: JobRecord, level: int, queue: QueueRecord, used: int) -> Rank:
        """The whole rank, with `queue` holding `used` GPUs."""
        ...


class FairOrder:
    """`fair`: jobs within their queue's guarantee first, then higher priority, then jobs not
    demoted for their attained service, then the queue furthest below its share, then
    submission order."""

    def job_key(self, rec: JobRecord, level: int) -> Rank:
        return (-rec.spec.priority, level, rec.seq)

    def rank(self, rec: JobRecord, level: int, queue: QueueRecord, used: int) -> Rank:
        need = rec.spec.min_workers * rec.spec.gpus_per_worker
        inside = 0 if used + need <= queue.guaranteed else 1
        priority, level_, seq = self.job_key(rec, level)
        return (inside, priority, level_, queue.share(used), seq)


class FifoOrder:
    """`fifo`: submission order alone (priority, queues and service play no part)."""

    def job_key(self, rec: JobRecord, level: int) -> Rank:
        return (rec.seq,)

    def rank(self, rec: JobRecord, level: int, queue: QueueRecord, used: int) -> Rank:
        return self.job_key(rec, level)


ORDERS: dict[Order, JobOrder] = {Order.FAIR: FairOrder(), Order.FIFO: FifoOrder()}


def shape_now(rec: JobRecord, now: float) -> Shape:
    spec = rec.spec
    waited = now - rec.waiting_since
    relax = spec.locality.relax_after_s
    if relax is not None and now >= rec.waiting_since + relax:
        waited = max(waited, relax)  # the very sum the due heap fired on, whatever the rounding
    tier = spec.locality.allowed(waited).tier
    if spec.min_workers == 1:
        tier = Tier.NODE  # one worker is on one node whatever it would accept
    needs = spec.needs
    return (spec.min_workers, spec.gpus_per_worker, tier, None if needs is NO_NEEDS else needs)


@dataclass(frozen=True)
class Cut:
    """A cycle (its number) that stopped before trying every waiting job: no GPU was left
    free (`head` None), or `head` could not start and jobs start in order (no backfill)."""

    cycle: int
    head: str | None


class PendingJobs:
    """Per (queue, shape): the waiting jobs in the order's `job_key` (the level is 0 for a job
    not demoted, else its level of attained service from 1: `Waiting.demoted_level`)."""

    def __init__(self, order: JobOrder) -> None:
        self.key = order.job_key
        self.lists: dict[Key, list[Entry]] = {}
        self.filed: dict[str, Key] = {}
        self.level: dict[str, int] = {}
        self.shapes: dict[Shape, int] = {}  # waiting jobs per shape, over all queues
        self.per_queue: dict[str, int] = {}  # waiting jobs per queue (a submit's cap reads it)
        # Jobs in each list that declare a run time: lists without any can be judged whole
        # against a reservation (none of their jobs ends before it).
        self.declared: dict[Key, int] = {}
        # (when its tier widens or it is promoted, seq, name): then it may need filing again.
        self._due: list[tuple[float, int, str]] = []
        self.cpu_only = 0  # waiting jobs without GPUs: a cycle goes on for them with none free
        # Waiting jobs asking part of a GPU (a share or a MIG instance): shared GPUs and GPUs
        # in MIG mode, never free, may still have room.
        self.shared = 0
        # Each list's entry in a merge's heap, its head's rank kept until the head changes
        # (`_stale`) or its queue's stamp does: a cycle starts from these rather than ranking
        # every list again, which on a long queue was most of its cost.
        self._heads: dict[Key, tuple[Rank, Key, int, int]] = {}
        self._stale: set[Key] = set()
        self._by_queue: dict[str, dict[Key, None]] = {}  # each queue's lists, in filing order
        self._stamps: dict[str, object] = {}

    def __bool__(self) -> bool:
        return bool(self.filed)

    def add(
        self, rec: JobRecord, now: float, level: int = 0, promote_at: float | None = None
    ) -> None:
        spec = rec.spec
        key = (spec.queue, shape_now(rec, now))
        entries = self.lists.get(key)
        if entries is None:
            entries = self.lists[key] = []
            self._by_queue.setdefault(key[0], {})[key] = None
        entry = (*self.key(rec, level), rec.name)
        at = bisect.bisect_left(entries, entry)
        entries.insert(at, entry)
        if at == 0:
            self._stale.add(key)
        self.filed[rec.name] = key
        self.level[rec.name] = level
        if promote_at is not None:
            heapq.heappush(self._due, (promote_at, rec.seq, rec.name))
        self.shapes[key[1]] = self.shapes.get(key[1], 0) + 1
        self.per_queue[key[0]] = self.per_queue.get(key[0], 0) + 1
        self.cpu_only += spec.cpu_only
        self.shared += spec.part_of_gpu
        if spec.limit_s is not None:
            self.declared[key] = self.declared.get(key, 0) + 1
        locality = spec.locality
        widest = locality.allowed(float("inf")).tier
        if spec.min_workers > 1 and locality.relax_after_s is not None and key[1][2] < widest:
            heapq.heappush(
                self._due, (rec.waiting_since + locality.relax_after_s, rec.seq, rec.name)
            )

    def remove(self, rec: JobRecord) -> Shape | None:
        """Take the job out; returns its shape if it was the last waiting job of that shape."""
        key = self.filed.pop(rec.name)
        level = self.level.pop(rec.name)
        entries = self.lists[key]
        at = bisect.bisect_left(entries, (*self.key(rec, level), rec.name))
        del entries[at]
        if at == 0:
            self._stale.add(key)
        if not entries:
            del self.lists[key]
            lists = self._by_queue[key[0]]
            del lists[key]
            if not lists:
                del self._by_queue[key[0]]
                self._stamps.pop(key[0], None)
        self.per_queue[key[0]] -= 1
        if not self.per_queue[key[0]]:
            del self.per_queue[key[0]]
        self.cpu_only -= rec.spec.cpu_only
        self.shared -= rec.spec.part_of_gpu
        if rec.spec.limit_s is not None:
            self.declared[key] -= 1
            if not self.declared[key]:
                del self.declared[key]
        shape = key[1]
        self.shapes[shape] -= 1
        if self.shapes[shape]:
            return None
        del self.shapes[shape]
        return shape

    def next_due(self) -> float | None:
        """When the next waiting job's locality widens or it is promoted (entries of jobs no
        longer waiting are dropped; one of a job filed again since may be early)."""
        due = self._due
        while due and due[0][2] not in self.filed:
            heapq.heappop(due)
        return due[0][0] if due else None

    def due(self, now: float) -> list[str]:
        """Jobs whose locality widened or that were promoted by `now` (stale entries, of jobs
        that started or were filed again since, are dropped)."""
        out = []
        while self._due and self._due[0][0] <= now:
            _, _, name = heapq.heappop(self._due)
            if name in self.filed:
                out.append(name)
        return out

    def _rank_heads(self, rank: Callable[[str], Rank], stamp: Callable[[str], object]) -> None:
        """Bring `_heads` up to date: lists whose head changed, and every list of a queue whose
        stamp moved, are ranked again."""
        stale = self._stale
        for queue, keys in self._by_queue.items():
            now = stamp(queue)
            if queue not in self._stamps or self._stamps[queue] != now:
                self._stamps[queue] = now
                stale.update(keys)
        heads = self._heads
        for key in stale:
            entries = self.lists.get(key)
            if entries:
                heads[key] = (rank(entries[0][-1]), key, 0, 0)
            else:
                heads.pop(key, None)
        stale.clear()

    def order(
        self,
        rank: Callable[[str], Rank],
        skip: Callable[[Key], bool],
        stamp: Callable[[str], object],
    ) -> Iterator[str]:
        """Merge the lists' heads by rank, best first.

        A rank changes only with its queue's usage, which `stamp` tells (it changes whenever
        the ranks of a queue's jobs may have): after a job starts (it is gone from its list
        when the caller resumes the iterator), every list of its queue is ranked again. A list
        for which `skip` says so when its turn comes is dropped whole.
        """
        self._rank_heads(rank, stamp)
        heap = list(self._heads.values())
        heapq.heapify(heap)
        pos = dict.fromkeys(self._heads, 0)
        by_queue = self._by_queue
        version: dict[str, int] = {}
        while heap:
            _, key, at, seen = heapq.heappop(heap)
            queue = key[0]
            if seen != version.get(queue, 0) or pos.get(key) != at:
                continue  # superseded by a newer entry for this list
            entries = self.lists.get(key, [])
            if at >= len(entries):
                pos.pop(key, None)
                continue
            if skip(key):
                del pos[key]
                continue
            name = entries[at][-1]
            yield name
            entries = self.lists.get(key, [])
            if at < len(entries) and entries[at][-1] == name:
                pos[key] = at + 1  # still waiting: step past it
                if at + 1 < len(entries):
                    heapq.heappush(heap, (rank(entries[at + 1][-1]), key, at + 1, seen))
                else:
                    del pos[key]
                continue
            # It started: its queue's usage, and so the rank of each of its lists, changed.
            version[queue] = seen = version.get(queue, 0) + 1
            for other in by_queue.get(queue, ()):
                if other not in pos:
                    continue
                rest = self.lists.get(other, [])
                if pos[other] < len(rest):
                    heapq.heappush(heap, (rank(rest[pos[other]][-1]), other, pos[other], seen))
                else:
                    del pos[other]


class Waiting:
    """The waiting jobs, filed by the policy's order, and what ranking them needs: each job's
    level (least attained service) and its rank, kept until its queue's usage changes."""

    def __init__(self, books: Books, policy: SchedulerPolicy, demotions: Demotions) -> None:
        self.books = books
        self.policy = policy
        self.demotions = demotions
        self.order = ORDERS[policy.order]
        self.lists = PendingJobs(self.order)
        # The rank depends on queue usage only under `fair`; `fifo` ranks are never kept.
        self._keeps_ranks = policy.order is not Order.FIFO
        self._ranks: dict[str, tuple[int, Rank]] = {}
        # What the last cycle that gave up on a shape said, for the jobs it did not reach.
        # (cycle, text, what the text states that may change before it is read)
        self.shape_notes: dict[Shape, tuple[int, str, Said | None]] = {}
        # Where the last full cycle stopped before the end of the queue, and why.
        self.cut: Cut | None = None

    def __bool__(self) -> bool:
        return bool(self.lists)

    def enqueue(self, rec: JobRecord) -> None:
        level, promote_at = self.level(rec)
        self.lists.add(rec, self.books.now, level, promote_at)

    def dequeue(self, rec: JobRecord) -> None:
        gone = self.lists.remove(rec)
        self._ranks.pop(rec.name, None)
        if gone is not None:
            self.shape_notes.pop(gone, None)

    def refile_due(self) -> None:
        """Jobs whose locality widened or that were promoted since the last cycle move to
        their new place."""
        now = self.books.now
        for name in self.lists.due(now):
            rec = self.books.jobs[name]
            if (
                shape_now(rec, now) != self.lists.filed[name][1]
                or self.level(rec)[0] != self.lists.level[name]
            ):
                self.dequeue(rec)
                self.enqueue(rec)

    def shape_of(self, rec: JobRecord) -> Shape:
        """The shape a waiting job is filed under."""
        return self.lists.filed[rec.name][1]

    # ------------------------------------------------------------------ levels

    def level(self, rec: JobRecord) -> tuple[int, float | None]:
        """A waiting job's level (at least 1: demoted for the service it has had) and when a
        demoted job is promoted back for having waited long (least attained service, as
        Tiresias). A promoted job is forgiven the service it had: it runs as long as a fresh
        one before it can be demoted again, so that it is not preempted as soon as it starts."""
        level = self.demoted_level(rec)
        if not level:
            return 0, None
        promote = self.policy.promote_after_s
        if promote is None:
            return level, None
        promote_at = rec.waiting_since + promote
        if self.books.now >= promote_at:  # the very sum the due heap fired on
            rec.forgiven = rec.service(self.books.now)
            return 0, None
        return level, promote_at

    def demoted_level(self, rec: JobRecord) -> int:
        """0 if `rec` is not demoted; else its level of attained service, from 1 to the
        policy's `demoted_levels`: each level past the first needs `level_ratio` times the
        service of the one before. Within a level jobs keep their submission order, so a
        long job waiting behind others of its level is not passed by each one that has run a
        little less (which would stop and start them in turn, as least attained service
        without levels does)."""
        if not self.demoted(rec):
            return 0
        levels = self.policy.demoted_levels
        if levels == 1:
            return 1
        threshold = self.policy.demote_after_gpu_h
        assert threshold is not None  # demoted
        had = (rec.service(self.books.now) - rec.forgiven) / 3600.0
        level, bar = 1, threshold * self.policy.level_ratio
        while level < levels and had >= bar * _REACHED:
            level, bar = level + 1, bar * self.policy.level_ratio
        return level

    def waiting_level(self, rec: JobRecord) -> int:
        """The level a waiting job is filed at (0 unless demoted and not yet promoted)."""
        return self.lists.level.get(rec.name, 0)

    def demoted(self, rec: JobRecord) -> bool:
        """The job has had at least the policy's demotion threshold of service (since it was
        last promoted)."""
        demote = self.policy.demote_after_gpu_h
        if demote is None:
            return False
        now = self.books.now
        tracked = self.demotions.is_demoted(rec.name, now)
        if tracked is not None:
            return tracked
        # Demotions times a running job's demotion; once it stops, its summed service must
        # agree, whatever the rounding of the sum (a job preempted as demoted that came back
        # undemoted would start again at once on the GPUs freed for another).
        return rec.service(now) - rec.forgiven >= demote * 3600.0 * _REACHED

    def demotes_alone(self) -> bool:
        """Demotion is the only reason to preempt: no queue has a guarantee, and every job
        ever submitted has one priority."""
        if self.policy.demote_after_gpu_h is None or self.books.guarantees():
            return False
        return self.books.one_priority()

    # ------------------------------------------------------------------ ranks

    def rank_after(self, rec: JobRecord, level: int, freed: dict[str, int]) -> Rank:
        """`rec`'s rank as a waiting job at `level`, once `freed` GPUs of each queue are
        given back (reclaim checks that its victims would rank after the job it stops them
        for)."""
        queue = self.books.queues[rec.spec.queue]
        return self.order.rank(rec, level, queue, queue.used - freed.get(queue.name, 0))

    def rank(self, rec: JobRecord) -> Rank:
        return self.rank_after(rec, self.waiting_level(rec), {})

    def rank_of(self, name: str) -> Rank:
        """A waiting job's rank, kept until its queue's usage changes."""
        rec = self.books.jobs[name]
        if not self._keeps_ranks:
            return self.order.job_key(rec, 0)
        version = self.books.queues[rec.spec.queue].version
        kept = self._ranks.get(name)
        if kept is not None and kept[0] == version:
            return kept[1]
        rank = self.rank(rec)
        self._ranks[name] = (version, rank)
        return rank

    def behind_reservation(self, rec: JobRecord) -> bool:
        """`rec` ranks after the job holding the reservation."""
        res = self.books.reservation
        jobs = self.books.jobs
        if res is None or res.job == rec.name or res.job not in jobs:
            return False
        return self.rank(jobs[res.job]) < self.rank(rec)

    def in_order(
        self, only: str | None = None, skip: Callable[[Key], bool] | None = None
    ) -> Iterator[JobRecord]:
        """Waiting jobs best first (see PendingJobs.order); `only` alone."""
        jobs = self.books.jobs
        if only is not None:
            return iter((jobs[only],))
        # A map, not a generator of our own: one frame less for every job a cycle looks at.
        names = self.lists.order(self.rank_of, skip or (lambda key: False), self._stamp)
        return map(jobs.__getitem__, names)

    def _stamp(self, queue: str) -> int:
        """What the ranks of `queue`'s waiting jobs depend on besides their own terms."""
        return self.books.queues[queue].version if self._keeps_ranks else 0
