"""The runtime's intake: submissions checked, stored together, then handed to the core in turn.

Submissions that arrive while another holds the runtime's lock are taken together by the next
to get it: one read of their idempotency keys, one transaction, then each handed to the core in
turn. Under a burst each waits for one commit, not for one per submission ahead of it.
"""

from __future__ import annotations

import secrets
import threading
from collections import deque
from collections.abc import Callable, Collection
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from toposched.common.driver import Driver
from toposched.common.jobspec import core_spec
from toposched.core import Ended, JobSpec, JobState, JobSubmitted
from toposched.core.views import CoreView
from toposched.executors.containers import Containers, NoContainerRuntime
from toposched.server.guard import WriteGuard
from toposched.server.predicted import Predictor
from toposched.server.reads import Reads
from toposched.server.shared import (
    ENDED,
    STORE_ERRORS,
    Conflict,
    QueueFull,
    RuntimeBroken,
    SubmitRefused,
    Unavailable,
)
from toposched.store import DuplicateJob, JobRow, NewJob, Store, write_fault

Outcome = tuple[JobRow, bool, str]  # the job, whether a retry found it, its reason
# Jobs one queue may have waiting (`serve --max-waiting`): a team that queues without end
# slows every cycle and list for all. Well above the 10,000-job bursts and the load test's
# ~21,000 waiting in one queue.
MAX_WAITING = 50_000


def ended_before(
    view: CoreView, store: Store, spec: JobSpec, taken: Collection[str] | None = None
) -> Ended:
    """How the jobs `spec` runs after ended, as stored, for those the core no longer holds
    (it forgets ended jobs in time). At submit (`taken`: the batch's names before it), one
    that is neither held, nor of the batch, nor stored is refused (field `after`); at a
    restart, one deleted since it ended is left to the core."""
    out: list[tuple[str, JobState]] = []
    for dep in spec.after:
        if view.knows(dep.job) or (taken is not None and dep.job in taken):
            continue
        row = store.job(dep.job)
        if row is not None and row.state in ENDED:
            out.append((dep.job, JobState(row.state)))
        elif taken is not None:
            raise SubmitRefused(f"no job named {dep.job!r} to run after", "after")
    return tuple(out)


@dataclass(eq=False)
class Submission:
    """A submit waiting for the lock, and what became of it (an outcome or an error)."""

    owner: str
    queue: str
    spec: dict[str, Any]
    name: str | None
    key: str | None
    core: JobSpec | None = None
    ended: Ended = ()  # how the jobs it runs after that the core no longer holds ended
    first: Submission | None = None  # an earlier one of its batch with the same key
    outcome: Outcome | None = None
    error: BaseException | None = None


class Intake:
    """Takes submissions for the runtime: `driver` is fed each one admitted, under `lock`."""

    def __init__(
        self,
        driver: Driver,
        lock: threading.RLock,
        guard: WriteGuard,
        store: Store,
        reads: Reads,
        predictor: Predictor,
        containers: Containers | None,
        cluster_gpus: int,
        clock: Callable[[], float],
        max_waiting: int = MAX_WAITING,
    ) -> None:
        self.driver = driver
        self.lock = lock
        self.guard = guard
        self.store = store
        self.reads = reads
        self.predictor = predictor
        self.containers = containers
        self.cluster_gpus = cluster_gpus
        self.clock = clock
        self.max_waiting = max_waiting
        # Submissions waiting for the lock, kept under a lock of their own.
        self.waiting: deque[Submission] = deque()
        self._waiting_lock = threading.Lock()

    def submit(
        self,
        owner: str,
        queue: str,
        spec: dict[str, Any],
        name: str | None = None,
        key: str | None = None,
    ) -> Outcome:
        """Store a submission, then hand it to the core (it may start at once). Returns the
        job, whether it is one that `owner` submitted before with idempotency `key` (a retry:
        nothing new is stored), and its reason, read under the same hold of the lock (taking
        it again would queue the answer behind every other change)."""
        entry = Submission(owner, queue, spec, name, key)
        with self._waiting_lock:
            self.waiting.append(entry)
        with self.lock:
            if entry.outcome is None and entry.error is None:
                self._take()
        if entry.error is not None:
            raise entry.error
        assert entry.outcome is not None
        return entry.outcome

    def _take(self) -> None:
        """Every submission waiting, in arrival order; under the lock."""
        with self._waiting_lock:
            batch = list(self.waiting)
            self.waiting.clear()
        # Before the check for writes: a retry of a submit that was stored finds its job
        # even while nothing new can be stored.
        keyed = [(e.owner, e.key) for e in batch if e.key is not None]
        try:
            known = self.store.jobs_by_keys(keyed)
        except STORE_ERRORS as err:
            for entry in batch:
                entry.error = Unavailable(write_fault(err))
            return
        fresh: list[Submission] = []
        taken: dict[str, Submission] = {}  # name -> the entry of this batch that takes it
        queued: dict[str, int] = {}  # queue -> its jobs waiting, this batch's admitted too
        firsts: dict[tuple[str, str], Submission] = {}  # (owner, key) -> its first entry
        try:
            for entry in batch:
                try:
                    self._admissible(entry, known, taken, firsts, queued)
                except Exception as err:  # this submission's answer, not the batch's
                    entry.error = err
                    continue
                if entry.outcome is None and entry.first is None:
                    fresh.append(entry)
            self._store_and_feed(fresh)
        finally:
            for entry in batch:
                if entry.first is not None:  # the same key twice in one batch: a retry
                    entry.error, entry.outcome = entry.first.error, entry.first.outcome
                    if entry.outcome is not None:
                        entry.outcome = (*entry.outcome[:1], True, entry.outcome[2])
                if entry.outcome is None and entry.error is None:
                    # Never left without an answer: its thread would take the batch again.
                    entry.error = RuntimeBroken("the submission was not taken: see the log")

    def _admissible(
        self,
        entry: Submission,
        known: dict[tuple[str, str], JobRow],
        taken: dict[str, Submission],
        firsts: dict[tuple[str, str], Submission],
        queued: dict[str, int],
    ) -> None:
        """Check one submission of a batch: sets its outcome if it is a retry of a stored
        one, or `first` if of one earlier in the batch, or raises why it is refused."""
        if entry.key is not None:
            pair = (entry.owner, entry.key)
            stored = known.get(pair)
            first = firsts.get(pair)
            if stored is not None or first is not None:
                had = stored.name if stored is not None else first.name if first else None
                if entry.name is not None and had != entry.name:
                    raise Conflict(f"idempotency key {entry.key!r} was used for job {had!r}")
                if stored is not None:
                    entry.outcome = (stored, True, self.reads.reason_held(stored))
                else:
                    entry.first = first
                return
        self.guard.usable()
        entry.name = entry.name or f"job-{secrets.token_hex(4)}"
        unknown = self.predictor.check_model(entry.spec.get("model"))
        if unknown:
            raise SubmitRefused(unknown, "model")
        if entry.spec.get("image") is not None:
            self._container_runtime()
        core = core_spec(entry.name, entry.owner, entry.queue, entry.spec)
        never = self.driver.core.never_fits(core)
        if never:
            raise SubmitRefused(never, "mig" if core.mig else "gpus")
        self._bound_elastic(core)
        if self.driver.view.knows(entry.name) or entry.name in taken:
            raise Conflict(f"a job named {entry.name!r} already exists")
        entry.ended = ended_before(self.driver.view, self.store, core, taken)
        self._room_in_queue(entry, queued)
        taken[entry.name] = entry
        if entry.key is not None:
            # Only an admitted one: a retry of a refused one is judged on its own.
            firsts[(entry.owner, entry.key)] = entry
        entry.core = core

    def _room_in_queue(self, entry: Submission, queued: dict[str, int]) -> None:
        """QueueFull if the entry's queue has `max_waiting` jobs waiting already; else it
        counts as one more for the rest of the batch."""
        queue = entry.queue
        if queue not in queued:
            queued[queue] = self.driver.view.waiting_in(queue)
        waiting = queued[queue]
        if waiting >= self.max_waiting:
            jobs = "job" if waiting == 1 else "jobs"
            raise QueueFull(
                f"queue {queue!r} has {waiting:,} {jobs} waiting, the most this server "
                f"takes (serve --max-waiting {self.max_waiting}): submit again once some "
                "have started or been cancelled"
            )
        queued[queue] += 1

    def _store_and_feed(self, fresh: list[Submission]) -> None:
        """Store the batch's new jobs in one transaction (if any is refused, one by one, so
        that only it fails), then hand each to the core."""
        if not fresh:
            return
        now = self.clock()
        jobs = [
            NewJob(e.name or "", e.owner, e.queue, e.spec["priority"], e.spec, now, e.key)
            for e in fresh
        ]
        write = self.guard.write
        stored: list[tuple[Submission, JobRow]] = []
        try:
            try:
                stored = list(zip(fresh, write(self.store.add_jobs, jobs), strict=True))
            except DuplicateJob:
                for entry, job in zip(fresh, jobs, strict=True):
                    try:
                        stored.append((entry, write(self.store.add_jobs, [job])[0]))
                    except DuplicateJob as err:
                        entry.error = Conflict(str(err))
        except Unavailable as err:
            for entry in fresh:
                if entry.error is None and all(entry is not e for e, _ in stored):
                    entry.error = err
        for entry, row in stored:
            assert entry.core is not None
            try:
                self.driver.feed(JobSubmitted(now, entry.core, entry.ended))
            except Unavailable:
                # Stored, so accepted: the rebuilt core takes it from the store.
                entry.outcome = (row, False, row.reason)
                continue
            except Exception as err:  # this submission's answer, not the batch's
                entry.error = err
                continue
            if self.driver.view.job(row.name).state is not JobState.PENDING:
                # No longer as stored: read it back, if the database lets us (the answer as
                # stored is still true, only older).
                with suppress(*STORE_ERRORS):
                    row = self.store.job(row.name) or row
            entry.outcome = (row, False, self.reads.reason_held(row))

    def _container_runtime(self) -> None:
        """A job with an image is refused where nothing can run it, saying what is missing."""
        if self.containers is None:
            raise SubmitRefused("this server runs no container images", "image")
        try:
            self.containers.get()
        except NoContainerRuntime as err:
            raise SubmitRefused(str(err), "image") from None

    def _bound_elastic(self, spec: JobSpec) -> None:
        """An elastic job may grow no further than the cluster holds, as its workers may not:
        a larger maximum would only be a promise never kept."""
        if spec.elastic is None:
            return
        most = self.cluster_gpus // spec.gpus_per_worker
        if spec.elastic.max_workers > most:
            raise SubmitRefused(
                f"elastic max ({spec.elastic.max_workers}) is more workers of "
                f"{spec.gpus_per_worker} GPU(s) than the cluster holds ({most})",
                "elastic.max",
            )
