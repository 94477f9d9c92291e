"""The Kubernetes driver: what the API server holds, turned into core events, and the core's
decisions carried out as bindings, evictions, Events and pod conditions.

One loop (`step`) takes what the watches saw, brings its copies of nodes, pods and PodGroups up
to date, then reconciles them with the core: nodes come and go, gangs whose pods all exist are
submitted, bound gangs whose pods have all ended finish, and waiting gangs get the core's reason
on their pods. A gang is bound only whole. Before its pods are bound, the whole plan is written
on its PodGroup (annotation `toposched.io/placement`), so that a scheduler that dies halfway is
followed by one that restores the gang from the plan and binds the rest: no GPU is booked twice
and no gang is left half bound.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from toposched.common.driver import Driver
from toposched.core import (
    Action,
    Event,
    GpuHealth,
    JobCancelled,
    JobFinished,
    JobState,
    JobStopped,
    JobSubmitted,
    NodeAdded,
    NodeChanged,
    NodeCordoned,
    NodeRemoved,
    Placement,
    QueueConfigured,
    Scheduler,
    SchedulerPolicy,
    SchedulingError,
    StartJob,
    StopJob,
    StopKind,
    Tick,
    Transition,
    WorkerFailed,
    WorkerSlot,
)
from toposched.kube.annotations import GPUS, NodeGpus, encode_gpus
from toposched.kube.api import ApiError, KubeApi
from toposched.kube.objects import (
    ACCEPT_UNKNOWN,
    COUNTED,
    FREE,
    GANG_KINDS,
    GPU_RESOURCE,
    GangKind,
    Obj,
    ObjectError,
    Pod,
    allocatable,
    UPSTREAM,
    gang_selector,
    gang_spec,
    is_gang,
    key_of,
    min_member,
    node_from,
    node_ready,
    pod_from,
    pod_requests,
)
from toposched.kube.usage import Amounts, Usage
from toposched.perf.model import DEFAULT_FRAMEWORK, DEFAULT_NETWORK, PerfModel
from toposched.perf.registry import Catalog
from toposched.perf.steptime import mixed_step_time
from toposched.perf.typespeeds import TypeSpeeds
from toposched.topology.cluster import (
    EVERY_NODE,
    Cluster,
    Eligibility,
    Node,
    tier_of,
)
from toposched.topology.node import NodeTopology
from toposched.topology.resources import cpus_text, memory_text

_T = TypeVar("_T")
_R = TypeVar("_R")

log = logging.getLogger("toposched.kube")

PLAN = "toposched.io/placement"  # on a PodGroup: {"job": ..., "pods": {pod: [node, [gpus]]}}
UNKNOWN_USE = (
    f"its allocatable GPUs are counted (unknown topology) for jobs annotated {ACCEPT_UNKNOWN}=true"
)
GANG_RESOURCES = {kind.resource: kind for kind in GANG_KINDS}
OTHERS_PATH = "/api/v1/pods"  # pods other schedulers bound, in every namespace
QUEUES_SELECTOR = "metadata.name=toposched-queues"
REASON_EVERY_S = 10.0  # how often a waiting gang's pods may be told a new reason
BIND_CONNECTIONS = 8  # binds sent at once
# How long a gang whose pods were found not to fit a node at bind time is kept off that node.
REFUSED_S = 60.0
# Answers to a write that say nothing about the object (throttled by API Priority and
# Fairness, a server or load balancer error, no answer at all): the write is tried again.
RETRIED = frozenset({0, 429, 500, 502, 503, 504})
RETRY_WAITS = (0.2, 0.5, 1.0, 2.0, 4.0)  # seconds before each new try, when not told
MOST_WAIT_S = 10.0  # the longest Retry-After honoured
Bind = tuple[str, tuple[str, str], str, dict[str, str]]  # (what, pod, node, annotations)
Key = tuple[str, str]


@dataclass
class Gang:
    """A core job and the pods it stands for."""

    job: str
    key: Key  # (namespace, PodGroup name or the pod's own, tagged: see gang_key)
    workers: list[Key]  # GPU pods, worker i is placement.workers[i]
    extra: list[Key] = field(default_factory=list)  # pods of the gang without GPUs
    group: bool = False
    reason: str = ""  # the last reason written on its pods
    written: float = float("-inf")  # when
    failed: bool = False  # a WorkerFailed was fed
    bound: set[Key] = field(default_factory=set)  # pods bound to their node
    uids: dict[Key, str] = field(default_factory=dict)  # which pod each key was (made again?)
    excluded: frozenset[str] = frozenset()  # nodes its job was kept off (REFUSED_S)
    placed: bool = False  # its pods are booked on the nodes the core gave it
    scheduled: bool = False  # its PodGroup was told it is bound (a Kubernetes PodGroup's)


class LeaseLost(RuntimeError):
    """This replica no longer holds the lease: it must not write anything more."""


class KubeScheduler(Driver):
    """Drives one core with one Kubernetes cluster. `sync()` once, then `step()` in a loop."""

    def __init__(
        self,
        api: KubeApi,
        policy: SchedulerPolicy,
        *,
        scheduler_name: str = "toposched",
        namespace: str | None = None,
        rack_label: str = "toposched.io/rack",
        config_namespace: str = "toposched-system",
        clock: Callable[[], float] = time.time,
        gpu_names: Iterable[str] | None = None,
        perf: PerfModel | None = None,
        framework: str = DEFAULT_FRAMEWORK,
        network: str = DEFAULT_NETWORK,
    ) -> None:
        perf = perf if perf is not None else PerfModel()
        # The catalog's speed of each GPU type: what the choice among a job's types weighs.
        self.type_speed = TypeSpeeds(perf)
        # Each topology's catalog GPU type (the slowest of its nodes'), as nodes join: what
        # the step time a gang is spread by (`spread_by_model`) predicts with.
        self.type_of: dict[NodeTopology, str] = {}
        step = mixed_step_time(
            perf, self.type_speed, self.type_of, framework=framework, network=network
        )
        super().__init__(Scheduler(Cluster(()), policy, step_time=step, type_speed=self.type_speed))
        self.config_namespace = config_namespace
        self.shares: dict[str, int] = {}  # guaranteed GPUs per queue, as the core was told
        self.api = api
        self.name = scheduler_name
        self.namespace = namespace
        self.rack_label = rack_label
        self.clock = clock
        self.nodes: dict[str, Obj] = {}
        self.pods: dict[Key, tuple[Obj, Pod]] = {}
        self.groups: dict[Key, Obj] = {}  # PodGroups of every kind, by their gangs' keys
        self.unqueued: set[Key] = set()  # PodGroups whose operator waits for a queued phase
        # Whether each kind's CRD has a status subresource (where its phase is written).
        self.status_paths: dict[GangKind, bool] = {}
        self.gangs: dict[str, Gang] = {}
        self.by_key: dict[Key, str] = {}
        self.known: dict[str, NodeGpus] = {}  # nodes in the core, with what it was told
        self.cordoned: set[str] = set()  # nodes in the core that take no new work
        self._parsed: dict[str, tuple[str, tuple[Node, NodeGpus] | None]] = {}
        # What pods use of each node: ours (booked where the core put them, or bound) and
        # those of other schedulers; what the core was last told of each node, and its base.
        self.usage = Usage()
        self.placed: dict[Key, str] = {}  # our pods, where the core put their gangs
        self.held: set[Key] = set()  # our pods whose CPUs and memory the core counts
        self.told: dict[str, Node] = {}
        self._cores: dict[str, tuple[Node, Node]] = {}  # node: (as parsed, as the core sees it)
        self._allocatable: dict[str, dict[str, int]] = {}
        self.refused: dict[Key, dict[str, float]] = {}  # gang: nodes it did not fit, when
        names = (
            gpu_names if gpu_names is not None else (g.name for g in Catalog.load().gpus.values())
        )
        self.gpu_names = tuple(names)
        self._topologies: dict[NodeTopology, NodeTopology] = {}
        self.warned: dict[tuple[str, str, str], str] = {}  # the last warning per object
        self.rejected: dict[Key, str] = {}  # pods refused (bad objects), by key
        self.evicting: dict[str, set[Key]] = {}  # pods still to evict, per stopping job
        self._gated: dict[Key, list[Pod]] = {}  # unbound pods with scheduling gates, by gang
        self._told: dict[Key, str] = {}  # the last reason on each Kubernetes PodGroup
        # Whether writes may go out now (a leader checks that its lease still holds).
        self.fence: Callable[[], bool] = lambda: True
        self.retry_waits = RETRY_WAITS
        self.sleep: Callable[[float], None] = time.sleep
        self._serial = 0
        self._gathered: list[Event] = []  # jobs' events for the core's next batch
        self._binds: list[tuple[Gang, list[Bind], float]] = []
        self._pool = ThreadPoolExecutor(BIND_CONNECTIONS, thread_name_prefix="bind")

    # ------------------------------------------------------------------ observing

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

    def sync(self) -> dict[str, str]:
        """List everything, rebuild the core from bound pods (before anything is bound), and
        reconcile. Returns the resourceVersion of each list, where watches start."""
        nodes, nodes_rv = self.api.list("/api/v1/nodes")
        pods, pods_rv = self.api.list(self.pods_path(), fieldSelector=self.pod_selector())
        others, others_rv = self.api.list(OTHERS_PATH, fieldSelector=self.others_selector())
        versions = {"nodes": nodes_rv, "pods": pods_rv, "others": others_rv}
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
            self._account(key)
        self._sync_nodes()
        self._restore_bound()
        self._flush_binds()
        self.reconcile()
        return versions

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

    def _configure(self, config: Obj | None) -> None:
        """Guaranteed shares from the `toposched-queues` ConfigMap; a bad one is refused
        whole (a Warning Event) and the shares stay as they were."""
        try:
            shares = queues_from(config)
        except ObjectError as err:
            if config is not None:
                self._warn(config, "InvalidQueues", str(err))
            return
        now = self.clock()
        for name in sorted(set(self.shares) | set(shares)):
            gpus = shares.get(name, 0)
            if self.shares.get(name, 0) != gpus:
                self.feed(QueueConfigured(now, name, gpus))
        self.shares = shares

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
                self._account(key)
        elif kind == "others":
            self.usage.drop("other")
            for obj in objects:
                self._observe_other("ADDED", obj)

    def _keep_group(self, kind: GangKind, obj: Obj) -> None:
        key = group_key(kind, obj)
        self.groups[key] = obj
        if kind.queued_phase and (obj.get("status") or {}).get("phase") in (None, "", "Pending"):
            self.unqueued.add(key)

    def _observe_pod(self, event_type: str, obj: Obj) -> None:
        key = key_of(obj)
        self._keep_pod(event_type, key, obj)
        self._account(key)

    def _keep_pod(self, event_type: str, key: Key, obj: Obj) -> None:
        if event_type == "DELETED":
            self.pods.pop(key, None)
            self.rejected.pop(key, None)
            self.placed.pop(key, None)
            return
        try:
            pod = pod_from(obj)
        except ObjectError as err:
            self.pods.pop(key, None)
            if self.rejected.get(key) != str(err):
                self.rejected[key] = str(err)
                self._warn(obj, "InvalidPod", str(err))
            return
        self.rejected.pop(key, None)
        self.pods[key] = (obj, pod)

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

    def _account(self, key: Key) -> None:
        """Book what our pod `key` requests on its node: where the core put its gang, else
        where it is bound; nowhere once it has ended or is gone."""
        found = self.pods.get(key)
        node = None
        if found is not None and not found[1].done:
            node = found[1].node or self.placed.get(key)
        requests = found[1].requests if found is not None else {}
        self.usage.put(("ours", key), node, requests, key in self.held)

    # ------------------------------------------------------------------ reconciling

    def step(self) -> None:
        """Reconcile and let time pass in the core (reservations, locality deadlines)."""
        self.reconcile(Tick(self.clock()))

    def reconcile(self, *also: Event) -> None:
        """Bring the core up to what the watches saw. The jobs' events (ended, gone, new) go
        to the core as one batch, with `also`: one scheduling cycle for all of them, not one
        each (on a burst of 10,000 pods, most of the scheduler's time otherwise)."""
        self._sync_nodes()
        self._queue_groups()
        self._gathered = []
        self._sync_bound()
        self._sync_waiting()
        events, self._gathered = [*self._gathered, *also], []
        self.feed_batch(events)
        self._sync_reasons()

    def _queue_groups(self) -> None:
        """Set the queued phase on new PodGroups whose job operator waits for it before it
        makes the pods (Volcano's Inqueue, which its own scheduler would set). Nothing is held
        for them: their gangs are placed once their pods exist, as any other."""
        unqueued, self.unqueued = self.unqueued, set()
        for key in sorted(unqueued):
            group, kind = self.groups.get(key), kind_of(key)
            if group is None or kind is None:
                continue  # deleted meanwhile
            self._fenced()
            path = f"{kind.prefix}/namespaces/{key[0]}/podgroups/{name_of(key)}"
            if self.status_paths.get(kind, False):
                path += "/status"
            try:
                self.api.request(
                    "PATCH",
                    path,
                    body={"status": {"phase": kind.queued_phase}},
                    content_type="application/merge-patch+json",
                )
            except ApiError as err:  # tried again when the PodGroup changes
                why = f"could not set status.phase {kind.queued_phase}: {err}"
                self._warn(group, "PodGroupNotQueued", why)

    def _sync_nodes(self) -> None:
        """Nodes join the core once ready with a usable topology and leave it only when
        deleted. A cordoned, NotReady or stale node keeps its running gangs but takes no new
        work (cordoned in the core); a node rewired while gangs run on it keeps its old
        topology until they end. A node's labels, taints, and what it has left (CPUs and memory
        that pods the core does not count leave, and FREE labels) go to the core as they
        change (NodeChanged)."""
        now = self.clock()
        for name in sorted(set(self.known) - set(self.nodes)):
            del self.known[name]
            self.cordoned.discard(name)
            self.told.pop(name, None)
            self._cores.pop(name, None)
            self.feed(NodeRemoved(now, name))
        for name, obj in sorted(self.nodes.items()):
            parsed = self._parse_node(name, obj)
            old = self.known.get(name)
            if old is None:
                if parsed is None or not node_ready(obj):
                    continue
                self.told[name] = self._core_node(name, parsed[0])
                self.feed(NodeAdded(now, self.told[name]))
                old = self.known[name] = NodeGpus(parsed[1].topology, frozenset(), False)
            elif parsed is not None and parsed[1].topology != old.topology:
                if any(node == name for node, _ in self.view.owners()):
                    self._warn(obj, "TopologyChanged", "applied once the gangs on it end")
                    parsed = None
                else:
                    self.feed(NodeRemoved(now, name))
                    self.told[name] = self._core_node(name, parsed[0])
                    self.feed(NodeAdded(now, self.told[name]))
                    old = self.known[name] = NodeGpus(parsed[1].topology, frozenset(), False)
            usable = parsed is not None and node_ready(obj)
            if usable == (name in self.cordoned):
                self.feed(NodeCordoned(now, name, not usable))
                (self.cordoned.discard if usable else self.cordoned.add)(name)
            if parsed is None:
                continue
            node, gpus = parsed
            for gpu in sorted(gpus.unhealthy ^ old.unhealthy):
                self.feed(GpuHealth(now, name, gpu, gpu not in gpus.unhealthy))
            core = self._core_node(name, node)
            if _differs(self.told.get(name), core):
                self.feed(NodeChanged(now, core))
            self.told[name] = core
            self.known[name] = gpus
        self.usage.dirty.clear()

    def _core_node(self, name: str, node: Node) -> Node:
        """`node` as the core is to see it: its CPUs and memory less what the pods it does not
        count request, and for each other resource it has allocatable, a FREE label of what
        all its pods leave. Kept until the node or the pods on it change."""
        kept = self._cores.get(name)
        if kept is not None and kept[0] is node and name not in self.usage.dirty:
            return kept[1]
        every, uncounted = self.usage.totals(name)
        hardware = replace(
            node.hardware,
            cpus=_less(node.hardware.cpus, uncounted.get("cpu", 0)),
            memory=_less(node.hardware.memory, uncounted.get("memory", 0)),
        )
        labels = dict(node.labels)
        for resource, amount in self._allocatable.get(name, {}).items():
            if resource not in COUNTED:
                labels[FREE + resource] = str(max(amount - every.get(resource, 0), 0))
        core = replace(node, labels=labels, hardware=hardware)
        self._cores[name] = (node, core)
        return core

    def _parse_node(self, name: str, obj: Obj) -> tuple[Node, NodeGpus] | None:
        """The node as the core sees it, or None (with a Warning Event): kept per
        resourceVersion, since a large cluster's annotations cost more than the rest. A node
        of unknown topology is used by jobs that accept it, with an Event that says so."""
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        kept = self._parsed.get(name)
        if kept is not None and kept[0] == version and version:
            return kept[1]
        found: tuple[Node, NodeGpus] | None = None
        self._allocatable[name] = allocatable(obj)
        try:
            node, gpus, problem = node_from(obj, self.rack_label, self.gpu_names)
        except ObjectError as err:
            self._warn(obj, "UnknownTopology", f"{err}; not used")
        else:
            # Equal topologies share one object: placement's tables are kept per topology, and
            # a thousand equal copies would each be compared in full at every lookup.
            topology = self._topologies.setdefault(gpus.topology, gpus.topology)
            found = (replace(node, topology=topology), replace(gpus, topology=topology))
            known = self.type_of.get(topology)
            types = [self.type_speed.of_node(found[0]), *([known] if known else [])]
            self.type_of[topology] = self.type_speed.slowest(None, types)
            if problem is not None:
                self._warn(obj, "UnknownTopology", f"{problem}; {UNKNOWN_USE}")
        self._parsed[name] = (version, found)
        return found

    def _sync_bound(self) -> None:
        """Bound gangs whose pods ended finish; stopping ones whose pods are gone stop."""
        now = self.clock()
        for job, gang in list(self.gangs.items()):
            if not self.view.knows(job):
                self._forget(job)
                continue
            state = self.view.state(job)
            if state is JobState.PENDING:
                self._unplace(gang)  # requeued: it holds nothing until placed again
            pods = [self._mine(gang, k) for k in gang.workers]
            alive = [p for p in pods if p is not None and not p[1].done]
            if state is JobState.STOPPING:
                self._evict(job)
                holding = [self._mine(gang, k) for k in gang.bound]
                if not [p for p in holding if p is not None and not p[1].done]:
                    self.evicting.pop(job, None)
                    self._gathered.append(JobStopped(now, job))
            elif state is JobState.RUNNING:
                # A worker that failed, or was deleted (or made again): the gang stops whole.
                failed = [i for i, p in enumerate(pods) if p is None or p[1].phase == "Failed"]
                if failed and alive and not gang.failed:
                    gang.failed = True
                    why = "its pod failed or was deleted"
                    self._gathered.append(WorkerFailed(now, job, failed[0], why))
                elif not alive:
                    ok = all(p is not None and p[1].phase == "Succeeded" for p in pods)
                    why = "all pods succeeded" if ok else "its pods ended or were deleted"
                    self._gathered.append(JobFinished(now, job, ok, why))
            if state.terminal:
                self._forget(job)

    def _sync_waiting(self) -> None:
        """Submit gangs whose pods all exist and may be scheduled (no scheduling gate left);
        cancel waiting gangs whose pods went away."""
        now = self.clock()
        waiting: dict[Key, list[Pod]] = {}
        self._gated = {}
        for _, found in self.pods.values():
            if found.node is None and not found.done and not found.deleting:
                key, pod = self._gang_of(found)
                into = self._gated if pod.gates else waiting
                into.setdefault(key, []).append(pod)
        for job, gang in list(self.gangs.items()):
            if self.view.state(job) is not JobState.PENDING:
                continue
            present = {p.key for p in waiting.get(gang.key, []) if gang.uids.get(p.key) == p.uid}
            # A gang kept off nodes where it did not fit is submitted again once that lapses.
            if not set(gang.workers) <= present or gang.excluded != self._excluded(gang.key, now):
                self._gathered.append(JobCancelled(now, job))
                self._forget(job)
        for key in set(self.refused) - set(waiting):
            del self.refused[key]  # bound, or its pods are gone
        for key, pods in sorted(waiting.items(), key=lambda kv: _created(self, kv[1])):
            if key not in self.by_key:
                self._submit(key, sorted(pods, key=lambda p: p.name))

    def _submit(self, key: Key, pods: list[Pod]) -> None:
        now = self.clock()
        gpu_pods = [p for p in pods if p.gpus]
        extra = [p.key for p in pods if not p.gpus]
        group = pods[0].group
        obj = self.groups.get(key)
        if group and obj is None:
            what = f"{pods[0].group_kind.title} {key[0]}/{group}"
            self._warn_pods(pods, "WaitingForPodGroup", f"no {what} yet")
            return
        need = 1
        if obj is not None:
            try:
                need = min_member(obj)
            except ObjectError as err:
                self._warn(obj, "InvalidPodGroup", str(err))
                self._warn_pods(pods, "InvalidPodGroup", str(err))
                return
        # Every member counts toward minMember, as coscheduling counts them: an MPI job's
        # launcher (no GPU) and its workers are one gang, bound together.
        if len(pods) < need:
            gated = self._gated.get(key, [])
            why = f"gang {shown(key)}: {len(pods)} of {need} pods"
            if gated:
                gates = sorted({g for p in gated for g in p.gates})
                why += f" ({len(gated)} more gated by {', '.join(gates)})"
            self._warn_pods(pods, "WaitingForPods", why)
            return
        if not gpu_pods:
            self._bind_without_gpus(pods)
            return
        self._serial += 1
        job = f"{shown(key)}#{self._serial}"
        workers = gpu_pods  # all of them: a pod beyond minMember would never bind later
        excluded = self._excluded(key, now)
        others = [p for p in pods if not p.gpus]
        try:
            spec = gang_spec(job, workers, len(workers), obj, extra=others, excluded=excluded)
        except ObjectError as err:
            self._warn_pods(pods, "InvalidGang", str(err))
            return
        never = self.core.never_fits(spec)
        if never:
            self._warn_pods(pods, "Unschedulable", never)
            if obj is not None and kind_of(key) is UPSTREAM:
                self._tell_group(key, never)
            return
        gang = Gang(job, key, [p.key for p in workers], extra, group=obj is not None)
        gang.excluded = excluded
        gang.uids = {p.key: p.uid for p in pods}
        self.gangs[job] = gang
        self.by_key[key] = job
        self._gathered.append(JobSubmitted(now, spec))

    def _excluded(self, key: Key, now: float) -> frozenset[str]:
        """The nodes gang `key` is kept off: those its pods did not fit at bind time, lately."""
        refused = self.refused.get(key)
        if refused is None:
            return frozenset()
        for node in [n for n, when in refused.items() if now - when >= REFUSED_S]:
            del refused[node]
        if not refused:
            del self.refused[key]
        return frozenset(refused)

    def _sync_reasons(self) -> None:
        """Each waiting gang's pods say why they wait: a PodScheduled=False condition and an
        Event, written when the core's reason changes."""
        now = self.clock()
        # A busy queue changes every reason often: each gang's is written at most this often.
        due = [
            job
            for job, gang in self.gangs.items()
            if now - gang.written >= REASON_EVERY_S and self.view.state(job) is JobState.PENDING
        ]
        writes: list[tuple[Key, Obj | None, str]] = []
        for job, reason in self.view.reasons(due).items():
            gang = self.gangs[job]
            if reason == gang.reason:
                continue
            gang.reason, gang.written = reason, now
            if gang.group and kind_of(gang.key) is UPSTREAM and self._told.get(gang.key) != reason:
                self._told[gang.key] = reason
                writes.append((gang.key, None, reason))  # its PodGroup's condition
            for key in gang.workers:
                found = self.pods.get(key)
                if found is not None:
                    writes.append((key, found[0], reason))
        if not writes:
            return
        stamp = _stamp(now)

        def say(write: tuple[Key, Obj | None, str]) -> None:
            key, obj, reason = write
            try:
                if obj is None:
                    self._group_condition(key, False, "Unschedulable", reason, stamp)
                    return
                self.api.set_scheduled_condition(key[0], key[1], "Unschedulable", reason, stamp)
                self.api.event(obj, "FailedScheduling", reason, "Warning", stamp)
            except ApiError as err:
                log.info("%s/%s: could not say why it waits: %s", *key, err)

        # On the binds' connections, several at once: on a burst, thousands of pods wait, and
        # two round trips each, one after the other, held up the loop for seconds.
        self._on_connections(say, writes)

    # ------------------------------------------------------------------ carrying out

    def on_transition(
        self, t: Transition, start: StartJob | None, stop: StopJob | None, now: float
    ) -> None:
        gang = self.gangs.get(t.job)
        if gang is None:
            return
        if start is not None:
            self._bind(gang, start.placement, now)
        elif stop is not None:
            self.evicting[t.job] = set(gang.workers) | set(gang.extra)
            self._evict(t.job)

    def _bind(self, gang: Gang, placement: Placement, now: float) -> None:
        """Bind the whole gang: write its plan on the PodGroup first, then each pod. A gang
        whose pods would not fit where the core put them (resources the core does not count,
        or its pods without GPUs, next to what the core placed in the same cycle) is not bound:
        it is cancelled and submitted again, kept off that node for REFUSED_S."""
        self._unplace(gang)
        misfit = self._misfit(gang, placement)
        if misfit is not None:
            node, why = misfit
            self.refused.setdefault(gang.key, {})[node] = now
            message = f"{why}; its gang is kept off {node} for {REFUSED_S:.0f} s"
            for key in [*gang.workers, *gang.extra]:
                found = self.pods.get(key)
                if found is not None:
                    self._warn(found[0], "FailedScheduling", message)
            self.post(JobCancelled(now, gang.job))
            return
        self._place(gang, placement.workers)
        plan = {
            key[1]: [slot.node, list(slot.gpus)]
            for key, slot in zip(gang.workers, placement.workers, strict=True)
        }
        kind = kind_of(gang.key)
        if gang.group and kind is not None:
            body = {
                "metadata": {"annotations": {PLAN: json.dumps({"job": gang.job, "pods": plan})}}
            }
            path = f"{kind.prefix}/namespaces/{gang.key[0]}/podgroups/{name_of(gang.key)}"
            try:
                self._write(
                    lambda: self.api.request(
                        "PATCH", path, body=body, content_type="application/merge-patch+json"
                    )
                )
            except ApiError as err:
                self.post(WorkerFailed(now, gang.job, 0, f"could not record its plan: {err}"))
                return
        self._bind_planned(gang, placement.workers, now)

    def _misfit(self, gang: Gang, placement: Placement) -> tuple[str, str] | None:
        """(node, why) where the gang's pods, with what is on that node already, would ask
        more of a resource than it has allocatable, as kube-scheduler's NodeResourcesFit
        checks; None if they fit. GPUs are the core's, and CPUs or memory are not checked on a
        node that lists none allocatable."""
        asks: dict[str, dict[str, int]] = {}
        pairs = [*zip(gang.workers, placement.workers, strict=True)]
        pairs += [(key, placement.workers[0]) for key in gang.extra]
        for key, slot in pairs:
            found = self.pods.get(key)
            for resource, amount in (found[1].requests if found else {}).items():
                into = asks.setdefault(slot.node, {})
                into[resource] = into.get(resource, 0) + amount
        for node, wanted in sorted(asks.items()):
            why = self._short(node, wanted)
            if why:
                return node, why
        return None

    def _short(self, node: str, wanted: Amounts) -> str:
        """What `node` lacks for pods asking `wanted` beside those on it, or ""."""
        have = self._allocatable.get(node, {})
        used = self.usage.totals(node)[0]
        for resource, amount in sorted(wanted.items()):
            if resource in (GPU_RESOURCE, "pods") or (resource in COUNTED and resource not in have):
                continue
            free = have.get(resource, 0) - used.get(resource, 0)
            if amount > free:
                asked, left = _shown(resource, amount), _shown(resource, max(free, 0))
                return f"Insufficient {resource} on {node}: its pods there ask {asked}, {left} free"
        return ""

    def _place(self, gang: Gang, slots: Iterable[WorkerSlot], counted: bool = True) -> None:
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
            self._account(key)

    def _unplace(self, gang: Gang) -> None:
        if not gang.placed:
            return
        gang.placed = False
        for key in [*gang.workers, *gang.extra]:
            self.placed.pop(key, None)
            self.held.discard(key)
            self._account(key)

    def _bind_planned(self, gang: Gang, slots: Iterable[WorkerSlot], now: float) -> None:
        """Queue the binds of a gang's pods not bound yet; `_flush_binds` sends them."""
        slots = list(slots)
        binds: list[Bind] = []
        for i, (key, slot) in enumerate(zip(gang.workers, slots, strict=True)):
            found = self.pods.get(key)
            if found is not None and found[1].node is not None:
                gang.bound.add(key)
                continue  # bound before a restart, by the plan
            binds.append(
                (f"pod {key[1]} (worker {i})", key, slot.node, {GPUS: encode_gpus(slot.gpus)})
            )
        binds.extend((f"pod {key[1]}", key, slots[0].node, {}) for key in gang.extra)
        self._binds.append((gang, binds, now))

    def carry_out(self, actions: Iterable[Action], now: float) -> None:
        super().carry_out(actions, now)
        self._flush_binds()

    def _flush_binds(self) -> None:
        """Send every queued bind at once, on several connections (each costs a round trip to
        the API server), then stop whole any gang one of whose binds failed: pods cannot be
        unbound, so its bound pods are evicted and the pods its operator makes again wait as a
        new gang."""
        queued, self._binds = self._binds, []
        calls = [(gang, bind) for gang, binds, _ in queued for bind in binds]
        if not calls:
            return
        answers = self._on_connections(lambda c: self._bind_one(c[0], *c[1][1:]), calls)
        failed: dict[str, list[str]] = {}
        for (gang, (what, *_)), why in zip(calls, answers, strict=True):
            if why:
                failed.setdefault(gang.job, []).append(f"{what}: {why}")
        for gang, _, now in queued:
            if gang.job in failed:
                why = "bind failed: " + "; ".join(failed[gang.job])
                self.post(WorkerFailed(now, gang.job, 0, why))
            elif gang.group and kind_of(gang.key) is UPSTREAM and not gang.scheduled:
                gang.scheduled = True
                try:
                    self._group_condition(gang.key, True, "Scheduled", "", _stamp(now))
                except ApiError as err:
                    log.info("%s/%s: could not say it is bound: %s", *gang.key, err)

    def _on_connections(self, call: Callable[[_T], _R], items: list[_T]) -> list[_R]:
        """`call` on each item, at most BIND_CONNECTIONS at once on the pool's threads; the
        answers in order. As the pool's map, but one task per thread rather than one per item:
        each task takes the next item until none is left, so that a burst of thousands of binds
        costs a handful of futures, not one each (and as many wake-ups of this thread). If a
        call raises, no new one starts, and the first item's error in order is raised once the
        calls under way have ended."""
        answers: list[Any] = [None] * len(items)
        errors: dict[int, BaseException] = {}
        lock = threading.Lock()
        following = iter(range(len(items)))

        def work() -> None:
            while True:
                with lock:
                    i = None if errors else next(following, None)
                if i is None:
                    return
                try:
                    answers[i] = call(items[i])
                except BaseException as err:  # raised in the caller's thread, below
                    with lock:
                        errors[i] = err
                    return

        tasks = [self._pool.submit(work) for _ in range(min(BIND_CONNECTIONS, len(items)))]
        for task in tasks:
            task.result()
        if errors:
            raise errors[min(errors)]
        return answers

    def _write(self, call: Callable[[], object]) -> None:
        """Make a write (`call`) while the lease holds, tried again after an answer that says
        nothing about the object (RETRIED: 429 from API Priority and Fairness, a 5xx, no
        answer at all), after the wait the server asks for or a growing one (`retry_waits`).
        The last ApiError is raised."""
        waits = iter(self.retry_waits)
        while True:
            self._fenced()
            try:
                call()
                return
            except ApiError as err:
                wait = next(waits, None) if err.status in RETRIED else None
                if wait is None:
                    raise
                log.info("%s; again in %.1f s", err, _wait(err, wait))
                self.sleep(_wait(err, wait))

    def _bind_one(self, gang: Gang, key: Key, node: str, annotations: dict[str, str]) -> str:
        """Bind one pod of `gang` (`_write`: tried again where that helps); returns why it
        failed, or "" once it is bound as asked. A 409 may be our own bind, carried out though
        its answer was lost (or sent by a predecessor that died with it in flight): the pod is
        read back, and counts as bound if it is where the plan put it."""
        uid = gang.uids.get(key, "")
        try:
            self._write(lambda: self.api.bind(key[0], key[1], node, annotations, uid=uid))
        except ApiError as err:
            if err.status == 409 and self._bound_as(key, node, annotations):
                gang.bound.add(key)
                return ""
            if err.status == 0:  # no answer: the bind may yet land, so it counts as bound
                gang.bound.add(key)
            return str(err)
        gang.bound.add(key)
        return ""

    def _tell_group(self, key: Key, reason: str) -> None:
        """A Kubernetes PodGroup's condition says why its gang cannot be placed (once per
        reason)."""
        if self._told.get(key) == reason:
            return
        self._told[key] = reason
        try:
            self._group_condition(key, False, "Unschedulable", reason, _stamp(self.clock()))
        except ApiError as err:
            log.info("%s/%s: could not say why it waits: %s", *key, err)

    def _group_condition(
        self, key: Key, scheduled: bool, reason: str, message: str, stamp: str
    ) -> None:
        """A Kubernetes PodGroup's PodGroupInitiallyScheduled condition, as kube-scheduler
        writes it: True once its gang is bound, False (Unschedulable) with why it waits."""
        kind = kind_of(key)
        assert kind is not None
        condition = {
            "type": "PodGroupInitiallyScheduled",
            "status": "True" if scheduled else "False",
            "reason": reason,
            "message": message[:32768],
            "lastTransitionTime": stamp,
        }
        self._fenced()
        self.api.request(
            "PATCH",
            f"{kind.prefix}/namespaces/{key[0]}/podgroups/{name_of(key)}/status",
            body={"status": {"conditions": [condition]}},
            content_type="application/strategic-merge-patch+json",
        )

    def _bound_as(self, key: Key, node: str, annotations: dict[str, str]) -> bool:
        try:
            obj = self.api.request("GET", f"/api/v1/namespaces/{key[0]}/pods/{key[1]}")
        except ApiError:
            return False
        have = (obj.get("metadata") or {}).get("annotations") or {}
        return bool((obj.get("spec") or {}).get("nodeName") == node) and all(
            have.get(k) == v for k, v in annotations.items()
        )

    def _fenced(self) -> None:
        """Writes go out only while this replica may make them (it holds the lease)."""
        if not self.fence():
            raise LeaseLost("the lease ran out: another replica may be scheduling")

    def _evict(self, job: str) -> None:
        """Evict the job's bound pods (those this scheduler bound, or seen bound)."""
        left = self.evicting.get(job)
        gang = self.gangs.get(job)
        if not left or gang is None:
            return
        for key in sorted(left):
            found = self._mine(gang, key)
            bound = key in gang.bound or (found is not None and found[1].node is not None)
            if found is None or found[1].done or not bound:
                left.discard(key)
                continue
            self._fenced()
            try:
                self.api.evict(key[0], key[1])
                left.discard(key)
            except ApiError as err:
                if err.status == 404:
                    left.discard(key)
                elif err.status == 429:
                    self._warn(found[0], "EvictionBlocked", f"a PodDisruptionBudget: {err.message}")
                else:
                    log.warning("evicting %s/%s: %s", *key, err)

    def _bind_without_gpus(self, pods: list[Pod]) -> None:
        """A pod without GPUs, alone: of the nodes that take new work and that it accepts, the
        one with the fewest of our pods."""
        load: dict[str, int] = {n: 0 for n in self.known if n not in self.cordoned}
        for _, p in self.pods.values():
            if p.node in load and not p.done:
                load[p.node] += 1
        if not load:
            self._warn_pods(pods, "NoNodes", "no node is ready for toposched")
            return
        for pod in pods:
            try:
                selector = gang_selector(f"pod {pod.namespace}/{pod.name}", [pod], EVERY_NODE)
            except ObjectError as err:
                self._warn_pods([pod], "InvalidPod", str(err))
                continue
            where = Eligibility(selector, tolerations=pod.tolerations)
            fits = [n for n in load if self._accepts(pod, where, n)]
            if not fits:
                why = "no node that takes new work has room for it, its labels and tolerations"
                self._warn_pods([pod], "FailedScheduling", why)
                continue
            node = min(fits, key=lambda n: (load[n], n))
            try:
                self.api.bind(pod.namespace, pod.name, node, {})
                load[node] += 1
                self.placed[pod.key] = node  # until it is seen bound: others may not fit now
                self._account(pod.key)
            except ApiError as err:
                log.info("binding %s/%s: %s", pod.namespace, pod.name, err)

    def _accepts(self, pod: Pod, where: Eligibility, node: str) -> bool:
        """Whether `pod` (alone), which may use the nodes `where` admits, may go on `node`: as
        kube-scheduler filters."""
        core = self.told.get(node)
        return (
            core is not None
            and where.admits(core, core.labels)
            and not self._short(node, pod.requests)
        )

    # ------------------------------------------------------------------ restoring

    def _restore_bound(self) -> None:
        """Give the core back every gang that holds GPUs: bound pods (their annotation), and the
        rest of a gang whose plan was written before its scheduler died."""
        now = self.clock()
        bound: dict[Key, list[Pod]] = {}
        for _, found in self.pods.values():
            if found.node is not None and found.bound_gpus is not None and not found.done:
                key, pod = self._gang_of(found)
                bound.setdefault(key, []).append(pod)
        for key, pods in sorted(bound.items()):
            self._restore_gang(key, pods, now)
        # Workers taken as the core's to count (sync) whose gang was not given back.
        kept = {k for gang in self.gangs.values() if gang.placed for k in gang.workers}
        for key in self.held - kept:
            self.held.discard(key)
            self._account(key)

    def _restore_gang(self, key: Key, pods: list[Pod], now: float) -> None:
        """One gang: from its plan (binding the rest), else from its bound pods. A gang with
        fewer live pods than its PodGroup asks is given back as stopping, and its pods are
        evicted: a smaller gang is never kept running."""
        planned = self._plan_of(key, pods)
        workers = planned if planned is not None else sorted(pods, key=lambda p: p.name)
        group = self.groups.get(key)
        need = len(workers)
        if planned is None and group is not None:
            with contextlib.suppress(ObjectError):  # a bad minMember: its own Event says so
                need = min_member(group)
        broken = len(workers) < need
        self._serial += 1
        job = f"{shown(key)}#{self._serial}"
        try:
            slots = [
                WorkerSlot(p.node, p.bound_gpus or ())
                if p.node
                else WorkerSlot(*self._planned_slot(key, p.name))
                for p in workers
            ]
            placement = Placement(tuple(slots), None, tier_of(self._node(s.node) for s in slots))
            counted = self._give_back(key, job, workers, group, placement, broken, now)
        except (ObjectError, SchedulingError, KeyError, ValueError, TypeError) as err:
            log.warning("gang %s/%s cannot be restored (%s): its pods are evicted", *key, err)
            for p in pods:
                self._try_evict(p)
            return
        gang = Gang(job, key, [p.key for p in workers], group=group is not None)
        gang.bound = {p.key for p in workers if p.node is not None}
        gang.uids = {p.key: p.uid for p in workers}
        self.gangs[job], self.by_key[key] = gang, job
        self._place(gang, slots, counted)
        if broken:
            self.evicting[job] = set(gang.bound)
        elif planned is not None:
            self._bind_planned(gang, slots, now)

    def _give_back(
        self,
        key: Key,
        job: str,
        workers: list[Pod],
        group: Obj | None,
        placement: Placement,
        broken: bool,
        now: float,
    ) -> bool:
        """Restore one gang's job in the core; whether the core counts its CPUs and memory.
        Kubernetes ignores what a running pod asks of its node (IgnoredDuringExecution): a gang
        its nodes no longer suit (a new taint or label, less room) is given back as it runs,
        asking nothing of them, and its pods' requests are then taken off its nodes instead."""
        kind = StopKind.FAILURE if broken else None
        spec = gang_spec(job, workers, len(workers), group)
        try:
            self.restore(now, spec, now, placement, 0, kind)
        except SchedulingError as err:
            log.info("gang %s/%s given back asking nothing of its nodes: %s", *key, err)
            spec = gang_spec(job, workers, len(workers), group, filters=False)
            self.restore(now, spec, now, placement, 0, kind)
            return False
        return True

    def _plan_of(self, key: Key, bound: list[Pod]) -> list[Pod] | None:
        """The workers of the plan on the gang's PodGroup, if it names these bound pods."""
        group = self.groups.get(key)
        text = ((group or {}).get("metadata") or {}).get("annotations", {}).get(PLAN)
        if not text:
            return None
        try:
            names = list(json.loads(text)["pods"])
        except (ValueError, KeyError, TypeError):
            return None
        pods = [self.pods.get((key[0], n)) for n in names]
        if any(p is None or p[1].done for p in pods) or not {b.name for b in bound} <= set(names):
            return None
        return [p[1] for p in pods if p is not None]

    def _planned_slot(self, key: Key, pod: str) -> tuple[str, tuple[int, ...]]:
        group = self.groups[key]
        node, gpus = json.loads(group["metadata"]["annotations"][PLAN])["pods"][pod]
        return str(node), tuple(int(g) for g in gpus)

    def _node(self, name: str) -> Node:
        kept = self._parsed.get(name)
        if name not in self.known or kept is None or kept[1] is None:
            raise KeyError(f"node {name} is not ready or has no usable topology")
        return kept[1][0]

    # ------------------------------------------------------------------ small helpers

    def _gang_of(self, pod: Pod) -> tuple[Key, Pod]:
        """The key of the gang `pod` is in, and the pod as its gang sees it: a pod of a
        Kubernetes PodGroup whose policy is `basic` is a pod of its own (no gang)."""
        key = gang_key(pod)
        group = self.groups.get(key) if pod.group else None
        if group is not None and not is_gang(group):
            pod = replace(pod, group=None)
            return gang_key(pod), pod
        return key, pod

    def _mine(self, gang: Gang, key: Key) -> tuple[Obj, Pod] | None:
        """The pod `key` of `gang`, unless it is gone (or a new pod of the same name)."""
        found = self.pods.get(key)
        if found is None or gang.uids.get(key, found[1].uid) != found[1].uid:
            return None
        return found

    def _forget(self, job: str) -> None:
        gang = self.gangs.pop(job, None)
        self.evicting.pop(job, None)
        if gang is not None:
            self._unplace(gang)
        if gang is not None and self.by_key.get(gang.key) == job:
            del self.by_key[gang.key]

    def _try_evict(self, pod: Pod) -> None:
        try:
            self.api.evict(pod.namespace, pod.name)
        except ApiError as err:
            log.warning("evicting %s/%s: %s", pod.namespace, pod.name, err)

    def _warn_pods(self, pods: list[Pod], reason: str, message: str) -> None:
        for pod in pods:
            found = self.pods.get(pod.key)
            if found is not None:
                self._warn(found[0], reason, message)

    def _warn(self, obj: Obj, reason: str, message: str) -> None:
        """A Warning Event on `obj`, once per distinct message."""
        ns, name = key_of(obj)
        # apiVersion too: PodGroups of two kinds may share a name.
        key = (f"{obj.get('apiVersion', 'v1')}/{obj.get('kind', 'Pod')}", ns, name)
        if self.warned.get(key) == message:
            return
        self.warned[key] = message
        log.info("%s %s/%s: %s", reason, *key_of(obj), message)
        try:
            self.api.event(obj, reason, message, "Warning", _stamp(self.clock()))
        except ApiError as err:
            log.info("could not post an Event: %s", err)


def gang_key(pod: Pod) -> Key:
    """A gang's key: its PodGroup's, tagged with the PodGroup's kind, or the pod's own (none
    of them ever meet, whatever names)."""
    if pod.group:
        return (pod.namespace, f"{pod.group_kind.tag}/{pod.group}")
    return (pod.namespace, f"pod/{pod.name}")


def group_key(kind: GangKind, group: Obj) -> Key:
    """The key of the gang a PodGroup of `kind` stands for (the key its pods' gang_key is)."""
    ns, name = key_of(group)
    return (ns, f"{kind.tag}/{name}")


def kind_of(key: Key) -> GangKind | None:
    """The kind of PodGroup a gang's key names, None for a pod of its own."""
    tag = key[1].split("/", 1)[0]
    return next((kind for kind in GANG_KINDS if kind.tag == tag), None)


def name_of(key: Key) -> str:
    return key[1].split("/", 1)[1]


def shown(key: Key) -> str:
    """`namespace/name` of a gang, as its jobs are named."""
    return f"{key[0]}/{name_of(key)}"


KINDS = {
    "nodes": ("v1", "Node"),
    "pods": ("v1", "Pod"),
    "others": ("v1", "Pod"),
    "configmaps": ("v1", "ConfigMap"),
    **{kind.resource: (kind.api_version, "PodGroup") for kind in GANG_KINDS},
}


def _kind(resource: str, obj: Obj) -> None:
    """The apiVersion and kind that items of a list lack: an Event names its object by both."""
    if isinstance(obj, dict) and not obj.get("kind"):
        obj["apiVersion"], obj["kind"] = KINDS.get(resource, ("v1", ""))


def _created(s: KubeScheduler, pods: list[Pod]) -> tuple[str, str]:
    """Gangs in the order their first pod was created (then by name)."""
    stamps = [
        str(((s.pods[p.key][0].get("metadata") or {}).get("creationTimestamp")) or "") for p in pods
    ]
    return (min(stamps), pods[0].name)


def _wait(err: ApiError, default: float) -> float:
    """How long to wait before trying again: what the server asked (at most MOST_WAIT_S),
    else `default`."""
    if err.retry_after is not None:
        return min(err.retry_after, MOST_WAIT_S)
    return default


def _shown(resource: str, amount: int) -> str:
    """An amount as Kubernetes writes it: `1500m` CPUs, `30Gi` of bytes, a count."""
    if resource == "cpu":
        return cpus_text(amount)
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        return memory_text(amount)
    return str(amount)


def _less(amount: int | None, used: int) -> int | None:
    """What is left of `amount` (None: not counted) once `used` is taken."""
    return None if amount is None else max(amount - used, 0)


def _differs(told: Node | None, node: Node) -> bool:
    """Whether the core must be told of `node` again (it was told of `told`)."""
    if told is None or told is node:
        return False
    return (told.labels, told.hardware, told.taints) != (
        node.labels,
        node.hardware,
        node.taints,
    )


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


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


__all__ = ["Gang", "KubeScheduler", "queues_from"]
