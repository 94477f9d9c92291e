"""How busy each job's GPUs are, sampled every few seconds, and the idle rule applied to it.

With NVML a GPU's activity is its utilization (the share of the last period a kernel ran);
a job's is the mean over its GPUs, and it is idle while its busiest GPU is below its rule's
threshold. Without NVML (emulated GPUs) the stand-in is the CPU time of the job's processes:
CPU-seconds per second over the sample period, in percent of one core, capped at 100, and
the same figure for each of its GPUs (docs/idle.md). A job that keeps a core busy loading
data is busy under the stand-in; one that sleeps or waits on input is idle.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from toposched.common.durations import duration_text
from toposched.common.jobspec import idle_rule
from toposched.core.idle import IdleWatch
from toposched.core.job import IdleAction, IdleRule, JobSpec
from toposched.discovery.gpu_usage import GpuUsage, NvmlUsage
from toposched.discovery.nvml import NvmlUnavailable
from toposched.executors.cputime import group_cpu_seconds
from toposched.executors.local import LocalExecutor
from toposched.store import Store
from toposched.topology.resources import gib_text

log = logging.getLogger(__name__)
MIB = 2**20

SAMPLE_S = 5.0
# An interactive session's rule when neither it nor its queue has one: JupyterHub's culler
# stops a server idle for an hour by default, and so does this.
SESSION_IDLE = IdleRule(3600.0, 5.0, IdleAction.STOP)
KEPT = 120  # samples per job: 10 minutes at the default period; a chart, not an archive
NVML = "nvml"
CPU = "cpu"
SOURCE_TEXT = {
    NVML: "NVML GPU utilization",
    CPU: "CPU time of the job's processes (no NVML here: a stand-in for GPU activity)",
}


@dataclass
class JobActivity:
    """One attempt of a running job: its recent samples and its mean since it started."""

    attempt: int
    samples: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=KEPT))
    total: float = 0.0
    count: int = 0
    cpu_s: float | None = None  # the stand-in's last reading, and its time
    cpu_at: float = 0.0
    idle_notice: str | None = None  # what a `notify` rule said, while the idle run lasts
    # A shared job's GPU memory at the last NVML sample: bytes its processes use, its share,
    # and what was said while it is over the share.
    memory_used: int | None = None
    memory_share: int | None = None
    memory_notice: str | None = None

    def add(self, t: float, pct: float) -> None:
        self.samples.append((t, pct))
        self.total += pct
        self.count += 1


@dataclass(frozen=True)
class GpuNow:
    """One GPU of the node at the last sample, as the API shows it."""

    index: int
    busy_pct: float
    memory_used: int | None
    memory_total: int | None
    job: str | None
    outside: tuple[int, ...]  # pids on it while no job holds it: run outside the scheduler
    sharers: tuple[str, ...] = ()  # the jobs holding shares of it


class Watched(Protocol):
    """What the monitor reads of the runtime, and where it reports an idle job."""

    def running(self) -> dict[str, int]: ...  # job -> attempt, the jobs holding GPUs now

    def gpu_owners(self) -> dict[int, str]: ...

    def gpu_shares(self) -> dict[int, dict[str, tuple[int, int]]]: ...

    def spec_of(self, name: str) -> JobSpec | None: ...

    def idle(self, name: str, attempt: int, why: str, *, stop: bool) -> None: ...


class ActivityMonitor:
    """Samples the node every `period_s` in its own thread; the runtime stops idle jobs. The
    executor gives the stand-in its workers' process groups, the store the queues' rules."""

    def __init__(
        self,
        runtime: Watched,
        executor: LocalExecutor,
        store: Store,
        usage: NvmlUsage | None,
        *,
        period_s: float = SAMPLE_S,
        clock: Callable[[], float] = time.time,
        cpu_seconds: Callable[[list[int]], Mapping[int, float]] = group_cpu_seconds,
    ) -> None:
        self.runtime = runtime
        self.executor = executor
        self.store = store
        self.usage = usage
        self.source = NVML if usage is not None else CPU
        self.period_s = period_s
        self.clock = clock
        self.cpu_seconds = cpu_seconds
        self.watch = IdleWatch()
        self.jobs: dict[str, JobActivity] = {}
        self.gpus: dict[int, GpuNow] = {}
        self.idle_events: dict[str, int] = {action.value: 0 for action in IdleAction}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._said_outside: set[int] = set()

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="toposched-activity", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.usage is not None:
            self.usage.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.sample()
            except Exception:
                log.exception("sampling GPU activity failed; trying again next period")

    # ------------------------------------------------------------------ one sample

    def sample(self) -> None:
        """Read the node once, update each running job, and apply the idle rules."""
        now = self.clock()
        runtime = self.runtime
        running = runtime.running()
        owners = runtime.gpu_owners()
        shares = runtime.gpu_shares()
        held: dict[str, list[int]] = {}
        for gpu, job in owners.items():
            held.setdefault(job, []).append(gpu)
        for gpu, on_gpu in shares.items():
            for job in on_gpu:
                held.setdefault(job, []).append(gpu)
        over: list[tuple[str, str]] = []
        per_job = None
        if self.usage is not None:
            per_job = self._by_nvml(owners, shares, held, running, over)
        if per_job is None:
            per_job = self._by_cpu(running, owners, held, now)
        rules = self._rules(running)
        with self._lock:
            for job in list(self.jobs):
                if running.get(job) != self.jobs[job].attempt:
                    del self.jobs[job]
                    self.watch.forget(job)
            due: list[tuple[str, int, IdleRule, str]] = []
            for job, busy in per_job.items():
                if job not in running or not busy:
                    continue
                activity = self.jobs.setdefault(job, JobActivity(running[job]))
                activity.add(now, sum(busy) / len(busy))
                rule = rules.get(job)
                if rule is None:
                    continue
                if max(busy) >= rule.below_pct:
                    activity.idle_notice = None
                if self.watch.observe(job, rule, now, max(busy)):
                    due.append((job, running[job], rule, self._why(job, rule, max(busy))))
        for job, attempt, rule, why in due:
            self.idle_events[rule.action.value] += 1
            if rule.action is IdleAction.NOTIFY:
                self.jobs[job].idle_notice = f"idle: {why}"
            runtime.idle(job, attempt, why, stop=rule.action is IdleAction.STOP)
        for job, why in over:
            if job in running:
                log.warning("job %s: %s", job, why)
                runtime.idle(job, running[job], why, stop=self._stops_over(job))

    def _why(self, job: str, rule: IdleRule, busiest: float) -> str:
        what = "GPUs" if self.source == NVML else "processes (CPU stand-in)"
        return (
            f"its {what} stayed below {rule.below_pct:g}% busy for "
            f"{duration_text(rule.after_s)} (busiest {busiest:.0f}% now; idle action "
            f"{rule.action.value})"
        )

    def _by_nvml(
        self,
        owners: Mapping[int, str],
        shares: Mapping[int, Mapping[str, tuple[int, int]]],
        held: Mapping[str, list[int]],
        running: Mapping[str, int],
        over: list[tuple[str, str]],
    ) -> dict[str, list[float]] | None:
        assert self.usage is not None
        try:
            gpus = self.usage.sample()
        except NvmlUnavailable as err:
            log.warning("%s; this sample uses the CPU stand-in", err)
            return None
        by_index = {g.index: g for g in gpus}
        with self._lock:
            self.gpus = {
                g.index: self._gpu_now(
                    g, owners.get(g.index), tuple(sorted(shares.get(g.index, ())))
                )
                for g in gpus
            }
            if shares:
                self._watch_memory(by_index, shares, running, over)
        return {
            job: [by_index[i].busy_pct for i in sorted(indices) if i in by_index]
            for job, indices in held.items()
        }

    def _watch_memory(
        self,
        by_index: Mapping[int, GpuUsage],
        shares: Mapping[int, Mapping[str, tuple[int, int]]],
        running: Mapping[str, int],
        over: list[tuple[str, str]],
    ) -> None:
        """Each shared job's GPU memory (its processes' bytes by NVML, a process counted by
        its process group) against its share; `over` gets the jobs newly over it. Under the
        lock."""
        groups = self.executor.process_groups()
        for gpu, on_gpu in shares.items():
            usage = by_index.get(gpu)
            if usage is None:
                continue
            for job, (milli, mib) in on_gpu.items():
                if job not in running:
                    continue
                pgids = set(groups.get((job, running[job]), ()))
                used = sum(b for pid, b in usage.process_memory if _group_of(pid) in pgids)
                share = mib * MIB if mib else milli * usage.memory_total // 1000
                activity = self.jobs.setdefault(job, JobActivity(running[job]))
                activity.memory_used, activity.memory_share = used, share
                if not share or used <= share:
                    activity.memory_notice = None
                elif activity.memory_notice is None:
                    activity.memory_notice = (
                        f"over its GPU memory share: GPU{gpu} {gib_text(used)} used of "
                        f"{gib_text(share)} (NVML; gpu_memory_action "
                        f"{'stop' if self._stops_over(job) else 'flag'})"
                    )
                    over.append((job, activity.memory_notice))

    def _stops_over(self, job: str) -> bool:
        """Whether job `job` asked to be stopped over its memory share (else flagged)."""
        row = self.store.job(job)
        return row is not None and row.spec.get("gpu_memory_action") == "stop"

    def _gpu_now(self, gpu: GpuUsage, job: str | None, sharers: tuple[str, ...]) -> GpuNow:
        outside = () if job is not None or sharers else gpu.pids
        for pid in set(outside) - self._said_outside:
            log.warning(
                "GPU %d: process %d runs on it but no job holds it (outside the scheduler)",
                gpu.index,
                pid,
            )
        self._said_outside.update(outside)
        return GpuNow(
            gpu.index, gpu.busy_pct, gpu.memory_used, gpu.memory_total, job, outside, sharers
        )

    def _by_cpu(
        self,
        running: Mapping[str, int],
        owners: Mapping[int, str],
        held: Mapping[str, list[int]],
        now: float,
    ) -> dict[str, list[float]]:
        groups = self.executor.process_groups()
        wanted = {job: groups.get((job, attempt), []) for job, attempt in running.items()}
        seconds = self.cpu_seconds([g for gs in wanted.values() for g in gs])
        found: dict[str, list[float]] = {}
        with self._lock:
            for job, pgids in wanted.items():
                if not pgids:
                    continue
                used = sum(seconds.get(g, 0.0) for g in pgids)
                activity = self.jobs.setdefault(job, JobActivity(running[job]))
                before, at = activity.cpu_s, activity.cpu_at
                activity.cpu_s, activity.cpu_at = used, now
                if before is None or now <= at:
                    continue  # the first reading: a rate needs two
                pct = min(100.0, max(0.0, 100.0 * (used - before) / (now - at)))
                found[job] = [pct] * max(1, len(held.get(job, ())))
            self.gpus = {
                gpu: GpuNow(gpu, found.get(job, [0.0])[0], None, None, job, ())
                for gpu, job in owners.items()
            }
        return found

    def _rules(self, running: Mapping[str, int]) -> dict[str, IdleRule]:
        """Each running job's idle rule: its own, else its queue's, else for an interactive
        session SESSION_IDLE."""
        queues = self.store.queue_idle_rules()
        rules: dict[str, IdleRule] = {}
        for job in running:
            spec = self.runtime.spec_of(job)
            if spec is None:
                continue
            rule = spec.idle or (idle_rule(queues.get(spec.queue)) if queues else None)
            if rule is None and spec.interactive:
                rule = SESSION_IDLE
            if rule is not None:
                rules[job] = rule
        return rules

    # ------------------------------------------------------------------ reads

    def of(self, job: str) -> dict[str, Any] | None:
        """A running job's activity for the API, or None before its first sample."""
        with self._lock:
            activity = self.jobs.get(job)
            if activity is None or not activity.count:
                return None
            return {
                "source": self.source,
                "busy_pct": round(activity.samples[-1][1], 1),
                "mean_pct": round(activity.total / activity.count, 1),
                "samples": activity.count,
                "idle_since": self.watch.idle_since(job),
                "idle_notice": activity.idle_notice,
                "gpu_memory_used": activity.memory_used,
                "gpu_memory_share": activity.memory_share,
                "gpu_memory_notice": activity.memory_notice,
            }

    def history(self, job: str) -> list[tuple[float, float]]:
        with self._lock:
            activity = self.jobs.get(job)
            return list(activity.samples) if activity is not None else []

    def gpu(self, index: int) -> GpuNow | None:
        with self._lock:
            return self.gpus.get(index)


def _group_of(pid: int) -> int | None:
    """The process group of `pid` (None once it has ended): a worker's processes, its
    dataloaders and the programs it runs, are in the group its supervisor made."""
    try:
        return os.getpgid(pid)
    except OSError:
        return None
