"""The server's driver loop: store, scheduler core and local executor kept in step.

Every API call and every executor report becomes core events under one lock; the actions that
come back are persisted (one transaction per job state change) and then carried out. Persisting
before acting means a crash can only leave a job the store calls running whose workers never
started, and recovery tells that case apart (no pid or exit files) and requeues it.

Starting and stopping processes is left to the runtime's own thread, in the order decided: an
API call returns once the decision is stored, without waiting for supervisors to come up.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

from sqlalchemy.exc import SQLAlchemyError

from toposched.common.driver import Driver
from toposched.common.jobspec import core_spec, placement_from_json, placement_json
from toposched.core import (
    Action,
    Event,
    JobCancelled,
    JobFinished,
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
from toposched.executors.local import ExecutorError, LocalExecutor, RunSpec, WorkerExit
from toposched.executors.supervisor import read_exit, read_pids
from toposched.server.localnode import LocalNode
from toposched.store import JobRow, Store, StoreError
from toposched.topology.cluster import Cluster, ClusterError, Node

log = logging.getLogger("toposched.server")

LIVE = tuple(state.value for state in JobState if not state.terminal)
TICK_S = 5.0


def clock_time(t: float) -> str:
    """An event time as the server's local date and time, to the millisecond."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1000):03d}"


class RuntimeBroken(RuntimeError):
    """The database failed after the core had decided, so the two no longer agree: the runtime
    takes no more calls, and a restart reloads its state from the database (crash-only)."""


class SubmitRefused(ValueError):
    """A submission the cluster can never run; nothing was stored."""


class NotFound(LookupError):
    pass


class Conflict(ValueError):
    pass


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
        self.clock = clock
        self.observe = observe
        self.lock = threading.RLock()
        labels = store.labels().get(local.node.name, {})
        node = Node(
            local.node.name,
            local.node.topology,
            labels={**local.node.labels, **labels},
        )
        self.node = node
        super().__init__(Scheduler(Cluster((node,)), policy, store.queues()))
        self.attempts: dict[str, int] = {}
        self.exits: dict[tuple[str, int], dict[int, WorkerExit]] = {}
        # Executor operations decided under the lock, carried out in order by the loop thread.
        self._ops: deque[Callable[[], None]] = deque()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.broken: str | None = None
        self._last_tick = 0.0

    # ------------------------------------------------------------------ start and stop

    def recover(self) -> list[str]:
        """Load what the store says is live: adopt running workers, requeue waiting jobs in
        their submission order. Returns one line per job whose fate changed."""
        notes: list[str] = []
        with self.lock:
            rows = self.store.jobs(states=LIVE)
            running = [r for r in rows if r.state != "pending"]
            waiting = [r for r in rows if r.state == "pending"]
            for row in running:
                notes.extend(self._adopt(row, waiting))
            waiting.sort(key=lambda r: r.seq)
            now = self.clock()
            for row in waiting:
                spec = core_spec(row.name, row.owner, row.queue, row.spec)
                self.restore(now, spec, row.submitted_at, None, row.restarts)
        return notes

    def _adopt(self, row: JobRow, waiting: list[JobRow]) -> list[str]:
        now = self.clock()
        spec = core_spec(row.name, row.owner, row.queue, row.spec)
        run_dir = self.executor.run_dir(row.name, row.attempt)
        ranks = range(len(row.placement or []))
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
            self.restore(now, spec, row.submitted_at, placement, row.restarts, stopping)
        except SchedulingError as err:
            self.executor.adopt(row.name, row.attempt, len(placement.workers))
            self.executor.stop(row.name, row.attempt, "SIGKILL", 0)
            self._requeue_row(row, now, f"requeued: its placement no longer fits ({err})")
            waiting.append(self.store.job(row.name) or row)
            return [f"{row.name}: stopped and requeued ({err})"]
        self.executor.adopt(row.name, row.attempt, len(placement.workers))
        self.attempts[row.name] = row.attempt
        if stopping is not None:
            signal, grace = self.stop_signal(spec, stopping)
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
            except Exception:
                log.exception("runtime step failed; retrying")

    def step(self) -> None:
        """One pass: start and stop what was decided, collect worker exits, feed them, and
        tick now and then."""
        if self.broken is not None:
            return
        while self._ops:
            self._ops.popleft()()
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

    def submit(self, owner: str, queue: str, spec: dict[str, Any], name: str) -> JobRow:
        """Store a submission, then hand it to the core (it may start at once)."""
        with self.lock:
            self._usable()
            core = core_spec(name, owner, queue, spec)
            never = self.core.never_fits(core)
            if never:
                raise SubmitRefused(never)
            if self.view.knows(name):
                raise Conflict(f"a job named {name!r} already exists")
            now = self.clock()
            row = self.store.add_job(
                name=name, owner=owner, queue=queue, priority=spec["priority"], spec=spec, time=now
            )
            self.feed(JobSubmitted(now, core))
            if self.view.job(name).state is JobState.PENDING:
                return row  # still as stored: skip reading it back
            return self.store.job(name) or row

    def cancel(self, name: str) -> JobRow:
        with self.lock:
            self._usable()
            row = self.store.job(name)
            if row is None:
                raise NotFound(f"no job named {name!r}")
            if row.state not in LIVE:
                raise Conflict(f"job {name!r} has already ended ({row.state})")
            self.feed(JobCancelled(self.clock(), name))
            if row.state == "stopping":
                # The core cancels it once the stop under way is over, with no transition to
                # store now: a restart meanwhile must still know that it was cancelled.
                self._after_decision(self.store.set_stop_kind, name, "cancel")
            return self.store.job(name) or row

    def configure_queue(self, name: str, guaranteed_gpus: int) -> None:
        with self.lock:
            self._usable()
            self.store.set_queue(name, guaranteed_gpus)
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

    def reason(self, row: JobRow) -> str:
        """The core's current reason for a live job (why it waits), else the stored one."""
        with self.lock:
            if row.state in LIVE and self.view.knows(row.name):
                return self.view.job(row.name).reason
        return row.reason

    def explain(self, name: str) -> tuple[JobRow, str]:
        with self.lock:
            row = self.store.job(name)
            if row is None:
                raise NotFound(f"no job named {name!r}")
            if self.view.knows(row.name):
                return row, self.view.explain(name, clock_time)
        lines = [f"job {name}: {row.state}; queue {row.queue}, priority {row.priority}"]
        lines.extend(
            f"  {clock_time(h.time)}: {h.old or '-'} -> {h.new}: {h.reason}"
            for h in self.store.history(name)
        )
        return row, "\n".join(lines)

    def gpu_owners(self) -> dict[int, str]:
        with self.lock:
            return {gpu: job for (_, gpu), job in self.view.owners().items()}

    def unhealthy_gpus(self) -> set[int]:
        with self.lock:
            return set(self.view.unhealthy(self.node.name))

    def queue_usage(self) -> dict[str, tuple[int, int]]:
        """(guaranteed, used) GPUs per queue the core knows."""
        with self.lock:
            return self.view.queues()

    # ------------------------------------------------------------------ the core loop

    def feed(self, *events: Event) -> None:
        """Hand events to the core and carry out what it asks (the driver kit), once the
        runtime is known to be usable."""
        self._usable()
        super().feed(*events)

    def decide(self, event: Event) -> list[Action]:
        began = time.perf_counter()
        actions = self.core.handle(event)
        if self.observe is not None:
            self.observe(time.perf_counter() - began)
        return actions

    def carry_out(self, actions: Iterable[Action], now: float) -> None:
        try:
            super().carry_out(actions, now)
        except (StoreError, SQLAlchemyError) as err:
            self._break(err)

    def _usable(self) -> None:
        if self.broken is not None:
            raise RuntimeBroken(self.broken)

    def _after_decision(self, write: Callable[..., None], *args: Any) -> None:
        """A store write the core's state already reflects: if it fails, the two disagree."""
        try:
            write(*args)
        except (StoreError, SQLAlchemyError) as err:
            self._break(err)

    def _break(self, err: Exception) -> NoReturn:
        self.broken = (
            f"the database failed while a decision was being stored ({err}); restart the "
            "server: it reloads its state from the database"
        )
        log.critical("%s", self.broken)
        # Nothing decided from here on may happen: the next server decides again.
        self.drop_posted()
        self._ops.clear()
        raise RuntimeBroken(self.broken) from err

    def on_transition(
        self, t: Transition, start: StartJob | None, stop: StopJob | None, now: float
    ) -> None:
        old = t.old.value if t.old else None
        new = t.new
        if start is not None:
            self._launch(t, start, now)
        elif new is JobState.STOPPING:
            assert stop is not None  # the core sends a StopJob with every stop
            self.store.transition(t.job, old, new.value, t.reason, now, stop_kind=stop.kind.value)
            self._later(self._stop_run, t.job, self.attempts[t.job], stop.signal, stop.grace_s)
        elif new is JobState.PENDING:
            if old is None:
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
            )
        else:
            fields: dict[str, Any] = {"stop_kind": None}
            if new.terminal:
                fields["ended_at"] = now
                self.attempts.pop(t.job, None)
            self.store.transition(t.job, old, new.value, t.reason, now, **fields)

    def _launch(self, t: Transition, start: StartJob, now: float) -> None:
        row = self.store.job(t.job)
        assert row is not None
        attempt = row.attempt + 1
        self.store.transition(
            t.job,
            t.old.value if t.old else None,
            "running",
            t.reason,
            now,
            placement=placement_json(start.placement),
            attempt=attempt,
            stop_kind=None,
            started_at=now,
        )
        self.attempts[t.job] = attempt
        run = RunSpec(
            job=t.job,
            attempt=attempt,
            queue=row.queue,
            command=tuple(row.spec["command"]),
            env=dict(row.spec.get("env") or {}),
            workdir=row.spec.get("workdir"),
            workers=tuple((slot.node, slot.gpus) for slot in start.placement.workers),
            restart_count=row.restarts,
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
            with self.lock:
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
            failed = [ended for ended in ends if ended.returncode != 0]
            if failed and state is JobState.RUNNING:
                self.feed(WorkerFailed(now, job, failed[0].rank, failed[0].reason))
            return
        del self.exits[key]
        self.executor.forget(job, attempt)
        state = self.view.job(job).state
        if state is JobState.STOPPING:
            self.feed(JobStopped(now, job))
        elif state is JobState.RUNNING:
            ok = all(e.returncode == 0 for e in seen.values())
            why = (
                "all workers exited 0"
                if ok
                else "; ".join(
                    f"worker {r}: {e.reason}" for r, e in sorted(seen.items()) if e.returncode != 0
                )
            )
            self.feed(JobFinished(now, job, ok, why))
