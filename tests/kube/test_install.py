"""The install as a cluster admin runs it: `kubectl apply -k` of deploy/kubernetes and of its
node-agent folder, with the machine's kubectl, accepted by the real API server; and a pod made
from each workload's template admitted there (Pod Security admission among the plugins), as
the Deployment and DaemonSet controllers will make them."""

from __future__ import annotations

import json
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from tools.kube.controlplane import write_kubeconfig

from tests.kube.live import LiveCluster
from tests.kube.realcluster import DEPLOY, Session, kubectl
from tests.kube.test_scheduler_e2e import node
from tests.server import wait_for as until
from toposched.kube.api import ApiError, KubeApi

FOLDERS = (DEPLOY, DEPLOY / "node-agent")
WORKLOADS = ("Deployment", "DaemonSet")


def run_kubectl(session: Session, *args: str) -> str:
    done = subprocess.run(
        [kubectl(session.plane.bin), "--kubeconfig", str(session.admin_kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def workloads(session: Session, folder: Path) -> list[dict[str, Any]]:
    """The Deployments and DaemonSets the kustomization makes."""
    docs = yaml.safe_load_all(run_kubectl(session, "kustomize", str(folder)))
    return [d for d in docs if d and d["kind"] in WORKLOADS]


@pytest.fixture
def installed(apiserver: LiveCluster, kube_session: Session | None) -> Iterator[Session]:
    """Both kustomizations applied; their workloads deleted after (the namespaces, CRD and
    RBAC stay: the session's own install is the same)."""
    if kube_session is None:
        pytest.skip("installs into the session's own control plane only")
    made: list[dict[str, Any]] = []
    try:
        for folder in FOLDERS:
            run_kubectl(kube_session, "apply", "-k", str(folder))
            made += workloads(kube_session, folder)
        yield kube_session
    finally:
        for workload in made:
            kind, meta = workload["kind"].lower(), workload["metadata"]
            run_kubectl(
                kube_session,
                "delete",
                kind,
                meta["name"],
                "-n",
                meta["namespace"],
                "--ignore-not-found",
                "--wait=false",
            )


@pytest.mark.parametrize("folder", FOLDERS, ids=["scheduler", "node-agent"])
def test_a_pod_of_each_workload_is_admitted(installed: Session, folder: Path) -> None:
    """A server-side dry run of the pod each template makes: every admission plugin runs
    (Pod Security, service accounts, priority classes), nothing is stored."""
    found = workloads(installed, folder)
    assert found, f"no workload in {folder}"
    for workload in found:
        template = workload["spec"]["template"]
        ns = workload["metadata"]["namespace"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**template["metadata"], "name": f"{workload['metadata']['name']}-check"},
            "spec": template["spec"],
        }
        try:
            installed.admin.request(
                "POST", f"/api/v1/namespaces/{ns}/pods", {"dryRun": "All"}, body=pod
            )
        except ApiError as err:
            pytest.fail(f"{workload['kind']} {ns}/{workload['metadata']['name']}: {err}")


def test_the_node_agent_runs_on_a_gpu_node(installed: Session, apiserver: LiveCluster) -> None:
    """The DaemonSet controller makes the agent's pod for a node labelled as NVIDIA's GPU
    feature discovery labels GPU nodes, and the API server admits it."""
    gpu = node("agent-host")
    gpu["metadata"]["labels"]["nvidia.com/gpu.present"] = "true"
    apiserver.create(gpu)
    (daemonset,) = workloads(installed, DEPLOY / "node-agent")
    ns, name = daemonset["metadata"]["namespace"], daemonset["metadata"]["name"]
    host = apiserver.node_name("agent-host")

    def made() -> list[dict[str, Any]] | str:
        pods, _ = installed.admin.list(f"/api/v1/namespaces/{ns}/pods")
        mine = [
            p
            for p in pods
            if any(o.get("name") == name for o in p["metadata"].get("ownerReferences") or [])
            and host in json.dumps(p["spec"].get("affinity") or {})
        ]
        if mine:
            return mine
        events, _ = installed.admin.list(f"/api/v1/namespaces/{ns}/events")
        refused = [e["message"] for e in events if e["reason"] == "FailedCreate"]
        return f"refused: {refused[-1]}" if refused else []

    answer = until(made, "the agent's pod made for the GPU node")
    assert not isinstance(answer, str), answer


def test_the_own_node_policy_keeps_an_agent_to_its_node(
    apiserver: LiveCluster, kube_session: Session | None
) -> None:
    """node-agent/own-node-policy.yaml, evaluated by the real API server: an agent whose token
    is bound to its pod may annotate its own Node, not another's, and the pods on its node, not
    another's; it never changes a spec, nor a pod's labels."""
    if kube_session is None:
        pytest.skip("installs into the session's own control plane only")
    policy = DEPLOY / "node-agent" / "own-node-policy.yaml"
    run_kubectl(kube_session, "apply", "-f", str(policy))
    try:
        for name in ("mine", "other"):
            apiserver.create(node(name))
        mine, other = apiserver.node_name("mine"), apiserver.node_name("other")
        agent = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "agent-on-mine", "namespace": "toposched-node"},
            "spec": {
                "serviceAccountName": "toposched-node-agent",
                "nodeName": mine,
                "containers": [{"name": "agent", "image": "toposched:0.1.0"}],
            },
        }
        apiserver.create(agent)
        made = kube_session.admin.request(
            "GET", "/api/v1/namespaces/toposched-node/pods/agent-on-mine"
        )
        token = kube_session.admin.request(
            "POST",
            "/api/v1/namespaces/toposched-node/serviceaccounts/toposched-node-agent/token",
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": "agent-on-mine",
                        "uid": made["metadata"]["uid"],
                    }
                },
            },
        )["status"]["token"]
        path = kube_session.plane.home / "bound-agent.kubeconfig"
        write_kubeconfig(
            path,
            kube_session.plane.server,
            user={"token": token},
            ca=(kube_session.plane.pki / "ca.crt").read_bytes(),
            name="agent",
        )
        as_agent = KubeApi.connect(str(path))
        note = {"metadata": {"annotations": {"toposched.io/checked": "yes"}}}

        def patch(name: str, body: dict[str, Any], where: str = "/api/v1/nodes") -> None:
            as_agent.request(
                "PATCH", f"{where}/{name}", body=body, content_type="application/merge-patch+json"
            )

        until(lambda: _denies(patch, other, note), "the policy in force")
        patch(mine, note)
        with pytest.raises(ApiError, match="may change only the Node its pod runs on"):
            patch(other, note)
        with pytest.raises(ApiError, match="may not change a Node's or a pod's spec"):
            patch(mine, {"spec": {"unschedulable": True}})
        # Pods: the idle annotation on a pod of its node (agent/activity.py), nothing else.
        elsewhere = {**agent, "metadata": {"name": "pod-on-other", "namespace": "toposched-node"}}
        apiserver.create({**elsewhere, "spec": {**agent["spec"], "nodeName": other}})
        pods = "/api/v1/namespaces/toposched-node/pods"
        idle = {"metadata": {"annotations": {"toposched.io/gpu-idle-since": "1700000000"}}}
        patch("agent-on-mine", idle, pods)
        with pytest.raises(ApiError, match="may change only the Node its pod runs on, and pods"):
            patch("pod-on-other", idle, pods)
        with pytest.raises(ApiError, match="may not change a pod's labels"):
            patch("agent-on-mine", {"metadata": {"labels": {"team": "other"}}}, pods)
    finally:
        run_kubectl(kube_session, "delete", "-f", str(policy), "--ignore-not-found")
        apiserver.delete("pods", "agent-on-mine", "toposched-node")
        apiserver.delete("pods", "pod-on-other", "toposched-node")


def _denies(patch: Any, name: str, body: dict[str, Any]) -> bool:
    """Whether the patch is refused (an admission policy takes a moment to be enforced)."""
    try:
        patch(name, body)
    except ApiError as err:
        return err.status in (403, 422)
    return False


def test_the_schedulers_requests_have_a_priority_level_of_their_own(installed: Session) -> None:
    """API Priority and Fairness classifies the scheduler's ServiceAccount by the shipped
    FlowSchema into its own level (issue 44, N5), as the API server says in the headers of
    each answer; without it the scheduler waits in workload-low with every operator."""
    flowcontrol = "/apis/flowcontrol.apiserver.k8s.io/v1"
    schema = installed.admin.request("GET", f"{flowcontrol}/flowschemas/toposched-scheduler")
    level = installed.admin.request(
        "GET", f"{flowcontrol}/prioritylevelconfigurations/toposched-scheduler"
    )
    token = installed.admin.request(
        "POST",
        "/api/v1/namespaces/toposched-system/serviceaccounts/toposched-scheduler/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )["status"]["token"]
    trust = ssl.create_default_context(cafile=str(installed.plane.pki / "ca.crt"))

    def classified() -> tuple[str | None, str | None] | None:
        answer = httpx.get(
            f"{installed.plane.server}/api/v1/nodes",
            headers={"Authorization": f"Bearer {token}"},
            verify=trust,
            timeout=30,
        )
        assert answer.status_code == 200, answer.text  # the scheduler may list nodes
        got = (
            answer.headers.get("X-Kubernetes-PF-FlowSchema-UID"),
            answer.headers.get("X-Kubernetes-PF-PriorityLevel-UID"),
        )
        # The API server's flow-control config follows the objects in a moment.
        return got if got == (schema["metadata"]["uid"], level["metadata"]["uid"]) else None

    assert until(classified, "the scheduler's requests classified by its FlowSchema")
