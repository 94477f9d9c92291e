"""The cluster cache: the driver's copies of what the API server holds, kept by its watches.

Nodes, the pods this scheduler places, the pods other schedulers bound (their requests, in
`usage`), PodGroups of every kind and the queues ConfigMap: listed once (`load`), then kept up
to date by watch events (`observe`) and fresh lists after 410 Gone (`relisted`). The cache
reads the cluster and writes nothing to it but Warning Events about objects it cannot read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from toposched.core import WorkerSlot
from toposched.kube.api import ApiError, KubeApi
from toposched.kube.claims import API as CLAIMS_API
from toposched.kube.claims import ClaimError, allocated_devices, claim_gpus, pod_claims
from toposched.kube.gangs import Gang, Key, gang_key, group_key, kind_of
from toposched.kube.gangspec import is_gang
from toposched.kube.objects import (
    GANG_KINDS,
    GangKind,
    Obj,
    ObjectError,
    Pod,
    key_of,
    pod_from,
    pod_requests,
)
from toposched.kube.usage import Usage

log = logging.getLogger("toposched.kube")

OTHERS_PATH = "/api/v1/pods"  # pods other schedulers bound, in every namespace
QUEUES_SELECTOR = "metadata.name=toposched-queues"
GANG_RESOURCES = {kind.resource: kind for kind in GANG_KINDS}
KINDS = {
    "nodes": ("v1", "Node"),
    "pods": ("v1", "Pod"),
    "others": ("v1", "Pod"),
    "configmaps": ("v1", "ConfigMap"),
    "resourceclaims": ("resource.k8s.io/v1", "ResourceClaim"),
    **{kind.resource: (kind.api_version, "PodGroup") for kind in GANG_KINDS},
}

Warn = Callable[[Obj, str, str], None]  # a Warning Event on an object: (object, reason, why)


class ClusterCache:
    """What the watches saw, and what our pods and other schedulers' pods use of each node."""

    def __init__(
        self,
        api: KubeApi,
        *,
        scheduler_name: str,
        namespace: str | None,
        config_namespace: str,
        warn: Warn,
        configure: Callable[[dict[str, int]], None],
    ) -> None:
        self.api = api
        self.name = scheduler_name
        self.namespace = namespace
        self.config_namespace = config_namespace
        self.warn = warn
        # Handed the guaranteed shares of each good queues ConfigMap: the driver tells the core.
        self.configure = configure
        self.nodes: dict[str, Obj] = {}
        self.pods: dict[Key, tuple[Obj, Pod]] = {}
        self.groups: dict[Key, Obj] = {}  # PodGroups of every kind, by their gangs' keys
        self.unqueued: set[Key] = set()  # PodGroups whose operator waits for a queued phase
        # Whether each kind's CRD has a status subresource (where its phase is written).
        self.status_paths: dict[GangKind, bool] = {}
        # What pods use of each node: ours (booked where the core put them, or bound) and
        # those of other schedulers.
        self.usage = Usage()
        self.placed: dict[Key, str] = {}  # our pods, where the core put their gangs
        self.held: set[Key] = set()  # our pods whose CPUs and memory the core counts
        self.rejected: dict[Key, str] = {}  # pods refused (bad objects), by key
        # ResourceClaims (resource.k8s.io/v1), where the cluster serves them; "" in `versions`
        # where it does not. Which pod references each, to read the pod again when it changes.
        self.claims: dict[Key, Obj] = {}
        self.claimed_by: dict[Key, Key] = {}

    # ------------------------------------------------------------------ what is watched

    def pods_path(self) -> str:
        if self.namespace:
            return f"/api/v1/namespaces/{self.namespace}/pods"
        return "/api/v1/pods"

    def pod_selector(self) -> str:
        return f"spec.schedulerName={self.name}"

    def others_selector(self) -> str:
        """Bound pods that have not ended and that this scheduler does not place (as the
        cluster autoscaler selects them): what they request is taken off their nodes. With a
        namespace of its own, pods of its name elsewhere count as others too."""
        terms = ["spec.nodeName!=", "status.phase!=Succeeded", "status.phase!=Failed"]
        if not self.namespace:
            terms.append(f"spec.schedulerName!={self.name}")
        return ",".join(terms)

    def groups_path(self, kind: GangKind) -> str:
        if self.namespace:
            return f"{kind.prefix}/namespaces/{self.namespace}/podgroups"
        return f"{kind.prefix}/podgroups"

    def config_path(self) -> str:
        return f"/api/v1/namespaces/{self.config_namespace}/configmaps"

    def claims_path(self) -> str:
        if self.namespace:
            return f"{CLAIMS_API}/namespaces/{self.namespace}/resourceclaims"
        return f"{CLAIMS_API}/resourceclaims"

    # ------------------------------------------------------------------ keeping the copies

    def load(self) -> dict[str, str]:
        """List everything into the copies. Returns the resourceVersion of each list, where
        watches start."""
        nodes, nodes_rv = self.api.list("/api/v1/nodes")
        pods, pods_rv = self.api.list(self.pods_path(), fieldSelector=self.pod_selector())
        others, others_rv = self.api.list(OTHERS_PATH, fieldSelector=self.others_selector())
        versions = {"nodes": nodes_rv, "pods": pods_rv, "others": others_rv}
        claims, versions["resourceclaims"] = self._list_claims()
        self.claims = {key_of(c): c for c in claims}
        self.groups = {}
        for kind in GANG_KINDS:
            groups, versions[kind.resource] = self._list_groups(kind)
            self.relisted(kind.resource, groups)
        configs, versions["configmaps"] = self.api.list(
            self.config_path(), fieldSelector=QUEUES_SELECTOR
        )
        for resource, objects in (("nodes", nodes), ("pods", pods)):
            for obj in objects:
                _kind(resource, obj)  # items of a list carry no kind; Events about them need it
        self._configure(configs[0] if configs else None)
        self.nodes = {key_of(n)[1]: n for n in nodes}
        self.pods = {}
        for obj in pods:
            self._observe_pod("ADDED", obj)
        self.relisted("others", list(others))
        # The workers of gangs bound before a restart are the core's to count once restored:
        # the nodes must not be told they have that much less first.
        self.held = {k for k, (_, p) in self.pods.items() if p.bound_gpus and not p.done}
        for key in self.pods:
            self.account(key)
        return versions

    def _list_claims(self) -> tuple[list[Obj], str]:
        """ResourceClaims, and the list's resourceVersion: "" (not watched) where the cluster
        does not serve resource.k8s.io/v1."""
        try:
            claims, version = self.api.list(self.claims_path())
        except ApiError as err:
            if err.status != 404:
                raise
            return [], ""
        return list(claims), version

    def _list_groups(self, kind: GangKind) -> tuple[list[Obj], str]:
        """The PodGroups of one kind, and the list's resourceVersion: "" (nothing to watch)
        where the cluster lacks that CRD, whose pods then wait for a PodGroup."""
        try:
            groups, version = self.api.list(self.groups_path(kind))
        except ApiError as err:
            if err.status != 404:
                raise
            return [], ""
        if kind.queued_phase:
            self.status_paths[kind] = self._has_status(kind)
        return list(groups), version

    def _has_status(self, kind: GangKind) -> bool:
        """Whether the cluster serves `podgroups/status` for `kind` (API discovery): Volcano's
        CRD declares no status subresource, so its status is written on the object itself."""
        try:
            served = self.api.request("GET", kind.prefix).get("resources") or []
        except ApiError as err:
            log.warning("discovery of %s: %s; writing status on the object", kind.prefix, err)
            return False
        return any(r.get("name") == "podgroups/status" for r in served if isinstance(r, dict))

    def observe(self, kind: str, event_type: str, obj: Obj) -> None:
        """One watch event (or a listed object) into the copies."""
        _kind(kind, obj)
        if kind == "nodes":
            name = key_of(obj)[1]
            if event_type == "DELETED":
                self.nodes.pop(name, None)
            else:
                self.nodes[name] = obj
        elif kind == "pods":
            self._observe_pod(event_type, obj)
        elif kind == "others":
            self._observe_other(event_type, obj)
        elif kind in GANG_RESOURCES:
            if event_type == "DELETED":
                self.groups.pop(group_key(GANG_RESOURCES[kind], obj), None)
            else:
                self._keep_group(GANG_RESOURCES[kind], obj)
        elif kind == "configmaps":
            self._configure(None if event_type == "DELETED" else obj)
        elif kind == "resourceclaims":
            self._observe_claim(event_type, obj)

    def _observe_claim(self, event_type: str, obj: Obj) -> None:
        key = key_of(obj)
        if event_type == "DELETED":
            self.claims.pop(key, None)
        else:
            self.claims[key] = obj
        pod = self.claimed_by.get(key)
        found = self.pods.get(pod) if pod is not None else None
        if pod is not None and found is not None:
            self._observe_pod("MODIFIED", found[0])

    def taken_by_others(self) -> dict[str, frozenset[int]]:
        """Per node, toposched's devices that claims not of our pods hold (allocated by
        another scheduler, or by us for a pod since gone and not yet deallocated)."""
        ours = {p.uid for _, p in self.pods.values()}
        taken: dict[str, set[int]] = {}
        for claim in self.claims.values():
            holders = (claim.get("status") or {}).get("reservedFor") or []
            if holders and all(h.get("uid") in ours for h in holders):
                continue
            for node, gpu in allocated_devices(claim):
                taken.setdefault(node, set()).add(gpu)
        return {node: frozenset(gpus) for node, gpus in taken.items()}

    def _configure(self, config: Obj | None) -> None:
        """Guaranteed shares from the `toposched-queues` ConfigMap; a bad one is refused
        whole (a Warning Event) and the shares stay as they were."""
        try:
            shares = queues_from(config)
        except ObjectError as err:
            if config is not None:
                self.warn(config, "InvalidQueues", str(err))
            return
        self.configure(shares)

    def relisted(self, kind: str, objects: list[Obj]) -> None:
        """A watch came back with a fresh list (after 410 Gone): objects it lacks are gone."""
        for obj in objects:
            _kind(kind, obj)
        if kind == "nodes":
            self.nodes = {key_of(n)[1]: n for n in objects}
        elif kind in GANG_RESOURCES:
            gang_kind = GANG_RESOURCES[kind]
            self.groups = {k: g for k, g in self.groups.items() if kind_of(k) != gang_kind}
            for obj in objects:
                self._keep_group(gang_kind, obj)
        elif kind == "configmaps":
            self._configure(objects[0] if objects else None)
        elif kind == "pods":
            gone = set(self.pods)
            self.pods = {}
            for obj in objects:
                self._observe_pod("ADDED", obj)
            for key in gone - set(self.pods):
                self.account(key)
        elif kind == "others":
            self.usage.drop("other")
            for obj in objects:
                self._observe_other("ADDED", obj)
        elif kind == "resourceclaims":
            self.claims = {key_of(c): c for c in objects}
            for _, (pod_obj, _) in list(self.pods.items()):
                self._observe_pod("MODIFIED", pod_obj)

    def _keep_group(self, kind: GangKind, obj: Obj) -> None:
        key = group_key(kind, obj)
        self.groups[key] = obj
        if kind.queued_phase and (obj.get("status") or {}).get("phase") in (None, "", "Pending"):
            self.unqueued.add(key)

    def _observe_pod(self, event_type: str, obj: Obj) -> None:
        key = key_of(obj)
        self._keep_pod(event_type, key, obj)
        self.account(key)

    def _keep_pod(self, event_type: str, key: Key, obj: Obj) -> None:
        if event_type == "DELETED":
            self.pods.pop(key, None)
            self.rejected.pop(key, None)
            self.placed.pop(key, None)
            return
        try:
            pod = self._with_claims(pod_from(obj), obj)
        except (ObjectError, ClaimError) as err:
            self.pods.pop(key, None)
            if self.rejected.get(key) != str(err):
                self.rejected[key] = str(err)
                self.warn(obj, "InvalidPod", str(err))
            return
        self.rejected.pop(key, None)
        self.pods[key] = (obj, pod)

    def _with_claims(self, pod: Pod, obj: Obj) -> Pod:
        """The pod with the GPUs its ResourceClaims ask (ClaimError for one toposched does not
        allocate); `claims_made` False while one is not made yet."""
        refs = pod_claims(obj)
        if not refs:
            return pod
        for ref in refs:
            if ref.claim is not None:
                self.claimed_by[(pod.namespace, ref.claim)] = pod.key
        gpus = claim_gpus(obj, self.claims)
        names = tuple(ref.claim or "" for ref in refs)
        if gpus is None:
            return replace(pod, claims=names, claims_made=False)
        return replace(pod, gpus=pod.gpus + gpus, claims=names)

    def _observe_other(self, event_type: str, obj: Obj) -> None:
        """A pod another scheduler bound (or ours, where this one keeps to a namespace: those
        are kept with the rest of ours)."""
        key = key_of(obj)
        spec = obj.get("spec") or {}
        ended = (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        mine = spec.get("schedulerName") == self.name and key[0] == self.namespace
        if event_type == "DELETED" or ended or mine or not spec.get("nodeName"):
            self.usage.put(("other", key), None, {}, False)
            return
        try:
            requests = pod_requests(spec)
        except ValueError as err:  # the API server validates requests: not seen in practice
            log.warning("pod %s/%s: %s; its requests are not counted", *key, err)
            requests = {}
        self.usage.put(("other", key), str(spec["nodeName"]), requests, False)

    # ------------------------------------------------------------------ our pods on nodes

    def account(self, key: Key) -> None:
        """Book what our pod `key` requests on its node: where the core put its gang, else
        where it is bound; nowhere once it has ended or is gone."""
        found = self.pods.get(key)
        node = None
        if found is not None and not found[1].done:
            node = found[1].node or self.placed.get(key)
        requests = found[1].requests if found is not None else {}
        self.usage.put(("ours", key), node, requests, key in self.held)

    def book(self, gang: Gang, slots: Iterable[WorkerSlot], counted: bool = True) -> None:
        """Book the gang's pods where the core put it; the core counts its workers' CPUs and
        memory (unless not `counted`), not those of its pods without GPUs."""
        slots = list(slots)
        gang.placed = True
        for key, slot in zip(gang.workers, slots, strict=True):
            self.placed[key] = slot.node
            (self.held.add if counted else self.held.discard)(key)
        for key in gang.extra:
            self.placed[key] = slots[0].node
        for key in [*gang.workers, *gang.extra]:
            self.account(key)

    def unbook(self, gang: Gang) -> None:
        if not gang.placed:
            return
        gang.placed = False
        for key in [*gang.workers, *gang.extra]:
            self.placed.pop(key, None)
            self.held.discard(key)
            self.account(key)

    # ------------------------------------------------------------------ reading the copies

    def gang_of(self, pod: Pod) -> tuple[Key, Pod]:
        """The key of the gang `pod` is in, and the pod as its gang sees it: a pod of a
        Kubernetes PodGroup whose policy is `basic` is a pod of its own (no gang)."""
        key = gang_key(pod)
        group = self.groups.get(key) if pod.group else None
        if group is not None and not is_gang(group):
            pod = replace(pod, group=None)
            return gang_key(pod), pod
        return key, pod

    def mine(self, gang: Gang, key: Key) -> tuple[Obj, Pod] | None:
        """The pod `key` of `gang`, unless it is gone (or a new pod of the same name)."""
        found = self.pods.get(key)
        if found is None or gang.uids.get(key, found[1].uid) != found[1].uid:
            return None
        return found


def _kind(resource: str, obj: Obj) -> None:
    """The apiVersion and kind that items of a list lack: an Event names its object by both."""
    if isinstance(obj, dict) and not obj.get("kind"):
        obj["apiVersion"], obj["kind"] = KINDS.get(resource, ("v1", ""))


def queues_from(config: Obj | None) -> dict[str, int]:
    """Guaranteed GPUs per queue from the `toposched-queues` ConfigMap (`queues.yaml`)."""
    import yaml

    if not config:
        return {}
    text = (config.get("data") or {}).get("queues.yaml") or ""
    try:
        data: Any = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise ObjectError(f"queues.yaml is not YAML: {err}") from None
    queues = data.get("queues") if isinstance(data, dict) else None
    if not isinstance(queues, dict):
        raise ObjectError("queues.yaml: expected `queues:` mapping each queue to its share")
    out: dict[str, int] = {}
    for name, entry in queues.items():
        if not isinstance(name, str) or not name:
            raise ObjectError(f"queues.yaml: a queue needs a name, got {name!r}")
        gpus = entry.get("guaranteed_gpus", 0) if isinstance(entry, dict) else None
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
            raise ObjectError(f"queues.yaml: queue {name!r}: guaranteed_gpus must be >= 0")
        out[name] = gpus
    return out
