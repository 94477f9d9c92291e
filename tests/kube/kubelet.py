"""The kubelet's part, played by the tests: there is no kubelet here (no container runtime), so
for the fake nodes the tests make this does what a kubelet does that the control plane and the
scheduler watch for:

- renew each node's Lease in `kube-node-lease` (the node lifecycle controller marks a node
  whose lease is not renewed NotReady and taints it);
- write a pod's phase and conditions, and its IP, through `pods/status`, as the status
  manager does (`set_phase`);
- finish a graceful deletion: a pod of a fake node that has a deletionTimestamp is removed
  (a DELETE with grace period 0, as the kubelet sends once the containers have stopped);
- serve containers' logs on HTTPS, which the API server asks for `pods/log` (`set_log`);
- run the readiness probes of running pods that have an IP (an HTTP GET of the probe's path
  and port), and write Ready as they answer.
"""

from __future__ import annotations

import contextlib
import datetime
import ssl
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from toposched.kube.api import ApiError, KubeApi

LEASE_S = 40  # the lease duration a kubelet writes
RENEW_S = 5.0
LOOP_S = 0.2


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Kubelet:
    """The kubelet of every node whose name starts with `prefix`."""

    def __init__(self, api: KubeApi, prefix: str, cert: Path, key: Path) -> None:
        self.api = api
        self.prefix = prefix
        self.logs: dict[tuple[str, str], str] = {}
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.held: set[tuple[str, str]] = set()  # pods whose containers take time to stop
        self._renewed = 0.0
        handler = self._log_handler()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        self._threads = [
            threading.Thread(target=self.httpd.serve_forever, daemon=True),
            threading.Thread(target=self._loop, daemon=True, name="kubelet"),
        ]

    def start(self) -> Kubelet:
        for thread in self._threads:
            thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._threads[1].join(timeout=5)

    # ------------------------------------------------------------------ nodes

    def node_status(self) -> dict[str, Any]:
        """What a kubelet reports of itself in a Node's status: where the API server reaches
        it (`pods/log` goes there)."""
        return {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
        }

    def renew_soon(self) -> None:
        """Write the leases at the next round, as a kubelet does as soon as it registers."""
        self._renewed = 0.0

    def _renew_leases(self) -> None:
        nodes, _ = self.api.list("/api/v1/nodes")
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        for node in nodes:
            name = node["metadata"]["name"]
            if not name.startswith(self.prefix):
                continue
            spec = {"holderIdentity": name, "leaseDurationSeconds": LEASE_S, "renewTime": _now()}
            owner = {
                "apiVersion": "v1",
                "kind": "Node",
                "name": name,
                "uid": node["metadata"]["uid"],
            }
            # The owner said each time: a lease left by a deleted node of the same name is
            # taken over, not collected as garbage under the new node.
            body = {"metadata": {"name": name, "ownerReferences": [owner]}, "spec": spec}
            try:
                self.api.request(
                    "PATCH",
                    f"{path}/{name}",
                    body=body,
                    content_type="application/merge-patch+json",
                )
            except ApiError as err:
                if err.status != 404:
                    raise
                with contextlib.suppress(ApiError):  # the node went meanwhile
                    self.api.request("POST", path, body=body)

    # ------------------------------------------------------------------ pods

    def set_phase(
        self, namespace: str, name: str, phase: str, ip: str = "", ready: bool | None = None
    ) -> dict[str, Any]:
        """The pod's phase and its Ready conditions (and IP), as the status manager writes
        them; Ready while Running unless `ready` says otherwise."""
        now = _now()[:19] + "Z"
        ready = phase == "Running" if ready is None else ready
        ready_text = "True" if ready else "False"
        conditions = [
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": ready_text, "lastTransitionTime": now},
            {"type": "ContainersReady", "status": ready_text, "lastTransitionTime": now},
        ]
        status: dict[str, Any] = {"phase": phase, "conditions": conditions}
        if phase == "Running":
            status["startTime"] = now
        if ip:
            status["podIP"], status["podIPs"] = ip, [{"ip": ip}]
            status["hostIP"], status["hostIPs"] = ip, [{"ip": ip}]
        return self.api.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}/status",
            body={"status": status},
            content_type="application/strategic-merge-patch+json",
        )

    def hold(self, namespace: str, name: str) -> None:
        """Let the pod's containers run on through its grace period: its deletion is finished
        only once its phase says they have stopped (Succeeded or Failed). Other pods stop at
        once when they are deleted."""
        with self.lock:
            self.held.add((namespace, name))

    def _pods(self) -> list[dict[str, Any]]:
        pods, _ = self.api.list("/api/v1/pods", fieldSelector="spec.nodeName!=")
        return [p for p in pods if str(p["spec"].get("nodeName", "")).startswith(self.prefix)]

    def _finish_deletions(self, pods: list[dict[str, Any]]) -> None:
        for pod in pods:
            meta = pod["metadata"]
            if not meta.get("deletionTimestamp"):
                continue
            ns, name = meta["namespace"], meta["name"]
            phase = (pod.get("status") or {}).get("phase")
            with self.lock:
                if (ns, name) in self.held and phase not in ("Succeeded", "Failed"):
                    continue
                self.held.discard((ns, name))
            body = {
                "kind": "DeleteOptions",
                "apiVersion": "v1",
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": meta["uid"]},
            }
            with contextlib.suppress(ApiError):  # gone, or made again, meanwhile
                self.api.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", body=body)

    def _probe_readiness(self, pods: list[dict[str, Any]]) -> None:
        """Each running pod with an IP and an HTTP readiness probe: Ready as its probe
        answers (2xx or 3xx), written when that changes."""
        for pod in pods:
            status = pod.get("status") or {}
            ip = status.get("podIP")
            if (
                status.get("phase") != "Running"
                or not ip
                or pod["metadata"].get("deletionTimestamp")
            ):
                continue
            ready = _probe(pod, ip)
            if ready is None:
                continue
            now_ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or []
            )
            if ready != now_ready:
                meta = pod["metadata"]
                with contextlib.suppress(ApiError):
                    self.set_phase(meta["namespace"], meta["name"], "Running", ip, ready)

    def set_log(self, namespace: str, pod: str, text: str) -> None:
        """What `pods/{pod}/log` answers: the container's output so far."""
        with self.lock:
            self.logs[(namespace, pod)] = text

    def _log_handler(self) -> type[BaseHTTPRequestHandler]:
        kubelet = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                parts = path.strip("/").split("/")
                if len(parts) < 3 or parts[0] != "containerLogs":
                    self.send_error(404)
                    return
                with kubelet.lock:
                    text = kubelet.logs.get((parts[1], parts[2]))
                if text is None:
                    self.send_error(404, f"no container of pod {parts[1]}/{parts[2]} has run")
                    return
                params = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
                if "tailLines" in params:
                    lines = text.splitlines(keepends=True)
                    text = "".join(lines[-int(params["tailLines"]) :])
                data = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    # ------------------------------------------------------------------ the loop

    def _loop(self) -> None:
        import time

        while not self.stop.is_set():
            try:
                if time.monotonic() - self._renewed >= RENEW_S:
                    self._renew_leases()
                    self._renewed = time.monotonic()
                pods = self._pods()
                self._finish_deletions(pods)
                self._probe_readiness(pods)
            except ApiError:
                pass  # the control plane is stopping, or busy: again next round
            self.stop.wait(LOOP_S)


def _probe(pod: dict[str, Any], ip: str) -> bool | None:
    """The pod's HTTP readiness probe, run once: whether it passes; None without one."""
    for container in pod["spec"].get("containers") or []:
        probe = (container.get("readinessProbe") or {}).get("httpGet")
        if not probe:
            continue
        port = probe.get("port")
        if isinstance(port, str):
            named = [p for p in container.get("ports") or [] if p.get("name") == port]
            if not named:
                return False
            port = named[0]["containerPort"]
        try:
            url = f"http://{ip}:{port}{probe.get('path', '/')}"
            with urllib.request.urlopen(url, timeout=1) as answer:
                return bool(200 <= answer.status < 400)
        except (OSError, ValueError):
            return False
    return None


__all__ = ["Kubelet"]
