"""Admission without gangs (a baseline, as kube-scheduler without a gang plugin): workers bind
one at a time, each job holding what it bound until its last worker is bound."""

from __future__ import annotations

import random

from toposched.core.actions import Action
from toposched.core.books import Books
from toposched.core.changes import Changes
from toposched.core.moves import placement_of
from toposched.core.ordering import Waiting
from toposched.core.records import JobRecord
from toposched.core.requests import gang_request, kept_type
from toposched.placement.gang import Placement
from toposched.placement.policies import WorkerPicker
from toposched.placement.random_pick import Room
from toposched.topology.cluster import Tier


class WorkerBinding:
    """The non-gang cycle: waiting jobs bind one worker each in turn (the pods of concurrent
    jobs interleaved), on GPUs the placement policy picks. Two jobs holding parts of what each
    needs wait forever."""

    def __init__(
        self,
        books: Books,
        waiting: Waiting,
        changes: Changes,
        pick: WorkerPicker,
        rng: random.Random,
    ) -> None:
        self.books = books
        self.waiting = waiting
        self.changes = changes
        self.pick = pick
        self.rng = rng

    def run(self) -> list[Action]:
        books = self.books
        waiting: list[JobRecord] = []
        room: Room = {}  # (GPUs per worker, eligibility, fit) -> nodes with that many free
        # The first round walks the queue only as far as free GPUs last; later rounds go
        # over the jobs met so far.
        bound = False
        for rec in self.waiting.in_order():
            if not books.capacity.total_free:
                break
            waiting.append(rec)
            bound = self._bind_one(rec, room) or bound
        while bound and books.capacity.total_free:
            bound = False
            for rec in waiting:
                bound = self._bind_one(rec, room) or bound
        out: list[Action] = []
        for rec in waiting:
            out += self._settle(rec)
        return out

    def _bind_one(self, rec: JobRecord, room: Room) -> bool:
        books = self.books
        g = rec.spec.gpus_per_worker
        if len(rec.partial) >= rec.spec.min_workers or books.capacity.total_free < g:
            return False
        cap = books.capacity
        # A gang of one type keeps to the type of its first bound worker.
        bound = Placement(tuple(rec.partial), None, Tier.NODE) if rec.partial else None
        request = gang_request(rec.spec, 1, Tier.NODE, kept_type(cap, rec.spec, bound))
        slot = self.pick(cap, g, request.where, request.fit, self.rng, room)
        if slot is None:
            return False
        books.allocate(rec, Placement((slot,), None, Tier.NODE))
        rec.partial.append(slot)
        books.held_waiting[rec.name] = len(rec.partial) * g
        return True

    def _settle(self, rec: JobRecord) -> list[Action]:
        """Start a job whose every worker is bound; say how far the others got."""
        books = self.books
        needed = rec.spec.min_workers
        if len(rec.partial) == needed:
            placement = placement_of(books.capacity, rec.partial, books.network_gbps)
            rec.partial = []
            del books.held_waiting[rec.name]
            return self.changes.start(rec, placement, "every worker bound", allocate=False)
        if rec.partial:
            rec.note(books.now, f"holding {len(rec.partial)} of {needed} workers; the rest wait")
        else:
            rec.note(books.now, f"no node has {rec.spec.gpus_per_worker} free GPUs")
        return []
