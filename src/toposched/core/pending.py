"""Waiting jobs, filed by queue and gang shape, and merged into one order each cycle.

Jobs of one shape (minimum workers, GPUs per worker, the widest tier their locality allows now)
place alike, so a cycle can judge a whole list by its first job. A job's tier widens while it
waits (`node,rack@600`), and a demoted job is promoted after a long wait: it is filed again
when that happens.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterator

from toposched.core.records import JobRecord
from toposched.topology.cluster import Tier

Shape = tuple[int, int, Tier]
Key = tuple[str, Shape]  # (queue, shape)
Rank = tuple[float, ...]


def shape_now(rec: JobRecord, now: float) -> Shape:
    spec = rec.spec
    waited = now - rec.waiting_since
    relax = spec.locality.relax_after_s
    if relax is not None and now >= rec.waiting_since + relax:
        waited = max(waited, relax)  # the very sum the due heap fired on, whatever the rounding
    tier = spec.locality.allowed(waited).tier
    if spec.min_workers == 1:
        tier = Tier.NODE  # one worker is on one node whatever it would accept
    return (spec.min_workers, spec.gpus_per_worker, tier)


class PendingJobs:
    """Per (queue, shape): the waiting jobs in (-priority, level, submission) order (the level
    is 1 for a job demoted for the service it has had, else 0)."""

    def __init__(self) -> None:
        self.lists: dict[Key, list[tuple[int, int, int, str]]] = {}
        self.filed: dict[str, Key] = {}
        self.level: dict[str, int] = {}
        self.shapes: dict[Shape, int] = {}  # waiting jobs per shape, over all queues
        # Jobs in each list that declare a run time: lists without any can be judged whole
        # against a reservation (none of their jobs ends before it).
        self.declared: dict[Key, int] = {}
        # (when its tier widens or it is promoted, seq, name): then it may need filing again.
        self._due: list[tuple[float, int, str]] = []

    def __bool__(self) -> bool:
        return bool(self.filed)

    def add(
        self, rec: JobRecord, now: float, level: int = 0, promote_at: float | None = None
    ) -> None:
        spec = rec.spec
        key = (spec.queue, shape_now(rec, now))
        bisect.insort(self.lists.setdefault(key, []), (-spec.priority, level, rec.seq, rec.name))
        self.filed[rec.name] = key
        self.level[rec.name] = level
        if promote_at is not None:
            heapq.heappush(self._due, (promote_at, rec.seq, rec.name))
        self.shapes[key[1]] = self.shapes.get(key[1], 0) + 1
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
        del entries[bisect.bisect_left(entries, (-rec.spec.priority, level, rec.seq, rec.name))]
        if not entries:
            del self.lists[key]
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

    def due(self, now: float) -> list[str]:
        """Jobs whose locality widened or that were promoted by `now` (stale entries, of jobs
        that started or were filed again since, are dropped)."""
        out = []
        while self._due and self._due[0][0] <= now:
            _, _, name = heapq.heappop(self._due)
            if name in self.filed:
                out.append(name)
        return out

    def order(self, rank: Callable[[str], Rank], skip: Callable[[Key], bool]) -> Iterator[str]:
        """Merge the lists' heads by rank, best first.

        A rank changes only with its queue's usage: after a job starts (it is gone from its
        list when the caller resumes the iterator), every list of its queue is ranked again.
        A list for which `skip` says so when its turn comes is dropped whole.
        """
        heap: list[tuple[Rank, Key, int, int]] = []
        pos: dict[Key, int] = {}
        by_queue: dict[str, list[Key]] = {}
        version: dict[str, int] = {}
        for key, entries in self.lists.items():
            pos[key] = 0
            by_queue.setdefault(key[0], []).append(key)
            heap.append((rank(entries[0][3]), key, 0, 0))
        heapq.heapify(heap)
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
            name = entries[at][3]
            yield name
            entries = self.lists.get(key, [])
            if at < len(entries) and entries[at][3] == name:
                pos[key] = at + 1  # still waiting: step past it
                if at + 1 < len(entries):
                    heapq.heappush(heap, (rank(entries[at + 1][3]), key, at + 1, seen))
                else:
                    del pos[key]
                continue
            # It started: its queue's usage, and so the rank of each of its lists, changed.
            version[queue] = seen = version.get(queue, 0) + 1
            for other in by_queue[queue]:
                if other not in pos:
                    continue
                rest = self.lists.get(other, [])
                if pos[other] < len(rest):
                    heapq.heappush(heap, (rank(rest[pos[other]][3]), other, pos[other], seen))
                else:
                    del pos[other]
