"""The runtime's launcher: each decided state change stored, then carried out on the executor.

Persisting before acting means a crash can only leave a job the store calls running whose
workers never started, and recovery tells that case apart (no pid or exit files) and requeues
it. Starting and stopping processes is left to the runtime's own thread (`run_ops`), in the
order decided: an API call returns once the decision is stored, without waiting for
supervisors to come up. The workers' ends come back through `workers_ended` as core events.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from dataclasses import replace
from typing import Any

from toposched.common.driver import Driver
from toposched.common.jobspec import job_kind, placement_json
from toposched.core import (
    JobFinished,
    JobState,
    JobStopped,
    StartJob,
    StopJob,
    Transition,
    WorkerFailed,
)
from toposched.executors.local import (
    SESSION_PORT,
    ExecutorError,
    LocalExecutor,
    RunSpec,
    WorkerExit,
)
from toposched.executors.miginstances import MigInstanceError, MigInstances
from toposched.executors.processes import free_port
from toposched.server.gpushare import gpu_share
from toposched.server.shared import Unavailable
from toposched.store import Store
from toposched.topology.resources import parse_cpus

log = logging.getLogger("toposched.server")


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


class Launcher:
    """Stores each state change the core decides and queues its start or stop; runs them.

    `attempts` is each job that holds GPUs and its attempt: news of any other attempt (one
    killed at recovery, a start that failed late) changes nothing. `driver` is fed the events
    that carrying out produces, under `lock`."""

    def __init__(
        self,
        driver: Driver,
        lock: threading.RLock,
        store: Store,
        executor: LocalExecutor,
        clock: Callable[[], float],
        gpu_memory: int = 0,
        mig: MigInstances | None = None,
    ) -> None:
        self.driver = driver
        self.mig = mig or MigInstances()  # NVML is loaded only once a MIG job starts
        self.gpu_memory = gpu_memory  # bytes per GPU of the node (0: unknown)
        self.lock = lock
        self.store = store
        self.executor = executor
        self.clock = clock
        self.attempts: dict[str, int] = {}
        self.exits: dict[tuple[str, int], dict[int, WorkerExit]] = {}
        # Executor operations decided under the lock, carried out in order by the loop thread.
        self._ops: deque[Callable[[], None]] = deque()
        self.wake = threading.Event()

    def reset(self) -> None:
        """Forget every run (the core is rebuilt and the workers adopted again)."""
        self.attempts.clear()
        self.exits.clear()

    def adopted(self, job: str, attempt: int) -> None:
        """Attempt `attempt` of `job` runs on, found by recovery."""
        self.attempts[job] = attempt

    def stop_later(self, job: str, attempt: int, signal: str, grace_s: float) -> None:
        """Queue a stop of one run: `signal`, then SIGKILL after `grace_s`."""
        self.later(self._stop_run, job, attempt, signal, grace_s)

    def later(self, op: Callable[..., None], *args: Any) -> None:
        """Queue `op(*args)` for the loop thread, and wake it."""
        self._ops.append(lambda: op(*args))
        self.wake.set()

    def run_ops(self) -> None:
        """Carry out the operations queued so far, in order (the loop thread)."""
        while self._ops:
            self._ops.popleft()()

    # ------------------------------------------------------------------ decisions

    def carry(
        self, t: Transition, start: StartJob | None, stop: StopJob | None, now: float
    ) -> None:
        """Store one state change of the core, then queue its start or stop."""
        old = t.old.value if t.old else None
        new = t.new
        view = self.driver.view
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
            self.stop_later(t.job, self.attempts[t.job], stop.signal, stop.grace_s)
        elif new is JobState.PENDING:
            if old is None:
                _log_decision(t, start, stop)
                return  # the submission is already stored
            self.store.transition(
                t.job,
                old,
                "pending",
                t.reason,
                now,
                placement=None,
                stop_kind=None,
                restarts=view.job(t.job).restarts,
                service_gpu_s=view.attained_service(t.job),
            )
        else:
            fields: dict[str, Any] = {"stop_kind": None}
            if new.terminal:
                fields["ended_at"] = now
                fields["service_gpu_s"] = view.attained_service(t.job)
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
            service_gpu_s=self.driver.view.attained_service(t.job),
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
            share=gpu_share(row.spec, self.gpu_memory),
        )
        instance = None
        if row.spec.get("mig"):
            (slot,) = start.placement.workers
            assert slot.instance is not None  # the core places a MIG job on an instance
            instance = (slot.gpus[0], slot.instance, str(row.spec["mig"]))
        self.later(self._start_run, run, instance)

    # ------------------------------------------------------------------ the executor

    def _start_run(self, run: RunSpec, instance: tuple[int, int, str] | None = None) -> None:
        """Start a run; a MIG job's worker gets the instance (GPU, first memory slice,
        profile) the core chose, found or created through NVML."""
        try:
            if instance is not None:
                run = replace(run, mig_device=self.mig.acquire(run.job, run.attempt, *instance))
            self.executor.start(run)
        except (ExecutorError, MigInstanceError) as err:
            self._release_instance(run.job, run.attempt)
            log.warning("job %s: could not start: %s", run.job, err)
            with self.lock, suppress(Unavailable):  # degraded: recovery requeues it
                if self.attempts.get(run.job) == run.attempt:
                    self.driver.feed(
                        JobFinished(self.clock(), run.job, False, f"could not start: {err}")
                    )

    def _release_instance(self, job: str, attempt: int) -> None:
        """Destroy the MIG instance created for this run, if one was; a failure is logged (the
        instance stays, and the next job placed there is given it)."""
        why = self.mig.release(job, attempt)
        if why is not None:
            log.warning("job %s: %s", job, why)

    def _stop_run(self, job: str, attempt: int, signal: str, grace_s: float) -> None:
        try:
            self.executor.stop(job, attempt, signal, grace_s)
        except ExecutorError as err:
            # The run never started, or all its workers ended and were reported already.
            log.info("job %s: nothing to stop: %s", job, err)

    def ended_runs(self) -> dict[tuple[str, int], list[WorkerExit]]:
        """The workers that ended since the last poll, by run. One poll may report several
        workers of a gang: they are taken together, since the first one taken alone would
        look like the gang's last (the executor has already marked the others reported) and
        decide the job's fate without them."""
        runs: dict[tuple[str, int], list[WorkerExit]] = {}
        for ended in self.executor.poll():
            runs.setdefault((ended.job, ended.attempt), []).append(ended)
        return runs

    def workers_ended(self, job: str, attempt: int, ends: list[WorkerExit], now: float) -> None:
        """Workers of one run that ended, all those one poll reported; under the lock."""
        if self.attempts.get(job) != attempt:
            # An attempt the core has moved past (killed at recovery): no news for the core,
            # but the executor would watch it for ever.
            if not self.executor.running(job, attempt):
                self.executor.forget(job, attempt)
                self._release_instance(job, attempt)
            return
        key = (job, attempt)
        seen = self.exits.setdefault(key, {})
        seen.update((ended.rank, ended) for ended in ends)
        view = self.driver.view
        if self.executor.running(job, attempt):
            # The rest of a gang whose worker failed must stop; the job ends once they have.
            state = view.job(job).state
            failed = [ended for ended in ends if ended.failed]
            if failed and state is JobState.RUNNING:
                self.driver.feed(WorkerFailed(now, job, failed[0].rank, failed[0].reason))
            return
        del self.exits[key]
        self.executor.forget(job, attempt)
        self._release_instance(job, attempt)
        state = view.job(job).state
        if state is JobState.STOPPING:
            self.driver.feed(JobStopped(now, job))
        elif state is JobState.RUNNING:
            ok = not any(e.failed for e in seen.values())
            why = (
                "all workers exited 0"
                if ok
                else "; ".join(
                    f"worker {r}: {e.reason}" for r, e in sorted(seen.items()) if e.failed
                )
            )
            self.driver.feed(JobFinished(now, job, ok, why))
