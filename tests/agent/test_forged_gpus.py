"""Issue 44, N1: `toposched.io/gpus` is toposched's word only on a pod that toposched placed, and
even then the plugin gives a container only the devices the kubelet passed for it. Here the
plugin is served on real gRPC with the tests as the kubelet (FakeKubelet), and the pods are
given as the API server lists them; tests/agent/test_e2e.py has the same on the real control
plane, with the scheduler."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import DGX1, NODE, NS
from tests.agent.fakes import FakeKubelet, short_tmp_dir
from tests.agent.test_plugin import allocate, preferred
from toposched.agent.plugin import GpuPlugin, PluginConfig
from toposched.agent.podmatch import AllocationBook, find_claim, placed_by
from toposched.agent.server import PluginServer
from toposched.agent.state import Gpus, NodeState
from toposched.kube.annotations import GPUS

SCHEDULED = {"type": "PodScheduled", "status": "True"}  # what the API server sets on a Binding


def pod(
    name: str,
    size: int,
    gpus: str | None = None,
    scheduler: str | None = "toposched",
    bound: bool = True,
    made_s: int = 0,
) -> dict[str, Any]:
    """A Pending pod on the node as the API server lists it: `bound` through a Binding (its
    PodScheduled condition) or made with spec.nodeName; `scheduler` None: the default; made
    `made_s` seconds into the minute."""
    spec: dict[str, Any] = {
        "nodeName": NODE,
        "containers": [{"name": "c0", "resources": {"limits": {"nvidia.com/gpu": str(size)}}}],
    }
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "uid": f"uid-{name}",
        "creationTimestamp": f"2026-01-01T00:00:{made_s:02d}Z",
    }
    if gpus is not None:
        meta["annotations"] = {GPUS: gpus}
    status = {"phase": "Pending", "conditions": [SCHEDULED] if bound else []}
    return {"metadata": meta, "spec": spec, "status": status}


@dataclass
class Served:
    """A plugin on its socket, the kubelet's side, and the pods the API server lists."""

    plugin: GpuPlugin
    kubelet: FakeKubelet
    pods: list[dict[str, Any]] = field(default_factory=list)

    def stub(self) -> Any:
        return self.kubelet.plugin(self.plugin.config.socket_name)


@contextmanager
def serve(plugin_dir: Path, schedulers: tuple[str, ...] = ("toposched",)) -> Iterator[Served]:
    kubelet = FakeKubelet(plugin_dir).start()
    state = NodeState()
    state.set(Gpus(DGX1))
    config = PluginConfig(
        NODE,
        plugin_dir=plugin_dir,
        dev_dir=plugin_dir,
        pod_resources=kubelet.pod_resources_socket,
        schedulers=schedulers,
    )
    listed: list[dict[str, Any]] = []
    plugin = GpuPlugin(config, state, lambda: list(listed))
    server = PluginServer(plugin)
    assert server.check()
    try:
        yield Served(plugin, kubelet, listed)
    finally:
        server.stop()
        kubelet.stop()


@pytest.fixture
def served() -> Iterator[Served]:
    with short_tmp_dir() as path, serve(path) as running:
        yield running


def holds(kubelet: FakeKubelet, name: str, *gpus: int) -> None:
    """The kubelet has given a running container of pod `name` these devices."""
    kubelet.taken[(NS, name)] = {"c0": [str(g) for g in gpus]}


def test_a_forged_annotation_on_a_default_scheduler_pod_gets_none_of_anothers_gpus(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    holds(served.kubelet, "victim", 4, 5)
    forged = pod("forged", 2, gpus="4,5", scheduler=None)
    served.pods.append(forged)
    with served.stub() as stub, caplog.at_level(logging.WARNING, "toposched.agent"):
        [answer] = served.kubelet.admit(stub, forged)
    got = [int(g) for g in answer.envs["NVIDIA_VISIBLE_DEVICES"].split(",")]
    assert len(got) == 2 and not {4, 5} & set(got)
    assert served.kubelet.taken[(NS, "forged")] == {"c0": [str(g) for g in got]}
    assert "asks scheduler 'default-scheduler'" in caplog.text
    assert "ignored" in caplog.text


def test_a_forged_annotation_does_not_steer_the_kubelet_either(served: Served) -> None:
    """Naming free GPUs, it gets what a pod without the annotation gets: the best pair."""
    served.pods.append(pod("plain", 2, scheduler=None))
    served.kubelet.take_in(served.pods[0])
    with served.stub() as stub:
        best = preferred(stub, list(range(8)), 2)
    served.pods[:] = [pod("forged", 2, gpus="0,7", scheduler=None)]
    served.kubelet.taken.clear()
    served.kubelet.take_in(served.pods[0])
    with served.stub() as stub:
        assert preferred(stub, list(range(8)), 2) == best != [0, 7]


def test_a_pod_made_on_the_node_is_not_toposcheds_whatever_its_scheduler_name(
    served: Served,
) -> None:
    """spec.nodeName given at creation: no scheduler bound it (no PodScheduled condition)."""
    made = pod("made-on-node", 2, gpus="0,7", bound=False)
    served.pods.append(made)
    served.kubelet.take_in(made)
    with served.stub() as stub:
        assert preferred(stub, list(range(8)), 2) != [0, 7]
        assert allocate(stub, "2", "3").envs["NVIDIA_VISIBLE_DEVICES"] == "2,3"
    assert placed_by(made, ("toposched",)).endswith(
        "was not bound by a scheduler (made with spec.nodeName): the annotation is ignored"
    )


def test_a_toposched_pod_gets_its_gpus_where_the_kubelet_passes_them(served: Served) -> None:
    train = pod("train", 2, gpus="4,5")
    served.pods.append(train)
    with served.stub() as stub:
        [answer] = served.kubelet.admit(stub, train)
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == "4,5"
    assert served.kubelet.taken[(NS, "train")] == {"c0": ["4", "5"]}


def test_a_toposched_pod_whose_gpus_the_kubelet_holds_gets_the_kubelets_instead(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    """Its annotation edited after the bind (or the two books apart): the kubelet holds 4 and
    5 for another container, so it neither offers them nor are they given."""
    holds(served.kubelet, "victim", 4, 5)
    edited = pod("edited", 2, gpus="4,5")
    served.pods.append(edited)
    served.kubelet.take_in(edited)
    free = served.kubelet.free()
    with served.stub() as stub, caplog.at_level(logging.WARNING, "toposched.agent"):
        chosen = preferred(stub, free, 2)
        assert set(chosen) <= set(free)
        # A kubelet that picks by itself (the preference is only advice): its IDs, still.
        answer = allocate(stub, "0", "1")
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == "0,1"
    assert [d.host_path for d in answer.devices][:2] == [
        str(served.plugin.config.dev_dir / "nvidia0"),
        str(served.plugin.config.dev_dir / "nvidia1"),
    ]
    assert "offers 0,1,2,3,6,7" in caplog.text
    assert "gets the kubelet's GPUs 0,1, not 4,5" in caplog.text
    # The container was served: the kubelet's next 2-GPU container is another pod's.
    assert served.plugin.book.served("uid-edited") == 1


def test_the_agent_heeds_the_scheduler_names_it_is_given() -> None:
    with short_tmp_dir() as path, serve(path, ("toposched", "gpu-gangs")) as served:
        served.pods.append(pod("other-name", 2, gpus="6,7", scheduler="gpu-gangs"))
        with served.stub() as stub:
            [answer] = served.kubelet.admit(stub, served.pods[0])
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == "6,7"


def test_without_the_kubelets_word_forged_pods_take_no_part_in_the_guess() -> None:
    """The oldest waiting pod of the size is guessed among toposched's pods alone."""
    forged = pod("forged", 2, gpus="4,5", scheduler=None, made_s=1)
    genuine = pod("genuine", 2, gpus="2,3", made_s=2)  # the younger
    claim = find_claim([forged, genuine], 2, "nvidia.com/gpu", AllocationBook())
    assert claim is not None and (claim.pod, claim.gpus) == (f"{NS}/genuine", (2, 3))
    assert find_claim([forged], 2, "nvidia.com/gpu", AllocationBook()) is None


@pytest.mark.parametrize(
    ("scheduler", "bound", "why"),
    [
        ("toposched", True, ""),
        (None, True, "asks scheduler 'default-scheduler', not 'toposched'"),
        ("volcano", True, "asks scheduler 'volcano', not 'toposched'"),
        ("toposched", False, "was not bound by a scheduler"),
    ],
)
def test_placed_by_says_why_an_annotation_is_not_toposcheds(
    scheduler: str | None, bound: bool, why: str
) -> None:
    found = placed_by(pod("p", 1, gpus="0", scheduler=scheduler, bound=bound), ("toposched",))
    assert (found == "") if not why else (why in found and f"pod {NS}/p carries {GPUS}" in found)
