"""GPU activity on a cluster: the agent's dcgm-exporter metrics per pod, and an idle pod found by
the agent on its GPUs (FakeNvml: no GPU here), then evicted by the scheduler with an Event
that says why, on the real API server."""

from __future__ import annotations

import time
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.agent.conftest import NODE, NS, RunningAgent
from tests.agent.fakes import FakeKubelet, HealthNvml
from tests.agent.test_e2e import bound_gpus
from tests.agent.test_plugin import gpu_pod
from tests.kube.live import LiveCluster
from tests.server import free_port, wait_for
from toposched.agent.activity import LABELS, PodActivity, exposition, holders, serve_metrics
from toposched.agent.plugin import pods_on
from toposched.discovery.gpu_usage import GpuUsage, NvmlUsage
from toposched.kube.api import KubeApi
from toposched.kube.objects import IDLE, IDLE_SINCE
from toposched.kube.runner import Runner

RESOURCE = "nvidia.com/gpu"


def running_pod(name: str, gpus: str, *limits: int, scheduler: str = "toposched") -> dict[str, Any]:
    """A running pod as listed, bound by `scheduler` with `gpus`."""
    pod = gpu_pod(name, *limits)
    pod["spec"]["schedulerName"] = scheduler
    pod["metadata"]["annotations"] = {"toposched.io/gpus": gpus}
    pod["metadata"]["uid"] = f"uid-{name}"
    pod["status"] = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    return pod


def test_each_gpu_is_its_containers_in_the_pods_order() -> None:
    pods = [
        running_pod("two", "5,1,7", 2, 1),
        {**running_pod("done", "0", 1), "status": {"phase": "Succeeded"}},
        running_pod("wrong", "2", 2),  # names fewer GPUs than it asks: the plugin refused it
    ]
    held = holders(pods, RESOURCE)
    assert {g: (h.pod, h.container) for g, h in held.items()} == {
        5: ("two", "c0"),
        1: ("two", "c0"),
        7: ("two", "c1"),
    }


def test_a_gpu_is_never_a_pods_of_another_scheduler() -> None:
    """A forged toposched.io/gpus (issue 44, N1) on a running pod of another scheduler takes no
    GPU from its real holder, in the metrics or the idle rule."""
    pods = [
        running_pod("train", "0,1", 2),
        running_pod("forged", "1", 1, scheduler="default-scheduler"),
    ]
    held = holders(pods, RESOURCE)
    assert {g: h.pod for g, h in held.items()} == {0: "train", 1: "train"}


def series(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Each series of a Prometheus text exposition, read as Prometheus reads it: (name, its
    labels in dcgm-exporter's order) -> value. The order labels are written in means nothing to
    a scrape, so it is not what is compared; every label's name and value is."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert set(sample.labels) == set(LABELS), sample
            labels = tuple((name, sample.labels[name]) for name in LABELS)
            out[(sample.name, labels)] = sample.value
    return out


def dcgm(gpu: int, uuid: str, pod: str = "", container: str = "") -> tuple[tuple[str, str], ...]:
    """dcgm-exporter's labels of one GPU on node-1."""
    ns = NS if pod else ""
    return (
        ("gpu", str(gpu)),
        ("UUID", uuid),
        ("device", f"nvidia{gpu}"),
        ("Hostname", "node-1"),
        ("container", container),
        ("namespace", ns),
        ("pod", pod),
    )


def test_the_metrics_are_dcgm_exporters_names_and_labels() -> None:
    gpus = (GpuUsage(0, 87.0, 3 * 2**30, 16 * 2**30, (11,)), GpuUsage(1, 0.0, 0, 16 * 2**30, ()))
    held = holders([running_pod("train", "0", 1)], RESOURCE)
    text = exposition(gpus, held, {0: "GPU-aaaa"}, "node-1")
    assert LABELS == ("gpu", "UUID", "device", "Hostname", "container", "namespace", "pod")
    for name, kind, help_text in [
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
        ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
        ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ]:
        assert f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n" in text
    train, idle = dcgm(0, "GPU-aaaa", "train", "c0"), dcgm(1, "")
    assert series(text) == {
        ("DCGM_FI_DEV_GPU_UTIL", train): 87.0,
        ("DCGM_FI_DEV_GPU_UTIL", idle): 0.0,
        ("DCGM_FI_DEV_FB_USED", train): 3072.0,
        ("DCGM_FI_DEV_FB_USED", idle): 0.0,
        ("DCGM_FI_DEV_FB_FREE", train): 13312.0,
        ("DCGM_FI_DEV_FB_FREE", idle): 16384.0,
    }


def test_a_label_value_is_escaped_as_the_text_format_asks() -> None:
    """A pod or container name cannot carry a quote, but a UUID read from a driver could: the
    exposition must still parse, with the value as it was."""
    text = exposition((GpuUsage(0, 1.0, 0, 2**30, ()),), {}, {0: 'GPU-"a"\\b\nc'}, "node-1")
    ((_, labels),) = {key for key in series(text) if key[0] == "DCGM_FI_DEV_GPU_UTIL"}
    assert dict(labels)["UUID"] == 'GPU-"a"\\b\nc'


def test_an_idle_pod_is_marked_by_the_agent_and_evicted_by_the_scheduler(
    agent: RunningAgent,
    kubelet: FakeKubelet,
    cluster: LiveCluster,
    scheduler: Runner,
    kube: KubeApi,
    nvml: HealthNvml,
) -> None:
    busy = gpu_pod("busy", 2)
    nap = gpu_pod("nap", 2)
    for pod in (busy, nap):
        pod["spec"]["schedulerName"] = "toposched"
        pod["metadata"]["annotations"] = {IDLE: "after=1s,action=stop"}
        cluster.create(pod)
    chosen = {
        name: wait_for(lambda n=name: bound_gpus(cluster, n), f"{name} bound")
        for name in ("busy", "nap")
    }
    for name in ("busy", "nap"):
        made = cluster.get("pods", name, NS) or {}
        # The scheduler copied the rule onto each pod it bound, for the agent.
        assert made["metadata"]["annotations"][IDLE] == "after=1,below=5,action=stop"
        cluster.set_phase(NS, name, "Running")
    for gpu in map(int, chosen["busy"].split(",")):
        nvml.gpus[gpu].busy = 60.0
    activity = PodActivity(kube, NODE, NvmlUsage(nvml), pods_on(kube, NODE), RESOURCE)
    port = free_port()
    server = serve_metrics(activity, f"127.0.0.1:{port}")
    try:
        activity.step()
        scraped = httpx.get(f"http://127.0.0.1:{port}/metrics")
        assert scraped.headers["content-type"].startswith("text/plain; version=0.0.4")
        busy_util = {
            dict(labels)["gpu"]: value
            for (name, labels), value in series(scraped.text).items()
            if name == "DCGM_FI_DEV_GPU_UTIL"
            and dict(labels)["pod"] == "busy"
            and dict(labels)["namespace"] == NS
            and dict(labels)["container"] == "c0"
        }
        assert busy_util == dict.fromkeys(chosen["busy"].split(","), 60.0)

        def marked() -> tuple[dict[str, str] | None] | None:
            activity.step()  # a poll, as the agent's loop makes one each interval
            pod = cluster.get("pods", "nap", NS)
            if pod is None:
                # On a slow machine the poll that marks it can come a second after the first,
                # and the scheduler evicts it before this read: the Event below says why.
                return (None,)
            notes = pod["metadata"]["annotations"]
            return (notes,) if IDLE_SINCE in notes else None

        (notes,) = wait_for(marked, "nap marked idle by the agent", timeout_s=20)
        if notes is not None:
            assert float(notes[IDLE_SINCE]) <= time.time() - 1  # idle for the rule's second
        assert IDLE_SINCE not in (cluster.get("pods", "busy", NS) or {})["metadata"]["annotations"]

        def said() -> list[str]:
            return [
                e["message"]
                for e in cluster.objects("events", NS)
                if e["reason"] == "GPUsIdle" and e["involvedObject"]["name"] == "nap"
            ]

        (why,) = wait_for(said, "the scheduler's Event on the idle pod")
        assert why.startswith("its GPUs stayed below 5% busy for 1s (idle since ")
        assert why.endswith("UTC; idle action stop)")
        gone = wait_for(
            lambda: (
                (pod := cluster.get("pods", "nap", NS)) is None
                or pod["metadata"].get("deletionTimestamp")
            ),
            "the idle pod evicted",
        )
        assert gone
        assert (cluster.get("pods", "busy", NS) or {}).get("metadata", {}).get(
            "deletionTimestamp"
        ) is None
    finally:
        server.shutdown()
