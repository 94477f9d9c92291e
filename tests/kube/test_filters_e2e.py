"""The Kubernetes scheduler filters nodes as kube-scheduler does, against the real API server:
for each rule, a pod that must not land on a node and one that must (CPUs and memory
another scheduler's pods leave, ephemeral-storage, an extended resource, taints, nodeSelector,
required node affinity, cordoned and NotReady nodes, the GPU type of the product label)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kube.live import LiveCluster
from tests.kube.test_scheduler_e2e import Cluster, node, pod, podgroup
from tests.server import wait_for as until
from toposched.kube import driver

SETTLE_S = 0.6  # how long a pod that must not be bound is watched staying unbound


@pytest.fixture
def cluster(
    apiserver: LiveCluster, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Cluster]:
    # A gang refused at bind time is kept off that node for a while: short here, so that a
    # test can see it bind once the node has room (whether the core or the bind check said no).
    monkeypatch.setattr(driver, "REFUSED_S", 0.3)
    c = Cluster(apiserver, kubeconfig)
    yield c
    c.stop()


def real(name: str) -> str:
    """A test node's name on the cluster, as the scheduler knows it (tests/kube/live.py)."""
    return LiveCluster.node_name(name)


def gpu_node(
    name: str,
    allocatable: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A DGX-1 node with more allocatable, labels and taints."""
    made = node(name)
    made["status"]["allocatable"].update(allocatable or {})
    made["metadata"]["labels"].update(labels or {})
    if taints:
        made["spec"] = {"taints": taints}
    return made


def asking(name: str, gpus: int = 1, group: str | None = None, **spec: Any) -> dict[str, Any]:
    """A pod of one GPU (or `gpus`) with `requests=` (and extended resources as limits too,
    as the API server requires) and more of its spec (`nodeSelector=`, `tolerations=` ...)."""
    made = pod(name, gpus, group=group)
    requests = spec.pop("requests", {})
    resources = made["spec"]["containers"][0]["resources"]
    resources["requests"] = {"nvidia.com/gpu": gpus, **requests}
    resources["limits"].update({k: v for k, v in requests.items() if "/" in k})
    made["spec"].update(spec)
    return made


def foreign(name: str, on: str, requests: dict[str, str]) -> dict[str, Any]:
    """A running pod another scheduler placed on node `on`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "batch"},
        "spec": {
            "nodeName": on,
            "containers": [
                {
                    "name": "main",
                    "image": "etl",
                    "resources": {
                        "requests": requests,
                        "limits": {k: v for k, v in requests.items() if "/" in k},
                    },
                }
            ],
        },
    }


def run_foreign(c: Cluster, name: str, on: str, requests: dict[str, str]) -> None:
    """Start a pod of another scheduler and wait until toposched has seen it."""
    c.server.create(foreign(name, on, requests))
    c.server.set_phase("batch", name, "Running")
    scheduler = c.runners[-1][0].scheduler
    until(lambda: ("other", ("batch", name)) in scheduler.usage, f"the scheduler sees {name}")


def where(c: Cluster, name: str) -> str:
    return str(until(lambda: c.bound(name), f"{name} bound")[name][0])


def stays_unbound(c: Cluster, name: str) -> str:
    """Assert `name` is never bound; the message of the FailedScheduling Event it got."""
    said = until(
        lambda: [e for e in c.events(name) if e["reason"] == "FailedScheduling"],
        f"{name} told why it waits",
    )
    time.sleep(SETTLE_S)
    assert c.pod(name), f"{name} was evicted"
    assert not c.pod(name)["spec"].get("nodeName"), f"{name} was bound"
    return str(said[-1]["message"])


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def test_cpus_another_schedulers_pod_takes_are_not_given_again(cluster: Cluster) -> None:
    cluster.server.create(gpu_node("dgx0", {"cpu": "8", "memory": "64Gi"}))
    cluster.start()
    run_foreign(cluster, "etl", "dgx0", {"cpu": "6"})
    cluster.server.create(asking("fits", requests={"cpu": "1500m"}))
    assert where(cluster, "fits") == "dgx0"
    cluster.server.create(asking("too-big", requests={"cpu": "1"}))  # 500m left
    assert "cpu" in stays_unbound(cluster, "too-big").lower()
    cluster.server.set_phase("batch", "etl", "Succeeded")  # its CPUs come back
    assert where(cluster, "too-big") == "dgx0"


def test_pod_level_resources_count_for_the_whole_pod(cluster: Cluster) -> None:
    """Pod-level `spec.resources` (beta and on by default since 1.34): the pod asks what they
    say for CPUs and memory, whatever its containers ask, as kube-scheduler counts it."""
    cluster.server.create(gpu_node("dgx0", {"cpu": "8", "memory": "64Gi"}))
    cluster.start()
    first = asking("first")
    first["spec"]["resources"] = {"requests": {"cpu": "6", "memory": "8Gi"}}
    cluster.server.create(first)
    assert where(cluster, "first") == "dgx0"
    second = asking("second", requests={"cpu": "1"})  # a container asks 1 CPU, the pod 4
    second["spec"]["resources"] = {"requests": {"cpu": "4"}}
    cluster.server.create(second)
    assert "with 4 CPUs each" in stays_unbound(cluster, "second")
    cluster.server.delete("pods", "first", namespace="team-a")
    assert where(cluster, "second") == "dgx0"


def test_memory_another_schedulers_pod_takes_is_not_given_again(cluster: Cluster) -> None:
    cluster.server.create(gpu_node("dgx0", {"cpu": "64", "memory": "64Gi"}))
    cluster.start()
    run_foreign(cluster, "cache", "dgx0", {"memory": "48Gi"})
    cluster.server.create(asking("fits", requests={"memory": "8Gi"}))
    assert where(cluster, "fits") == "dgx0"
    cluster.server.create(asking("too-big", requests={"memory": "16Gi"}))  # 8Gi left
    assert "memory" in stays_unbound(cluster, "too-big").lower()
    cluster.server.delete("pods", "cache", namespace="batch")
    assert where(cluster, "too-big") == "dgx0"


def test_init_containers_count_as_kube_scheduler_counts_them(cluster: Cluster) -> None:
    """A pod's effective request is the larger of its containers' sum and its largest init
    container: 4 CPUs here, which 3 free CPUs do not hold."""
    cluster.server.create(gpu_node("dgx0", {"cpu": "3"}))
    cluster.start()
    big_init = asking("big-init", requests={"cpu": "1"})
    big_init["spec"]["initContainers"] = [
        {"name": "fetch", "image": "curl", "resources": {"requests": {"cpu": "4"}}}
    ]
    cluster.server.create(big_init)
    stays_unbound(cluster, "big-init")
    cluster.server.create(asking("small", requests={"cpu": "3"}))
    assert where(cluster, "small") == "dgx0"


def test_ephemeral_storage_is_checked_against_what_is_left(cluster: Cluster) -> None:
    cluster.server.create(gpu_node("dgx0", {"ephemeral-storage": "100Gi"}))
    cluster.start()
    run_foreign(cluster, "scratch", "dgx0", {"ephemeral-storage": "80Gi"})
    cluster.server.create(asking("small", requests={"ephemeral-storage": "10Gi"}))
    assert where(cluster, "small") == "dgx0"
    cluster.server.create(asking("large", requests={"ephemeral-storage": "30Gi"}))  # 10Gi left
    assert "ephemeral-storage" in stays_unbound(cluster, "large")
    cluster.server.delete("pods", "scratch", namespace="batch")
    assert where(cluster, "large") == "dgx0"


def test_an_extended_resource_is_checked_and_a_node_without_it_is_not_used(
    cluster: Cluster,
) -> None:
    cluster.server.create(gpu_node("dgx0", {"example.com/fpga": "2"}))
    cluster.server.create(gpu_node("dgx1"))  # no FPGA at all
    cluster.start()
    run_foreign(cluster, "synth", "dgx0", {"example.com/fpga": "1"})
    cluster.server.create(asking("two", requests={"example.com/fpga": "2"}))
    assert "example.com/fpga" in stays_unbound(cluster, "two")
    cluster.server.create(asking("one", requests={"example.com/fpga": "1"}))
    assert where(cluster, "one") == "dgx0"


def test_the_sum_of_a_gangs_pods_on_one_node_is_checked_before_binding(
    cluster: Cluster,
) -> None:
    """Two 4-GPU pods of 30Gi of ephemeral-storage each: one node has room for one of them
    (40Gi), the other for both. Whatever the core chose first, they are bound together where
    both fit, never where their sum does not."""
    cluster.server.create(gpu_node("dgx0", {"ephemeral-storage": "40Gi"}))
    cluster.server.create(gpu_node("dgx1", {"ephemeral-storage": "100Gi"}))
    cluster.start()
    cluster.server.create(podgroup("g", 2))
    for i in range(2):
        cluster.server.create(
            asking(f"g-{i}", 4, group="g", requests={"ephemeral-storage": "30Gi"})
        )
    placed = until(lambda: cluster.bound("g-0", "g-1"), "the gang bound")
    assert {n for n, _ in placed.values()} == {"dgx1"}


def test_a_noschedule_taint_keeps_off_pods_that_do_not_tolerate_it(cluster: Cluster) -> None:
    taint = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    cluster.server.create(gpu_node("dgx0", taints=[taint]))
    cluster.start()
    cluster.server.create(asking("plain"))
    assert "dedicated" in stays_unbound(cluster, "plain")
    toleration = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    cluster.server.create(asking("tolerant", tolerations=[toleration]))
    assert where(cluster, "tolerant") == "dgx0"
    cluster.server.patch("nodes", "dgx0", {"spec": {"taints": None}})  # the core is told
    assert where(cluster, "plain") == "dgx0"


def test_a_taint_added_while_running_keeps_new_pods_off(cluster: Cluster) -> None:
    cluster.server.create(gpu_node("dgx0"))
    cluster.start()
    cluster.server.create(asking("before"))
    assert where(cluster, "before") == "dgx0"
    taint = {"key": "maintenance", "effect": "NoSchedule"}
    cluster.server.patch("nodes", "dgx0", {"spec": {"taints": [taint]}})
    scheduler = cluster.runners[-1][0].scheduler
    until(lambda: scheduler.told[real("dgx0")].taints, "the core told of the taint")
    cluster.server.create(asking("after"))
    assert "maintenance" in stays_unbound(cluster, "after")
    assert cluster.bound("before")  # running pods stay


def test_a_node_selector_picks_the_nodes(cluster: Cluster) -> None:
    cluster.server.create(gpu_node("dgx0", labels={"pool": "a"}))
    cluster.server.create(gpu_node("dgx1", labels={"pool": "b"}))
    cluster.start()
    cluster.server.create(asking("to-b", nodeSelector={"pool": "b"}))
    assert where(cluster, "to-b") == "dgx1"
    cluster.server.create(asking("to-c", nodeSelector={"pool": "c"}))
    assert "pool" in stays_unbound(cluster, "to-c")


def test_required_node_affinity_in_notin_and_match_fields(cluster: Cluster) -> None:
    cluster.server.create(gpu_node("dgx0", labels={"pool": "a"}))
    cluster.server.create(gpu_node("dgx1", labels={"pool": "b"}))
    cluster.start()
    expression = {"key": "pool", "operator": "In", "values": ["b"]}
    cluster.server.create(asking("in-b", affinity=affinity({"matchExpressions": [expression]})))
    assert where(cluster, "in-b") == "dgx1"
    expression = {"key": "pool", "operator": "NotIn", "values": ["b"]}
    cluster.server.create(asking("not-b", affinity=affinity({"matchExpressions": [expression]})))
    assert where(cluster, "not-b") == "dgx0"
    field = {"key": "metadata.name", "operator": "In", "values": [real("dgx1")]}
    cluster.server.create(asking("named", affinity=affinity({"matchFields": [field]})))
    assert where(cluster, "named") == "dgx1"
    nowhere = {"key": "pool", "operator": "In", "values": ["c"]}
    either = {"key": "pool", "operator": "Exists"}
    terms = affinity({"matchExpressions": [nowhere]}, {"matchExpressions": [either, nowhere]})
    cluster.server.create(asking("in-c", affinity=terms))
    assert "pool" in stays_unbound(cluster, "in-c")


def test_a_cordoned_node_takes_no_new_pod(cluster: Cluster) -> None:
    """As `kubectl cordon` leaves it: unschedulable, and the node controller's taint."""
    cluster.server.create(gpu_node("dgx0"))
    cluster.start()
    cluster.server.create(asking("running"))
    assert where(cluster, "running") == "dgx0"
    cordon = {
        "unschedulable": True,
        "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
    }
    cluster.server.patch("nodes", "dgx0", {"spec": cordon})
    scheduler = cluster.runners[-1][0].scheduler
    until(lambda: real("dgx0") in scheduler.cordoned, "the scheduler sees the cordon")
    cluster.server.create(asking("waits"))
    stays_unbound(cluster, "waits")
    assert cluster.bound("running")
    cluster.server.patch("nodes", "dgx0", {"spec": {"unschedulable": None, "taints": None}})
    assert where(cluster, "waits") == "dgx0"


def test_a_not_ready_node_takes_no_new_pod(cluster: Cluster) -> None:
    sick = gpu_node("dgx0")
    sick["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    cluster.server.create(sick)
    cluster.server.create(gpu_node("dgx1"))
    cluster.start()
    cluster.server.create(asking("a", 8))
    assert where(cluster, "a") == "dgx1"
    cluster.server.create(asking("b", 8))
    stays_unbound(cluster, "b")
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    cluster.server.patch("nodes", "dgx0", ready, subresource="status")
    assert where(cluster, "b") == "dgx0"


def test_the_gpu_type_is_read_from_the_product_label(cluster: Cluster) -> None:
    cluster.server.create(
        gpu_node("dgx0", labels={"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB"})
    )
    cluster.server.create(
        gpu_node(
            "dgx1",
            labels={
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                "nvidia.com/gpu.memory": "40960",
            },
        )
    )
    cluster.start()
    a100 = asking("wants-a100")
    a100["metadata"]["annotations"] = {"toposched.io/gpu-type": "A100"}
    cluster.server.create(a100)
    assert where(cluster, "wants-a100") == "dgx1"
    h100 = asking("wants-h100")
    h100["metadata"]["annotations"] = {"toposched.io/gpu-type": "H100"}
    cluster.server.create(h100)
    stays_unbound(cluster, "wants-h100")
    scheduler = cluster.runners[-1][0].scheduler
    assert scheduler.told[real("dgx1")].hardware.gpu_memory == 40 * 2**30


def test_a_successor_keeps_a_running_pod_its_node_no_longer_suits(cluster: Cluster) -> None:
    """Kubernetes ignores a pod's node rules once it runs: a scheduler started after its node
    was tainted and filled by another scheduler's pod gives the pod back, evicting nothing,
    and binds nothing more there."""
    cluster.server.create(gpu_node("dgx0", {"cpu": "8"}))
    first = cluster.start()
    cluster.server.create(asking("running", requests={"cpu": "4"}))
    assert where(cluster, "running") == "dgx0"
    cluster.stop()
    taint = {"key": "maintenance", "effect": "NoSchedule"}
    cluster.server.patch("nodes", "dgx0", {"spec": {"taints": [taint]}})
    cluster.server.create(foreign("etl", "dgx0", {"cpu": "6"}))
    successor = cluster.start()
    assert successor is not first
    until(lambda: successor.scheduler.gangs, "the running gang given back")
    cluster.server.create(asking("later"))
    stays_unbound(cluster, "later")
    assert cluster.bound("running")


def test_a_gang_goes_only_where_every_pod_may(cluster: Cluster) -> None:
    """One pod of the gang tolerates the taint, the other does not: the gang takes the
    untainted node; two pods asking two values of one label are refused with an Event."""
    taint = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    cluster.server.create(gpu_node("dgx0", taints=[taint]))
    cluster.server.create(gpu_node("dgx1"))
    cluster.start()
    cluster.server.create(podgroup("g", 2))
    toleration = {"key": "dedicated", "operator": "Exists"}
    cluster.server.create(asking("g-0", 4, group="g", tolerations=[toleration]))
    cluster.server.create(asking("g-1", 4, group="g"))
    placed = until(lambda: cluster.bound("g-0", "g-1"), "the gang bound")
    assert {n for n, _ in placed.values()} == {"dgx1"}
    cluster.server.create(podgroup("h", 2))
    cluster.server.create(asking("h-0", group="h", nodeSelector={"pool": "a"}))
    cluster.server.create(asking("h-1", group="h", nodeSelector={"pool": "b"}))
    said = until(
        lambda: [e for e in cluster.events("h-0") if e["reason"] == "InvalidGang"],
        "the gang refused",
    )
    assert "pool=a" in said[0]["message"] and "pool=b" in said[0]["message"]
    time.sleep(SETTLE_S)
    assert not cluster.bound("h-0") and not cluster.bound("h-1")
