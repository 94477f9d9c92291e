"""What the Kubernetes driver reads of nodes and pods to filter as kube-scheduler does: effective
requests, quantities, taints and hardware, and a gang's selector and tolerations combined."""

from __future__ import annotations

from typing import Any

import pytest

from toposched.kube.annotations import encode_topology
from toposched.kube.gangspec import common_tolerations, gang_spec
from toposched.kube.objects import (
    FREE,
    NODE_NAME,
    ObjectError,
    Pod,
    node_from,
    pod_from,
    pod_requests,
    quantity,
)
from toposched.topology import preset
from toposched.topology.cluster import Requirement, Taint, Toleration, untolerated


def container(cpu: str = "", memory: str = "", **more: Any) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    return {"name": "c", "image": "i", "resources": {"requests": requests}, **more}


def make_pod(name: str = "p", **spec: Any) -> Pod:
    body = {"containers": [container("1")], "schedulerName": "toposched", **spec}
    return pod_from({"metadata": {"name": name, "namespace": "ns"}, "spec": body})


@pytest.mark.parametrize(
    ("text", "milli", "want"),
    [
        ("500m", True, 500),
        ("2", True, 2000),
        ("0.1", True, 100),
        ("1.5Gi", False, 3 * 2**29),
        ("1e3", False, 1000),
        ("100M", False, 10**8),
        ("1m", False, 1),
        ("1.5k", False, 1500),
        (4, False, 4),
    ],
)
def test_quantities_round_up_as_kube_scheduler_does(text: Any, milli: bool, want: int) -> None:
    assert quantity(text, milli) == want


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("-1", "must not be negative"),
        ("1GB", "unknown unit 'GB'"),
        ("lots", "expected a Kubernetes quantity"),
        (True, "is not a quantity"),
    ],
)
def test_a_bad_quantity_is_refused(text: Any, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        quantity(text)


def test_effective_requests_take_init_containers_sidecars_and_overhead() -> None:
    spec = {
        "containers": [container("1", "1Gi"), container("2")],
        "initContainers": [
            container("1", "4Gi", restartPolicy="Always"),  # a sidecar: runs beside them all
            container("3", "1Gi"),  # runs beside the sidecar before it: 4 CPUs, 5Gi
        ],
        "overhead": {"cpu": "250m"},
    }
    # containers 3 CPUs + sidecar 1 = 4; the init container 3 + sidecar 1 = 4: 4 + overhead.
    assert pod_requests(spec) == {"cpu": 4250, "memory": 5 * 2**30}


def test_pod_level_requests_replace_the_containers_for_cpus_and_memory() -> None:
    """Pod-level resources (beta since 1.34): their CPU, memory and huge pages replace what
    the containers add up to; other resources and the overhead are the containers' and added."""
    spec = {
        "containers": [container("1", "1Gi"), container("2")],
        "resources": {"requests": {"cpu": "6"}, "limits": {"memory": "4Gi", "cpu": "8"}},
        "overhead": {"cpu": "250m"},
    }
    assert pod_requests(spec) == {"cpu": 6250, "memory": 4 * 2**30}
    fpga = {"containers": [{"name": "c", "resources": {"limits": {"example.com/fpga": "2"}}}]}
    fpga["resources"] = {"requests": {"hugepages-2Mi": "1Gi", "example.com/fpga": "5"}}
    assert pod_requests(fpga) == {"example.com/fpga": 2, "hugepages-2Mi": 2**30}


def test_requests_default_to_limits() -> None:
    spec = {"containers": [{"name": "c", "resources": {"limits": {"example.com/fpga": "2"}}}]}
    assert pod_requests(spec) == {"example.com/fpga": 2}


def test_a_node_carries_its_hardware_taints_and_name() -> None:
    obj = {
        "metadata": {
            "name": "dgx0",
            "labels": {
                "nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB",
                "nvidia.com/gpu.memory": "16384",
            },
            "annotations": {"toposched.io/topology": encode_topology(preset("dgx1-v100"))},
        },
        "spec": {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "79500m", "memory": "500Gi"}},
    }
    node, _, problem = node_from(obj, gpu_names=("V100", "A100"))
    assert problem is None
    assert node.hardware.gpu_type == "V100" and node.hardware.gpu_memory == 16 * 2**30
    assert (node.hardware.cpus, node.hardware.memory) == (79500, 500 * 2**30)
    assert node.taints == (Taint("dedicated", "ml", "NoSchedule"),)
    assert node.labels[NODE_NAME] == "dgx0"


def test_affinity_terms_and_match_fields_become_requirements() -> None:
    terms = [
        {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["dgx1"]}]},
        {},  # matches no node: dropped
    ]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }
    pod = make_pod(affinity=affinity)
    assert pod.affinity == (
        (Requirement("pool", "NotIn", ("a",)),),
        (Requirement(NODE_NAME, "In", ("dgx1",)),),
    )


@pytest.mark.parametrize(
    ("terms", "said"),
    [
        (
            [{"matchFields": [{"key": "spec.unschedulable", "operator": "In", "values": ["x"]}]}],
            "metadata.name",
        ),
        ([{}], "no node matches"),
        ([{"matchExpressions": [{"key": "pool", "operator": "Near", "values": ["a"]}]}], "Near"),
    ],
)
def test_an_affinity_toposched_cannot_read_refuses_the_pod(terms: Any, said: str) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }
    with pytest.raises(ObjectError, match=said):
        make_pod(affinity=affinity)


def test_a_gang_accepts_only_the_taints_every_pod_tolerates() -> None:
    any_dedicated = (Toleration("dedicated", "Exists"),)
    ml_no_schedule = (
        Toleration("dedicated", "Equal", "ml", "NoSchedule"),
        Toleration("gpu", "Exists"),
    )
    common = common_tolerations([any_dedicated, ml_no_schedule])
    assert untolerated((Taint("dedicated", "ml", "NoSchedule"),), common) is None
    assert untolerated((Taint("dedicated", "web", "NoSchedule"),), common) is not None
    assert untolerated((Taint("gpu", "", "NoSchedule"),), common) is not None  # one pod only
    everything = (Toleration("", "Exists"),)
    assert common_tolerations([everything, any_dedicated]) == any_dedicated


def test_a_gangs_selector_is_the_strictest_of_its_pods() -> None:
    a = make_pod("a", nodeSelector={"pool": "a"})
    b = make_pod("b", nodeSelector={"zone": "1"})
    asks_storage = make_pod(
        "c", containers=[{"name": "c", "resources": {"requests": {"ephemeral-storage": "10"}}}]
    )
    spec = gang_spec("g", [a, b], 2, extra=[asks_storage], excluded=["dgx9"])
    assert dict(spec.selector.match) == {
        "pool": "a",
        "zone": "1",
        "toposched.io/topology-known": "true",
    }
    assert spec.selector.any_of == (
        (
            Requirement(FREE + "ephemeral-storage", "Gt", ("9",)),
            Requirement(NODE_NAME, "NotIn", ("dgx9",)),
        ),
    )
    assert spec.cpus == 1000


def test_pods_of_one_gang_asking_two_values_of_a_label_are_refused() -> None:
    a = make_pod("a", nodeSelector={"pool": "a"})
    b = make_pod("b", nodeSelector={"pool": "b"})
    with pytest.raises(ObjectError, match="pool=a and pool=b"):
        gang_spec("g", [a, b], 2)


def test_pods_with_different_affinities_need_both() -> None:
    def required(*values: str) -> dict[str, Any]:
        term = {"matchExpressions": [{"key": "pool", "operator": "In", "values": list(values)}]}
        return {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }

    spec = gang_spec(
        "g", [make_pod("a", affinity=required("a", "b")), make_pod("b", affinity=required("b"))], 2
    )
    assert spec.selector.matches({"pool": "b", "toposched.io/topology-known": "true"})
    assert not spec.selector.matches({"pool": "a", "toposched.io/topology-known": "true"})


def test_a_gangs_gpu_types_are_those_all_its_pods_accept() -> None:
    def typed(name: str, types: str) -> Pod:
        annotations = {"toposched.io/gpu-type": types}
        meta = {"name": name, "namespace": "ns", "annotations": annotations}
        return pod_from({"metadata": meta, "spec": {"containers": [container("1")]}})

    pods = [typed("a", "V100,A100"), typed("b", "a100,H100")]
    assert [t.casefold() for t in gang_spec("g", pods, 2).gpu_types] == ["a100"]
    with pytest.raises(ObjectError, match="share no GPU type"):
        gang_spec("g", [typed("a", "V100"), typed("b", "H100")], 2)
    restored = gang_spec("g", pods, 2, filters=False)
    assert restored.gpu_types == () and restored.cpus == 0
