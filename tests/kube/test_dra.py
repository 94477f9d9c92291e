"""Dynamic Resource Allocation against the real API server (v1.37, resource.k8s.io/v1): pods that
ask GPUs by ResourceClaims of toposched's DeviceClass get their claims allocated with the best
set and reserved for them before they are bound; what toposched cannot allocate is left alone
with an Event; claims held through other schedulers count as taken."""

from __future__ import annotations

from typing import Any

from tests.kube.live import LiveCluster
from tests.kube.test_scheduler_e2e import DGX1, Cluster, node, node_name, pod, podgroup
from tests.server import wait_for as until
from toposched.kube.claims import DEVICE_CLASS, DRIVER
from toposched.placement.ring import ring_bandwidth

NS = "team-a"
RESOURCE = "resource.k8s.io/v1"


def device_class() -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE,
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def template(name: str, count: int, device_class: str = DEVICE_CLASS) -> dict[str, Any]:
    request = {"name": "gpus", "exactly": {"deviceClassName": device_class, "count": count}}
    return {
        "apiVersion": RESOURCE,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def claiming_pod(name: str, template_name: str, group: str | None = None) -> dict[str, Any]:
    """A pod of toposched's that asks its GPUs by a claim made from `template_name`."""
    made = pod(name, group=group)
    made["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    made["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template_name}]
    return made


def claim_of(server: LiveCluster, pod_name: str) -> dict[str, Any]:
    """The ResourceClaim the resource claim controller made for the pod, once it has."""
    for claim in server.objects("resourceclaims", NS):
        owners = claim["metadata"].get("ownerReferences") or []
        if any(o.get("name") == pod_name for o in owners):
            return claim
    return {}


def devices(claim: dict[str, Any]) -> list[tuple[str, str, str]]:
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
    return [(r["driver"], r["pool"], r["device"]) for r in results.get("results") or []]


def test_a_claim_of_four_gpus_gets_an_nvlink_ring_around_what_others_hold(
    cluster: Cluster,
) -> None:
    server = cluster.server
    server.create(device_class())
    server.create(node("dgx0"))
    dgx0 = node_name(server, "dgx0")
    # A claim another scheduler allocated: GPUs 0 and 4 of dgx0 are its pod's.
    other = server.create(
        {
            "apiVersion": RESOURCE,
            "kind": "ResourceClaim",
            "metadata": {"name": "elsewhere", "namespace": NS},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "g", "exactly": {"deviceClassName": DEVICE_CLASS, "count": 2}}
                    ]
                }
            },
        }
    )
    held = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "g", "driver": DRIVER, "pool": dgx0, "device": f"gpu-{g}"}
                    for g in (0, 4)
                ]
            }
        },
        "reservedFor": [{"resource": "pods", "name": "theirs", "uid": "uid-of-theirs"}],
    }
    server.api.request(
        "PATCH",
        f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/elsewhere/status",
        body={"status": held},
        content_type="application/merge-patch+json",
    )
    assert other["metadata"]["name"] == "elsewhere"
    cluster.start()
    server.create(template("four", 4))
    server.create(claiming_pod("train", "four"))
    where = until(lambda: cluster.bound("train"), "train bound", timeout_s=20)
    (node_bound, gpus) = where["train"]
    assert node_bound == "dgx0"
    claim = until(
        lambda: devices(claim_of(server, "train")) and claim_of(server, "train"), "allocated"
    )
    allocated = devices(claim)
    assert [d[:2] for d in allocated] == [(DRIVER, dgx0)] * 4
    chosen = sorted(int(d[2].removeprefix("gpu-")) for d in allocated)
    assert chosen == sorted(gpus)  # the claim and the pod's annotation say the same GPUs
    assert not {0, 4} & set(chosen)  # the other scheduler's claim is respected
    assert ring_bandwidth(DGX1, chosen) == 25.0  # an NVLink ring
    reserved = claim["status"]["reservedFor"]
    train = cluster.pod("train")
    assert reserved == [{"resource": "pods", "name": "train", "uid": train["metadata"]["uid"]}]
    terms = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert terms[0]["matchFields"][0]["values"] == [dgx0]


def test_a_claim_that_cannot_be_met_waits_and_says_why(cluster: Cluster) -> None:
    server = cluster.server
    server.create(node("dgx0"))
    cluster.start()
    server.create(template("sixteen", 16))
    server.create(claiming_pod("huge", "sixteen"))
    said = until(lambda: cluster.warnings("huge", "Unschedulable"), "huge's Event")
    assert "a worker needs 16 GPUs; the largest node has 8" in said[0]["message"]
    assert not cluster.pod("huge")["spec"].get("nodeName")
    assert devices(claim_of(server, "huge")) == []


def test_a_claim_of_another_driver_is_left_alone_with_an_event(cluster: Cluster) -> None:
    server = cluster.server
    server.create(node("dgx0"))
    cluster.start()
    server.create(template("theirs", 1, device_class="gpu.example.com"))
    server.create(claiming_pod("foreign", "theirs"))
    said = until(lambda: cluster.warnings("foreign", "InvalidPod"), "foreign's Event")
    message = said[0]["message"]
    assert "device class 'gpu.example.com' is not toposched's (gpu.toposched.io)" in message
    assert "request 'gpus'" in message
    claim = until(lambda: claim_of(server, "foreign"), "the claim made")
    assert "allocation" not in (claim.get("status") or {})
    assert not cluster.pod("foreign")["spec"].get("nodeName")


def test_a_gang_of_claims_is_allocated_whole_each_pod_on_an_nvlink_ring(cluster: Cluster) -> None:
    server = cluster.server
    for i in range(2):
        server.create(node(f"dgx{i}"))
    cluster.start()
    server.create(template("four", 4))
    server.create(podgroup("bert", 3))
    names = [f"bert-{i}" for i in range(3)]
    for name in names:
        server.create(claiming_pod(name, "four", group="bert"))
    where = until(lambda: cluster.bound(*names), "the gang bound", timeout_s=30)
    for name in names:
        claim = claim_of(server, name)
        gpus = sorted(int(d[2].removeprefix("gpu-")) for d in devices(claim))
        node_bound, annotated = where[name]
        assert gpus == sorted(annotated) and len(gpus) == 4
        assert {d[1] for d in devices(claim)} == {node_name(server, node_bound)}
        assert ring_bandwidth(DGX1, gpus) == 25.0
        assert claim["status"]["reservedFor"][0]["name"] == name
    # 12 GPUs on two 8-GPU nodes: one node holds two of the workers, on its two NVLink quads.
    per_node: dict[str, list[int]] = {}
    for node_bound, annotated in where.values():
        per_node.setdefault(node_bound, []).extend(annotated)
    assert sorted(len(g) for g in per_node.values()) == [4, 8]
