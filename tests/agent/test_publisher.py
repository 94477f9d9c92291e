"""The publisher against the API server cluster and the fake NVML: the annotation the scheduler
reads, its `unhealthy` list as GPUs fail and recover, and `stale` when NVML cannot be read."""

from __future__ import annotations

from tests.agent.conftest import DGX1, NODE
from tests.agent.fakes import HealthNvml
from tests.kube.live import LiveCluster
from toposched.agent.health import NvmlHealth
from toposched.agent.publisher import Publisher
from toposched.agent.state import NodeState
from toposched.discovery.nvml import discover_topology
from toposched.kube.annotations import TOPOLOGY, NodeGpus, decode_topology, encode_topology
from toposched.kube.api import KubeApi
from toposched.topology import preset


def publisher(kube: KubeApi, nvml: HealthNvml) -> Publisher:
    return Publisher(kube, NODE, NodeState(), lambda: discover_topology(nvml), NvmlHealth(nvml))


def published(cluster: LiveCluster) -> NodeGpus:
    node = cluster.get("nodes", NODE)
    assert node is not None
    return decode_topology(node["metadata"]["annotations"][TOPOLOGY], NODE)


def patches(cluster: LiveCluster) -> int:
    return cluster.requests.count(("PATCH", f"/api/v1/nodes/{NODE}"))


def test_publishes_the_topology_the_scheduler_reads_back_equal(
    cluster: LiveCluster, kube: KubeApi, nvml: HealthNvml
) -> None:
    cluster.patch("nodes", NODE, {"metadata": {"annotations": {"other": "kept"}}})
    publisher(kube, nvml).step()
    read = published(cluster)
    assert read.topology.codes() == DGX1.codes()
    assert read.topology.numa == DGX1.numa
    assert read.topology.cpu_affinity == DGX1.cpu_affinity
    assert read.topology.switch == DGX1.switch
    assert (read.unhealthy, read.stale) == (frozenset(), False)
    assert cluster.get("nodes", NODE)["metadata"]["annotations"]["other"] == "kept"


def test_writes_only_when_something_changed(
    cluster: LiveCluster, kube: KubeApi, nvml: HealthNvml
) -> None:
    agent = publisher(kube, nvml)
    for _ in range(5):
        agent.step()
    assert patches(cluster) == 1
    nvml.xid(6, 79)
    agent.step()
    agent.step()
    assert patches(cluster) == 2


def test_unhealthy_follows_xid_errors_and_lost_gpus(
    cluster: LiveCluster, kube: KubeApi, nvml: HealthNvml
) -> None:
    agent = publisher(kube, nvml)
    agent.step()
    nvml.xid(1, 13)  # an application's own fault: the GPU is fine
    agent.step()
    assert published(cluster).unhealthy == frozenset()
    nvml.xid(1, 79)
    agent.step()
    assert published(cluster).unhealthy == {1}
    nvml.lost.add(4)
    agent.step()
    assert published(cluster).unhealthy == {1, 4}
    nvml.lost.clear()
    agent.step()
    assert published(cluster).unhealthy == {1}  # a critical XID stays until the agent restarts


def test_marks_the_topology_stale_when_nvml_fails_and_fresh_once_it_answers(
    cluster: LiveCluster, kube: KubeApi, nvml: HealthNvml
) -> None:
    agent = publisher(kube, nvml)
    agent.step()
    nvml.failing = True
    agent.step()
    read = published(cluster)
    assert read.stale and read.topology.codes() == DGX1.codes()  # kept, not deleted
    assert agent.state.get()[0].stale
    nvml.failing = False
    agent.step()
    assert not published(cluster).stale
    assert nvml.initialised == 1  # the health check's one session; discovery shut its own


def test_an_agent_that_cannot_read_nvml_marks_the_annotation_it_finds_stale(
    cluster: LiveCluster, kube: KubeApi, nvml: HealthNvml
) -> None:
    before = encode_topology(preset("dgx-a100"), unhealthy=[2])
    cluster.patch("nodes", NODE, {"metadata": {"annotations": {TOPOLOGY: before}}})
    nvml.failing = True
    publisher(kube, nvml).step()
    read = published(cluster)
    assert read.stale and read.topology.codes() == preset("dgx-a100").codes()


def test_a_node_with_nothing_readable_gets_no_annotation(
    cluster: LiveCluster, kube: KubeApi, nvml: HealthNvml
) -> None:
    nvml.failing = True
    publisher(kube, nvml).step()
    assert TOPOLOGY not in (cluster.get("nodes", NODE)["metadata"].get("annotations") or {})
    assert patches(cluster) == 0
