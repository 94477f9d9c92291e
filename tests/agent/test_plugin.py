"""The device plugin through real gRPC on unix sockets, with the tests as the kubelet:
registration, ListAndWatch and health, Allocate of the scheduler's GPUs, GetPreferredAllocation,
refusals, and registering again after a kubelet restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import CONTROL, DGX1, GUESSING, NODE, NS, RunningAgent
from tests.agent.fakes import FakeKubelet, HealthNvml
from tests.kube.live import LiveCluster
from tests.server import wait_for
from toposched.agent.plugin import PluginConfig, container_response
from toposched.agent.podmatch import AllocationBook
from toposched.agent.proto import grpc, messages
from toposched.kube.annotations import GPUS
from toposched.kube.api import KubeApi
from toposched.placement import ring_bandwidth

TIMEOUT_S = 5.0


def gpu_pod(name: str, *limits: int, ns: str = NS) -> dict[str, Any]:
    containers = [
        {"name": f"c{i}", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": n}}}
        for i, n in enumerate(limits)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": containers},
    }


def bind(cluster: LiveCluster, name: str, *limits: int, gpus: str | None = None) -> dict[str, Any]:
    """A pod bound to the node as the scheduler binds it (one of toposched's, with `gpus`), or
    as another scheduler binds its own."""
    pod = gpu_pod(name, *limits)
    if gpus is not None:
        pod["spec"]["schedulerName"] = "toposched"
    made = cluster.create(pod)
    cluster.api.bind(NS, name, NODE, {GPUS: gpus} if gpus is not None else {})
    return made


def allocate(stub: Any, *ids: str) -> Any:
    m = messages()
    request = m.AllocateRequest(container_requests=[m.ContainerAllocateRequest(devices_ids=ids)])
    [answer] = stub.Allocate(request, timeout=TIMEOUT_S).container_responses
    return answer


def preferred(stub: Any, available: list[int], size: int, must: tuple[int, ...] = ()) -> list[int]:
    m = messages()
    request = m.PreferredAllocationRequest(
        container_requests=[
            m.ContainerPreferredAllocationRequest(
                available_deviceIDs=[str(g) for g in available],
                must_include_deviceIDs=[str(g) for g in must],
                allocation_size=size,
            )
        ]
    )
    [answer] = stub.GetPreferredAllocation(request, timeout=TIMEOUT_S).container_responses
    return sorted(int(g) for g in answer.deviceIDs)


def given(answer: Any, agent: RunningAgent) -> tuple[list[str], dict[str, str]]:
    """The host device files (relative to the test's /dev) and the envs of a container."""
    dev = str(agent.config.dev_dir) + "/"
    files = [d.host_path.removeprefix(dev) for d in answer.devices]
    for d in answer.devices:
        assert d.container_path == "/dev/" + d.host_path.removeprefix(dev)
        assert d.permissions == "rw"
    return files, dict(answer.envs)


def test_registers_with_the_kubelet(agent: RunningAgent, kubelet: FakeKubelet) -> None:
    request = kubelet.registration()
    assert request.version == "v1beta1"
    assert request.resource_name == "nvidia.com/gpu"
    assert request.endpoint == "toposched-nvidia-com-gpu.sock"
    assert (agent.config.plugin_dir / request.endpoint).exists()
    assert request.options.get_preferred_allocation_available
    assert not request.options.pre_start_required
    with kubelet.plugin(request.endpoint) as stub:
        assert stub.GetDevicePluginOptions(messages().Empty(), timeout=TIMEOUT_S) == request.options
        empty = messages().PreStartContainerRequest(devices_ids=["0"])
        assert stub.PreStartContainer(empty, timeout=TIMEOUT_S) is not None


def test_list_and_watch_sends_the_gpus_then_each_health_change(
    agent: RunningAgent, kubelet: FakeKubelet, nvml: HealthNvml
) -> None:
    request = kubelet.registration()
    with kubelet.plugin(request.endpoint) as stub:
        stream = stub.ListAndWatch(messages().Empty(), timeout=10)

        def health() -> dict[str, str]:
            return {d.ID: d.health for d in next(stream).devices}

        first = next(stream).devices
        assert [d.ID for d in first] == [str(i) for i in range(8)]
        assert {d.health for d in first} == {"Healthy"}
        assert [[n.ID for n in d.topology.nodes] for d in first] == [[s] for s in DGX1.numa]
        nvml.xid(3, 79)  # fallen off the bus
        assert health() == {str(i): "Unhealthy" if i == 3 else "Healthy" for i in range(8)}
        nvml.lost.add(5)
        assert {g for g, h in health().items() if h == "Unhealthy"} == {"3", "5"}
        nvml.lost.clear()  # answers again: healthy again; the XID stays
        assert {g for g, h in health().items() if h == "Unhealthy"} == {"3"}
        stream.cancel()


def test_allocate_gives_the_gpus_the_scheduler_wrote_on_the_pod(
    agent: RunningAgent, kubelet: FakeKubelet, cluster: LiveCluster, kube: KubeApi
) -> None:
    request = kubelet.registration()
    kubelet.take_in(bind(cluster, "train", 2, gpus="4,5"))
    with kubelet.plugin(request.endpoint) as stub:
        # The kubelet asks first which devices it should pick: the scheduler's; it then
        # passes those (tests/agent/test_forged_gpus.py: where it passes others).
        assert preferred(stub, list(range(8)), 2) == [4, 5]
        answer = allocate(stub, "4", "5")
        kubelet.gave(NS, "train", "c0", ["4", "5"])
        files, envs = given(answer, agent)
        assert files == ["nvidia4", "nvidia5", *CONTROL]
        assert envs["NVIDIA_VISIBLE_DEVICES"] == "4,5"
        assert envs["CUDA_VISIBLE_DEVICES"] == "0,1"  # the container sees its two GPUs as 0, 1
        assert envs["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert dict(answer.annotations) == {GPUS: "4,5"}
        # The pod has its devices: the next 2-GPU container is not it, and gets the kubelet's.
        files, envs = given(allocate(stub, "0", "1"), agent)
        assert files == ["nvidia0", "nvidia1", *CONTROL]
        assert envs["NVIDIA_VISIBLE_DEVICES"] == "0,1"
        # Recorded on disk, for an agent that restarts while the pod is still Pending ...
        uid = cluster.get("pods", "train", NS)["metadata"]["uid"]
        assert AllocationBook(agent.config.book_file).served(uid) == 1
        # ... and forgotten once the pod is gone from the node.
        cluster.delete("pods", "train", NS)
        allocate(stub, "2")
        assert AllocationBook(agent.config.book_file).served(uid) == 0


def test_two_pods_of_one_size_get_their_own_gpus_in_whatever_order_the_kubelet_takes_them(
    agent: RunningAgent, kubelet: FakeKubelet, cluster: LiveCluster
) -> None:
    """Two pods of one size bound close together may reach the kubelet in either order: the
    kubelet's pod resources API says which one it is admitting, so each gets its own GPUs and
    the kubelet's books agree with the scheduler's (oldest-first, they swapped GPUs)."""
    request = kubelet.registration()
    older = bind(cluster, "a-older", 2, gpus="0,1")
    newer = bind(cluster, "b-newer", 2, gpus="4,5")
    with kubelet.plugin(request.endpoint) as stub:
        [first] = kubelet.admit(stub, newer)  # the kubelet saw the newer binding first
        [second] = kubelet.admit(stub, older)
    assert first.envs["NVIDIA_VISIBLE_DEVICES"] == "4,5"
    assert second.envs["NVIDIA_VISIBLE_DEVICES"] == "0,1"
    assert kubelet.taken[(NS, "b-newer")] == {"c0": ["4", "5"]}
    assert kubelet.taken[(NS, "a-older")] == {"c0": ["0", "1"]}


SWAPPED = [1, 0, 3, 2, 5, 4, 7, 6]  # the driver's minor numbers, not the NVML indices


@pytest.mark.parametrize("nvml", [{"minors": SWAPPED}], indirect=True)
def test_device_files_are_named_by_the_drivers_minor_numbers(
    agent: RunningAgent, kubelet: FakeKubelet, cluster: LiveCluster
) -> None:
    """/dev/nvidia<N> is named by the GPU's minor number (NVML's nvmlDeviceGetMinorNumber),
    which the driver gives in its own order; indices and environment stay NVML's."""
    request = kubelet.registration()
    kubelet.take_in(bind(cluster, "train", 2, gpus="4,6"))
    with kubelet.plugin(request.endpoint) as stub:
        files, envs = given(allocate(stub, "4", "6"), agent)
    assert files == ["nvidia5", "nvidia7", *CONTROL]
    assert envs["NVIDIA_VISIBLE_DEVICES"] == "4,6"


def test_each_container_gets_its_share_of_the_pods_gpus(
    agent: RunningAgent, kubelet: FakeKubelet, cluster: LiveCluster, kube: KubeApi
) -> None:
    request = kubelet.registration()
    kubelet.take_in(bind(cluster, "two-containers", 1, 3, gpus="0,2,3,1"))
    with kubelet.plugin(request.endpoint) as stub:
        assert preferred(stub, list(range(8)), 1) == [0]
        first = allocate(stub, "0")
        assert first.envs["NVIDIA_VISIBLE_DEVICES"] == "0"
        kubelet.gave(NS, "two-containers", "c0", ["0"])
        assert preferred(stub, list(range(1, 8)), 3) == [1, 2, 3]
        second = allocate(stub, "1", "2", "3")
        assert second.envs["NVIDIA_VISIBLE_DEVICES"] == "1,2,3"
        assert second.envs["CUDA_VISIBLE_DEVICES"] == "0,1,2"


@pytest.mark.parametrize("agent", [GUESSING], indirect=True)
def test_without_the_kubelets_word_the_oldest_waiting_pod_of_that_size_is_served(
    agent: RunningAgent, kubelet: FakeKubelet, cluster: LiveCluster, kube: KubeApi
) -> None:
    request = kubelet.registration()
    bind(cluster, "running", 2, gpus="0,1")
    cluster.set_phase(NS, "running", "Running")
    bind(cluster, "four", 4, gpus="4,5,6,7")
    bind(cluster, "pair", 2, gpus="2,3")
    with kubelet.plugin(request.endpoint) as stub:
        assert preferred(stub, list(range(2, 8)), 2) == [2, 3]
        assert allocate(stub, "2", "3").envs["NVIDIA_VISIBLE_DEVICES"] == "2,3"
        assert preferred(stub, list(range(4, 8)), 4) == [4, 5, 6, 7]
        assert allocate(stub, "4", "5", "6", "7").envs["NVIDIA_VISIBLE_DEVICES"] == "4,5,6,7"
        assert (
            AllocationBook(agent.config.book_file).served(
                cluster.get("pods", "pair", NS)["metadata"]["uid"]
            )
            == 1
        )


def test_a_pod_without_the_annotation_gets_the_topology_best_set(
    agent: RunningAgent, kubelet: FakeKubelet, cluster: LiveCluster, kube: KubeApi
) -> None:
    request = kubelet.registration()
    kubelet.take_in(bind(cluster, "other-scheduler", 2))
    best_pair = max(ring_bandwidth(DGX1, (a, b)) or 0 for a in range(8) for b in range(a))
    with kubelet.plugin(request.endpoint) as stub:
        pair = preferred(stub, list(range(8)), 2)
        link = DGX1.links[pair[0]][pair[1]]
        assert link is not None and link.is_nvlink
        assert ring_bandwidth(DGX1, pair) == best_pair
        # Only from what is free, and around what must be kept.
        four = preferred(stub, [0, 1, 2, 3, 4], 4)
        assert set(four) <= {0, 1, 2, 3, 4}
        assert ring_bandwidth(DGX1, four) == max(
            ring_bandwidth(DGX1, [g for g in range(5) if g != out]) or 0 for out in range(5)
        )
        kept = preferred(stub, list(range(8)), 2, must=(6,))
        assert 6 in kept and DGX1.links[kept[0]][kept[1]].is_nvlink  # type: ignore[union-attr]
        # At Allocate such a pod gets the devices the kubelet picked.
        assert allocate(stub, *map(str, pair)).envs["NVIDIA_VISIBLE_DEVICES"] == "{},{}".format(
            *pair
        )


@pytest.mark.parametrize(
    ("gpus", "code", "words"),
    [
        ("8,9", "INVALID_ARGUMENT", ["team-a/bad", "GPU 8", "GPUs 0-7"]),
        ("2,3", "FAILED_PRECONDITION", ["team-a/bad", "GPU 2", "unhealthy"]),
        ("1,x", "INVALID_ARGUMENT", ["team-a/bad", GPUS]),
        ("1,2,3", "INVALID_ARGUMENT", ["team-a/bad", "names 3 GPUs", "ask 2"]),
    ],
)
def test_an_annotation_the_node_cannot_honour_is_refused_and_nothing_given(
    agent: RunningAgent,
    kubelet: FakeKubelet,
    cluster: LiveCluster,
    kube: KubeApi,
    nvml: HealthNvml,
    gpus: str,
    code: str,
    words: list[str],
) -> None:
    request = kubelet.registration()
    nvml.xid(2, 48)  # a double-bit ECC error
    wait_for(lambda: 2 in agent.state.get()[0].unhealthy, "GPU 2 unhealthy", timeout_s=5)
    kubelet.take_in(bind(cluster, "bad", 2, gpus=gpus))
    with kubelet.plugin(request.endpoint) as stub, pytest.raises(grpc().RpcError) as raised:
        allocate(stub, "0", "1")
    assert raised.value.code().name == code
    for word in words:
        assert word in raised.value.details()
    assert agent.plugin.book.served(cluster.get("pods", "bad", NS)["metadata"]["uid"]) == 0


def test_allocate_fails_closed_when_the_pods_cannot_be_listed(
    agent: RunningAgent, kubelet: FakeKubelet, cluster: LiveCluster
) -> None:
    request = kubelet.registration()
    cluster.proxy.inject("GET", r"^/api/v1/pods$", times=1000)  # the API server unreachable
    with kubelet.plugin(request.endpoint) as stub, pytest.raises(grpc().RpcError) as raised:
        allocate(stub, "0")
    assert raised.value.code().name == "UNAVAILABLE"
    assert NODE in raised.value.details()


def test_registers_again_when_the_kubelet_restarts(
    agent: RunningAgent, kubelet: FakeKubelet
) -> None:
    first = kubelet.registration()
    kubelet.restart()  # removes the plugin's socket, as the kubelet does
    again = kubelet.registration()
    assert (again.endpoint, again.resource_name) == (first.endpoint, first.resource_name)
    with kubelet.plugin(again.endpoint) as stub:
        stream = stub.ListAndWatch(messages().Empty(), timeout=5)
        assert len(next(stream).devices) == 8
        stream.cancel()


def test_registers_once_the_kubelet_is_up(agent: RunningAgent, kubelet: FakeKubelet) -> None:
    kubelet.registration()
    kubelet.stop()
    kubelet.requests.queue.clear()
    kubelet.start()  # a new kubelet.sock, the plugin's socket kept: registers again all the same
    assert kubelet.registration().resource_name == "nvidia.com/gpu"


def test_device_paths_are_the_hosts_wherever_the_agent_sees_them(dev_dir: Path) -> None:
    (dev_dir / "nvidia-uvm").unlink()  # a node without the UVM module loaded yet
    config = PluginConfig(NODE, dev_dir=Path("/dev"), dev_mount=dev_dir)
    answer = container_response((6, 7), config)
    assert [d.host_path for d in answer.devices] == [
        "/dev/nvidia6",
        "/dev/nvidia7",
        "/dev/nvidiactl",
    ]
    assert [d.container_path for d in answer.devices] == [d.host_path for d in answer.devices]
