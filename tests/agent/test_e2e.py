"""The scheduler and the agent together: the scheduler binds a pod on a node whose topology the
agent published, and the agent's Allocate gives the container the GPUs the scheduler chose."""

from __future__ import annotations

from typing import Any

from tests.agent.conftest import DGX1, NODE, NS, RunningAgent
from tests.agent.fakes import FakeKubelet
from tests.agent.test_plugin import allocate, gpu_pod, preferred
from tests.kube.live import LiveCluster
from tests.server import wait_for
from toposched.kube.annotations import GPUS
from toposched.kube.runner import Runner


def bound_gpus(cluster: LiveCluster, name: str) -> str:
    pod: Any = cluster.get("pods", name, NS) or {}
    return str(((pod.get("metadata") or {}).get("annotations") or {}).get(GPUS) or "")


def test_the_container_gets_the_gpus_the_scheduler_chose(
    agent: RunningAgent,
    kubelet: FakeKubelet,
    cluster: LiveCluster,
    scheduler: Runner,
) -> None:
    request = kubelet.registration()
    # A pod that takes GPU 0, so that the scheduler's choice for the next is not the kubelet's.
    first = gpu_pod("first", 1)
    first["spec"]["schedulerName"] = "toposched"
    cluster.create(first)
    wait_for(lambda: bound_gpus(cluster, "first"), "first bound", timeout_s=10)
    train = gpu_pod("train", 4)
    train["spec"]["schedulerName"] = "toposched"
    cluster.create(train)
    chosen = wait_for(lambda: bound_gpus(cluster, "train"), "train bound", timeout_s=10)
    assert cluster.get("pods", "train", NS)["spec"]["nodeName"] == LiveCluster.test_name(NODE)
    gpus = [int(g) for g in chosen.split(",")]
    with kubelet.plugin(request.endpoint) as stub:
        # The kubelet admits `first`, then `train`, each with what it would pick by itself.
        kubelet.take_in(cluster.get("pods", "first", NS) or {})
        assert allocate(stub, "7").envs["NVIDIA_VISIBLE_DEVICES"] == bound_gpus(cluster, "first")
        kubelet.gave(NS, "first", "c0", ["7"])
        kubelet.take_in(cluster.get("pods", "train", NS) or {})
        free = [g for g in range(DGX1.size) if str(g) != bound_gpus(cluster, "first")]
        assert preferred(stub, free, 4) == gpus
        answer = allocate(stub, *map(str, free[:4]))
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == chosen
    assert [d.host_path.rsplit("/", 1)[1] for d in answer.devices][:4] == [
        f"nvidia{g}" for g in gpus
    ]
