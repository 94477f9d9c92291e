"""The node's GPUs as a ResourceSlice on the real API server (resource.k8s.io/v1): published with
the agent's own service account, kept in step with GPU health, written only on a change."""

from __future__ import annotations

from typing import Any

from tests.agent.conftest import DGX1, NODE, NS
from tests.agent.fakes import HealthNvml, short_tmp_dir
from tests.kube.live import LiveCluster
from toposched.agent.dra import CHECK_EVERY, SlicePublisher, facts_from_nvml, slice_name
from toposched.agent.drakubelet import DraPlugin, serve_dra
from toposched.agent.health import NvmlHealth
from toposched.agent.proto import dra, grpc, registration
from toposched.agent.publisher import Publisher
from toposched.agent.state import NodeState
from toposched.discovery.nvml import discover_topology
from toposched.kube.api import KubeApi
from toposched.kube.claims import DRIVER
from toposched.topology.resources import memory_text

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def the_slice(cluster: LiveCluster) -> dict[str, Any]:
    found: dict[str, Any] = cluster.api.request("GET", f"{SLICES}/{slice_name(NODE)}")
    return found


def writes(cluster: LiveCluster) -> int:
    return sum(
        1 for method, path in cluster.requests if path.startswith(SLICES) and method != "GET"
    )


def test_the_slice_lists_each_gpu_and_follows_its_health(
    cluster: LiveCluster, kube: KubeApi, nvml: HealthNvml
) -> None:
    facts = facts_from_nvml(nvml)
    slices = SlicePublisher(kube, NODE, facts)
    agent = Publisher(
        kube, NODE, NodeState(), lambda: discover_topology(nvml), NvmlHealth(nvml), slices=slices
    )
    try:
        agent.step()
        made = the_slice(cluster)
        spec = made["spec"]
        assert (spec["driver"], spec["nodeName"]) == (DRIVER, NODE)
        assert spec["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
        node = cluster.api.request("GET", f"/api/v1/nodes/{NODE}")
        (owner,) = made["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"]) == ("Node", node["metadata"]["uid"])
        by_name = {d["name"]: d for d in spec["devices"]}
        assert sorted(by_name) == [f"gpu-{i}" for i in range(8)]
        gpu0 = by_name["gpu-0"]["attributes"]
        assert gpu0["index"] == {"int": 0} and gpu0["healthy"] == {"bool": True}
        # GPU 0 of a DGX-1 has NVLinks to 1, 2, 3 and 4 (the preset's links).
        peers = [j for j in range(1, 8) if DGX1.link(0, j).path.name == "NV"]
        assert gpu0[f"{DRIVER}/nvlinkPeers"] == {"string": ",".join(map(str, peers))}
        assert gpu0["productName"] == {"string": facts[0].product}
        assert gpu0["uuid"]["string"].startswith("GPU-")
        assert gpu0["pciBusID"] == {"string": facts[0].pci_bus_id}
        assert by_name["gpu-0"]["capacity"]["memory"] == {"value": memory_text(facts[0].memory)}
        for _ in range(3):
            agent.step()
        assert writes(cluster) == 1  # nothing changed: nothing written
        nvml.xid(3, 79)
        agent.step()
        again = the_slice(cluster)["spec"]
        assert again["pool"]["generation"] == 2
        health = {d["name"]: d["attributes"]["healthy"]["bool"] for d in again["devices"]}
        assert health == {f"gpu-{i}": i != 3 for i in range(8)}
        assert writes(cluster) == 2
        # The kubelet deletes a driver's slices when it starts: within CHECK_EVERY polls the
        # agent has seen it gone and published it again.
        cluster.api.request("DELETE", f"{SLICES}/{slice_name(NODE)}")
        for _ in range(CHECK_EVERY):
            agent.step()
        back = the_slice(cluster)["spec"]
        assert back["pool"]["generation"] == 3
        assert [d["name"] for d in back["devices"]] == [f"gpu-{i}" for i in range(8)]
    finally:
        cluster.api.request("DELETE", f"{SLICES}/{slice_name(NODE)}")


def allocated_claim(
    cluster: LiveCluster, name: str, pool: str, *gpus: int, driver: str = DRIVER
) -> dict[str, Any]:
    """A claim as toposched leaves it once allocated: its devices of `pool`."""
    made = cluster.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpus", "exactly": {"deviceClassName": DRIVER, "count": len(gpus)}}
                    ]
                }
            },
        }
    )
    results = [
        {"request": "gpus", "driver": driver, "pool": pool, "device": f"gpu-{g}"} for g in gpus
    ]
    cluster.api.request(
        "PATCH",
        f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/{name}/status",
        body={"status": {"allocation": {"devices": {"results": results}}}},
        content_type="application/merge-patch+json",
    )
    return made


def test_node_prepare_resources_answers_the_allocated_gpus_over_the_socket(
    cluster: LiveCluster, kube: KubeApi
) -> None:
    mine = allocated_claim(cluster, "mine", NODE, 2, 5)
    elsewhere = allocated_claim(cluster, "elsewhere", "another-node", 0)
    theirs = allocated_claim(cluster, "theirs", NODE, 1, driver="gpu.example.com")
    with short_tmp_dir() as tmp:
        server, socket = serve_dra(DraPlugin(kube, NODE, DGX1.size), tmp / "plugins", tmp / "reg")
        try:
            with grpc().insecure_channel(f"unix:{tmp / 'reg' / f'{DRIVER}-reg.sock'}") as channel:
                info = (
                    registration()[1]
                    .RegistrationStub(channel)
                    .GetInfo(registration()[0].InfoRequest(), timeout=5)
                )
            assert (info.type, info.name, info.endpoint) == ("DRAPlugin", DRIVER, str(socket))
            assert list(info.supported_versions) == ["v1.DRAPlugin"]
            m, services = dra()
            claims = [
                m.Claim(namespace=NS, name=c["metadata"]["name"], uid=c["metadata"]["uid"])
                for c in (mine, elsewhere, theirs)
            ]
            claims.append(m.Claim(namespace=NS, name="nobody", uid="no-such-uid"))
            with grpc().insecure_channel(f"unix:{socket}") as channel:
                stub = services.DRAPluginStub(channel)
                answer = stub.NodePrepareResources(
                    m.NodePrepareResourcesRequest(claims=claims), timeout=10
                )
                undone = stub.NodeUnprepareResources(
                    m.NodeUnprepareResourcesRequest(claims=claims[:1]), timeout=10
                )
        finally:
            server.stop(grace=0).wait()
    got = answer.claims[mine["metadata"]["uid"]]
    assert got.error == ""
    assert [(d.device_name, d.pool_name, list(d.cdi_device_ids)) for d in got.devices] == [
        ("gpu-2", NODE, ["nvidia.com/gpu=2"]),
        ("gpu-5", NODE, ["nvidia.com/gpu=5"]),
    ]
    assert all(list(d.request_names) == ["gpus"] for d in got.devices)
    far = answer.claims[elsewhere["metadata"]["uid"]]
    assert "gpu-0 is allocated on another-node, not on this node" in far.error
    assert list(far.devices) == []
    other = answer.claims[theirs["metadata"]["uid"]]
    assert (other.error, list(other.devices)) == ("", [])  # another driver's to prepare
    assert "cannot be read" in answer.claims["no-such-uid"].error
    assert undone.claims[mine["metadata"]["uid"]].error == ""
