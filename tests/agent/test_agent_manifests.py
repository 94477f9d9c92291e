"""The manifests in deploy/kubernetes/node-agent/: schema-valid, least-privilege, and agreeing
with the `toposched kube node-agent` command and the image."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import typer.main
import yaml

from tests.kube.test_manifests import K8S_VERSION, grants
from toposched.agent.proto import DEFAULT_PLUGIN_DIR
from toposched.cli.main import app

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "node-agent"
SCHEDULER = DEPLOY.parent / "scheduler.yaml"
KUSTOMIZATION = "kustomization.yaml"
OPTIONAL = "own-node-policy.yaml"  # needs Kubernetes 1.30+: not in the kustomization
NAMESPACE = "toposched-node"
SERVICE_ACCOUNT = "toposched-node-agent"

Doc = dict[str, Any]


def manifest_files() -> list[str]:
    return sorted(p.name for p in DEPLOY.glob("*.yaml") if p.name != KUSTOMIZATION)


def all_docs() -> list[tuple[str, Doc]]:
    return [
        (name, doc)
        for name in manifest_files()
        for doc in yaml.safe_load_all((DEPLOY / name).read_text())
        if doc is not None
    ]


def one(kind: str) -> Doc:
    [doc] = [d for _, d in all_docs() if d["kind"] == kind]
    return doc


def daemonset_pod() -> Doc:
    return dict(one("DaemonSet")["spec"]["template"]["spec"])


def container() -> Doc:
    [c] = daemonset_pod()["containers"]
    return dict(c)


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


@pytest.mark.parametrize(
    ("name", "doc"), all_docs(), ids=[f"{n}:{d['kind']}" for n, d in all_docs()]
)
def test_document_is_valid(name: str, doc: Doc) -> None:
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        path = ".".join(map(str, e.path)) or "<root>"
        pytest.fail(
            f"{name} {doc['kind']}: invalid for Kubernetes {e.version}: {path}: {e.message}"
        )
    cluster_scoped = doc["kind"].startswith(
        ("Cluster", "ValidatingAdmission", "Namespace", "DeviceClass")
    )
    assert ("namespace" in doc["metadata"]) != cluster_scoped, name
    if not cluster_scoped:
        assert doc["metadata"]["namespace"] == NAMESPACE


def test_the_agent_has_a_namespace_of_its_own_that_admits_it() -> None:
    """Host paths and root: only Pod Security's `privileged` level admits the agent, so its
    namespace is not the scheduler's (held to `restricted`)."""
    (ns,) = [d for _, d in all_docs() if d["kind"] == "Namespace"]
    assert ns["metadata"]["name"] == NAMESPACE != "toposched-system"
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_kustomization_lists_the_install() -> None:
    k = yaml.safe_load((DEPLOY / KUSTOMIZATION).read_text())
    assert (k["apiVersion"], k["kind"]) == ("kustomize.config.k8s.io/v1beta1", "Kustomization")
    assert set(k["resources"]) == set(manifest_files()) - {OPTIONAL}


def test_cluster_role_grants_exactly_what_the_agent_does() -> None:
    # get/patch its Node's annotation; list the pods bound to its node at Allocate and each
    # poll; patch the idle annotation of a pod there.
    assert grants(one("ClusterRole")) == {
        ("", "nodes"): {"get", "patch"},
        ("", "pods"): {"list", "patch"},
        ("resource.k8s.io", "resourceslices"): {"get", "create", "update"},
        ("resource.k8s.io", "resourceclaims"): {"get"},
    }
    binding = one("ClusterRoleBinding")
    assert binding["roleRef"]["name"] == one("ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}
    ]
    assert one("ServiceAccount")["metadata"]["name"] == SERVICE_ACCOUNT


def test_the_policy_keeps_the_agent_to_its_own_node() -> None:
    policy = one("ValidatingAdmissionPolicy")
    assert (
        one("ValidatingAdmissionPolicyBinding")["spec"]["policyName"]
        == (policy["metadata"]["name"])
    )
    [condition] = policy["spec"]["matchConditions"]
    assert f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}" in condition["expression"]
    assert any("node-name" in v["expression"] for v in policy["spec"]["validations"])


def test_daemonset_runs_the_agent_with_its_node_name_and_the_plugin_dir() -> None:
    pod = daemonset_pod()
    c = container()
    command = c["command"]
    assert command[:3] == ["toposched", "kube", "node-agent"]
    assert "--in-cluster" in command and "--kubeconfig" not in command
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    [env] = [e for e in c["env"] if e["name"] == "NODE_NAME"]
    assert env["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    plugin_dir = flag(command, "--plugin-dir")
    [plugins] = [n for n, m in mounts.items() if m["mountPath"] == plugin_dir]
    assert volumes[plugins]["hostPath"]["path"] == plugin_dir == DEFAULT_PLUGIN_DIR
    assert not mounts[plugins].get("readOnly")  # the plugin's socket is made there
    [dev] = [n for n, m in mounts.items() if m["mountPath"] == flag(command, "--dev-mount")]
    assert volumes[dev]["hostPath"]["path"] == flag(command, "--dev-dir")
    assert mounts[dev]["readOnly"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    selector = one("DaemonSet")["spec"]["selector"]["matchLabels"]
    assert selector.items() <= one("DaemonSet")["spec"]["template"]["metadata"]["labels"].items()


def test_container_has_no_privilege() -> None:
    sc = container()["securityContext"]
    assert not sc.get("privileged")
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True  # the .proto is compiled in memory
    assert sc["capabilities"] == {"drop": ["ALL"]}
    for bound in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container()["resources"][bound])


def test_command_options_exist_in_the_cli() -> None:
    command = container()["command"]
    node: Any = typer.main.get_command(app)
    for word in command[1:3]:
        node = node.commands[word]
    options = {opt for p in node.params if p.param_type_name == "option" for opt in p.opts}
    given = {arg for arg in command[3:] if arg.startswith("--")}
    assert given <= options, given - options


def test_the_agent_heeds_the_pods_of_the_scheduler_name_the_scheduler_runs_under() -> None:
    """A pod's toposched.io/gpus counts only where its schedulerName is one the agent is told
    (issue 44, N1): the agent and the scheduler must name the same one."""
    [deployment] = [
        d for d in yaml.safe_load_all(SCHEDULER.read_text()) if d["kind"] == "Deployment"
    ]
    [scheduler] = deployment["spec"]["template"]["spec"]["containers"]
    command = container()["command"]
    named = [value for option, value in pairwise(command) if option == "--scheduler-name"]
    assert named == [flag(scheduler["command"], "--scheduler-name")]
