"""`LiveCluster`: what the Kubernetes tests call to make and read objects, and to play the
kubelet and inject faults, over a real API server.

By default it is the session's own control plane (tests/kube/realcluster.py): the real API
server v1.37, the proxy for faults in front of it, the tests as its kubelet. With
`TOPOSCHED_KUBECONFIG` set to a kubeconfig, it is that cluster instead, a scratch one (kind is
enough) with deploy/kubernetes/podgroup-crd.yaml applied and no toposched scheduler running:

    TOPOSCHED_KUBECONFIG=~/.kube/kind-config .venv/bin/pytest -q tests/kube/test_scheduler_e2e.py

There, what needs the proxy or the session's kubelet (faults, the log of requests) skips.
The tests never touch a real node or its GPUs:

- the nodes they make are Node objects with no kubelet behind them, named `toposched-e2e-<name>`
  (`dgx0` becomes `toposched-e2e-dgx0`; the adapter translates the names both ways, so the tests
  read `dgx0`). The scheduler under test takes only nodes labelled
  `toposched.io/gpu-schedule=topology`, so a real node must not carry that label;
- their objects go into the namespaces `team-a`, `team-b` and `batch`, which are emptied after
  each test, and the queue ConfigMap and the leader Lease into `toposched-system`;
- every object a test creates is deleted afterwards (`close()`), with the Events about them
  and the Leases the scheduler took in `toposched-system`.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime
import json
import os
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from tests.kube.kubelet import Kubelet
from tests.kube.proxy import FaultProxy
from tests.kube.realcluster import CRDS, NODE_PREFIX, Session
from toposched.kube.api import ApiError, KubeApi
from toposched.kube.driver import PLAN

ENV = "TOPOSCHED_KUBECONFIG"
NOT_READY = "node.kubernetes.io/not-ready"
TEST_NAMESPACES = ("team-a", "team-b", "batch")
NAMESPACES = (*TEST_NAMESPACES, "toposched-system")

JSON = dict[str, Any]
T = TypeVar("T")

VOLCANO = "podgroups.scheduling.volcano.sh"  # the plural is scheduler-plugins' alone
WORKLOADS = "workloads.scheduling.k8s.io"
UPSTREAM_GROUPS = "podgroups.scheduling.k8s.io"

# resource -> (API prefix, plural, namespaced)
_RESOURCES: dict[str, tuple[str, str, bool]] = {
    "pods": ("/api/v1", "pods", True),
    "nodes": ("/api/v1", "nodes", False),
    "events": ("/api/v1", "events", True),
    "configmaps": ("/api/v1", "configmaps", True),
    "services": ("/api/v1", "services", True),
    "namespaces": ("/api/v1", "namespaces", False),
    "podgroups": ("/apis/scheduling.x-k8s.io/v1alpha1", "podgroups", True),
    VOLCANO: ("/apis/scheduling.volcano.sh/v1beta1", "podgroups", True),
    WORKLOADS: ("/apis/scheduling.k8s.io/v1beta1", "workloads", True),
    UPSTREAM_GROUPS: ("/apis/scheduling.k8s.io/v1beta1", "podgroups", True),
    "poddisruptionbudgets": ("/apis/policy/v1", "poddisruptionbudgets", True),
    "priorityclasses": ("/apis/scheduling.k8s.io/v1", "priorityclasses", False),
    "leases": ("/apis/coordination.k8s.io/v1", "leases", True),
    "resourceclaims": ("/apis/resource.k8s.io/v1", "resourceclaims", True),
    "resourceclaimtemplates": ("/apis/resource.k8s.io/v1", "resourceclaimtemplates", True),
    "deviceclasses": ("/apis/resource.k8s.io/v1", "deviceclasses", False),
    "resourceslices": ("/apis/resource.k8s.io/v1", "resourceslices", False),
}
_KINDS: dict[tuple[str, str], str] = {
    ("v1", "Pod"): "pods",
    ("v1", "Node"): "nodes",
    ("v1", "Event"): "events",
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "Service"): "services",
    ("v1", "Namespace"): "namespaces",
    ("scheduling.x-k8s.io/v1alpha1", "PodGroup"): "podgroups",
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): VOLCANO,
    ("scheduling.k8s.io/v1beta1", "Workload"): WORKLOADS,
    ("scheduling.k8s.io/v1beta1", "PodGroup"): UPSTREAM_GROUPS,
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudgets",
    ("scheduling.k8s.io/v1", "PriorityClass"): "priorityclasses",
    ("coordination.k8s.io/v1", "Lease"): "leases",
    ("resource.k8s.io/v1", "ResourceClaim"): "resourceclaims",
    ("resource.k8s.io/v1", "ResourceClaimTemplate"): "resourceclaimtemplates",
    ("resource.k8s.io/v1", "DeviceClass"): "deviceclasses",
    ("resource.k8s.io/v1", "ResourceSlice"): "resourceslices",
}
_ALIASES = {
    "pod": "pods",
    "node": "nodes",
    "event": "events",
    "configmap": "configmaps",
    "service": "services",
    "namespace": "namespaces",
    "podgroup": "podgroups",
    "poddisruptionbudget": "poddisruptionbudgets",
    "pdb": "poddisruptionbudgets",
    "priorityclass": "priorityclasses",
    "lease": "leases",
}
# What a test may leave in its namespaces, emptied after it (the plural of each resource).
_EMPTIED = (
    "pods",
    "services",
    "configmaps",
    "events",
    "poddisruptionbudgets",
    "podgroups",
    VOLCANO,
    WORKLOADS,
    UPSTREAM_GROUPS,
    "resourceclaims",
    "resourceclaimtemplates",
)


def _resource(resource: str) -> str:
    if resource.lower() in (VOLCANO, WORKLOADS, UPSTREAM_GROUPS):
        return resource.lower()
    name = resource.split(".")[0].lower()
    name = _ALIASES.get(name, name)
    if name not in _RESOURCES:
        raise ValueError(f"LiveCluster does not know the resource {resource!r}")
    return name


def _path(resource: str, namespace: str | None, name: str | None = None) -> str:
    prefix, plural, namespaced = _RESOURCES[resource]
    path = prefix
    if namespaced and namespace:
        path += f"/namespaces/{namespace}"
    path += f"/{plural}"
    return path + (f"/{name}" if name else "")


def _needs(what: str, needed: str) -> None:
    pytest.skip(f"needs {needed}: {what} (set on the session's own control plane only)")


class LiveCluster:
    """A real cluster, as the tests use it; the hooks need the session's control plane."""

    def __init__(
        self,
        api: KubeApi,
        kubeconfig: Path,
        *,
        proxy: FaultProxy | None = None,
        kubelet: Kubelet | None = None,
        etcd_url: str = "",
        admin_kubeconfig: Path | None = None,
        user_kubeconfig: Path | None = None,
        pod_ips: tuple[str, ...] = (),
    ) -> None:
        self.api = api
        self.kubeconfig_path = kubeconfig
        self.admin_kubeconfig = admin_kubeconfig or kubeconfig
        self.user_kubeconfig = user_kubeconfig or self.admin_kubeconfig
        self.pod_ips = pod_ips
        self.proxy = proxy
        self.kubelet = kubelet
        self.etcd_url = etcd_url
        self.created: list[tuple[str, str | None, str]] = []  # (resource, namespace, name)
        self._leases = {
            lease["metadata"]["name"] for lease in self._list("leases", "toposched-system")
        }
        for ns in NAMESPACES:
            if self.get("namespaces", ns) is None:
                with contextlib.suppress(ApiError):  # made meanwhile by someone else
                    self.api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
        if proxy is not None:
            proxy.log.clear()

    @classmethod
    def of_session(cls, session: Session) -> LiveCluster:
        return cls(
            session.admin,
            session.scheduler_kubeconfig,
            proxy=session.proxy,
            kubelet=session.kubelet,
            etcd_url=session.plane.etcd_url,
            admin_kubeconfig=session.admin_kubeconfig,
            user_kubeconfig=session.user_kubeconfig,
            pod_ips=session.pod_ips,
        )

    # ------------------------------------------------------------------ node names

    @staticmethod
    def node_name(name: str) -> str:
        """The name a test's node has on the cluster: `dgx0` is `toposched-e2e-dgx0`."""
        return name if not name or name.startswith(NODE_PREFIX) else NODE_PREFIX + name

    @staticmethod
    def test_name(name: str) -> str:
        """The name a test knows a node by: `toposched-e2e-dgx0` is `dgx0`."""
        return name[len(NODE_PREFIX) :] if name.startswith(NODE_PREFIX) else name

    def _outward(self, resource: str, obj: JSON) -> JSON:
        """An object as the cluster stores it: node names given the prefix, and a node's
        status what its kubelet (played by the tests) reports of itself."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if resource == "nodes":
            meta["name"] = self.node_name(meta.get("name", ""))
            if self.kubelet is not None:
                status = obj.setdefault("status", {})
                for key, value in self.kubelet.node_status().items():
                    status.setdefault(key, value)
                _heartbeat(status)
        elif resource == "pods":
            spec = obj.setdefault("spec", {})
            if spec.get("nodeName"):
                spec["nodeName"] = self.node_name(spec["nodeName"])
        elif resource in ("podgroups", VOLCANO, UPSTREAM_GROUPS):
            annotations = meta.get("annotations") or {}
            if PLAN in annotations:
                plan = json.loads(annotations[PLAN])
                for placed in (plan.get("pods") or {}).values():
                    placed[0] = self.node_name(placed[0])
                annotations[PLAN] = json.dumps(plan)
        return obj

    def _inward(self, resource: str, obj: JSON) -> JSON:
        """An object as the tests expect it: node names without the prefix."""
        meta = obj.get("metadata") or {}
        if resource == "nodes" and meta.get("name"):
            meta["name"] = self.test_name(meta["name"])
        elif resource == "pods":
            spec = obj.get("spec") or {}
            if spec.get("nodeName"):
                spec["nodeName"] = self.test_name(spec["nodeName"])
        elif resource == "events":
            involved = obj.get("involvedObject") or {}
            if involved.get("kind") == "Node" and involved.get("name"):
                involved["name"] = self.test_name(involved["name"])
        elif resource in ("podgroups", VOLCANO, UPSTREAM_GROUPS):
            annotations = meta.get("annotations") or {}
            if PLAN in annotations:
                with contextlib.suppress(ValueError, TypeError, AttributeError, IndexError):
                    plan = json.loads(annotations[PLAN])
                    for placed in (plan.get("pods") or {}).values():
                        placed[0] = self.test_name(placed[0])
                    annotations[PLAN] = json.dumps(plan)
        return obj

    # ------------------------------------------------------------------ objects

    def kubeconfig(self, path: str | Path | None = None, namespace: str = "default") -> Path:
        """The scheduler's kubeconfig (its service account, through the proxy); `path` is
        not written."""
        return self.kubeconfig_path

    def create(self, obj: JSON, namespace: str | None = None) -> JSON:
        resource = _KINDS.get((str(obj.get("apiVersion", "v1")), str(obj.get("kind", ""))))
        if resource is None:
            raise ValueError(f"LiveCluster does not know {obj.get('apiVersion')} {obj.get('kind')}")
        namespaced = _RESOURCES[resource][2]
        meta = obj.get("metadata") or {}
        ns = (namespace or meta.get("namespace") or "default") if namespaced else None
        body = self._outward(resource, obj)
        if ns:
            body["metadata"]["namespace"] = ns
        made = self.api.request("POST", _path(resource, ns), body=body)
        if resource == "nodes" and self.kubelet is not None:
            self.kubelet.renew_soon()
        if resource == "nodes" and _ready(made):
            made = self._joined(made["metadata"]["name"])
        key = (resource, ns, made["metadata"]["name"])
        if key not in self.created:
            self.created.append(key)
        return self._inward(resource, made)

    def _joined(self, name: str) -> JSON:
        """A Ready node once the node lifecycle controller has taken off the `not-ready`
        taint that admission puts on every new node (TaintNodesByCondition), as a kubelet's
        node is once it has registered and reported Ready."""

        def untainted() -> JSON | None:
            node = self.api.request("GET", _path("nodes", None, name))
            taints = (node.get("spec") or {}).get("taints") or []
            return None if any(t.get("key") == NOT_READY for t in taints) else node

        return self.wait_until(untainted, timeout=30)

    def get(self, resource: str, name: str, namespace: str | None = None) -> JSON | None:
        resource = _resource(resource)
        if resource == "nodes":
            name = self.node_name(name)
        ns = (namespace or "default") if _RESOURCES[resource][2] else None
        try:
            return self._inward(resource, self.api.request("GET", _path(resource, ns, name)))
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def objects(
        self, resource: str, namespace: str | None = None, *, label_selector: str = ""
    ) -> list[JSON]:
        """The objects, sorted by namespace and name; namespace None or "" is all. Nodes are
        only the fake ones the tests made (`toposched-e2e-*`), never the cluster's own."""
        resource = _resource(resource)
        items = self._list(resource, namespace, label_selector)
        if resource == "nodes":
            items = [n for n in items if n["metadata"]["name"].startswith(NODE_PREFIX)]
        items.sort(key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"].get("name")))
        return [self._inward(resource, o) for o in items]

    def patch(
        self,
        resource: str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        patch_type: str = "application/merge-patch+json",
    ) -> JSON:
        """A JSON merge patch (of `/status` with that subresource)."""
        resource = _resource(resource)
        if resource == "nodes":
            name = self.node_name(name)
        ns = (namespace or "default") if _RESOURCES[resource][2] else None
        if resource == "nodes" and self.kubelet is not None and isinstance(patch, dict):
            _heartbeat(patch.get("status") or {})
        path = _path(resource, ns, name) + (f"/{subresource}" if subresource else "")
        answer = self.api.request("PATCH", path, body=patch, content_type=patch_type)
        return self._inward(resource, answer)

    def delete(self, resource: str, name: str, namespace: str | None = None) -> JSON | None:
        """Remove the object at once (grace period 0); the deleted object, or None."""
        resource = _resource(resource)
        if resource == "nodes":
            name = self.node_name(name)
        ns = (namespace or "default") if _RESOURCES[resource][2] else None
        try:
            answer = self.api.request(
                "DELETE",
                _path(resource, ns, name),
                body={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
            )
        except ApiError as err:
            if err.status == 404:
                return None
            raise
        return self._inward(resource, answer)

    def wait_until(self, check: Callable[[], T], timeout: float = 10.0) -> T:
        """Poll `check` until it returns something truthy; AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {check}")
            time.sleep(0.05)

    # ------------------------------------------------------------------ the kubelet's part

    def set_phase(
        self, namespace: str, name: str, phase: str, ip: str = "", ready: bool | None = None
    ) -> JSON:
        """What the pod's kubelet writes: its phase, its Ready conditions (and its IP)."""
        if self.kubelet is None:
            _needs(f"pod {namespace}/{name} {phase}", "the tests' kubelet")
        assert self.kubelet is not None
        return self.kubelet.set_phase(namespace, name, phase, ip, ready)

    def pod_ip(self, index: int) -> str:
        """A local address a test's process may listen on as a pod's IP."""
        if index >= len(self.pod_ips):
            raise AssertionError(
                "no local address for a pod: the tests put 198.51.100.10-13 on the loopback "
                "interface, which needs root (`ip address add`)"
            )
        return self.pod_ips[index]

    def set_log(self, namespace: str, pod: str, text: str) -> None:
        if self.kubelet is None:
            _needs(f"the log of pod {namespace}/{pod}", "the tests' kubelet")
        assert self.kubelet is not None
        self.kubelet.set_log(namespace, pod, text)

    def hold(self, namespace: str, name: str) -> None:
        """The pod's containers take their grace period to stop (tests/kube/kubelet.py)."""
        if self.kubelet is None:
            _needs(f"pod {namespace}/{name} held", "the tests' kubelet")
        assert self.kubelet is not None
        self.kubelet.hold(namespace, name)

    @contextlib.contextmanager
    def without_crd(self, name: str) -> Iterator[None]:
        """The cluster without the CRD `name` (and so without its objects) for a while: it is
        deleted, then applied again and waited for."""
        if self.etcd_url == "":
            _needs(f"deleting the CRD {name}", "the session's control plane")
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        self.api.request("DELETE", path)
        self.wait_until(lambda: not self._exists(path), timeout=30)
        try:
            yield
        finally:
            crd = next(yaml.safe_load_all(CRDS[name].read_text()))
            self.api.request(
                "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=crd
            )
            self.wait_until(lambda: self._established(path), timeout=30)
            prefix, plural, _ = _RESOURCES["podgroups" if "x-k8s" in name else VOLCANO]
            self.wait_until(lambda: self._exists(f"{prefix}/{plural}"), timeout=30)

    def _exists(self, path: str) -> bool:
        try:
            self.api.request("GET", path)
        except ApiError as err:
            if err.status == 404:
                return False
            raise
        return True

    def _established(self, path: str) -> bool:
        conditions = (self.api.request("GET", path).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    # ------------------------------------------------------------------ between client and server

    def _proxy(self, what: str) -> FaultProxy:
        if self.proxy is None:
            _needs(what, "the proxy in front of the API server")
        assert self.proxy is not None
        return self.proxy

    @property
    def requests(self) -> list[tuple[str, str]]:
        """(method, path) of what the scheduler asked the API server (through the proxy)."""
        return self._proxy("the log of requests").requests

    def inject_error(self, method: str, path_regex: str, *args: Any, **kwargs: Any) -> None:
        self._proxy(f"an error for {method} {path_regex}").inject_error(
            method, path_regex, *args, **kwargs
        )

    def inject_delay(self, method: str, path_regex: str, seconds: float, times: int = 1) -> None:
        self._proxy(f"a delay of {method} {path_regex}").inject_delay(
            method, path_regex, seconds, times
        )

    def clear_delays(self) -> int:
        return self._proxy("delays").clear_delays()

    def drop_watches(self) -> int:
        return self._proxy("ending watches").drop_watches()

    def watch_count(self) -> int:
        return self._proxy("counting watches").watch_count()

    # ------------------------------------------------------------------ the server's history

    def compact(self) -> int:
        """Compact etcd past every revision the watches have seen, as the API server's
        compactor does every 5 minutes (at a revision it wrote that long ago): a list or watch
        from an older resourceVersion is then 410 Gone. Two writes of a key of the tests'
        own come first, so that the compaction is beyond the next revision of any watcher
        too (one that resumes exactly at the compacted revision finds its previous value
        gone, which the server answers 500, not 410). Returns the revision."""
        if not self.etcd_url:
            _needs("compacting etcd", "the session's etcd")
        key = base64.b64encode(b"/toposched-tests/compaction").decode()
        for _ in range(2):
            answer = _etcd(self.etcd_url, "/v3/kv/put", {"key": key, "value": "Lw=="})
        revision = int(answer["header"]["revision"])
        _etcd(self.etcd_url, "/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    # ------------------------------------------------------------------ cleanup

    def _list(self, resource: str, namespace: str | None, label_selector: str = "") -> list[JSON]:
        query = {"labelSelector": label_selector} if label_selector else {}
        items, _ = self.api.list(_path(resource, namespace or None), **query)
        return items

    def close(self) -> None:
        """Delete what the tests made: everything in the test namespaces, the objects made
        elsewhere (nodes last), the Events about them, and the Leases the scheduler took in
        `toposched-system` since the start."""
        errors: list[str] = []
        for ns in TEST_NAMESPACES:
            # Kubernetes' PodGroups carry a protection finalizer that a controller takes off
            # once no pod names them: taken off here, so that the next test may reuse a name.
            with contextlib.suppress(ApiError):
                for group in self._list(UPSTREAM_GROUPS, ns):
                    if group["metadata"].get("finalizers"):
                        self.patch(
                            UPSTREAM_GROUPS,
                            group["metadata"]["name"],
                            {"metadata": {"finalizers": None}},
                            ns,
                        )
            for resource in _EMPTIED:
                with contextlib.suppress(ApiError):  # a CRD the cluster lacks
                    self.api.request(
                        "DELETE",
                        _path(resource, ns),
                        body={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
                    )
        order = {"pods": 0, "nodes": 2}
        made = sorted(self.created, key=lambda key: order.get(key[0], 1))
        for resource, ns, name in made:
            if ns in TEST_NAMESPACES:
                continue
            try:
                self.delete(resource, name, ns)
            except ApiError as err:
                errors.append(f"{resource} {ns}/{name}: {err}")
        for ns in ("toposched-system", "default"):
            with contextlib.suppress(ApiError):
                for event in self._list("events", ns):
                    involved = event.get("involvedObject") or {}
                    name = str(involved.get("name") or "")
                    mine = ns == "toposched-system" or name.startswith(NODE_PREFIX)
                    if mine or (involved.get("kind"), name) in {
                        (_kind_of(r), n) for r, _, n in made
                    }:
                        with contextlib.suppress(ApiError):
                            self.delete("events", event["metadata"]["name"], ns)
        with contextlib.suppress(ApiError):
            for lease in self._list("leases", "toposched-system"):
                if lease["metadata"]["name"] not in self._leases:
                    self.delete("leases", lease["metadata"]["name"], "toposched-system")
        with contextlib.suppress(ApiError):
            for config in self._list("configmaps", "toposched-system"):
                if config["metadata"]["name"] == "toposched-queues":
                    self.delete("configmaps", "toposched-queues", "toposched-system")
        with contextlib.suppress(ApiError):
            for node in self._list("nodes", None):
                if node["metadata"]["name"].startswith(NODE_PREFIX):
                    self.delete("nodes", node["metadata"]["name"])
        self.created = []
        if self.proxy is not None:
            self.proxy.clear_delays()
            with self.proxy.lock:
                self.proxy.faults.clear()
        if errors:
            raise AssertionError("LiveCluster could not delete: " + "; ".join(errors))

    def __enter__(self) -> LiveCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _heartbeat(status: JSON) -> None:
    """Stamp the node's conditions with now, as a kubelet does each time it posts its status.

    The node lifecycle controller keeps what it last saw of a node by name, and never forgets
    a deleted one: a node made again under an earlier test's name, its conditions without a
    heartbeat time, looked to it like the old node that had stopped reporting minutes ago,
    and before the first lease of the new one came it was marked Ready Unknown and tainted
    `unreachable` (tests failed so, now and then, late in a run)."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for condition in status.get("conditions") or []:
        condition.setdefault("lastHeartbeatTime", now)
        condition.setdefault("lastTransitionTime", now)


def _ready(node: JSON) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _kind_of(resource: str) -> str:
    return next(kind for (_, kind), r in _KINDS.items() if r == resource)


def _etcd(url: str, path: str, body: JSON) -> JSON:
    """etcd's v3 API through its JSON gateway."""
    req = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        answer: JSON = json.loads(resp.read())
    return answer


@contextlib.contextmanager
def cluster_for_tests(session: Session | None) -> Iterator[LiveCluster]:
    """What the `apiserver` fixture is: a `LiveCluster` over $TOPOSCHED_KUBECONFIG when set,
    else over the session's control plane."""
    external = os.environ.get(ENV)
    if external:
        path = Path(external).expanduser()
        with LiveCluster(KubeApi.connect(str(path)), path) as live:
            yield live
        return
    assert session is not None
    with LiveCluster.of_session(session) as live:
        yield live
