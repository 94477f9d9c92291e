"""Fixtures: the real API server (tests/kube/realcluster.py) with one GPU node, the kubelet's
device-plugin side played by the tests (FakeKubelet: no kubelet runs here), and a running agent
that acts as its own service account."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.agent.fakes import FakeKubelet, HealthNvml, short_tmp_dir
from tests.kube.live import LiveCluster, cluster_for_tests
from tests.kube.realcluster import Session
from toposched.agent.agent import NodeAgent
from toposched.agent.health import NvmlHealth
from toposched.agent.plugin import GpuPlugin, PluginConfig, pods_on
from toposched.agent.podmatch import AllocationBook
from toposched.agent.publisher import Publisher
from toposched.agent.server import PluginServer
from toposched.agent.state import NodeState
from toposched.core import make_scheduler_policy
from toposched.discovery.nvml import discover_minors, discover_topology
from toposched.kube.api import KubeApi
from toposched.kube.driver import KubeScheduler
from toposched.kube.runner import Runner
from toposched.topology import preset

NODE = "toposched-e2e-gpu-1"
NS = "team-a"
DGX1 = preset("dgx1-v100")
CONTROL = ("nvidiactl", "nvidia-uvm")


def gpu_node(name: str = NODE, gpus: int = 8) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"toposched.io/gpu-schedule": "topology"}},
        "status": {
            "capacity": {"nvidia.com/gpu": str(gpus)},
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


@pytest.fixture
def cluster(kube_session: Session | None) -> Iterator[LiveCluster]:
    """The API server with the agent's GPU node; everything the test made deleted after."""
    with cluster_for_tests(kube_session) as api:
        if api.proxy is None:
            pytest.skip("the agent's tests need the session's control plane (its proxy)")
        api.create(gpu_node())
        yield api


@pytest.fixture
def agent_kubeconfig(cluster: LiveCluster, kube_session: Session) -> Path:
    """The agent's own service account, through the proxy."""
    return kube_session.agent_kubeconfig


@pytest.fixture
def kube(agent_kubeconfig: Path) -> KubeApi:
    """The agent's connection."""
    return KubeApi.connect(str(agent_kubeconfig))


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


@pytest.fixture
def dev_dir(tmp_path: Path) -> Path:
    """Device files as a GPU node has them (empty files: only their paths matter)."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in [f"nvidia{i}" for i in range(DGX1.size)] + list(CONTROL):
        (dev / name).touch()
    return dev


@pytest.fixture
def kubelet(plugin_dir: Path) -> Iterator[FakeKubelet]:
    fake = FakeKubelet(plugin_dir).start()
    yield fake
    fake.stop()


@pytest.fixture
def nvml(request: pytest.FixtureRequest) -> HealthNvml:
    """A DGX-1's NVML; `indirect` parametrisation gives its options (`minors=`, say)."""
    return HealthNvml.from_topology(DGX1, **getattr(request, "param", {}))


@dataclass
class RunningAgent:
    """A NodeAgent on a thread, and its parts."""

    agent: NodeAgent
    plugin: GpuPlugin
    state: NodeState
    thread: threading.Thread

    @property
    def config(self) -> PluginConfig:
        return self.plugin.config

    def stop(self) -> None:
        self.agent.stop.set()
        self.thread.join(timeout=5)
        assert not self.thread.is_alive()


GUESSING = "guessing"  # `indirect` parameter of `agent`: no pod resources API to ask


@pytest.fixture
def agent(
    request: pytest.FixtureRequest,
    kube: KubeApi,
    nvml: HealthNvml,
    plugin_dir: Path,
    dev_dir: Path,
    kubelet: FakeKubelet,
) -> Iterator[RunningAgent]:
    """The node agent as `toposched kube node-agent` wires it, polling every 50 ms, asking the
    kubelet's pod resources API which pod it admits (not when parametrised GUESSING)."""
    state = NodeState()
    asks = getattr(request, "param", None) != GUESSING
    sockets = kubelet.pod_resources_socket if asks else None
    config = PluginConfig(NODE, plugin_dir=plugin_dir, dev_dir=dev_dir, pod_resources=sockets)
    plugin = GpuPlugin(config, state, pods_on(kube, NODE), AllocationBook(config.book_file))
    publisher = Publisher(
        kube,
        NODE,
        state,
        lambda: discover_topology(nvml),
        NvmlHealth(nvml),
        read_minors=lambda: discover_minors(nvml),
    )
    node_agent = NodeAgent(publisher, PluginServer(plugin), interval_s=0.05)
    thread = threading.Thread(target=node_agent.run, daemon=True)
    thread.start()
    running = RunningAgent(node_agent, plugin, state, thread)
    yield running
    running.stop()


@pytest.fixture
def scheduler(cluster: LiveCluster) -> Iterator[Runner]:
    """The scheduler, as its own service account."""
    chosen = make_scheduler_policy("toposched", {"migration": False, "elastic": False})
    api = KubeApi.connect(str(cluster.kubeconfig()))
    runner = Runner(KubeScheduler(api, chosen), interval_s=0.05, watch_timeout_s=5)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    yield runner
    runner.stop.set()
    thread.join(timeout=10)
