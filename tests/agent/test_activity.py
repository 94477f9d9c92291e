"""GPU activity on a cluster: the agent's dcgm-exporter metrics per pod, and an idle pod found by
the agent on its GPUs (FakeNvml: no GPU here), then evicted by the scheduler with an Event
that says why, on the real API server."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.agent.conftest import NODE, NS, RunningAgent
from tests.agent.fakes import FakeKubelet, HealthNvml
from tests.agent.test_e2e import bound_gpus
from tests.agent.test_plugin import gpu_pod
from tests.kube.live import LiveCluster
from tests.server import free_port, wait_for
from toposched.agent.activity import PodActivity, exposition, holders, serve_metrics
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


def test_the_metrics_are_dcgm_exporters_names_and_labels() -> None:
    gpus = (GpuUsage(0, 87.0, 3 * 2**30, 16 * 2**30, (11,)), GpuUsage(1, 0.0, 0, 16 * 2**30, ()))
    held = holders([running_pod("train", "0", 1)], RESOURCE)
    text = exposition(gpus, held, {0: "GPU-aaaa"}, "node-1")
    assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in text
    assert (
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-aaaa",device="nvidia0",Hostname="node-1",'
        f'container="c0",namespace="{NS}",pod="train"}} 87'
    ) in text
    assert (
        'DCGM_FI_DEV_FB_USED{gpu="1",UUID="",device="nvidia1",Hostname="node-1",'
        'container="",namespace="",pod=""} 0'
    ) in text
    assert (
        'DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-aaaa",device="nvidia0",Hostname="node-1",'
        f'container="c0",namespace="{NS}",pod="train"}} 13312'
    ) in text


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
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        first = chosen["busy"].split(",")[0]
        assert f'DCGM_FI_DEV_GPU_UTIL{{gpu="{first}",' in metrics
        assert f'container="c0",namespace="{NS}",pod="busy"}} 60' in metrics

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
