"""The tests' Kubernetes: one real control plane per test session (tools/kube), with toposched's
own install on it, the proxy for faults in front of it, and the tests playing the kubelet.

What is installed, as a cluster admin would with `kubectl apply`: the namespaces, the PodGroup
CRD and the RBAC of deploy/kubernetes/ and deploy/kubernetes/node-agent/, and Volcano's
PodGroup CRD (tests/fixtures/kube/). The scheduler under test authenticates as its own service
account, `toposched-system/toposched-scheduler`, so it may do exactly what that RBAC grants;
the tests themselves act as the admin.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tools.kube import build, pki
from tools.kube.controlplane import ControlPlane

from tests.kube.kubelet import Kubelet
from tests.kube.proxy import FaultProxy
from toposched.kube.api import KubeApi

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
VOLCANO_CRD = ROOT / "tests" / "fixtures" / "kube" / "volcano-podgroup-crd.yaml"
NODE_PREFIX = "toposched-e2e-"
USER = ("default", "toposched-tests-user")
# Pod IPs for the processes the tests run as pods (the scheduler's replicas behind their
# Service): addresses of TEST-NET-2 put on the loopback interface, since the API server proxies
# to no 127.0.0.0/8 address and an EndpointSlice may hold none.
POD_IPS = tuple(f"198.51.100.{i}" for i in range(10, 14))
SCHEDULER = ("toposched-system", "toposched-scheduler")
NODE_AGENT = ("toposched-node", "toposched-node-agent")
# What the session installs from deploy/ (the workloads themselves are tested on their own).
INSTALLED = (
    DEPLOY / "namespace.yaml",
    DEPLOY / "podgroup-crd.yaml",
    DEPLOY / "rbac.yaml",
    DEPLOY / "user-rbac.yaml",
    DEPLOY / "node-agent" / "namespace.yaml",
    DEPLOY / "node-agent" / "rbac.yaml",
    VOLCANO_CRD,
)
CRDS = {
    "podgroups.scheduling.x-k8s.io": DEPLOY / "podgroup-crd.yaml",
    "podgroups.scheduling.volcano.sh": VOLCANO_CRD,
}
HOW_TO_RUN = (
    "the Kubernetes tests run against a real control plane built from Go modules: install "
    "Go 1.26 (https://go.dev/doc/install) and run `make kube-test`"
)


def binaries(say: Callable[[str], None]) -> Path | None:
    """The control plane's binaries, built first where they are missing; None without Go."""
    if build.go_command() is None:
        return None
    folder = build.built()
    if folder is None:
        say(f"building the Kubernetes control plane ({build.FIRST_BUILD}, once per machine)")
        folder = build.build(say)
    return folder


def kubectl(bin_dir: Path) -> str:
    """The machine's `kubectl`, else the one built with the control plane."""
    return shutil.which("kubectl") or str(bin_dir / "kubectl")


@dataclass
class Session:
    """The control plane of the session and what the tests reach it with."""

    plane: ControlPlane
    admin: KubeApi
    proxy: FaultProxy
    kubelet: Kubelet
    scheduler_kubeconfig: Path  # the scheduler's service account, through the proxy
    agent_kubeconfig: Path  # the node agent's service account, through the proxy
    user_kubeconfig: Path  # a user with `edit` in the test namespaces, through the proxy
    pod_ips: tuple[str, ...]  # local addresses that pods' processes may listen on

    @property
    def admin_kubeconfig(self) -> Path:
        return self.plane.admin_kubeconfig

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(self.plane.bin / "kubectl"), "--kubeconfig", str(self.admin_kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {done.stderr}")
        return done

    def close(self) -> None:
        _drop_addresses(self.pod_ips)
        self.kubelet.close()
        self.proxy.stop()
        self.plane.stop()


def start(home: Path, bin_dir: Path) -> Session:
    # No watch cache of pods: a watch from a revision etcd has compacted is then answered
    # 410 Gone, as by a server whose cache has moved past it (the tests compact etcd).
    plane = ControlPlane(home, bin_dir, apiserver_args=("--watch-cache-sizes=pods#0",)).start()
    try:
        pki.make_cert(
            plane.pki, "kubelet", "/CN=system:node:toposched-e2e", server_ips=("127.0.0.1",)
        )
        admin = KubeApi.connect(str(plane.admin_kubeconfig))
        session_kubectl = [str(bin_dir / "kubectl"), "--kubeconfig", str(plane.admin_kubeconfig)]
        for manifest in INSTALLED:
            subprocess.run(
                [*session_kubectl, "apply", "-f", str(manifest)],
                check=True,
                capture_output=True,
                text=True,
            )
        subprocess.run(
            [
                *session_kubectl,
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/podgroups.scheduling.x-k8s.io",
                "crd/podgroups.scheduling.volcano.sh",
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        for ns in ("team-a", "team-b", "batch"):
            admin.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
        _wait_for_service_accounts(admin, ("default", "team-a", "team-b", "batch"))
        _make_user(admin)
        proxy = FaultProxy(plane.server, str(plane.pki / "ca.crt")).start()
        kubelet = Kubelet(
            admin, NODE_PREFIX, plane.pki / "kubelet.crt", plane.pki / "kubelet.key"
        ).start()
        return Session(
            plane,
            admin,
            proxy,
            kubelet,
            plane.service_account_kubeconfig(
                home / "scheduler.kubeconfig", *SCHEDULER, server=proxy.url
            ),
            plane.service_account_kubeconfig(
                home / "agent.kubeconfig", *NODE_AGENT, server=proxy.url
            ),
            plane.service_account_kubeconfig(
                home / "user.kubeconfig", *USER, server=proxy.url, context_namespace="team-a"
            ),
            _add_addresses(POD_IPS),
        )
    except BaseException:
        plane.stop()
        raise


def _make_user(api: KubeApi) -> None:
    """A user of the cluster: `edit` in the test namespaces (what `toposched kube submit`
    needs) and the read API's role (tests/kube/test_kube_cli.py)."""
    ns, name = USER
    api.request(
        "POST", f"/api/v1/namespaces/{ns}/serviceaccounts", body={"metadata": {"name": name}}
    )
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": ns}]
    for where, role in (
        *((team, "edit") for team in ("team-a", "team-b", "batch")),
        ("toposched-system", "toposched-read-api"),
    ):
        binding = {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": subject,
        }
        api.request(
            "POST",
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{where}/rolebindings",
            body=binding,
        )


def _add_addresses(addresses: tuple[str, ...]) -> tuple[str, ...]:
    """Put the addresses on the loopback interface (root only); those that are on it."""
    if shutil.which("ip") is None:
        return ()
    for address in addresses:
        subprocess.run(
            ["ip", "address", "add", f"{address}/32", "dev", "lo"], capture_output=True, text=True
        )
    # Those there now, whether added here or left by an earlier run that was killed (`ip`
    # then says "Address already assigned", or "File exists" in older versions).
    shown = subprocess.run(
        ["ip", "-o", "address", "show", "dev", "lo"], capture_output=True, text=True
    ).stdout
    present = {word.split("/")[0] for word in shown.split()}
    return tuple(address for address in addresses if address in present)


def _drop_addresses(addresses: tuple[str, ...]) -> None:
    for address in addresses:
        subprocess.run(["ip", "address", "del", f"{address}/32", "dev", "lo"], capture_output=True)


def _wait_for_service_accounts(api: KubeApi, namespaces: tuple[str, ...]) -> None:
    """A pod is refused until its namespace's `default` service account exists."""
    deadline = time.monotonic() + 60
    for ns in namespaces:
        while True:
            accounts, _ = api.list(f"/api/v1/namespaces/{ns}/serviceaccounts")
            if any(a["metadata"]["name"] == "default" for a in accounts):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"no service account `default` in {ns} after 60 s")
            time.sleep(0.1)


__all__ = ["CRDS", "HOW_TO_RUN", "NODE_PREFIX", "Session", "binaries", "kubectl", "start"]
