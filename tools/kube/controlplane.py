"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager
and (when asked) kube-scheduler, started from the binaries tools/kube/build.py makes.

The API server runs as kubeadm sets one up: TLS with a cluster CA, the Node and RBAC
authorizers, the default admission plugins (PodSecurity among them) plus NodeRestriction,
service-account tokens signed by its own key. The controller manager runs every default
controller, each with its own service account. There is no kubelet: nodes are Node objects
that whoever uses the control plane makes and keeps alive (tests/kube/kubelet.py does, for the
tests).

Every component's log is under `home/logs/`; `admin.kubeconfig` is a client certificate in the
group system:masters, as kubeadm's admin.conf.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.kube import pki

# The beta APIs and gates the tests use that a 1.37 server keeps off by default: the Workload
# and PodGroup gang API (scheduling.k8s.io/v1beta1), the gate of kube-scheduler's gang plugin.
FEATURE_GATES = "GenericWorkload=true"
RUNTIME_CONFIG = "scheduling.k8s.io/v1beta1=true"
SERVICE_RANGE = "10.96.0.0/16"
STARTUP_S = 120.0


class ControlPlaneError(RuntimeError):
    """A component did not start; the message names it and the end of its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it dies (Linux), so
    that a test run killed hard leaves no control plane behind."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class ControlPlane:
    """One control plane, started by `start()` (or `with`), its state in `home`."""

    home: Path
    bin: Path
    scheduler: bool = False  # start kube-scheduler too
    scheduler_config: str = ""  # a KubeSchedulerConfiguration (YAML) for it
    controllers: str = "*"
    apiserver_args: tuple[str, ...] = ()
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    etcd_port: int = 0
    port: int = 0

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    @property
    def pki(self) -> Path:
        return self.home / "pki"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.home / "admin.kubeconfig"

    # ------------------------------------------------------------------ starting

    def start(self) -> ControlPlane:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "logs").mkdir(exist_ok=True)
        self.pki.mkdir(exist_ok=True)
        self._make_pki()
        self.etcd_port, self.port = free_port(), free_port()
        try:
            self._start_etcd()
            self._start_apiserver()
            self._start_controller_manager()
            if self.scheduler:
                self._start_scheduler()
            self._wait_for_service_accounts()
        except BaseException:
            self.stop()
            raise
        return self

    def _make_pki(self) -> None:
        if (self.pki / "sa.pub").exists():
            return
        pki.make_ca(self.pki)
        pki.make_cert(
            self.pki,
            "apiserver",
            "/CN=kube-apiserver",
            server_names=("localhost", "kubernetes", "kubernetes.default.svc"),
            server_ips=("127.0.0.1", SERVICE_RANGE.replace("0.0/16", "0.1")),
        )
        pki.make_cert(self.pki, "admin", "/CN=kubernetes-admin/O=system:masters")
        pki.make_cert(self.pki, "scheduler", "/CN=system:kube-scheduler")
        pki.make_cert(self.pki, "controller-manager", "/CN=system:kube-controller-manager")
        # The API server's client certificate towards the kubelets it would proxy to.
        pki.make_cert(self.pki, "apiserver-kubelet", "/CN=kube-apiserver-kubelet/O=kubeadm")
        pki.make_service_account_key(self.pki)

    def _spawn(self, name: str, args: list[str]) -> None:
        log = (self.home / "logs" / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            [str(self.bin / name), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        log.close()

    def _start_etcd(self) -> None:
        peer = free_port()
        self._spawn(
            "etcd",
            [
                "--name=toposched-test",
                f"--data-dir={self.home / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=toposched-test=http://127.0.0.1:{peer}",
                # A test cluster's data need not survive a power cut: fsync would make every
                # write wait on the disk, a shared one here.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._wait("etcd", lambda: _http_ok(f"{self.etcd_url}/health"))

    def _start_apiserver(self) -> None:
        p = self.pki
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.port}",
                "--advertise-address=127.0.0.1",
                # The `kubernetes` Service's endpoints would be 127.0.0.1, which an EndpointSlice
                # may not hold: no reconciler, as for a server that nothing in-cluster reaches.
                "--endpoint-reconciler-type=none",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--allow-privileged=true",
                f"--client-ca-file={p / 'ca.crt'}",
                f"--tls-cert-file={p / 'apiserver.crt'}",
                f"--tls-private-key-file={p / 'apiserver.key'}",
                f"--kubelet-client-certificate={p / 'apiserver-kubelet.crt'}",
                f"--kubelet-client-key={p / 'apiserver-kubelet.key'}",
                f"--kubelet-certificate-authority={p / 'ca.crt'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={p / 'sa.pub'}",
                f"--service-account-signing-key-file={p / 'sa.key'}",
                f"--feature-gates={FEATURE_GATES}",
                f"--runtime-config={RUNTIME_CONFIG}",
                "--profiling=false",
                *self.apiserver_args,
            ],
        )
        self._write_kubeconfig(self.admin_kubeconfig, "admin")
        self._wait("kube-apiserver", self._ready)

    def _start_controller_manager(self) -> None:
        kubeconfig = self.home / "controller-manager.kubeconfig"
        self._write_kubeconfig(kubeconfig, "controller-manager")
        p = self.pki
        self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--secure-port=0",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={p / 'sa.key'}",
                f"--root-ca-file={p / 'ca.crt'}",
                f"--cluster-signing-cert-file={p / 'ca.crt'}",
                f"--cluster-signing-key-file={p / 'ca.key'}",
                f"--controllers={self.controllers}",
                f"--feature-gates={FEATURE_GATES}",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
            ],
        )

    def _start_scheduler(self) -> None:
        self.start_scheduler(self.scheduler_config)

    def start_scheduler(self, config: str = "") -> None:
        """Start kube-scheduler (again, after `stop_component`); `config` is a
        KubeSchedulerConfiguration in YAML whose clientConnection.kubeconfig may say KUBECONFIG
        for the one written here (its own identity, system:kube-scheduler)."""
        kubeconfig = self.home / "scheduler.kubeconfig"
        self._write_kubeconfig(kubeconfig, "scheduler")
        args = [
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--secure-port=0",
            f"--feature-gates={FEATURE_GATES}",
        ]
        if config:
            path = self.home / "scheduler-config.yaml"
            path.write_text(config.replace("KUBECONFIG", str(kubeconfig)))
            args.append(f"--config={path}")
        else:
            args += [f"--kubeconfig={kubeconfig}", "--leader-elect=false"]
        self._spawn("kube-scheduler", args)

    def stop_component(self, name: str, grace_s: float = 5.0) -> None:
        """Stop one component (SIGTERM, SIGKILL after `grace_s`)."""
        process = self.processes.pop(name, None)
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _wait_for_service_accounts(self) -> None:
        """The controller manager is up once it has made the `default` namespace's service
        account (pods are refused where their namespace has none yet)."""
        self._wait(
            "kube-controller-manager",
            lambda: self.get("/api/v1/namespaces/default/serviceaccounts/default") is not None,
        )

    def _wait(self, name: str, ready: Any) -> None:
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            for component, process in self.processes.items():
                if process.poll() is not None:
                    raise ControlPlaneError(
                        f"{component} exited {process.returncode}:\n{self.log_tail(component)}"
                    )
            with contextlib.suppress(OSError, ValueError, ssl.SSLError):
                if ready():
                    return
            time.sleep(0.2)
        raise ControlPlaneError(f"{name} not ready after {STARTUP_S:.0f} s:\n{self.log_tail(name)}")

    def _ready(self) -> bool:
        try:
            return self.request("GET", "/readyz") == {"text": "ok"}
        except urllib.error.HTTPError:
            return False

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.home / "logs" / f"{name}.log"
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    # ------------------------------------------------------------------ stopping

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM to every component, the last started first; SIGKILL to those still running
        after `grace_s` (the API server waits for its watches to drain otherwise)."""
        for process in reversed(list(self.processes.values())):
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + grace_s
        for process in self.processes.values():
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes = {}

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ using it

    def _context(self, user: str = "admin") -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        context.load_cert_chain(self.pki / f"{user}.crt", self.pki / f"{user}.key")
        return context

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        """One request as the admin; the JSON answer ({"text": ...} where it is not JSON)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.server}{path}", data=data, method=method)
        req.add_header("Content-Type", content_type)
        req.add_header("Accept", "application/json")
        with urllib.request.urlopen(req, context=self._context(), timeout=30) as resp:
            text = resp.read().decode()
        try:
            return json.loads(text)
        except ValueError:
            return {"text": text}

    def get(self, path: str) -> Any:
        """The object at `path`, or None where there is none."""
        try:
            return self.request("GET", path)
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise

    def version(self) -> str:
        """What the API server says it is (`/version`'s gitVersion)."""
        return str(self.request("GET", "/version")["gitVersion"])

    def _write_kubeconfig(self, path: Path, user: str) -> None:
        p = self.pki
        write_kubeconfig(
            path,
            self.server,
            ca=(p / "ca.crt").read_bytes(),
            user={
                "client-certificate-data": _b64((p / f"{user}.crt").read_bytes()),
                "client-key-data": _b64((p / f"{user}.key").read_bytes()),
            },
            name=user,
        )

    def token(self, namespace: str, service_account: str, seconds: int = 86400) -> str:
        """A token of the service account, from the TokenRequest API."""
        answer = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds},
            },
        )
        return str(answer["status"]["token"])

    def service_account_kubeconfig(
        self,
        path: Path,
        namespace: str,
        service_account: str,
        server: str = "",
        context_namespace: str = "default",
    ) -> Path:
        """A kubeconfig that acts as the service account (as a pod of it would), against
        `server` (default: the API server itself; a plain-http one takes no CA)."""
        server = server or self.server
        write_kubeconfig(
            path,
            server,
            ca=(self.pki / "ca.crt").read_bytes() if server.startswith("https") else None,
            user={"token": self.token(namespace, service_account)},
            name=f"{namespace}-{service_account}",
            namespace=context_namespace,
        )
        return path


def write_kubeconfig(
    path: Path,
    server: str,
    *,
    ca: bytes | None,
    user: Mapping[str, str],
    name: str,
    namespace: str = "default",
) -> None:
    cluster: dict[str, Any] = {"server": server}
    if ca is not None:
        cluster["certificate-authority-data"] = _b64(ca)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "toposched-test", "cluster": cluster}],
        "users": [{"name": name, "user": dict(user)}],
        "contexts": [
            {
                "name": name,
                "context": {"cluster": "toposched-test", "user": name, "namespace": namespace},
            }
        ],
        "current-context": name,
    }
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return bool(resp.status == 200)


@contextlib.contextmanager
def running(home: Path, bin_dir: Path, **options: Any) -> Iterator[ControlPlane]:
    """A started control plane, stopped on leaving."""
    plane = ControlPlane(home, bin_dir, **options)
    with plane:
        yield plane


__all__ = ["ControlPlane", "ControlPlaneError", "free_port", "running", "write_kubeconfig"]
