"""Prometheus metrics: jobs by state, queue lengths, GPUs per node, scheduling latency,
and whether the server is degraded."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import suppress

import anyio
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError

from toposched.core import JobState
from toposched.server.runtime import Runtime
from toposched.store import FAULT_KINDS, StoreError, fault_kind


class Metrics:
    """A registry of its own per server, so that tests can run several in one process."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "toposched_scheduling_seconds",
            "Time the scheduler core takes to handle one event (and decide).",
            buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=self.registry,
        )
        self._thread: anyio.CapacityLimiter | None = None

    def watch(self, runtime: Runtime) -> None:
        self.registry.register(_StateCollector(runtime))

    async def render(self) -> bytes:
        """The text format, rendered in a thread apart from the route pool's."""
        if self._thread is None:
            self._thread = anyio.CapacityLimiter(1)
        return await anyio.to_thread.run_sync(generate_latest, self.registry, limiter=self._thread)


class _StateCollector(Collector):
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.counts: dict[str, int] = {}

    def collect(self) -> Iterator[Metric]:
        degraded = GaugeMetricFamily(
            "toposched_degraded",
            "1 while the server cannot store changes, by cause (it refuses them; the whole "
            "message is in /api/v1/health).",
            labels=["cause"],
        )
        why = self.runtime.degraded
        for cause in FAULT_KINDS:
            degraded.add_metric([cause], int(why is not None and fault_kind(why) == cause))
        yield degraded

        # The database cannot be read now: the counts last read.
        with suppress(StoreError, SQLAlchemyError):
            self.counts = self.runtime.store.count_by_state()
        jobs = GaugeMetricFamily("toposched_jobs", "Jobs by state.", labels=["state"])
        for state in JobState:
            jobs.add_metric([state.value], self.counts.get(state.value, 0))
        yield jobs

        queue_len = GaugeMetricFamily(
            "toposched_queue_pending_jobs", "Jobs waiting, by queue.", labels=["queue"]
        )
        used = GaugeMetricFamily(
            "toposched_queue_used_gpus", "GPUs held by each queue's jobs.", labels=["queue"]
        )
        seen = self.runtime.snapshot()
        for queue, (_, held) in sorted(seen.usage.items()):
            queue_len.add_metric([queue], seen.waiting.get(queue, 0))
            used.add_metric([queue], held)
        yield queue_len
        yield used

        node = self.runtime.node
        free = GaugeMetricFamily("toposched_gpus_free", "Free GPUs per node.", labels=["node"])
        alloc = GaugeMetricFamily(
            "toposched_gpus_allocated", "Allocated GPUs per node.", labels=["node"]
        )
        idle = [g for g in range(node.size) if g not in seen.owners and g not in seen.sick]
        free.add_metric([node.name], len(idle))
        alloc.add_metric([node.name], len(seen.owners))
        yield free
        yield alloc
        yield from self._activity(seen.owners)

    def _activity(self, owners: dict[int, str]) -> Iterator[Metric]:
        """How busy each GPU and job is (server/activity.py), labelled with job and queue."""
        activity = self.runtime.activity
        if activity is None:
            return
        node = self.runtime.node.name
        gpu_busy = GaugeMetricFamily(
            "toposched_gpu_busy_percent",
            "How busy each GPU was at the last sample: NVML utilization, or without NVML the "
            "CPU time of its job's processes (source label).",
            labels=["node", "gpu", "job", "queue", "source"],
        )
        job_busy = GaugeMetricFamily(
            "toposched_job_busy_percent",
            "How busy a running job's GPUs were at the last sample, the mean over them.",
            labels=["job", "queue", "source"],
        )
        job_mean = GaugeMetricFamily(
            "toposched_job_busy_mean_percent",
            "The mean of a running job's samples since it started.",
            labels=["job", "queue", "source"],
        )
        job_idle = GaugeMetricFamily(
            "toposched_job_idle",
            "1 while every GPU of a job with an idle rule is below its threshold.",
            labels=["job", "queue"],
        )
        outside = GaugeMetricFamily(
            "toposched_gpu_outside_processes",
            "Processes on a GPU that no job holds: run outside the scheduler.",
            labels=["node", "gpu"],
        )
        queues = self.runtime.queues_of(set(owners.values()))
        for gpu in range(self.runtime.node.size):
            now = activity.gpu(gpu)
            if now is None:
                continue
            job = owners.get(gpu)
            queue = queues.get(job, "") if job else ""
            gpu_busy.add_metric([node, str(gpu), job or "", queue, activity.source], now.busy_pct)
            outside.add_metric([node, str(gpu)], len(now.outside))
        for job in sorted(set(owners.values())):
            of = activity.of(job)
            if of is None:
                continue
            labels = [job, queues.get(job, ""), activity.source]
            job_busy.add_metric(labels, of["busy_pct"])
            job_mean.add_metric(labels, of["mean_pct"])
            job_idle.add_metric(labels[:2], int(of["idle_since"] is not None))
        events = CounterMetricFamily(
            "toposched_idle_events",
            "Jobs found idle under their rule, by the rule's action (notify or stop).",
            labels=["action"],
        )
        for action, count in sorted(activity.idle_events.items()):
            events.add_metric([action], count)
        over = GaugeMetricFamily(
            "toposched_job_gpu_memory_over_share",
            "1 while a job holding a share of a GPU uses more of its memory than its share "
            "(NVML, per process), else 0.",
            labels=["job", "queue"],
        )
        shared = sorted({job for jobs in self.runtime.gpu_shares().values() for job in jobs})
        share_queues = self.runtime.queues_of(set(shared))
        for job in shared:
            of = activity.of(job)
            if of is not None and of["gpu_memory_share"] is not None:
                flagged = int(of["gpu_memory_notice"] is not None)
                over.add_metric([job, share_queues.get(job, "")], flagged)
        yield from (gpu_busy, job_busy, job_mean, job_idle, outside, events, over)
