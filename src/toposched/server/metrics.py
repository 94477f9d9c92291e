"""Prometheus metrics: jobs by state, queue lengths, GPUs per node, scheduling latency."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from toposched.core import JobState
from toposched.server.runtime import Runtime


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

    def watch(self, runtime: Runtime) -> None:
        self.registry.register(_StateCollector(runtime))


class _StateCollector(Collector):
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = self.runtime.store.count_by_state()
        jobs = GaugeMetricFamily("toposched_jobs", "Jobs by state.", labels=["state"])
        for state in JobState:
            jobs.add_metric([state.value], counts.get(state.value, 0))
        yield jobs

        queue_len = GaugeMetricFamily(
            "toposched_queue_pending_jobs", "Jobs waiting, by queue.", labels=["queue"]
        )
        used = GaugeMetricFamily(
            "toposched_queue_used_gpus", "GPUs held by each queue's jobs.", labels=["queue"]
        )
        with self.runtime.lock:
            waiting: dict[str, int] = {}
            for rec in self.runtime.view.pending():
                waiting[rec.spec.queue] = waiting.get(rec.spec.queue, 0) + 1
            usage = self.runtime.queue_usage()
        for queue, (_, held) in sorted(usage.items()):
            queue_len.add_metric([queue], waiting.get(queue, 0))
            used.add_metric([queue], held)
        yield queue_len
        yield used

        node = self.runtime.node
        owners = self.runtime.gpu_owners()
        free = GaugeMetricFamily("toposched_gpus_free", "Free GPUs per node.", labels=["node"])
        alloc = GaugeMetricFamily(
            "toposched_gpus_allocated", "Allocated GPUs per node.", labels=["node"]
        )
        sick = self.runtime.unhealthy_gpus()
        idle = [g for g in range(node.size) if g not in owners and g not in sick]
        free.add_metric([node.name], len(idle))
        alloc.add_metric([node.name], len(owners))
        yield free
        yield alloc
