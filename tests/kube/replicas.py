"""Schedulers run as the pods of deploy/kubernetes/scheduler.yaml's Deployment would be: each a
pod made from the Deployment's template, bound to a node, its read API served on the pod's IP
and the template's port, behind the manifest's own Service. The tests' kubelet probes each as
the template's readinessProbe says, and the controller manager's EndpointSlice controller puts
the ready ones behind the Service: a read through the API server's service proxy goes where it
would on a cluster."""

from __future__ import annotations

import copy
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.kube.live import LiveCluster
from toposched.kube.readapi import make_app, serve
from toposched.kube.runner import Runner

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "scheduler.yaml"
NAMESPACE = "toposched-system"


def manifest(kind: str) -> dict[str, Any]:
    """The Deployment or the Service of scheduler.yaml."""
    return next(d for d in yaml.safe_load_all(MANIFEST.read_text()) if d["kind"] == kind)


def container_port(template: dict[str, Any]) -> int:
    """The port the scheduler's container serves its read API on."""
    (container,) = template["spec"]["containers"]
    return int(next(p["containerPort"] for p in container["ports"] if p["name"] == "http"))


@dataclass
class Replica:
    """One scheduler as a pod of the Deployment: its pod's name and IP, and its HTTP server."""

    name: str
    ip: str
    port: int
    server: Any

    def stop(self) -> None:
        """Stop serving, and wait until the address is free for the next test's replica."""
        self.server.should_exit = True
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection((self.ip, self.port), timeout=0.2).close()
            except OSError:
                return
            time.sleep(0.05)
        raise AssertionError(f"the read API of {self.name} still answers on {self.ip}")


def run_as_pod(api: LiveCluster, runner: Runner, index: int, node: str) -> Replica:
    """Serve `runner`'s read API as the Deployment's pod number `index`, bound to `node`."""
    if api.get("services", "toposched-scheduler", NAMESPACE) is None:
        api.create(manifest("Service"))
    template = copy.deepcopy(manifest("Deployment")["spec"]["template"])
    name = f"toposched-scheduler-{index}"
    ip = api.pod_ip(index)
    server = serve(make_app(runner), ip, container_port(template))
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise AssertionError(f"the read API of {name} did not start on {ip}")
        time.sleep(0.05)
    made = {"apiVersion": "v1", "kind": "Pod", **template}
    made["metadata"] = {**template["metadata"], "name": name, "namespace": NAMESPACE}
    made["spec"] = {**template["spec"], "nodeName": node}
    api.create(made)
    api.set_phase(NAMESPACE, name, "Running", ip=ip, ready=False)  # the kubelet probes it next
    return Replica(name, ip, container_port(template), server)


def endpoints(api: LiveCluster) -> set[str]:
    """The addresses the Service sends its traffic to: the ready endpoints of its slices."""
    slices, _ = api.api.list(
        f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices",
        labelSelector="kubernetes.io/service-name=toposched-scheduler",
    )
    return {
        address
        for piece in slices
        for endpoint in piece.get("endpoints") or []
        if (endpoint.get("conditions") or {}).get("ready")
        for address in endpoint.get("addresses") or []
    }
