"""The scheduler and the agent together: the scheduler binds a pod on a node whose topology the
agent published, and the agent's Allocate gives the container the GPUs the scheduler chose; a
user who writes `toposched.io/gpus` on a pod toposched did not bind, or edits it after the bind,
gets none of another pod's GPUs (issue 44, N1)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.agent.conftest import DGX1, NODE, NS, RunningAgent
from tests.agent.fakes import FakeKubelet
from tests.agent.test_plugin import allocate, gpu_pod, preferred
from tests.kube.live import LiveCluster
from tests.server import wait_for
from toposched.kube.annotations import GPUS
from toposched.kube.api import ApiError, KubeApi
from toposched.kube.runner import Runner

OTHER_NS = "team-b"  # another team's namespace


def bound_gpus(cluster: LiveCluster, name: str, ns: str = NS) -> str:
    pod: Any = cluster.get("pods", name, ns) or {}
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
        # The kubelet admits `first`, then `train`: it asks which devices to pick among those
        # it holds free, and passes those.
        [given] = kubelet.admit(stub, cluster.get("pods", "first", NS) or {})
        assert given.envs["NVIDIA_VISIBLE_DEVICES"] == bound_gpus(cluster, "first")
        kubelet.take_in(cluster.get("pods", "train", NS) or {})
        free = [g for g in range(DGX1.size) if str(g) != bound_gpus(cluster, "first")]
        assert preferred(stub, free, 4) == gpus
        answer = allocate(stub, *map(str, gpus))
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == chosen
    assert [d.host_path.rsplit("/", 1)[1] for d in answer.devices][:4] == [
        f"nvidia{g}" for g in gpus
    ]


def visible(answer: Any) -> set[str]:
    """The host GPUs a container was given, by its environment and by its device files."""
    files = {d.host_path.rsplit("/nvidia", 1)[1] for d in answer.devices}
    shown = set(answer.envs["NVIDIA_VISIBLE_DEVICES"].split(","))
    assert shown <= files
    return shown


def test_a_forged_annotation_on_a_pod_toposched_did_not_bind_gets_none_of_anothers_gpus(
    agent: RunningAgent,
    kubelet: FakeKubelet,
    cluster: LiveCluster,
    scheduler: Runner,
) -> None:
    """Issue 44, N1. Another team's pod runs on 4 GPUs toposched chose. A user with `edit` in
    their namespace (a) writes `toposched.io/gpus` naming two of them on a pod of the default
    scheduler, and (b) rewrites it on a pod toposched bound, before the kubelet admits it.
    Neither container gets any of those GPUs, and no device goes to two containers."""
    request = kubelet.registration()
    victim = gpu_pod("victim", 4, ns=OTHER_NS)
    victim["spec"]["schedulerName"] = "toposched"
    cluster.create(victim)
    held = wait_for(lambda: bound_gpus(cluster, "victim", OTHER_NS), "victim bound", 10)
    with kubelet.plugin(request.endpoint) as stub:
        [answer] = kubelet.admit(stub, cluster.get("pods", "victim", OTHER_NS) or {})
    assert visible(answer) == set(held.split(","))
    cluster.set_phase(OTHER_NS, "victim", "Running")
    theirs = set(held.split(","))

    user = KubeApi.connect(str(cluster.user_kubeconfig))
    forged = gpu_pod("forged", 2)
    forged["metadata"]["annotations"] = {GPUS: ",".join(sorted(theirs)[:2])}
    user.request("POST", f"/api/v1/namespaces/{NS}/pods", body=forged)
    # What the agent's check rests on: `edit` may neither bind a pod nor write its status
    # (the PodScheduled condition a Binding sets).
    with pytest.raises(ApiError) as refused:
        user.bind(NS, "forged", NODE, {})
    assert refused.value.status == 403
    with pytest.raises(ApiError) as refused:
        user.request(
            "PATCH",
            f"/api/v1/namespaces/{NS}/pods/forged/status",
            body={"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}},
            content_type="application/strategic-merge-patch+json",
        )
    assert refused.value.status == 403
    cluster.api.bind(NS, "forged", NODE, {})  # as kube-scheduler binds its pod: no GPUs named
    bound = cluster.get("pods", "forged", NS) or {}
    assert {"type": "PodScheduled", "status": "True"} in [
        {k: c[k] for k in ("type", "status")} for c in bound["status"]["conditions"]
    ]
    with kubelet.plugin(request.endpoint) as stub:
        [answer] = kubelet.admit(stub, bound)
    assert len(visible(answer)) == 2 and not visible(answer) & theirs

    mine = gpu_pod("mine", 2)
    mine["spec"]["schedulerName"] = "toposched"
    user.request("POST", f"/api/v1/namespaces/{NS}/pods", body=mine)
    wait_for(lambda: bound_gpus(cluster, "mine"), "mine bound", 10)
    edited = {"metadata": {"annotations": {GPUS: ",".join(sorted(theirs)[2:])}}}
    user.request(
        "PATCH",
        f"/api/v1/namespaces/{NS}/pods/mine",
        body=edited,
        content_type="application/merge-patch+json",
    )
    with kubelet.plugin(request.endpoint) as stub:
        [answer] = kubelet.admit(stub, cluster.get("pods", "mine", NS) or {})
    assert len(visible(answer)) == 2 and not visible(answer) & theirs

    given = [d for pod in kubelet.taken.values() for ids in pod.values() for d in ids]
    assert sorted(given) == sorted(set(given)) and len(given) == 8
