"""Recovery at start (and after a degraded spell): the store's live jobs given back to a core.

Running workers are adopted from their supervisors' files; a run whose workers never started
(the server stopped between storing the start and carrying it out) is requeued, or ended if it
was being cancelled; waiting jobs are requeued in their submission order.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from toposched.common import jobfields
from toposched.common.driver import Driver
from toposched.common.jobspec import core_spec, job_kind, local_processes, placement_from_json
from toposched.core import SchedulingError, StopKind
from toposched.executors.local import LocalExecutor
from toposched.executors.supervisor import read_exit, read_pids
from toposched.server.deletes import Deletes
from toposched.server.intake import ended_before
from toposched.server.launcher import Launcher
from toposched.server.shared import ENDED, LIVE
from toposched.store import CORRUPT, JobRow, Store

log = logging.getLogger("toposched.server")


def _service_until(row: JobRow, gpus: int, now: float) -> float:
    """A running job's attained service at `now`: what it had when its run started (stored
    then, and at every stop), plus the run so far, the time the server was down included (its
    workers ran on). Nothing is lost in a crash; a run whose workers ended while the server was
    down counts until the server learns of the end."""
    since = row.started_at if row.started_at is not None else now
    return row.service_gpu_s + gpus * max(0.0, now - since)


class Recovery:
    """Gives `driver`'s core back what the store says is live; the launcher learns each run
    adopted, and the deletes each job whose delete was asked while it was live."""

    def __init__(
        self,
        driver: Driver,
        lock: threading.RLock,
        store: Store,
        executor: LocalExecutor,
        launcher: Launcher,
        deletes: Deletes,
        clock: Callable[[], float],
    ) -> None:
        self.driver = driver
        self.lock = lock
        self.store = store
        self.executor = executor
        self.launcher = launcher
        self.deletes = deletes
        self.clock = clock

    def recover(self) -> list[str]:
        """Load what the store says is live: adopt running workers, requeue waiting jobs in
        their submission order. Returns one line per job whose fate changed."""
        notes: list[str] = []
        with self.lock:
            rows = []
            for row in self.store.jobs(states=LIVE):
                if row.state == CORRUPT:
                    log.error("job %s: %s; not restored", row.name, row.reason)
                    notes.append(self._stop_unreadable(row))
                    continue
                rows.append(row)
            self.deletes.asked({r.name for r in rows if r.delete_when_ended})
            for row in self.store.ended_to_delete(ENDED):  # ended before a crash let them go
                if self.deletes.removed(row):
                    notes.append(f"{row.name}: deleted (it had ended; its delete was asked live)")
            running = [r for r in rows if r.state != "pending"]
            waiting = [r for r in rows if r.state == "pending"]
            for row in running:
                notes.extend(self._adopt(row, waiting))
            waiting.sort(key=lambda r: r.seq)
            now = self.clock()
            for row in waiting:
                spec = core_spec(row.name, row.owner, row.queue, row.spec)
                self.driver.restore(
                    now,
                    spec,
                    row.submitted_at,
                    None,
                    row.restarts,
                    None,
                    row.service_gpu_s,
                    ended_before(self.driver.view, self.store, spec),
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
            self.driver.restore(
                now,
                spec,
                row.submitted_at,
                placement,
                row.restarts,
                stopping,
                _service_until(row, placement.gpus, now),
                started=min(row.started_at, now) if row.started_at is not None else None,
            )
        except SchedulingError as err:
            self.executor.adopt(row.name, row.attempt, len(placement.workers), kind, ps)
            self.executor.stop(row.name, row.attempt, "SIGKILL", 0)
            self._requeue_row(row, now, f"requeued: its placement no longer fits ({err})")
            waiting.append(self.store.job(row.name) or row)
            return [f"{row.name}: stopped and requeued ({err})"]
        self.executor.adopt(row.name, row.attempt, len(placement.workers), kind, ps)
        self.launcher.adopted(row.name, row.attempt)
        if stopping is not None:
            signal, grace = self.driver.stop_signal(spec, stopping)
            deadline = self.store.stop_deadline(row.name)
            if deadline is not None:  # the grace began before the restart: what is left of it
                grace = min(grace, max(0.0, deadline - now))
            self.launcher.stop_later(row.name, row.attempt, signal, grace)
            return [f"{row.name}: adopted attempt {row.attempt}, still stopping ({stopping})"]
        return [f"{row.name}: adopted attempt {row.attempt} on {placement.describe()}"]

    def _stop_unreadable(self, row: JobRow) -> str:
        """A live job whose row cannot be read is not restored (listed as corrupt): nothing
        says how to run it. Workers it has running are stopped, as a cancel stops them, and
        its GPUs held until they are gone; given to the next job at once, they were held
        twice. Workers whose GPUs are not known (its placement unreadable too) are killed."""
        if row.attempt < 0:  # never started
            return f"{row.name}: not restored: {row.reason}"
        now = self.clock()
        slots = row.placement or []
        run_dir = self.executor.run_dir(row.name, row.attempt)
        running = any(read_pids(run_dir, rank) is not None for rank in range(len(slots)))
        if not running:
            self.executor.abandon(row.name, row.attempt)  # any it started, killed
            return f"{row.name}: not restored: {row.reason}"
        # Only what the core needs to hold its GPUs: its gang's shape, where it runs.
        shape = {f.name: f.default for f in jobfields.FIELDS if f.default is not jobfields.REQUIRED}
        shape |= {"workers": len(slots), "gpus": len(slots[0]["gpus"]), "command": ["?"]}
        spec = core_spec(row.name, row.owner, row.queue, shape)
        placement = placement_from_json(slots)
        try:
            self.driver.restore(
                now, spec, row.submitted_at, placement, row.restarts, StopKind.CANCEL, 0.0
            )
        except SchedulingError as err:
            self.executor.abandon(row.name, row.attempt)
            return f"{row.name}: not restored: {row.reason}; its workers killed ({err})"
        self.executor.adopt(row.name, row.attempt, len(slots))
        self.launcher.adopted(row.name, row.attempt)
        signal, grace = self.driver.stop_signal(spec, StopKind.CANCEL)
        self.launcher.stop_later(row.name, row.attempt, signal, grace)
        return (
            f"{row.name}: not restored: {row.reason}; its workers stopped, its GPUs held "
            f"until they are gone ({placement.describe()})"
        )

    def _requeue_row(self, row: JobRow, now: float, why: str) -> None:
        self.store.transition(
            row.name, row.state, "pending", why, now, placement=None, stop_kind=None
        )
