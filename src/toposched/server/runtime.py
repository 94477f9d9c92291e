"""The server's driver: store, scheduler core and local executor kept in step, in rooms.

Every API call and every executor report becomes core events under one lock; the actions that
come back are persisted (one transaction per job state change) and then carried out. The
runtime composes its rooms and holds the lock, the loop thread and the changes too small for a
room of their own (cancel, queue and label settings, idle jobs):

  shared     the job states, timings and errors every room uses (the lowest module)
  guard      WriteGuard: every store write; degraded after one fails, probing until one works
  reads      Reads: the core's answers for the API when it can be had at once, else the store's
  launcher   Launcher: each decided state change stored, its start or stop queued and run
  deletes    Deletes: jobs removed from the store, the core and the disk
  intake     Intake: submissions checked, stored together, handed to the core in turn
  recovery   Recovery: the store's live jobs given back to a new core, workers adopted

Each room is handed what it needs: the driver kit (`feed`, `view`), the lock, the guard, the
store, the rooms it calls; none imports this module.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import replace
from typing import Any

from toposched.common.driver import Driver
from toposched.core import (
    Action,
    Event,
    JobCancelled,
    JobIdle,
    JobSpec,
    NodeLabelled,
    QueueConfigured,
    Scheduler,
    SchedulerPolicy,
    SchedulingError,
    StartJob,
    StopJob,
    Tick,
    Transition,
)
from toposched.executors.local import LocalExecutor
from toposched.server.activity import ActivityMonitor
from toposched.server.deletes import Deletes
from toposched.server.guard import WriteGuard
from toposched.server.intake import MAX_WAITING, Intake, Outcome
from toposched.server.launcher import Launcher
from toposched.server.localnode import LocalNode
from toposched.server.predicted import Predictor
from toposched.server.reads import Reads, Snapshot
from toposched.server.recovery import Recovery
from toposched.server.shared import (
    LIVE,
    STORE_ERRORS,
    TICK_S,
    Conflict,
    NotFound,
    QueueFull,
    SubmitRefused,
    Unavailable,
)
from toposched.store import JobRow, Store
from toposched.store.db import KEEP
from toposched.topology.cluster import Cluster, ClusterError

# The job routes import these names from here.
__all__ = ["LIVE", "Conflict", "NotFound", "QueueFull", "Runtime", "SubmitRefused"]

log = logging.getLogger("toposched.server")


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
        max_waiting: int = MAX_WAITING,
    ) -> None:
        self.store = store
        self.executor = executor
        self.local = local
        self.policy = policy
        self.clock = clock
        self.observe = observe
        self.lock = threading.RLock()
        self.node = local.node
        self.predictor = Predictor(local.node)
        super().__init__(self._new_core())
        lock = self.lock
        self.guard = WriteGuard(store, lock, self.drop_posted)
        self.reads = Reads(self, lock, self.guard, store, self.node.name)
        self.launcher = Launcher(self, lock, store, executor, clock, local.node.hardware.gpu_memory)
        self.deletes = Deletes(
            self, lock, self.guard, store, self.reads, executor, self.launcher, clock
        )
        self.intake = Intake(
            self,
            lock,
            self.guard,
            store,
            self.reads,
            self.predictor,
            executor.containers,
            local.node.size,
            clock,
            max_waiting,
        )
        self.recovery = Recovery(self, lock, store, executor, self.launcher, self.deletes, clock)
        self._stop = threading.Event()
        # Set as the server begins to stop: followed logs end, so that no client holds the
        # shutdown open (it waits for every response to finish).
        self.closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_tick = 0.0
        # How busy each job's GPUs are (server/activity.py), once `serve` has started it.
        self.activity: ActivityMonitor | None = None

    def _new_core(self) -> Scheduler:
        """A core for the node and queues as stored (at start, and when rebuilt)."""
        labels = self.store.labels().get(self.local.node.name, {})
        base = self.local.node
        # The node as found (its hardware and taints too), with the labels set through the API.
        self.node = replace(base, labels={**base.labels, **labels})
        return Scheduler(Cluster((self.node,)), self.policy, self.store.queues())

    @property
    def degraded(self) -> str | None:
        """Why state cannot be written now; None while it can."""
        return self.guard.degraded

    @property
    def broken(self) -> str | None:
        """Why the runtime takes no more calls (its state could not be rebuilt); else None."""
        return self.guard.broken

    # ------------------------------------------------------------------ start and stop

    def recover(self) -> list[str]:
        """Load what the store says is live: adopt running workers, requeue waiting jobs in
        their submission order. Returns one line per job whose fate changed."""
        return self.recovery.recover()

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
        self.launcher.wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self, interval_s: float) -> None:
        wake = self.launcher.wake
        while not self._stop.is_set():
            wake.wait(interval_s)
            wake.clear()
            try:
                self.step()
            except Unavailable:
                pass  # degraded, and said so: the next steps probe the database
            except Exception:
                log.exception("runtime step failed; retrying")

    def step(self) -> None:
        """One pass: start and stop what was decided, collect worker exits, feed them, and
        tick now and then; degraded, try to write again."""
        if self.guard.broken is not None:
            return
        self.launcher.run_ops()
        if self.guard.degraded is not None:
            # Overdue stops are still escalated; the ends seen are read again from the
            # supervisors' files once the core is rebuilt.
            self.executor.poll()
            self.guard.try_recover(self._rebuild)
            return
        runs = self.launcher.ended_runs()
        with self.lock:
            now = self.clock()
            for (job, attempt), ends in runs.items():
                self.launcher.workers_ended(job, attempt, ends, now)
            # A run reaching its time limit is stopped on time, not at the next tick.
            limit = self.core.next_time_limit()
            if now - self._last_tick >= TICK_S or (limit is not None and limit <= now):
                self._last_tick = now
                self.feed(Tick(now))

    def _rebuild(self) -> list[str]:
        """A new core from the store, the workers adopted again from their files."""
        self.executor.release_all()
        self.replace_core(self._new_core())
        self.launcher.reset()
        self._last_tick = 0.0
        return self.recover()

    # ------------------------------------------------------------------ API operations

    def submit(
        self,
        owner: str,
        queue: str,
        spec: dict[str, Any],
        name: str | None = None,
        key: str | None = None,
    ) -> Outcome:
        """Store a submission and hand it to the core (`Intake.submit`): the job, whether it
        is a retry of one stored with idempotency `key`, and its reason."""
        return self.intake.submit(owner, queue, spec, name, key)

    def cancel(self, name: str) -> JobRow:
        with self.lock:
            self.guard.usable()
            row = self.reads.job_row(name)
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
                self.guard.after_decision(self.store.set_stop_kind, name, "cancel")
            return self.store.job(name) or row

    def remove(self, name: str) -> JobRow:
        """Delete ended job `name` (`Deletes.remove`): the job as it was."""
        return self.deletes.remove(name)

    def delete_live(self, name: str) -> tuple[JobRow, bool]:
        """Cancel live job `name` and remove it once it has ended (`Deletes.delete_live`): the
        job as it is now, and whether it is removed already."""
        return self.deletes.delete_live(name, self.cancel)

    def configure_queue(self, name: str, guaranteed_gpus: int | None, idle: Any = KEEP) -> None:
        """Set a queue's share and/or its idle rule (`idle`: the wire's IdleIn as stored, None
        to remove it, KEEP to leave it)."""
        with self.lock:
            self.guard.usable()
            self.guard.write(self.store.set_queue, name, guaranteed_gpus, idle)
            if guaranteed_gpus is None:
                return  # the rule is read by the activity monitor, not the core
            # Stored, so done: a decision that could not be stored is made again by the
            # rebuilt core, from the stored share.
            with suppress(Unavailable):
                self.feed(QueueConfigured(self.clock(), name, guaranteed_gpus))

    def label(self, node: str, key: str, value: str | None) -> None:
        with self.lock:
            self.guard.usable()
            if node != self.node.name:
                raise NotFound(f"no node named {node!r} (this server has {self.node.name!r})")
            try:
                self.feed(NodeLabelled(self.clock(), node, key, value))
            except (SchedulingError, ClusterError) as err:
                raise Conflict(str(err)) from None
            self.guard.after_decision(self.store.set_label, node, key, value)

    # ------------------------------------------------------------------ queries

    def reasons(self, rows: Iterable[JobRow]) -> dict[str, str]:
        """The core's current reason for each live job (why it waits), else the stored one."""
        return self.reads.reasons(rows)

    def reason(self, row: JobRow) -> str:
        return self.reads.reasons([row])[row.name]

    def explain(self, name: str) -> tuple[JobRow, str]:
        return self.reads.explain(name)

    def snapshot(self) -> Snapshot:
        return self.reads.snapshot()

    def gpu_owners(self) -> dict[int, str]:
        return self.reads.snapshot().owners

    def gpu_shares(self) -> dict[int, dict[str, tuple[int, int]]]:
        """Each shared GPU's jobs, with their (thousandths, MiB)."""
        return self.reads.snapshot().shares

    def queues_of(self, names: set[str]) -> dict[str, str]:
        return self.reads.queues_of(names)

    def spec_of(self, name: str) -> JobSpec | None:
        return self.reads.spec_of(name)

    def running(self) -> dict[str, int]:
        """Each job that holds GPUs, and its attempt."""
        return dict(self.launcher.attempts)

    # ------------------------------------------------------------------ idle GPUs

    def idle(self, name: str, attempt: int, why: str, *, stop: bool) -> None:
        """The activity monitor found attempt `attempt` of job `name` idle under its rule, or
        (a shared job) over its GPU memory share (`why` says which): stop it as an idle job is
        stopped (the core decides how), or note it in its history. News about an attempt that
        has ended meanwhile changes nothing."""
        with self.lock:
            if self.launcher.attempts.get(name) != attempt or self.guard.degraded is not None:
                return
            now = self.clock()
            said = why if why.startswith("over its GPU memory") else f"idle: {why}"
            log.info("job %s: %s", name, said)
            try:
                if stop:
                    self.feed(JobIdle(now, name, why))
                else:
                    self.guard.write(self.store.transition, name, "running", "running", said, now)
            except Unavailable:
                pass  # degraded, and said so; the monitor tries again on a later idle run

    # ------------------------------------------------------------------ the driver kit

    def feed(self, *events: Event) -> None:
        """Hand events to the core and carry out what it asks (the driver kit), once the
        runtime is known to be usable; then remove the jobs deleted live that have ended."""
        self.guard.usable()
        super().feed(*events)
        if self.deletes.deleting:
            self.deletes.remove_deleted()

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
            self.guard.degrade(err)

    def on_transition(
        self, t: Transition, start: StartJob | None, stop: StopJob | None, now: float
    ) -> None:
        self.launcher.carry(t, start, stop, now)
