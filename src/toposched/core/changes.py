"""The state changes of a job (start, stop, end, requeue, resume), each keeping the books, the
waiting lists and the demotion clock in step and returning the actions drivers carry out."""

from __future__ import annotations

from collections import deque

from toposched.core.actions import Action, StartJob, StopJob, StopKind, Transition
from toposched.core.books import Books
from toposched.core.demotion import Demotions
from toposched.core.dependencies import failed_why
from toposched.core.job import JobSpec, JobState
from toposched.core.ordering import Waiting
from toposched.core.policy import SchedulerPolicy
from toposched.core.records import JobRecord
from toposched.placement.gang import Placement

# Stops after which the job runs again on its checkpoint: its own grace is all it needs.
CHECKPOINTED = (StopKind.PREEMPT, StopKind.MIGRATE, StopKind.RESIZE, StopKind.IDLE)
ROOM_MAKING = (StopKind.PREEMPT, StopKind.MIGRATE, StopKind.RESIZE)  # stops for another job


def stop_signal(spec: JobSpec, kind: StopKind, policy: SchedulerPolicy) -> tuple[str, float]:
    """The signal a job's workers get when it is stopped for `kind`, and the grace before they
    are killed: a checkpointable job gets its own signal, and for a cancel or a failure at
    least the policy's grace; other jobs SIGTERM and the policy's grace."""
    checkpoint = spec.checkpoint
    if kind in CHECKPOINTED and checkpoint:
        return checkpoint.signal, checkpoint.grace_s
    if checkpoint is not None:
        return checkpoint.signal, max(checkpoint.grace_s, policy.stop_grace_s)
    return "SIGTERM", policy.stop_grace_s


class Changes:
    """Moves jobs between states; every handler and phase changes a job through these."""

    def __init__(
        self, books: Books, waiting: Waiting, demotions: Demotions, policy: SchedulerPolicy
    ) -> None:
        self.books = books
        self.waiting = waiting
        self.demotions = demotions
        self.policy = policy

    def start(
        self, rec: JobRecord, placement: Placement, why: str, allocate: bool = True
    ) -> list[Action]:
        books = self.books
        self.waiting.dequeue(rec)
        if allocate:
            books.allocate(rec, placement)
        rec.placement = placement
        rec.state = JobState.RUNNING
        rec.started = rec.last_restart = books.now
        books.limits.started(rec)
        books.touch_nodes_of(rec)
        self.demotions.started(rec, books.now)
        rec.note(books.now, f"started on {placement.describe()}: {why}")
        if books.reservation is not None and books.reservation.job == rec.name:
            books.reservation = None
        return [
            StartJob(rec.name, rec.reason, placement),
            Transition(rec.name, rec.reason, JobState.PENDING, JobState.RUNNING),
        ]

    def stop(self, rec: JobRecord, kind: StopKind, why: str) -> list[Action]:
        signal, grace = stop_signal(rec.spec, kind, self.policy)
        rec.state = JobState.STOPPING
        self.books.touch_nodes_of(rec)
        rec.stop_kind = kind
        rec.stop_why = why
        if kind in ROOM_MAKING:
            rec.stops += 1
        self.demotions.stopped(rec)
        rec.note(self.books.now, f"stopping ({kind.value}): {why}")
        return [
            StopJob(rec.name, rec.reason, kind, signal, grace),
            Transition(rec.name, rec.reason, JobState.RUNNING, JobState.STOPPING),
        ]

    def resume(self, rec: JobRecord, kind: StopKind) -> list[Action]:
        """A migrated or resized job restarts on its new GPUs; the ones it left are freed."""
        resume = rec.resume
        assert resume is not None
        books = self.books
        keep = set(resume.pairs())
        books.release_pairs(rec, {pair for p in rec.held() for pair in p.pairs()} - keep)
        rec.bank_service(books.now)
        rec.placement, rec.target, rec.resume = resume, None, None
        rec.state = JobState.RUNNING
        books.limits.started(rec)  # the same run: its limit may have come while it moved
        books.touch_nodes_of(rec)
        self.demotions.started(rec, books.now)
        rec.note(books.now, f"restarted after {kind.value} on {resume.describe()}")
        return [
            StartJob(rec.name, rec.reason, resume),
            Transition(rec.name, rec.reason, JobState.STOPPING, JobState.RUNNING),
        ]

    def requeue(self, rec: JobRecord, why: str) -> list[Action]:
        """Back to the waiting lists, keeping its place in submission order."""
        old = rec.state
        rec.state = JobState.PENDING
        rec.waiting_since = self.books.now
        rec.note(self.books.now, why)
        self.waiting.enqueue(rec)
        return [Transition(rec.name, rec.reason, old, JobState.PENDING)]

    def release_all(self, rec: JobRecord) -> None:
        rec.bank_service(self.books.now)
        self.books.release_held(rec)
        self.demotions.stopped(rec)

    def end(self, rec: JobRecord, state: JobState, why: str) -> list[Action]:
        """`rec` ends in `state`; then the jobs waiting for it learn of it (only those: a job's
        end is the event that decides its waiters), and one that asked it to succeed when it
        did not ends `dependency-failed` in turn, its own waiters after it."""
        out = self._end(rec, state, why)
        deps, now = self.books.deps, self.books.now
        ended = deque([rec])
        while ended:
            done = ended.popleft()
            for name, dep in deps.ended(done.name):
                waiter = self.books.jobs[name]
                if not dep.met_by(done.state):
                    why = failed_why(dep, done.state)
                    out += self._end(waiter, JobState.DEPENDENCY_FAILED, why)
                    ended.append(waiter)
                elif deps.release(name):
                    waiter.waiting_since = now  # its locality relaxes from now, as it waits now
                    waiter.note(now, f"{dep.job} {done.state.value}: it may run")
                    self.waiting.enqueue(waiter)
        return out

    def _end(self, rec: JobRecord, state: JobState, why: str) -> list[Action]:
        old = rec.state
        rec.state = state
        rec.note(self.books.now, why)
        self.books.deps.drop(rec.name)  # it waited for a job it runs after: no longer
        self.books.retire(rec, self.policy.keep_finished)
        return [Transition(rec.name, why, old, state)]
