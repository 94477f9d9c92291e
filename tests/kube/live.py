"""The end-to-end tests against a real cluster: `LiveCluster`, the part of the emulator's
Python-side API (`tests.kube.emulator.ApiServer`) that tests/kube/test_scheduler_e2e.py uses,
spoken over the real API with `toposched.kube.api.KubeApi`.

Set `TOPOSCHED_KUBECONFIG` to a kubeconfig file and the `apiserver` fixture is a `LiveCluster`
over that cluster instead of the emulator (unset, nothing here runs):

    TOPOSCHED_KUBECONFIG=~/.kube/kind-config .venv/bin/pytest -q tests/kube/test_scheduler_e2e.py

Use a scratch cluster only (kind is enough), with the PodGroup CRD installed
(`kubectl apply -f deploy/kubernetes/podgroup-crd.yaml`) and no toposched scheduler running.
The tests of Volcano's PodGroups need Volcano's CRD too (its `podgroups.scheduling.volcano.sh`
CRD alone is enough, Volcano itself must not run); without it they skip.
The tests never touch a real node or its GPUs:

- the nodes they make are fake Node objects created through the API, with no kubelet behind
  them, named `toposched-e2e-<name>` (`dgx0` becomes `toposched-e2e-dgx0`; the adapter
  translates the names both ways, so the tests read `dgx0`). The scheduler under test takes
  only nodes labelled `toposched.io/gpu-schedule=topology`, so a real node must not carry that
  label. With no kubelet, the node controller marks a fake node NotReady after its grace
  period (about 40 s), longer than a test takes;
- their pods and PodGroups go into the namespaces `team-a` and `team-b` (made if missing,
  left in place), the queue ConfigMap and the leader Lease into `toposched-system`;
- pods are made with `terminationGracePeriodSeconds: 0`: no kubelet will ever confirm that a
  container stopped, so an eviction must remove the pod at once, as the emulator does;
- every object a test creates is deleted afterwards (`close()`), with the Events about them
  and the Leases the scheduler took in `toposched-system`.

The emulator-only hooks (`requests`, `set_phase`, `inject_error`, `compact`, `drop_watches`)
have no real-cluster equivalent: a test that calls one is skipped at that point.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toposched.kube.api import ApiError, KubeApi
from toposched.kube.driver import PLAN

ENV = "TOPOSCHED_KUBECONFIG"
NODE_PREFIX = "toposched-e2e-"
NAMESPACES = ("team-a", "team-b", "toposched-system")

JSON = dict[str, Any]

VOLCANO = "podgroups.scheduling.volcano.sh"  # the plural is scheduler-plugins' alone

# resource -> (API prefix, plural, namespaced)
_RESOURCES: dict[str, tuple[str, str, bool]] = {
    "pods": ("/api/v1", "pods", True),
    "nodes": ("/api/v1", "nodes", False),
    "events": ("/api/v1", "events", True),
    "configmaps": ("/api/v1", "configmaps", True),
    "namespaces": ("/api/v1", "namespaces", False),
    "podgroups": ("/apis/scheduling.x-k8s.io/v1alpha1", "podgroups", True),
    VOLCANO: ("/apis/scheduling.volcano.sh/v1beta1", "podgroups", True),
    "poddisruptionbudgets": ("/apis/policy/v1", "poddisruptionbudgets", True),
    "priorityclasses": ("/apis/scheduling.k8s.io/v1", "priorityclasses", False),
    "leases": ("/apis/coordination.k8s.io/v1", "leases", True),
}
_KINDS: dict[str, str] = {
    "Pod": "pods",
    "Node": "nodes",
    "Event": "events",
    "ConfigMap": "configmaps",
    "Namespace": "namespaces",
    "PodGroup": "podgroups",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "PriorityClass": "priorityclasses",
    "Lease": "leases",
}
_ALIASES = {
    "pod": "pods",
    "node": "nodes",
    "event": "events",
    "configmap": "configmaps",
    "namespace": "namespaces",
    "podgroup": "podgroups",
    "poddisruptionbudget": "poddisruptionbudgets",
    "pdb": "poddisruptionbudgets",
    "priorityclass": "priorityclasses",
    "lease": "leases",
}


def _resource(resource: str) -> str:
    if resource.lower() == VOLCANO:
        return VOLCANO
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


def _needs_emulator(what: str) -> None:
    pytest.skip(f"needs the emulator: {what} has no equivalent on a real cluster")


class LiveCluster:
    """A real cluster behind the emulator's Python-side API (the part the e2e tests use)."""

    def __init__(self, kubeconfig: str | Path) -> None:
        self.kubeconfig_path = Path(kubeconfig).expanduser()
        self.api = KubeApi.connect(str(self.kubeconfig_path))
        self.created: list[tuple[str, str | None, str]] = []  # (resource, namespace, name)
        self._leases = {
            lease["metadata"]["name"] for lease in self._list("leases", "toposched-system")
        }
        for ns in NAMESPACES:
            if self.get("namespaces", ns) is None:
                with contextlib.suppress(ApiError):  # made meanwhile by someone else
                    self.api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})

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
        """An object as the cluster stores it: node names given the prefix."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if resource == "nodes":
            meta["name"] = self.node_name(meta.get("name", ""))
        elif resource == "pods":
            spec = obj.setdefault("spec", {})
            if spec.get("nodeName"):
                spec["nodeName"] = self.node_name(spec["nodeName"])
            spec.setdefault("terminationGracePeriodSeconds", 0)  # no kubelet: see above
        elif resource in ("podgroups", VOLCANO):
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
        elif resource in ("podgroups", VOLCANO):
            annotations = meta.get("annotations") or {}
            if PLAN in annotations:
                with contextlib.suppress(ValueError, TypeError, AttributeError, IndexError):
                    plan = json.loads(annotations[PLAN])
                    for placed in (plan.get("pods") or {}).values():
                        placed[0] = self.test_name(placed[0])
                    annotations[PLAN] = json.dumps(plan)
        return obj

    # ------------------------------------------------------------------ the emulator's API

    def kubeconfig(self, path: str | Path, namespace: str = "default") -> Path:
        """The cluster's own kubeconfig ($TOPOSCHED_KUBECONFIG); `path` is not written."""
        return self.kubeconfig_path

    def create(self, obj: JSON, namespace: str | None = None) -> JSON:
        volcano = str(obj.get("apiVersion", "")).startswith("scheduling.volcano.sh/")
        resource = VOLCANO if volcano else _resource(obj.get("kind", ""))
        namespaced = _RESOURCES[resource][2]
        ns = (
            (namespace or (obj.get("metadata") or {}).get("namespace") or "default")
            if (namespaced)
            else None
        )
        body = self._outward(resource, obj)
        if ns:
            body["metadata"]["namespace"] = ns
        try:
            made = self.api.request("POST", _path(resource, ns), body=body)
        except ApiError as err:
            if err.status == 404 and resource == VOLCANO:
                pytest.skip(f"the cluster lacks the CRD {VOLCANO}")
            raise
        key = (resource, ns, made["metadata"]["name"])
        if key not in self.created:
            self.created.append(key)
        return self._inward(resource, made)

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

    def objects(self, resource: str, namespace: str | None = None) -> list[JSON]:
        """The objects, sorted by namespace and name; namespace None or "" is all. Nodes are
        only the fake ones the tests made (`toposched-e2e-*`), never the cluster's own."""
        resource = _resource(resource)
        items = self._list(resource, namespace)
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
    ) -> JSON:
        """A JSON merge patch, as the emulator's default (of `/status` with that subresource)."""
        resource = _resource(resource)
        if resource == "nodes":
            name = self.node_name(name)
        ns = (namespace or "default") if _RESOURCES[resource][2] else None
        path = _path(resource, ns, name) + (f"/{subresource}" if subresource else "")
        answer = self.api.request(
            "PATCH",
            path,
            body=patch,
            content_type="application/merge-patch+json",
        )
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

    # ------------------------------------------------------------------ emulator only

    @property
    def requests(self) -> list[tuple[str, str]]:
        _needs_emulator("the log of requests the API server served")
        return []

    def set_phase(self, namespace: str, name: str, phase: str) -> JSON:
        _needs_emulator(f"setting pod {namespace}/{name}'s phase to {phase} as a kubelet would")
        return {}

    def inject_error(self, method: str, path_regex: str, *args: Any, **kwargs: Any) -> None:
        _needs_emulator(f"an error injected into {method} {path_regex}")

    def compact(self) -> int:
        _needs_emulator("compacting the API server's history (410 Gone)")
        return 0

    def drop_watches(self, *, bookmark: bool = False) -> int:
        _needs_emulator("ending the API server's watches")
        return 0

    # ------------------------------------------------------------------ cleanup

    def _list(self, resource: str, namespace: str | None) -> list[JSON]:
        items, _ = self.api.list(_path(resource, namespace or None))
        return items

    def close(self) -> None:
        """Delete what the tests made: their objects (pods first, nodes last), the Events about
        them, and the Leases the scheduler took in `toposched-system` since the start."""
        order = {"pods": 0, "nodes": 2}
        made = sorted(self.created, key=lambda key: order.get(key[0], 1))
        errors: list[str] = []
        for resource, ns, name in made:
            try:
                self.delete(resource, name, ns)
            except ApiError as err:
                errors.append(f"{resource} {ns}/{name}: {err}")
        about = {(_singular(r), ns or "", name) for r, ns, name in made}
        for ns in (*NAMESPACES, "default"):
            with contextlib.suppress(ApiError):
                for event in self._list("events", ns):
                    involved = event.get("involvedObject") or {}
                    key = (
                        str(involved.get("kind", "")).lower(),
                        involved.get("namespace") or "",
                        involved.get("name"),
                    )
                    if key in about:
                        with contextlib.suppress(ApiError):
                            self.delete("events", event["metadata"]["name"], ns)
        with contextlib.suppress(ApiError):
            for lease in self._list("leases", "toposched-system"):
                if lease["metadata"]["name"] not in self._leases:
                    self.delete("leases", lease["metadata"]["name"], "toposched-system")
        self.created = []
        if errors:
            raise AssertionError("LiveCluster could not delete: " + "; ".join(errors))

    def __enter__(self) -> LiveCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _singular(resource: str) -> str:
    plural = _RESOURCES[resource][1]
    return next(k for k, r in _KINDS.items() if r == plural).lower()


@contextlib.contextmanager
def cluster_for_tests() -> Iterator[Any]:
    """What the `apiserver` fixture is: a `LiveCluster` over $TOPOSCHED_KUBECONFIG when set,
    else a started emulator (checked afterwards for errors it caused itself)."""
    kubeconfig = os.environ.get(ENV)
    if kubeconfig:
        with LiveCluster(kubeconfig) as live:
            yield live
        return
    from tests.kube.emulator import ApiServer

    with ApiServer() as api:
        yield api
        assert not api.server_errors, api.server_errors[0]
