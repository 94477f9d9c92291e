"""`toposched kube submit`'s objects: exactly what the scheduler and each framework need,
valid against the Kubernetes OpenAPI schemas, made whole or not at all, and deleted whole."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest

from tests.kube.live import LiveCluster
from tests.kube.test_manifests import K8S_VERSION, custom_errors
from tests.kube.test_scheduler_e2e import Cluster, node, until
from toposched.common.frameworks import Kind
from toposched.kube.api import ApiError, KubeApi
from toposched.kube.objects import MODEL
from toposched.kube.submit import KubeJob, SubmitError, create, delete, objects


def job(kind: Kind = Kind.PYTORCH, **fields: Any) -> KubeJob:
    base: dict[str, Any] = {
        "name": "train",
        "image": "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
        "command": ["python", "train.py"],
        "kind": kind,
        "namespace": "team-a",
        "workers": 4,
        "gpus": 2,
    }
    return KubeJob(**(base | fields))


def by_name(made: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in made}


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize(
    "made",
    [
        job(),
        job(Kind.TENSORFLOW, ps=2),
        job(Kind.TENSORFLOW),
        job(Kind.MPI, queue="vision"),
        job(model="imagenet"),
    ],
    ids=["pytorch", "tensorflow-ps", "tensorflow", "mpi", "pytorch-model"],
)
def test_every_object_is_valid_against_the_openapi_schemas(made: KubeJob) -> None:
    for obj in objects(made):
        if obj["kind"] == "PodGroup":
            assert custom_errors(obj) == []
        else:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_pytorch_workers_are_a_gang_that_finds_rank_0() -> None:
    made = by_name(objects(job()))
    assert set(made) == {"PodGroup/train", "Service/train"} | {
        f"Pod/train-worker-{i}" for i in range(4)
    }
    group = made["PodGroup/train"]
    assert group["spec"] == {"minMember": 4}
    assert group["metadata"]["annotations"]["toposched.io/locality"] == "any"
    service = made["Service/train"]["spec"]
    assert service["clusterIP"] == "None" and service["selector"] == {"toposched.io/job": "train"}
    for i in range(4):
        pod = made[f"Pod/train-worker-{i}"]
        spec = pod["spec"]
        assert spec["schedulerName"] == "toposched"
        assert (spec["hostname"], spec["subdomain"]) == (f"train-worker-{i}", "train")
        assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "train"
        assert spec["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
        assert env_of(pod) == {
            "MASTER_ADDR": "train-worker-0.train",
            "MASTER_PORT": "29500",
            "RANK": str(i),
            "WORLD_SIZE": "4",
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
        }


def test_tensorflow_with_parameter_servers_has_a_chief_and_gpu_free_ps() -> None:
    made = by_name(objects(job(Kind.TENSORFLOW, workers=3, ps=2, env={"NCCL_DEBUG": "WARN"})))
    cluster = {
        "chief": ["train-worker-0.train:2222"],
        "worker": ["train-worker-1.train:2222", "train-worker-2.train:2222"],
        "ps": ["train-ps-0.train:2222", "train-ps-1.train:2222"],
    }
    tasks = {
        "Pod/train-worker-0": {"type": "chief", "index": 0},
        "Pod/train-worker-1": {"type": "worker", "index": 0},
        "Pod/train-worker-2": {"type": "worker", "index": 1},
        "Pod/train-ps-0": {"type": "ps", "index": 0},
        "Pod/train-ps-1": {"type": "ps", "index": 1},
    }
    for name, task in tasks.items():
        env = env_of(made[name])
        assert json.loads(env["TF_CONFIG"]) == {"cluster": cluster, "task": task}
        assert env["NCCL_DEBUG"] == "WARN"
    for i in range(2):
        ps = made[f"Pod/train-ps-{i}"]
        assert "resources" not in ps["spec"]["containers"][0]
        assert "schedulerName" not in ps["spec"]  # no GPU: the default scheduler's
        assert "scheduling.x-k8s.io/pod-group" not in ps["metadata"]["labels"]
    assert made["PodGroup/train"]["spec"] == {"minMember": 3}


def test_tensorflow_without_parameter_servers_lists_its_workers() -> None:
    made = by_name(objects(job(Kind.TENSORFLOW, workers=2)))
    config = json.loads(env_of(made["Pod/train-worker-1"])["TF_CONFIG"])
    assert config == {
        "cluster": {"worker": ["train-worker-0.train:2222", "train-worker-1.train:2222"]},
        "task": {"type": "worker", "index": 1},
    }


def test_mpi_has_a_launcher_and_a_hostfile_with_a_slot_per_gpu() -> None:
    made = by_name(objects(job(Kind.MPI, workers=2, gpus=4)))
    hostfile = made["ConfigMap/train-hostfile"]["data"]["hostfile"]
    assert hostfile == "train-worker-0.train slots=4\ntrain-worker-1.train slots=4\n"
    launcher = made["Pod/train-launcher-0"]
    assert env_of(launcher)["OMPI_MCA_orte_default_hostfile"] == "/etc/toposched/hostfile"
    assert "schedulerName" not in launcher["spec"]
    for name in ("Pod/train-launcher-0", "Pod/train-worker-0", "Pod/train-worker-1"):
        spec = made[name]["spec"]
        assert spec["volumes"] == [{"name": "hostfile", "configMap": {"name": "train-hostfile"}}]
        assert spec["containers"][0]["volumeMounts"][0]["mountPath"] == "/etc/toposched"


def test_the_model_a_job_trains_is_its_podgroups_annotation() -> None:
    named = by_name(objects(job(model="imagenet")))["PodGroup/train"]
    assert named["metadata"]["annotations"][MODEL] == "imagenet"
    assert MODEL not in by_name(objects(job()))["PodGroup/train"]["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"name": "Train"}, "name 'Train': lower-case letters"),
        ({"name": "x" * 60}, "at most 48 characters"),
        ({"image": " "}, "image: a container image is needed"),
        ({"workers": 0}, "workers must be a positive integer"),
        ({"gpus": True}, "gpus must be a positive integer"),
        ({"command": []}, "command: the program to run is missing"),
        ({"env": {"A B": "1"}}, "env 'A B': not a valid variable name"),
        ({"locality": "near"}, "locality 'near': expected one of"),
        ({"ps": 1}, "parameter servers (ps=1) are for tensorflow jobs, not pytorch"),
        ({"model": " "}, "model: a performance catalog model's name"),
    ],
)
def test_a_bad_job_is_refused_naming_the_field_and_nothing_is_made(
    apiserver: LiveCluster, fields: dict[str, Any], words: str
) -> None:
    api = KubeApi.connect(str(apiserver.user_kubeconfig))
    with pytest.raises(SubmitError, match=words.replace("(", r"\(").replace(")", r"\)")):
        create(api, job(**fields))
    assert not apiserver.objects("pods", "team-a") and not apiserver.objects("podgroups", "team-a")


def test_a_refused_object_takes_back_the_ones_made(apiserver: LiveCluster) -> None:
    api = KubeApi.connect(str(apiserver.user_kubeconfig))
    apiserver.inject_error("POST", r"/namespaces/team-a/pods$", 403, "Forbidden", "quota", times=1)
    with pytest.raises(ApiError, match="403 Forbidden"):
        create(api, job())
    for resource in ("pods", "podgroups", "services"):
        assert apiserver.objects(resource, "team-a") == []


def test_submitted_workers_bind_as_one_gang_and_delete_removes_every_object(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    for i in range(2):
        apiserver.create(node(f"dgx{i}"))
    cluster.start()
    api = KubeApi.connect(str(apiserver.user_kubeconfig))
    made = create(api, job(Kind.TENSORFLOW, workers=4, gpus=2, ps=1))
    assert made[:2] == ["PodGroup/train", "Service/train"] and len(made) == 7
    workers = [f"train-worker-{i}" for i in range(4)]
    where = until(lambda: cluster.bound(*workers), "the submitted gang bound")
    assert len({n for n, _ in where.values()}) == 1  # 8 GPUs: the fewest nodes, one
    gone = delete(api, "team-a", "train")
    assert sorted(gone) == sorted(made), (gone, made)
    for resource in ("pods", "podgroups", "services"):  # the kubelet ends the bound pods
        until(lambda r=resource: apiserver.objects(r, "team-a") == [], f"no {resource} left")
    assert delete(api, "team-a", "train") == []
