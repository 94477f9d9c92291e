"""How busy the GPUs the agent handed out are, per pod: Prometheus metrics under the names and
labels of NVIDIA's DCGM exporter, and the idle rule of each pod applied on its own GPUs.

Each GPU of a running pod is the container's that the scheduler chose it for (the pod's
`toposched.io/gpus`, split over its GPU containers in order, as the plugin hands them out; only
on pods of toposched's scheduler names that were bound, `podmatch.placed_by`, so that another
scheduler's pod with a forged annotation neither takes a pod's GPUs in the metrics nor hides
them from its idle rule), so dashboards and alerts written for dcgm-exporter
(`DCGM_FI_DEV_GPU_UTIL{pod, namespace, container}`) read the same series from this agent. A pod
with an idle rule (`toposched.io/idle`, which the scheduler copies onto the pods it binds) is
watched with the core's IdleWatch; once every GPU of the pod has stayed below the threshold for
the rule's time the agent writes `toposched.io/gpu-idle-since` on it, and removes it once they
are busy again. The scheduler acts on a gang whose every pod says so (kube/driver.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from toposched.agent.podmatch import DEFAULT_SCHEDULERS, JSON, gpu_containers, placed_by, pod_uid
from toposched.core.idle import IdleWatch
from toposched.discovery.gpu_usage import GpuUsage, NvmlUsage
from toposched.discovery.nvml import NvmlUnavailable
from toposched.kube.annotations import GPUS, AnnotationError, decode_gpus
from toposched.kube.api import ApiError, KubeApi
from toposched.kube.gangspec import parse_idle
from toposched.kube.objects import IDLE, IDLE_SINCE, ObjectError

log = logging.getLogger(__name__)

MIB = 2**20
MERGE_PATCH = "application/merge-patch+json"
# dcgm-exporter's default fields that NVML gives: the name, its help, its type, how it is read.
FIELDS: tuple[tuple[str, str, Callable[[GpuUsage], float]], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda g: g.busy_pct),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda g: g.memory_used / MIB),
    (
        "DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
        lambda g: max(0, g.memory_total - g.memory_used) / MIB,
    ),
)

# dcgm-exporter's labels, in its order.
LABELS = ("gpu", "UUID", "device", "Hostname", "container", "namespace", "pod")


@dataclass(frozen=True)
class Holder:
    """The container a GPU was handed to."""

    namespace: str
    pod: str
    container: str
    uid: str


def holders(
    pods: list[JSON], resource: str, schedulers: Sequence[str] = DEFAULT_SCHEDULERS
) -> dict[int, Holder]:
    """GPU index -> the container of a running pod of `schedulers` that holds it (pods whose
    GPUs cannot be read are left out: the plugin refused them anyway)."""
    found: dict[int, Holder] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        if (pod.get("status") or {}).get("phase") != "Running" or placed_by(pod, schedulers):
            continue
        try:
            gpus = decode_gpus(str((meta.get("annotations") or {}).get(GPUS)))
        except AnnotationError:
            continue
        containers = gpu_containers(pod, resource)
        if sum(count for _, count in containers) != len(gpus):
            continue
        start = 0
        for name, count in containers:
            for gpu in gpus[start : start + count]:
                found[gpu] = Holder(
                    str(meta.get("namespace") or "default"),
                    str(meta.get("name")),
                    name,
                    pod_uid(pod),
                )
            start += count
    return found


def families(
    gpus: tuple[GpuUsage, ...], held: dict[int, Holder], uuids: dict[int, str], node: str
) -> list[GaugeMetricFamily]:
    """The metrics of one poll: one gauge per field, one series per GPU."""
    out = []
    for name, help_text, read in FIELDS:
        family = GaugeMetricFamily(name, help_text, labels=LABELS)
        for gpu in gpus:
            who = held.get(gpu.index)
            family.add_metric(
                [
                    str(gpu.index),
                    uuids.get(gpu.index, ""),
                    f"nvidia{gpu.index}",
                    node,
                    who.container if who else "",
                    who.namespace if who else "",
                    who.pod if who else "",
                ],
                read(gpu),
            )
        out.append(family)
    return out


class LastPoll(Collector):
    """Hands a scrape the metrics of the last poll (none before the first)."""

    def __init__(self) -> None:
        self.families: list[GaugeMetricFamily] = []

    def collect(self) -> Iterator[Metric]:
        yield from self.families  # replaced whole by each poll: a scrape sees one poll


def exposition(
    gpus: tuple[GpuUsage, ...], held: dict[int, Holder], uuids: dict[int, str], node: str
) -> str:
    """The metrics of one poll in Prometheus' text format, as a scrape reads them."""
    poll = LastPoll()
    poll.families = families(gpus, held, uuids, node)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(poll)
    return generate_latest(registry).decode()


class PodActivity:
    """Samples NVML each `step`, keeps its metrics for the scrapes (`registry`), and marks idle
    pods on the API."""

    def __init__(
        self,
        api: KubeApi,
        node: str,
        usage: NvmlUsage,
        pods: Callable[[], list[JSON]],
        resource: str,
        clock: Callable[[], float] = time.time,
        schedulers: Sequence[str] = DEFAULT_SCHEDULERS,
    ) -> None:
        self.api = api
        self.node = node
        self.usage = usage
        self.pods = pods
        self.resource = resource
        self.clock = clock
        self.schedulers = schedulers
        self.watch = IdleWatch()
        self.last_poll = LastPoll()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.last_poll)
        self._uuids: dict[int, str] = {}

    def step(self) -> None:
        try:
            gpus = self.usage.sample()
        except NvmlUnavailable as err:
            log.warning("%s: no GPU metrics this poll", err)
            return
        listed = self.pods()
        held = holders(listed, self.resource, self.schedulers)
        self.last_poll.families = families(gpus, held, self._uuid_of(gpus), self.node)
        self._apply_rules(listed, gpus, held)

    def _uuid_of(self, gpus: tuple[GpuUsage, ...]) -> dict[int, str]:
        api: Any = self.usage.api
        for gpu in gpus:
            if gpu.index not in self._uuids:
                try:
                    uuid = api.nvmlDeviceGetUUID(api.nvmlDeviceGetHandleByIndex(gpu.index))
                except (api.NVMLError, AttributeError):
                    continue  # asked again next poll
                self._uuids[gpu.index] = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        return self._uuids

    def _apply_rules(
        self, pods: list[JSON], gpus: tuple[GpuUsage, ...], held: dict[int, Holder]
    ) -> None:
        now = self.clock()
        busy = {g.index: g.busy_pct for g in gpus}
        by_pod: dict[str, list[float]] = {}
        for gpu, who in held.items():
            by_pod.setdefault(who.uid, []).append(busy.get(gpu, 0.0))
        running = set()
        for pod in pods:
            meta = pod.get("metadata") or {}
            annotations = meta.get("annotations") or {}
            uid = pod_uid(pod)
            shown = f"{meta.get('namespace')}/{meta.get('name')}"
            if uid not in by_pod or not annotations.get(IDLE):
                continue
            running.add(uid)
            try:
                rule = parse_idle(shown, str(annotations[IDLE]))
            except ObjectError as err:
                log.warning("pod %s: %s", shown, err)
                continue
            assert rule is not None
            busiest = max(by_pod[uid])
            self.watch.observe(uid, rule, now, busiest)
            since = self.watch.idle_since(uid)
            due = since is not None and now - since >= rule.after_s
            marked = annotations.get(IDLE_SINCE) is not None
            # Written on a change only (a write that failed is tried again next poll).
            if since is not None and due and not marked:
                self._mark(pod, str(int(since)))  # the second it began, not a later one
            elif marked and not due:
                self._mark(pod, None)
        for uid in self.watch.jobs() - running:
            self.watch.forget(uid)

    def _mark(self, pod: JSON, since: str | None) -> None:
        meta = pod.get("metadata") or {}
        ns, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        body = {"metadata": {"annotations": {IDLE_SINCE: since}}}
        path = f"/api/v1/namespaces/{ns}/pods/{name}"
        try:
            self.api.request("PATCH", path, body=body, content_type=MERGE_PATCH)
        except ApiError as err:
            log.warning("pod %s/%s: could not write %s: %s", ns, name, IDLE_SINCE, err)
            return
        log.info("pod %s/%s: %s", ns, name, f"idle since {since}" if since else "busy again")


def serve_metrics(activity: PodActivity, listen: str) -> WSGIServer:
    """Serve the last poll's figures on HOST:PORT, in a daemon thread: at `/metrics`, and
    at any other path too but /favicon.ico (prometheus-client's server, as it is)."""
    host, _, port = listen.rpartition(":")
    server, _ = start_http_server(int(port), host or "0.0.0.0", registry=activity.registry)
    return server
