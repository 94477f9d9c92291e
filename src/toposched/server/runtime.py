"""The server's driver loop: store, scheduler core and local executor kept in step.

Every API call and every executor report becomes core events under one lock; the actions that
come back are persisted (one transaction per job state change) and then carried out. Persisting
before acting means a crash can only leave a job the store calls running whose workers never
started, and recovery tells that case apart (no pid or exit files) and requeues it.

Starting and stopping processes is left to the runtime's own thread, in the order decided: an
API call returns once the decision is stored, without waiting for supervisors to come up.

When a write fails (the database locked past its busy timeout, the disk full, a read-only file),
the runtime is degraded rather than dead: it refuses changes (`Unavailable`), starts nothing it
has not stored, lets running workers run, and probes the database every `PROBE_S`. Once a write
succeeds it rebuilds the core from the store, as a restart would (`recover`), and goes on.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NoReturn

from sqlalchemy.exc import SQLAlchemyError

from toposched.common.driver import Driver
from toposched.common.jobspec import (
    core_spec,
    job_kind,
    local_processes,
    placement_from_json,
    placement_json,
)
from toposched.core import (
    Action,
    Ended,
    Event,
    JobCancelled,
    JobFinished,
    JobIdle,
    JobSpec,
    JobState,
    JobStopped,
    JobSubmitted,
    NodeLabelled,
    QueueConfigured,
    Scheduler,
    SchedulerPolicy,
    SchedulingError,
    StartJob,
    StopJob,
    StopKind,
    Tick,
    Transition,
    WorkerFailed,
)
from toposched.executors.containers import NoContainerRuntime
from toposched.executors.local import (
    SESSION_PORT,
    ExecutorError,
    LocalExecutor,
    RunSpec,
    WorkerExit,
    free_port,
)
from toposched.executors.supervisor import read_exit, read_pids
from toposched.server.localnode import LocalNode
from toposched.server.predicted import Predictor
from toposched.store import (
    CORRUPT,
    DuplicateJob,
    JobRow,
    NewJob,
    Store,
    StoreError,
    write_fault,
)
from toposched.store.db import KEEP

if TYPE_CHECKING:
    from toposched.server.activity import ActivityMonitor
from toposched.topology.cluster import Cluster, ClusterError
from toposched.topology.resources import parse_cpus

log = logging.getLogger("toposched.server")

LIVE = tuple(state.value for state in JobState if not state.terminal)
ENDED = tuple(state.value for state in JobState if state.terminal)
TICK_S = 5.0
PROBE_S = 1.0  # how often a degraded runtime tries a write
PEEK_S = 0.1  # how long a read waits for the core before it answers from the store
STORE_ERRORS = (StoreError, SQLAlchemyError)


def clock_time(t: float) -> str:
    """An event time as the server's local date and time, to the millisecond."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1000):03d}"


def _service_until(row: JobRow, gpus: int, now: float) -> float:
    """A running job's attained service at `now`: what it had when its run started (stored
    then, and at every stop), plus the run so far, the time the server was down included (its
    workers ran on). Nothing is lost in a crash; a run whose workers ended while the server was
    down counts until the server learns of the end."""
    since = row.started_at if row.started_at is not None else now
    return row.service_gpu_s + gpus * max(0.0, now - since)


def _log_decision(t: Transition, start: StartJob | None, stop: StopJob | None) -> None:
    """One INFO line per stored state change: the job, old -> new, where it runs or how it is
    stopped, and the core's reason. Built only when INFO is on: the server logs every
    decision of a burst of submissions."""
    if not log.isEnabledFor(logging.INFO):
        return
    how = ""
    if start is not None:
        slots = " ".join(
            f"{s.node}:{','.join(map(str, s.gpus)) or '-'}" for s in start.placement.workers
        )
        how = f" on {slots}"
    elif stop is not None:
        how = f" ({stop.kind.value}: {stop.signal}, SIGKILL after {stop.grace_s:g} s)"
    old = t.old.value if t.old else "-"
    log.info("job %s: %s -> %s%s: %s", t.job, old, t.new.value, how, t.reason)


class RuntimeBroken(RuntimeError):
    """The runtime could not rebuild its state from the database for a reason other than the
    database (a bug): it takes no more calls, and the server exits so that a restart does."""


class Unavailable(RuntimeError):
    """The server cannot write its state now; nothing of the request was stored. `cause` says
    why (the database locked, the disk full, ...)."""

    def __init__(self, cause: str) -> None:
        super().__init__(
            f"the server cannot store changes now: {cause}; nothing was changed, running jobs "
            "keep running; retry later"
        )
        self.cause = cause


class SubmitRefused(ValueError):
    """A submission the cluster can never run; nothing was stored. `field`: the one at fault."""

    def __init__(self, message: str, field: str = "gpus") -> None:
        super().__init__(message)
        self.field = field


class NotFound(LookupError):
    pass


class Conflict(ValueError):
    pass


@dataclass(frozen=True)
class Snapshot:
    """The core's state as reads show it: who holds each GPU, the sick GPUs, the node's labels,
    (guaranteed, used) GPUs and waiting jobs per queue."""

    owners: dict[int, str] = field(default_factory=dict)
    sick: frozenset[int] = frozenset()
    labels: dict[str, str] = field(default_factory=dict)
    held: tuple[int, int] = (0, 0)  # millicores and bytes the node's jobs hold
    usage: dict[str, tuple[int, int]] = field(default_factory=dict)
    waiting: dict[str, int] = field(default_factory=dict)
    fresh: bool = True


@dataclass(eq=False)
class _Submission:
    """A submit waiting for the lock, and what became of it (an outcome or an error)."""

    owner: str
    queue: str
    spec: dict[str, Any]
    name: str | None
    key: str | None
    core: JobSpec | None = None
    ended: Ended = ()  # how the jobs it runs after that the core no longer holds ended
    first: _Submission | None = None  # an earlier one of its batch with the same key
    outcome: tuple[JobRow, bool, str] | None = None
    error: BaseException | None = None


class Runtime(Driver):
    """One machine's scheduler: call `recover()` once, then `start()` the background loop."""

    def __init__(
        self,
        store: Store,
        executor: LocalExecutor,
        local: LocalNode,
        policy: SchedulerPolicy,
        *,
        clock: Callable[[], float] = time.time,
        observe: Callable[[float], None] | None = None,
    ) -> None:
        self.store = store
        self.executor = executor
        self.local = local
        self.policy = policy
        self.clock = clock
        self.observe = observe
        self.lock = threading.RLock()
        # Submissions waiting for the lock (`submit`), kept under a lock of their own.
        self._intake: deque[_Submission] = deque()
        self._intake_lock = threading.Lock()
        self.node = local.node
        self.predictor = Predictor(local.node)
        super().__init__(self._new_core())
        self.attempts: dict[str, int] = {}
        self.exits: dict[tuple[str, int], dict[int, WorkerExit]] = {}
        # Executor operations decided under the lock, carried out in order by the loop thread.
        self._ops: deque[Callable[[], None]] = deque()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.broken: str | None = None
        # Why state cannot be written now; None while it can.
        self.degraded: str | None = None
        self._next_probe = 0.0
        self._snapshot = Snapshot()
        self._last_tick = 0.0
        # Jobs deleted while live, removed once they have ended (store.delete_when_ended);
        # and those removed in the last feed, for the answer of the delete that ended them.
        self._deleting: set[str] = set()
        self._just_removed: dict[str, JobRow] = {}
        # How busy each job's GPUs are (server/activity.py), once `serve` has started it.
        self.activity: ActivityMonitor | None = None

    def _new_core(self) -> Scheduler:
        """A core for the node and queues as stored (at start, and when rebuilt)."""
        labels = self.store.labels().get(self.local.node.name, {})
        base = self.local.node
        # The node as found (its hardware and taints too), with the labels set through the API.
        self.node = replace(base, labels={**base.labels, **labels})
        return Scheduler(Cluster((self.node,)), self.policy, self.store.queues())

    # ------------------------------------------------------------------ start and stop

    def recover(self) -> list[str]:
        """Load what the store says is live: adopt running workers, requeue waiting jobs in
        their submission order. Returns one line per job whose fate changed."""
        notes: list[str] = []
        with self.lock:
            rows = []
            for row in self.store.jobs(states=LIVE):
                if row.state == CORRUPT:
                    # Nothing can be restored from it: it is listed as corrupt, and its workers,
                    # if any run, are not adopted (the log has what could not be read).
                    log.error("job %s: %s; not restored", row.name, row.reason)
                    notes.append(f"{row.name}: not restored: {row.reason}")
                    continue
                rows.append(row)
            self._deleting = {r.name for r in rows if r.delete_when_ended}
            for row in self.store.ended_to_delete(ENDED):  # ended before a crash let them go
                if self._removed(row):
                    notes.append(f"{row.name}: deleted (it had ended; its delete was asked live)")
            running = [r for r in rows if r.state != "pending"]
            waiting = [r for r in rows if r.state == "pending"]
            for row in running:
                notes.extend(self._adopt(row, waiting))
            waiting.sort(key=lambda r: r.seq)
            now = self.clock()
            for row in waiting:
                spec = core_spec(row.name, row.owner, row.queue, row.spec)
                self.restore(
                    now,
                    spec,
                    row.submitted_at,
                    None,
                    row.restarts,
                    None,
                    row.service_gpu_s,
                    self._ended_before(spec),
                )
        return notes

    def _adopt(self, row: JobRow, waiting: list[JobRow]) -> list[str]:
        now = self.clock()
        spec = core_spec(row.name, row.owner, row.queue, row.spec)
        run_dir = self.executor.run_dir(row.name, row.attempt)
        kind, ps = job_kind(row.spec)
        # Every process: a parameter server's or launcher's records count as a worker's do
        ranks = range(len(local_processes(row.spec, len(row.placement or []))))
        # A supervisor leaves a pid file once its worker runs, or only an exit file when the
        # command could not be started at all. A rank with neither means the start was cut
        # short: what it did start is killed (a slow supervisor would start its worker later,
        # unwatched, on GPUs given to others), and the job counts as never started.
        launched = bool(ranks) and all(
            read_pids(run_dir, rank) is not None or read_exit(run_dir, rank) is not None
            for rank in ranks
        )
        if not launched:
            self.executor.abandon(row.name, row.attempt)
            if row.stop_kind == "cancel":  # cancelled before its workers started: not requeued
                why = "cancelled before its workers started"
                self.store.transition(
                    row.name, row.state, "cancelled", why, now, stop_kind=None, ended_at=now
                )
                return [f"{row.name}: cancelled (its workers had not started)"]
            self._requeue_row(row, now, "requeued: the server stopped before its workers started")
            waiting.append(self.store.job(row.name) or row)
            return [f"{row.name}: requeued (its workers had not started)"]
        placement = placement_from_json(row.placement or [])
        # A stop under way (cancel, failure, preemption, move) is carried on: the core holds the
        # job as stopping until its workers are gone, however long ago they went.
        stopping = StopKind(row.stop_kind or "preempt") if row.state == "stopping" else None
        try:
            self.restore(
                now,
                spec,
                row.submitted_at,
                placement,
                row.restarts,
                stopping,
                _service_until(row, placement.gpus, now),
            )
        except SchedulingError as err:
            self.executor.adopt(row.name, row.attempt, len(placement.workers), kind, ps)
            self.executor.stop(row.name, row.attempt, "SIGKILL", 0)
            self._requeue_row(row, now, f"requeued: its placement no longer fits ({err})")
            waiting.append(self.store.job(row.name) or row)
            return [f"{row.name}: stopped and requeued ({err})"]
        self.executor.adopt(row.name, row.attempt, len(placement.workers), kind, ps)
        self.attempts[row.name] = row.attempt
        if stopping is not None:
            signal, grace = self.stop_signal(spec, stopping)
            deadline = self.store.stop_deadline(row.name)
            if deadline is not None:  # the grace began before the restart: what is left of it
                grace = min(grace, max(0.0, deadline - now))
            self._later(self._stop_run, row.name, row.attempt, signal, grace)
            return [f"{row.name}: adopted attempt {row.attempt}, still stopping ({stopping})"]
        return [f"{row.name}: adopted attempt {row.attempt} on {placement.describe()}"]

    def _requeue_row(self, row: JobRow, now: float, why: str) -> None:
        self.store.transition(
            row.name, row.state, "pending", why, now, placement=None, stop_kind=None
        )

    def start(self, interval_s: float = 0.1) -> None:
        """Poll workers and tick the core in a background thread until `stop()`."""
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, args=(interval_s,), name="toposched-runtime", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop; running workers keep running and are adopted on the next start."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self, interval_s: float) -> None:
        while not self._stop.is_set():
            self._wake.wait(interval_s)
            self._wake.clear()
            try:
                self.step()
            except Unavailable:
                pass  # degraded, and said so: the next steps probe the database
            except Exception:
                log.exception("runtime step failed; retrying")

    def step(self) -> None:
        """One pass: start and stop what was decided, collect worker exits, feed them, and
        tick now and then; degraded, try to write again."""
        if self.broken is not None:
            return
        while self._ops:
            self._ops.popleft()()
        if self.degraded is not None:
            # Overdue stops are still escalated; the ends seen are read again from the
            # supervisors' files once the core is rebuilt.
            self.executor.poll()
            self._try_recover()
            return
        # One poll may report several workers of a gang: they are taken together, since the
        # first one taken alone would look like the gang's last (the executor has already
        # marked the others reported) and decide the job's fate without them.
        runs: dict[tuple[str, int], list[WorkerExit]] = {}
        for ended in self.executor.poll():
            runs.setdefault((ended.job, ended.attempt), []).append(ended)
        with self.lock:
            now = self.clock()
            for (job, attempt), ends in runs.items():
                self._workers_ended(job, attempt, ends, now)
            if now - self._last_tick >= TICK_S:
                self._last_tick = now
                self.feed(Tick(now))

    # ------------------------------------------------------------------ API operations

    def submit(
        self,
        owner: str,
        queue: str,
        spec: dict[str, Any],
        name: str | None = None,
        key: str | None = None,
    ) -> tuple[JobRow, bool, str]:
        """Store a submission, then hand it to the core (it may start at once). Returns the
        job, whether it is one that `owner` submitted before with idempotency `key` (a retry:
        nothing new is stored), and its reason, read under the same hold of the lock (taking
        it again would queue the answer behind every other change).

        Submissions that arrive while another holds the lock are taken together by the next
        to get it (`_take_submissions`): one read of their keys, one transaction, then each
        handed to the core in turn. Under a burst each waits for one commit, not for one per
        submission ahead of it."""
        entry = _Submission(owner, queue, spec, name, key)
        with self._intake_lock:
            self._intake.append(entry)
        with self.lock:
            if entry.outcome is None and entry.error is None:
                self._take_submissions()
        if entry.error is not None:
            raise entry.error
        assert entry.outcome is not None
        return entry.outcome

    def _take_submissions(self) -> None:
        """Every submission waiting in the intake, in arrival order; under the lock."""
        with self._intake_lock:
            batch = list(self._intake)
            self._intake.clear()
        # Before the check for writes: a retry of a submit that was stored finds its job
        # even while nothing new can be stored.
        keyed = [(e.owner, e.key) for e in batch if e.key is not None]
        try:
            known = self.store.jobs_by_keys(keyed)
        except STORE_ERRORS as err:
            for entry in batch:
                entry.error = Unavailable(write_fault(err))
            return
        fresh: list[_Submission] = []
        taken: dict[str, _Submission] = {}  # name -> the entry of this batch that takes it
        firsts: dict[tuple[str, str], _Submission] = {}  # (owner, key) -> its first entry
        try:
            for entry in batch:
                try:
                    self._admissible(entry, known, taken, firsts)
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
        entry: _Submission,
        known: dict[tuple[str, str], JobRow],
        taken: dict[str, _Submission],
        firsts: dict[tuple[str, str], _Submission],
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
                    entry.outcome = (stored, True, self._reason_held(stored))
                else:
                    entry.first = first
                return
        self._usable()
        entry.name = entry.name or f"job-{secrets.token_hex(4)}"
        unknown = self.predictor.check_model(entry.spec.get("model"))
        if unknown:
            raise SubmitRefused(unknown, "model")
        if entry.spec.get("image") is not None:
            self._container_runtime()
        core = core_spec(entry.name, entry.owner, entry.queue, entry.spec)
        never = self.core.never_fits(core)
        if never:
            raise SubmitRefused(never, "mig" if core.mig else "gpus")
        self._bound_elastic(core)
        if self.view.knows(entry.name) or entry.name in taken:
            raise Conflict(f"a job named {entry.name!r} already exists")
        entry.ended = self._ended_before(core, taken)
        taken[entry.name] = entry
        if entry.key is not None:
            # Only an admitted one: a retry of a refused one is judged on its own.
            firsts[(entry.owner, entry.key)] = entry
        entry.core = core

    def _store_and_feed(self, fresh: list[_Submission]) -> None:
        """Store the batch's new jobs in one transaction (if any is refused, one by one, so
        that only it fails), then hand each to the core."""
        if not fresh:
            return
        now = self.clock()
        jobs = [
            NewJob(e.name or "", e.owner, e.queue, e.spec["priority"], e.spec, now, e.key)
            for e in fresh
        ]
        stored: list[tuple[_Submission, JobRow]] = []
        try:
            try:
                stored = list(zip(fresh, self._write(self.store.add_jobs, jobs), strict=True))
            except DuplicateJob:
                for entry, job in zip(fresh, jobs, strict=True):
                    try:
                        stored.append((entry, self._write(self.store.add_jobs, [job])[0]))
                    except DuplicateJob as err:
                        entry.error = Conflict(str(err))
        except Unavailable as err:
            for entry in fresh:
                if entry.error is None and all(entry is not e for e, _ in stored):
                    entry.error = err
        for entry, row in stored:
            assert entry.core is not None
            try:
                self.feed(JobSubmitted(now, entry.core, entry.ended))
            except Unavailable:
                # Stored, so accepted: the rebuilt core takes it from the store.
                entry.outcome = (row, False, row.reason)
                continue
            except Exception as err:  # this submission's answer, not the batch's
                entry.error = err
                continue
            if self.view.job(row.name).state is not JobState.PENDING:
                # No longer as stored: read it back, if the database lets us (the answer as
                # stored is still true, only older).
                with suppress(*STORE_ERRORS):
                    row = self.store.job(row.name) or row
            entry.outcome = (row, False, self._reason_held(row))

    def _ended_before(self, spec: JobSpec, taken: Collection[str] | None = None) -> Ended:
        """How the jobs `spec` runs after ended, as stored, for those the core no longer
        holds (it forgets ended jobs in time). At submit (`taken`: the batch's names before
        it), one that is neither held, nor of the batch, nor stored is refused (field
        `after`); at a restart, one deleted since it ended is left to the core."""
        out: list[tuple[str, JobState]] = []
        for dep in spec.after:
            if self.view.knows(dep.job) or (taken is not None and dep.job in taken):
                continue
            row = self.store.job(dep.job)
            if row is not None and row.state in ENDED:
                out.append((dep.job, JobState(row.state)))
            elif taken is not None:
                raise SubmitRefused(f"no job named {dep.job!r} to run after", "after")
        return tuple(out)

    def _container_runtime(self) -> None:
        """A job with an image is refused where nothing can run it, saying what is missing."""
        if self.executor.containers is None:
            raise SubmitRefused("this server runs no container images", "image")
        try:
            self.executor.containers.get()
        except NoContainerRuntime as err:
            raise SubmitRefused(str(err), "image") from None

    def _bound_elastic(self, spec: JobSpec) -> None:
        """An elastic job may grow no further than the cluster holds, as its workers may not:
        a larger maximum would only be a promise never kept."""
        if spec.elastic is None:
            return
        most = self.node.size // spec.gpus_per_worker
        if spec.elastic.max_workers > most:
            raise SubmitRefused(
                f"elastic max ({spec.elastic.max_workers}) is more workers of "
                f"{spec.gpus_per_worker} GPU(s) than the cluster holds ({most})",
                "elastic.max",
            )

    def _job_row(self, name: str) -> JobRow:
        """Job `name` as stored; NotFound if there is none."""
        row = self.store.job(name)
        if row is None:
            raise NotFound(f"no job named {name!r}")
        return row

    def cancel(self, name: str) -> JobRow:
        with self.lock:
            self._usable()
            row = self._job_row(name)
            if row.state not in LIVE:
                raise Conflict(f"job {name!r} has already ended ({row.state})")
            try:
                self.feed(JobCancelled(self.clock(), name))
            except Unavailable:
                # Answered as stored: done if the job's own change was, else refused (503).
                after = self.store.job(name)
                if after is None or after.state == row.state:
                    raise
                return after
            if row.state == "stopping":
                # The core cancels it once the stop under way is over, with no transition to
                # store now: a restart meanwhile must still know that it was cancelled.
                self._after_decision(self.store.set_stop_kind, name, "cancel")
            return self.store.job(name) or row

    def remove(self, name: str) -> JobRow:
        """Delete ended job `name` from the store and the core: its name is free again.
        Returns the job as it was; Conflict for a live one (cancel it first)."""
        with self.lock:
            self._usable()
            row = self._job_row(name)
            if row.state in LIVE or not self._removed(row):
                raise Conflict(f"job {name!r} is {row.state}: only an ended job can be deleted")
            return row

    def delete_live(self, name: str) -> tuple[JobRow, bool]:
        """Cancel live job `name` and remove it once it has ended (at once if cancelling ended
        it): the job as it is now, and whether it is removed already. The wish is stored, so
        a server restarted meanwhile still removes it."""
        with self.lock:
            self._usable()
            row = self._job_row(name)
            if row.state not in LIVE:
                raise Conflict(f"job {name!r} has already ended ({row.state})")
            self._write(self.store.delete_when_ended, name)
            self._deleting.add(name)
            after = self.cancel(name)
            removed = self._just_removed.pop(name, None)
            return (removed, True) if removed is not None else (after, False)

    def _removed(self, row: JobRow) -> bool:
        """Remove ended job `row` from the store, the core and the disk; whether it was."""
        if not self._write(self.store.remove_job, row.name, ENDED, self.clock()):
            return False
        self.core.forget(row.name)
        self._discard_runs(row.name)
        self._deleting.discard(row.name)
        log.info("job %s: %s -> deleted: its name is free again", row.name, row.state)
        return True

    def _remove_deleted(self) -> None:
        """Remove the jobs deleted while live that have ended since."""
        for name in sorted(self._deleting):
            row = self.store.job(name)
            if row is None:
                self._deleting.discard(name)
            elif row.state in ENDED and self._removed(row):
                self._just_removed[name] = row

    def _discard_runs(self, name: str) -> None:
        """A deleted job's runs (logs, pid and exit files) and checkpoints go with it: a new job
        of its name would find them (its attempt 0 refused as started, the old checkpoint
        loaded). Moved aside at once, removed by the loop thread (a checkpoint may be large)."""
        home = self.executor.run_dir(name, 0).parent
        trash = home.with_name(f".deleted-{name}-{secrets.token_hex(4)}")
        try:
            home.rename(trash)
        except FileNotFoundError:
            return  # it never started
        except OSError as err:
            log.warning("job %s: deleted, but its runs stay in %s: %s", name, home, err)
            return
        self._later(shutil.rmtree, trash, True)

    def configure_queue(self, name: str, guaranteed_gpus: int | None, idle: Any = KEEP) -> None:
        """Set a queue's share and/or its idle rule (`idle`: the wire's IdleIn as stored, None
        to remove it, KEEP to leave it)."""
        with self.lock:
            self._usable()
            self._write(self.store.set_queue, name, guaranteed_gpus, idle)
            if guaranteed_gpus is None:
                return  # the rule is read by the activity monitor, not the core
            # Stored, so done: a decision that could not be stored is made again by the
            # rebuilt core, from the stored share.
            with suppress(Unavailable):
                self.feed(QueueConfigured(self.clock(), name, guaranteed_gpus))

    def label(self, node: str, key: str, value: str | None) -> None:
        with self.lock:
            self._usable()
            if node != self.node.name:
                raise NotFound(f"no node named {node!r} (this server has {self.node.name!r})")
            try:
                self.feed(NodeLabelled(self.clock(), node, key, value))
            except (SchedulingError, ClusterError) as err:
                raise Conflict(str(err)) from None
            self._after_decision(self.store.set_label, node, key, value)

    # ------------------------------------------------------------------ queries

    @contextmanager
    def peek(self) -> Iterator[bool]:
        """The core for a read, if it can be had within PEEK_S and is current: yields False
        (and holds nothing) when a change holds it longer, e.g. one waiting for a locked
        database, or while it is degraded; the caller then answers from the store."""
        got = self.lock.acquire(timeout=PEEK_S)
        try:
            yield got and self.degraded is None
        finally:
            if got:
                self.lock.release()

    def reasons(self, rows: Iterable[JobRow]) -> dict[str, str]:
        """The core's current reason for each live job (why it waits), else the stored one."""
        rows = list(rows)
        with self.peek() as current:
            return self._reasons_held(rows, current)

    def reason(self, row: JobRow) -> str:
        return self.reasons([row])[row.name]

    def _reason_held(self, row: JobRow) -> str:
        """`reason`, for a caller that holds the lock."""
        return self._reasons_held([row], self.degraded is None)[row.name]

    def _reasons_held(self, rows: list[JobRow], current: bool) -> dict[str, str]:
        found = {row.name: row.reason for row in rows}
        if current:
            live = (row.name for row in rows if row.state in LIVE)
            found.update(self.view.reasons(name for name in live if self.view.knows(name)))
        return found

    def explain(self, name: str) -> tuple[JobRow, str]:
        row = self._job_row(name)
        with self.peek() as current:
            if current and self.view.knows(row.name):
                return row, self.view.explain(name, clock_time)
        lines = [f"job {name}: {row.state}; queue {row.queue}, priority {row.priority}"]
        lines.extend(
            f"  {clock_time(h.time)}: {h.old or '-'} -> {h.new}: {h.reason}"
            for h in self.store.history(name)
        )
        return row, "\n".join(lines)

    def snapshot(self) -> Snapshot:
        """What the core holds (GPUs, labels, queues), for reads: the last one taken when the
        core cannot be had within PEEK_S (`fresh` is then False)."""
        with self.peek() as current:
            if current:
                # Counted by state: a job waiting for jobs it runs after is in no waiting list.
                waiting = {q: n for q, (n, _) in self.view.waiting_and_running().items() if n}
                self._snapshot = Snapshot(
                    owners={gpu: job for (_, gpu), job in self.view.owners().items()},
                    sick=frozenset(self.view.unhealthy(self.node.name)),
                    labels=dict(self.view.labels(self.node.name)),
                    held=self.view.held(self.node.name),
                    usage=self.view.queues(),
                    waiting=waiting,
                )
                return self._snapshot
        return replace(self._snapshot, fresh=False)

    def gpu_owners(self) -> dict[int, str]:
        return self.snapshot().owners

    def queues_of(self, names: set[str]) -> dict[str, str]:
        """The queue of each job named that the core holds (none while it is busy)."""
        found: dict[str, str] = {}
        with self.peek() as current:
            for name in names if current else ():
                spec = self.view.job(name).spec if self.view.knows(name) else None
                if spec is not None:
                    found[name] = spec.queue
        return found

    def spec_of(self, name: str) -> JobSpec | None:
        """The core's spec of a job it holds, or None (not held, or the core busy or degraded)."""
        with self.peek() as current:
            if current and self.view.knows(name):
                return self.view.job(name).spec
        return None

    # ------------------------------------------------------------------ idle GPUs

    def idle(self, name: str, attempt: int, why: str, *, stop: bool) -> None:
        """The activity monitor found attempt `attempt` of job `name` idle under its rule: stop
        it (the core decides how), or note it in its history. News about an attempt that has
        ended meanwhile changes nothing."""
        with self.lock:
            if self.attempts.get(name) != attempt or self.degraded is not None:
                return
            now = self.clock()
            log.info("job %s: idle: %s", name, why)
            try:
                if stop:
                    self.feed(JobIdle(now, name, why))
                else:
                    self._write(
                        self.store.transition, name, "running", "running", f"idle: {why}", now
                    )
            except Unavailable:
                pass  # degraded, and said so; the monitor tries again on a later idle run

    # ------------------------------------------------------------------ the core loop

    def feed(self, *events: Event) -> None:
        """Hand events to the core and carry out what it asks (the driver kit), once the
        runtime is known to be usable."""
        self._usable()
        super().feed(*events)
        if self._deleting:
            self._remove_deleted()

    def decide(self, event: Event) -> list[Action]:
        began = time.perf_counter()
        actions = self.core.handle(event)
        if self.observe is not None:
            self.observe(time.perf_counter() - began)
        return actions

    def carry_out(self, actions: Iterable[Action], now: float) -> None:
        try:
            super().carry_out(actions, now)
        except STORE_ERRORS as err:
            self._degrade(err)

    def _usable(self) -> None:
        if self.broken is not None:
            raise RuntimeBroken(self.broken)
        if self.degraded is not None:
            raise Unavailable(self.degraded)

    def _write(self, write: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A store write before any decision: a failure changes nothing, but degrades the
        runtime until a write succeeds again. A taken name is no fault of the database."""
        try:
            return write(*args, **kwargs)
        except DuplicateJob:
            raise
        except STORE_ERRORS as err:
            self._degrade(err)

    def _after_decision(self, write: Callable[..., None], *args: Any) -> None:
        """A store write the core's state already reflects: if it fails, the two disagree
        until the core is rebuilt from the store."""
        try:
            write(*args)
        except STORE_ERRORS as err:
            self._degrade(err)

    def _degrade(self, err: Exception) -> NoReturn:
        """Stop deciding: what the core decided and the store does not hold must not happen
        (decisions stored already are still carried out), and a write that fails must not
        hold every caller for the database's busy timeout."""
        cause = write_fault(err)
        if self.degraded is None:
            log.error(
                "degraded: cannot write the state (%s); refusing changes, running jobs keep "
                "running; trying again every %g s",
                cause,
                PROBE_S,
            )
        self.degraded = cause
        self._next_probe = time.monotonic() + PROBE_S
        self.drop_posted()
        raise Unavailable(cause) from err

    def _try_recover(self) -> None:
        """Once a write succeeds again, rebuild the core from the store, as a restart would."""
        if time.monotonic() < self._next_probe:
            return
        self._next_probe = time.monotonic() + PROBE_S
        try:
            # On fresh connections: one opened while the file was read-only stays read-only.
            self.store.engine.dispose()
            self.store.probe()
            with self.lock:
                cause, self.degraded = self.degraded, None
                try:
                    notes = self._rebuild()
                except BaseException:
                    self.degraded = self.degraded or cause
                    raise
        except Unavailable:
            return
        except STORE_ERRORS as err:
            self.degraded = write_fault(err)
            return
        except Exception as err:
            self.broken = f"could not rebuild the scheduler's state from the database: {err}"
            log.critical("%s; exiting, a restart reloads it", self.broken)
            return
        log.warning("recovered: the state can be written again (%s)", "; ".join(notes) or "-")

    def _rebuild(self) -> list[str]:
        """A new core from the store, the workers adopted again from their files."""
        self.executor.release_all()
        self.replace_core(self._new_core())
        self.attempts.clear()
        self.exits.clear()
        self._last_tick = 0.0
        return self.recover()

    def on_transition(
        self, t: Transition, start: StartJob | None, stop: StopJob | None, now: float
    ) -> None:
        old = t.old.value if t.old else None
        new = t.new
        if start is not None:
            self._launch(t, start, now)
        elif new is JobState.STOPPING:
            assert stop is not None  # the core sends a StopJob with every stop
            self.store.transition(
                t.job,
                old,
                new.value,
                t.reason,
                now,
                stop_kind=stop.kind.value,
                stop_deadline=now + stop.grace_s,
            )
            self._later(self._stop_run, t.job, self.attempts[t.job], stop.signal, stop.grace_s)
        elif new is JobState.PENDING:
            if old is None:
                _log_decision(t, start, stop)
                return  # the submission is already stored
            restarts = self.view.job(t.job).restarts
            self.store.transition(
                t.job,
                old,
                "pending",
                t.reason,
                now,
                placement=None,
                stop_kind=None,
                restarts=restarts,
                service_gpu_s=self.view.attained_service(t.job),
            )
        else:
            fields: dict[str, Any] = {"stop_kind": None}
            if new.terminal:
                fields["ended_at"] = now
                fields["service_gpu_s"] = self.view.attained_service(t.job)
                self.attempts.pop(t.job, None)
            self.store.transition(t.job, old, new.value, t.reason, now, **fields)
        _log_decision(t, start, stop)

    def _launch(self, t: Transition, start: StartJob, now: float) -> None:
        row = self.store.job(t.job)
        assert row is not None
        attempt = row.attempt + 1
        placed = placement_json(start.placement)
        command = tuple(row.spec["command"])
        env = dict(row.spec.get("env") or {})
        if row.spec.get("interactive"):
            # A session's port, chosen now and kept with its worker's placement for `get`.
            port = free_port()
            placed[0]["port"] = port
            env[SESSION_PORT] = str(port)
            command = tuple(word.replace(f"$({SESSION_PORT})", str(port)) for word in command)
        self.store.transition(
            t.job,
            t.old.value if t.old else None,
            "running",
            t.reason,
            now,
            placement=placed,
            attempt=attempt,
            stop_kind=None,
            started_at=now,
            service_gpu_s=self.view.attained_service(t.job),
        )
        self.attempts[t.job] = attempt
        kind, ps = job_kind(row.spec)
        run = RunSpec(
            job=t.job,
            attempt=attempt,
            queue=row.queue,
            command=command,
            env=env,
            workdir=row.spec.get("workdir"),
            workers=tuple((slot.node, slot.gpus) for slot in start.placement.workers),
            restart_count=row.restarts,
            kind=kind,
            ps=ps,
            cpus=parse_cpus(row.spec.get("cpus") or 0),
            owner=row.owner,
            image=row.spec.get("image"),
        )
        self._later(self._start_run, run)

    def _later(self, op: Callable[..., None], *args: Any) -> None:
        self._ops.append(lambda: op(*args))
        self._wake.set()

    def _start_run(self, run: RunSpec) -> None:
        try:
            self.executor.start(run)
        except ExecutorError as err:
            log.warning("job %s: could not start: %s", run.job, err)
            with self.lock, suppress(Unavailable):  # degraded: recovery requeues it
                if self.attempts.get(run.job) == run.attempt:
                    self.feed(JobFinished(self.clock(), run.job, False, f"could not start: {err}"))

    def _stop_run(self, job: str, attempt: int, signal: str, grace_s: float) -> None:
        try:
            self.executor.stop(job, attempt, signal, grace_s)
        except ExecutorError as err:
            # The run never started, or all its workers ended and were reported already.
            log.info("job %s: nothing to stop: %s", job, err)

    def _workers_ended(self, job: str, attempt: int, ends: list[WorkerExit], now: float) -> None:
        """Workers of one run that ended, all those one poll reported."""
        if self.attempts.get(job) != attempt:
            # An attempt the core has moved past (killed at recovery): no news for the core,
            # but the executor would watch it for ever.
            if not self.executor.running(job, attempt):
                self.executor.forget(job, attempt)
            return
        key = (job, attempt)
        seen = self.exits.setdefault(key, {})
        seen.update((ended.rank, ended) for ended in ends)
        if self.executor.running(job, attempt):
            # The rest of a gang whose worker failed must stop; the job ends once they have.
            state = self.view.job(job).state
            failed = [ended for ended in ends if ended.failed]
            if failed and state is JobState.RUNNING:
                self.feed(WorkerFailed(now, job, failed[0].rank, failed[0].reason))
            return
        del self.exits[key]
        self.executor.forget(job, attempt)
        state = self.view.job(job).state
        if state is JobState.STOPPING:
            self.feed(JobStopped(now, job))
        elif state is JobState.RUNNING:
            ok = not any(e.failed for e in seen.values())
            why = (
                "all workers exited 0"
                if ok
                else "; ".join(
                    f"worker {r}: {e.reason}" for r, e in sorted(seen.items()) if e.failed
                )
            )
            self.feed(JobFinished(now, job, ok, why))
