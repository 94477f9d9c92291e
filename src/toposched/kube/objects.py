"""Kubernetes objects as the core sees them: nodes and pods (their gangs: kube/gangspec.py).

Everything here is pure: it reads the JSON of Kubernetes objects (as the API returns them) and
answers with core types, or with an error that says what is wrong with which object.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from toposched.kube.annotations import (
    GPUS,
    TOPOLOGY,
    AnnotationError,
    NodeGpus,
    decode_gpus,
    decode_topology,
    opted_in,
)
from toposched.topology.cluster import (
    SCHEDULE_LABEL,
    ClusterError,
    Node,
    NodeSelector,
    Requirement,
    Taint,
    Toleration,
)
from toposched.topology.node import NodeTopology
from toposched.topology.resources import Hardware, gpu_type_from_product, parse_quantity

GPU_RESOURCE = "nvidia.com/gpu"
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"  # scheduler-plugins coscheduling
VOLCANO_GROUP = "scheduling.k8s.io/group-name"  # Volcano, set by the Kubeflow operators
QUEUE_LABEL = "toposched.io/queue"
LOCALITY = "toposched.io/locality"  # on the PodGroup or the pod: node, rack, any, node,rack@600
ZONE_LABEL = "topology.kubernetes.io/zone"
# The core's label of a node whose GPU topology toposched knows ("true") or not ("false"), and
# the annotation (on the PodGroup or the pod) of a job that may run on nodes of unknown topology.
TOPOLOGY_KNOWN = "toposched.io/topology-known"
ACCEPT_UNKNOWN = "toposched.io/accept-unknown-topology"
KNOWN_ONLY = NodeSelector.of({TOPOLOGY_KNOWN: "true"})
DEFAULT_RACK_LABEL = "toposched.io/rack"
# The annotation (on the PodGroup or the pod) of a job whose pods save their state when they
# are sent SIGTERM (an eviction does that, then SIGKILL after terminationGracePeriodSeconds)
# and whose controller makes them again: only such work is preempted for a higher priority or
# by least attained service (core/reclaim.py), as on the standalone server.
CHECKPOINT = "toposched.io/checkpoint"
# With CHECKPOINT "true": how often the job checkpoints, in its run time (`30m`, `1800`), on the
# PodGroup or the pod: what a stop of it loses, which the core weighs (core/stoprule.py).
CHECKPOINT_INTERVAL = "toposched.io/checkpoint-interval"
MAX_CHECKPOINT_INTERVAL_S = 30 * 86_400.0  # as the API's checkpoint.interval_s
EVICTION_SIGNAL = "SIGTERM"
DEFAULT_GRACE_S = 30.0  # Kubernetes' default terminationGracePeriodSeconds
# A job's idle rule, on the PodGroup or the pod (`after=30m,below=5,action=stop`; below and
# action optional, as `submit --idle-*`); the scheduler copies it onto each pod it binds, where
# the node agent reads it. The agent writes IDLE_SINCE on a pod whose GPUs have stayed below the
# threshold for the rule's time (the Unix time the idle run began), and removes it once they
# are busy again; the scheduler acts on a gang whose every pod says so.
IDLE = "toposched.io/idle"
IDLE_SINCE = "toposched.io/gpu-idle-since"
# NVIDIA GPU Feature Discovery's node labels: the product name and the memory of each GPU (MiB).
GPU_PRODUCT = "nvidia.com/gpu.product"
GPU_MEMORY = "nvidia.com/gpu.memory"
# The GPU types a job accepts (the catalog's names, comma-separated), on the PodGroup or pod.
GPU_TYPE = "toposched.io/gpu-type"
# What the job trains, by the performance catalog's name, on the PodGroup or pod: what
# `spread_by_model` predicts its step time by (docs/placement.md).
MODEL = "toposched.io/model"
# The core's label holding each node's name: what matchFields on metadata.name reads, and what
# keeps a gang off a node its pods were found not to fit at bind time.
NODE_NAME = "toposched.io/node-name"
# The core's label, set by the driver, of what a node has left of a resource the core does not
# count (ephemeral-storage, hugepages, extended resources): FREE + the resource's name.
FREE = "toposched.io/free-"
# What the core counts itself (GPUs, and CPUs and memory as Hardware), and the pod count, which
# is not checked (see docs/kubernetes.md): every other requested resource is checked by label.
COUNTED = frozenset({"cpu", "memory", GPU_RESOURCE, "pods"})

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class GangKind:
    """A PodGroup custom resource that gangs are read from: where it is served, and the tag
    that keeps its gangs apart from those of another kind with the same name."""

    resource: str  # the watch's name for it (and for its list's resourceVersion)
    group: str
    version: str
    tag: str  # the prefix of its gangs' keys
    title: str  # how messages name it
    # The status.phase that tells a job operator the gang's pods may be made, where its
    # operators wait for one ("" where they wait for nothing).
    queued_phase: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def prefix(self) -> str:
        return f"/apis/{self.api_version}"


# scheduler-plugins coscheduling: pods name their group by label.
SCHEDULER_PLUGINS = GangKind("podgroups", "scheduling.x-k8s.io", "v1alpha1", "podgroup", "PodGroup")
# Volcano's own, made by the Kubeflow training and MPI operators: pods name it by annotation.
# The training operator makes no pod while the phase is empty or Pending (Volcano's scheduler
# turns it to Inqueue when it admits the job).
VOLCANO = GangKind(
    "volcano-podgroups",
    "scheduling.volcano.sh",
    "v1beta1",
    "vcpodgroup",
    "Volcano PodGroup",
    queued_phase="Inqueue",
)
# Kubernetes' own (scheduling.k8s.io/v1beta1, 1.37, behind the GenericWorkload gate): made by
# workload controllers from a Workload's template; pods name theirs in spec.schedulingGroup.
# Its status is a subresource, where PodGroupInitiallyScheduled says how scheduling went.
UPSTREAM = GangKind(
    "k8s-podgroups", "scheduling.k8s.io", "v1beta1", "k8spodgroup", "PodGroup (scheduling.k8s.io)"
)
GANG_KINDS = (SCHEDULER_PLUGINS, VOLCANO, UPSTREAM)


class ObjectError(ValueError):
    """A Kubernetes object toposched cannot use; the message names it and says why."""


def meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def key_of(obj: Obj) -> tuple[str, str]:
    m = meta(obj)
    return (m.get("namespace") or "", m.get("name") or "")


# ---------------------------------------------------------------------- nodes


def node_from(
    obj: Obj, rack_label: str = DEFAULT_RACK_LABEL, gpu_names: Iterable[str] = ()
) -> tuple[Node, NodeGpus, str | None]:
    """The core's node for a Kubernetes Node, from its topology annotation, labels, taints and
    allocatable resources, and what is wrong with its annotation (None if nothing). A node whose
    annotation is missing, unreadable or stale has unknown topology: its allocatable GPUs,
    counted only, for jobs that accept that. ObjectError if it has no GPUs to offer at all.
    Its hardware's CPUs and memory are all it has allocatable: the driver takes off what pods
    the core does not count use. `gpu_names` are the GPU types the product label is read as."""
    m = meta(obj)
    name = m.get("name") or ""
    labels = dict(m.get("labels") or {})
    text = (m.get("annotations") or {}).get(TOPOLOGY)
    problem = None
    gpus: NodeGpus | None = None
    if text is None:
        problem = f"node {name}: no {TOPOLOGY} annotation"
    else:
        try:
            gpus = decode_topology(text, name)
        except AnnotationError as err:
            problem = f"node {name}: {err}"
        else:
            if gpus.stale:
                problem, gpus = f"node {name}: its agent marked the topology stale", None
    core_labels = {k: v for k, v in labels.items() if k not in (SCHEDULE_LABEL, TOPOLOGY_KNOWN)}
    # The device plugin's allocatable count says how many GPUs, not which: the agent's
    # `unhealthy` list is what names failed GPUs (a plugin restart reports 0 for a moment).
    if gpus is None:
        gpus = NodeGpus(unknown_topology(name, allocatable_gpus(obj)), frozenset(), False)
        core_labels[SCHEDULE_LABEL] = "default"
        core_labels[TOPOLOGY_KNOWN] = "false"
    else:
        core_labels[SCHEDULE_LABEL] = "topology" if opted_in(labels) else "default"
        core_labels[TOPOLOGY_KNOWN] = "true"
    core_labels[NODE_NAME] = name
    rack = labels.get(rack_label) or "rack-0"
    zone = labels.get(ZONE_LABEL) or "pod-0"
    try:
        node = Node(
            name,
            gpus.topology,
            rack=rack,
            pod=zone,
            labels=core_labels,
            hardware=hardware_of(obj, gpu_names),
            taints=taints_of(obj),
        )
    except ClusterError as err:
        raise ObjectError(f"node {name}: {err}") from None
    return node, gpus, problem


def hardware_of(obj: Obj, gpu_names: Iterable[str]) -> Hardware:
    """GPU type and memory from GPU Feature Discovery's labels (unknown without them), CPUs and
    memory from `status.allocatable` (not counted where it lists none)."""
    labels = meta(obj).get("labels") or {}
    product = labels.get(GPU_PRODUCT) or ""
    mib = labels.get(GPU_MEMORY) or ""
    have = allocatable(obj)
    return Hardware(
        gpu_type_from_product(product, gpu_names) if product else "",
        int(mib) * 2**20 if mib.isdigit() else 0,
        have.get("cpu"),
        have.get("memory"),
    )


def taints_of(obj: Obj) -> tuple[Taint, ...]:
    """A node's `spec.taints` (ClusterError for one the API server would not have taken)."""
    return tuple(
        Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in (obj.get("spec") or {}).get("taints") or []
    )


def allocatable(obj: Obj) -> dict[str, int]:
    """A node's allocatable resources (its capacity where it reports no allocatable): CPUs in
    millicores, the rest in units (bytes, devices); values that do not parse are left out."""
    status = obj.get("status") or {}
    listed = status.get("allocatable") or status.get("capacity") or {}
    out = {}
    for resource, value in listed.items():
        try:
            out[resource] = quantity(value, milli=resource == "cpu")
        except ValueError:
            continue
    return out


def quantity(value: Any, milli: bool = False) -> int:
    """A Kubernetes quantity (`4`, `500m`, `16Gi`, `1e3`) as kube-scheduler counts it
    (`parse_quantity`); ValueError for anything else (a negative amount too)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    return _quantity_of(str(value).strip(), milli)


@functools.lru_cache(maxsize=4096)
def _quantity_of(text: str, milli: bool) -> int:
    """`quantity` of a text: cached, as a cluster's pods repeat a handful of quantities."""
    return parse_quantity(text, milli)


def allocatable_gpus(obj: Obj) -> int:
    """The GPUs a node's device plugin offers (`status.allocatable`, else `capacity`)."""
    status = obj.get("status") or {}
    for field_name in ("allocatable", "capacity"):
        count = _quantity((status.get(field_name) or {}).get(GPU_RESOURCE))
        if count is not None:
            return count
    return 0


def unknown_topology(name: str, count: int) -> NodeTopology:
    """`count` GPUs whose links nobody has read: each pair taken as the slowest (SYS)."""
    if count < 1:
        raise ObjectError(
            f"node {name}: unknown GPU topology and no allocatable {GPU_RESOURCE} to count"
        )
    codes = [["X" if i == j else "SYS" for j in range(count)] for i in range(count)]
    return NodeTopology.from_codes(codes, name="unknown")


def node_ready(obj: Obj) -> bool:
    """Ready and schedulable."""
    if (obj.get("spec") or {}).get("unschedulable"):
        return False
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return True  # a node that reports no conditions (an emulated one) counts as ready


def _quantity(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(str(value))
    except ValueError:
        return None


# ---------------------------------------------------------------------- pods


@dataclass(frozen=True)
class Pod:
    """A pod toposched schedules, as far as scheduling cares."""

    namespace: str
    name: str
    uid: str
    gpus: int
    group: str | None  # the PodGroup it belongs to, None for a pod of its own
    queue: str
    priority: int
    node: str | None  # bound to
    bound_gpus: tuple[int, ...] | None  # the GPUs toposched gave it (its annotation)
    phase: str
    deleting: bool
    locality: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    accept_unknown: str = "false"  # its ACCEPT_UNKNOWN annotation, checked by gang_spec
    checkpoint: str = "false"  # its CHECKPOINT annotation, checked by gang_spec
    checkpoint_interval: str = ""  # its CHECKPOINT_INTERVAL annotation, checked by gang_spec
    grace_s: float = DEFAULT_GRACE_S  # its terminationGracePeriodSeconds
    group_kind: GangKind = SCHEDULER_PLUGINS  # which kind of PodGroup `group` names
    # What it asks of a node, as kube-scheduler reads it: its effective requests (CPUs in
    # millicores, the rest in units), nodeSelector, the terms of its required node affinity
    # (none: no affinity), tolerations, and its GPU_TYPE annotation (checked by gang_spec).
    requests: Mapping[str, int] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: tuple[tuple[Requirement, ...], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    gpu_type: str = ""
    model: str = ""  # its MODEL annotation
    # Its spec.schedulingGates (Kueue's, say): no scheduler may bind it until they are lifted.
    gates: tuple[str, ...] = ()
    idle: str = ""  # its IDLE annotation, checked by gang_spec
    idle_since: float | None = None  # its IDLE_SINCE annotation: the agent found it idle
    # Its ResourceClaims (kube/claims.py), by the ResourceClaim names once made; `gpus` counts
    # what they ask of toposched's DeviceClass once every one is made (`claims_made`).
    claims: tuple[str, ...] = ()
    claims_made: bool = True

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def done(self) -> bool:
        """Its containers ended, so it holds no GPUs any more. A pod being deleted still runs
        through its grace period: it holds its GPUs until it is gone."""
        return self.phase in ("Succeeded", "Failed")


def pod_from(obj: Obj) -> Pod:
    """The scheduling view of a pod; ObjectError says what is wrong with it."""
    m = meta(obj)
    ns, name = m.get("namespace") or "default", m.get("name") or ""
    spec = obj.get("spec") or {}
    labels = dict(m.get("labels") or {})
    annotations = m.get("annotations") or {}
    gpus = 0
    for container in spec.get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        value = limits.get(GPU_RESOURCE)
        if value is None:
            continue
        count = _quantity(value)
        if count is None or count < 0:
            raise ObjectError(
                f"pod {ns}/{name}: {GPU_RESOURCE} limit {value!r} in container "
                f"{container.get('name')!r} is not a whole number of GPUs"
            )
        gpus += count
    bound = annotations.get(GPUS)
    try:
        bound_gpus = decode_gpus(bound) if bound else None
    except AnnotationError as err:
        raise ObjectError(f"pod {ns}/{name}: {err}") from None
    priority = spec.get("priority") or 0
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ObjectError(f"pod {ns}/{name}: spec.priority {priority!r} is not an integer")
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is None:
        grace = DEFAULT_GRACE_S
    elif isinstance(grace, bool) or not isinstance(grace, int) or grace < 0:
        raise ObjectError(
            f"pod {ns}/{name}: spec.terminationGracePeriodSeconds {grace!r} is not a "
            "non-negative integer"
        )
    # The scheduler-plugins label wins over Volcano's annotation, as it did before Volcano's
    # own PodGroups were read, and both over Kubernetes' own spec.schedulingGroup.
    volcano = not labels.get(GROUP_LABEL) and bool(annotations.get(VOLCANO_GROUP))
    upstream = (spec.get("schedulingGroup") or {}).get("podGroupName") or None
    kind = VOLCANO if volcano else SCHEDULER_PLUGINS
    group = labels.get(GROUP_LABEL) or annotations.get(VOLCANO_GROUP)
    if not group and upstream:
        group, kind = str(upstream), UPSTREAM
    try:
        requests = pod_requests(spec)
        placement = (node_selector_of(spec), affinity_of(spec), tolerations_of(spec))
    except (ValueError, TypeError, AttributeError) as err:
        raise ObjectError(f"pod {ns}/{name}: {err}") from None
    return Pod(
        namespace=ns,
        name=name,
        uid=m.get("uid") or "",
        gpus=gpus,
        group=group,
        queue=labels.get(QUEUE_LABEL) or ns,
        priority=priority,
        node=spec.get("nodeName") or None,
        bound_gpus=bound_gpus,
        phase=(obj.get("status") or {}).get("phase") or "Pending",
        deleting=bool(m.get("deletionTimestamp")),
        gates=tuple(str(g.get("name")) for g in spec.get("schedulingGates") or []),
        locality=annotations.get(LOCALITY),
        labels=labels,
        accept_unknown=annotations.get(ACCEPT_UNKNOWN) or "false",
        checkpoint=annotations.get(CHECKPOINT) or "false",
        checkpoint_interval=annotations.get(CHECKPOINT_INTERVAL) or "",
        grace_s=float(grace),
        group_kind=kind,
        requests=requests,
        node_selector=placement[0],
        affinity=placement[1],
        tolerations=placement[2],
        gpu_type=annotations.get(GPU_TYPE) or "",
        idle=annotations.get(IDLE) or "",
        idle_since=_number(annotations.get(IDLE_SINCE)),
        model=annotations.get(MODEL) or "",
    )


def pod_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """A pod's effective requests, as kube-scheduler computes them: the sum over its
    containers and sidecars (init containers that restart Always), or the most one init
    container needs beside the sidecars started before it, whichever is larger, plus the pod's
    overhead. Requests a container leaves out default to its limits (the API server does that
    on create; a pod read from elsewhere may lack it). Pod-level resources (`spec.resources`,
    beta and on by default since Kubernetes 1.34) replace the containers' sum for the resources
    they may set (CPUs, memory, huge pages); the overhead is added to them as well."""
    total: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    init: dict[str, int] = {}
    for container in spec.get("containers") or []:
        _add(total, container_requests(container))
    for container in spec.get("initContainers") or []:
        asks = container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(total, asks)
            _add(sidecars, asks)
            asks = dict(sidecars)
        else:
            _add(asks, sidecars)
        _most(init, asks)
    _most(total, init)
    pod_level = _requested(spec.get("resources") or {}, "spec.resources")
    for resource, amount in pod_level.items():
        if resource in ("cpu", "memory") or resource.startswith("hugepages-"):
            total[resource] = amount
    _add(total, _amounts(spec.get("overhead") or {}, "overhead"))
    return {k: v for k, v in total.items() if v}


def container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    return _requested(container.get("resources") or {}, f"container {container.get('name')!r}")


def _requested(resources: Mapping[str, Any], where: str) -> dict[str, int]:
    """What `resources` (requests and limits) ask: a request left out defaults to its limit."""
    listed = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return _amounts(listed, where)


def _amounts(listed: Mapping[str, Any], where: str) -> dict[str, int]:
    out = {}
    for resource, value in listed.items():
        try:
            out[resource] = quantity(value, milli=resource == "cpu")
        except ValueError:
            raise ValueError(f"{where}: {resource} {value!r} is not a quantity") from None
    return out


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for resource, amount in more.items():
        into[resource] = into.get(resource, 0) + amount


def _most(into: dict[str, int], other: Mapping[str, int]) -> None:
    for resource, amount in other.items():
        into[resource] = max(into.get(resource, 0), amount)


def node_selector_of(spec: Mapping[str, Any]) -> dict[str, str]:
    selector = spec.get("nodeSelector") or {}
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in selector.items()):
        raise ValueError(f"nodeSelector must map label names to strings, got {selector!r}")
    return dict(selector)


def affinity_of(spec: Mapping[str, Any]) -> tuple[tuple[Requirement, ...], ...]:
    """The terms of a pod's required node affinity (one must hold, every requirement of it);
    `matchFields` on metadata.name reads the core's NODE_NAME label. An empty term matches no
    node, as in Kubernetes: dropped, and a pod whose every term is empty is refused."""
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    listed = required.get("nodeSelectorTerms") or []
    terms = tuple(t for t in (_term(term) for term in listed) if t)
    if listed and not terms:
        raise ValueError("its required node affinity has only empty terms: no node matches it")
    return terms


def _term(term: Mapping[str, Any]) -> tuple[Requirement, ...]:
    out = [_requirement(e, e.get("key")) for e in term.get("matchExpressions") or []]
    for expression in term.get("matchFields") or []:
        if expression.get("key") != "metadata.name":
            raise ValueError(
                f"node affinity matchFields on {expression.get('key')!r}: only metadata.name "
                "is a node field"
            )
        out.append(_requirement(expression, NODE_NAME))
    return tuple(out)


def _requirement(expression: Mapping[str, Any], key: Any) -> Requirement:
    values = tuple(str(v) for v in expression.get("values") or [])
    try:
        return Requirement(str(key or ""), str(expression.get("operator")), values)
    except ClusterError as err:
        raise ValueError(str(err)) from None


def tolerations_of(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    return tuple(
        _toleration(
            str(t.get("key") or ""),
            str(t.get("operator") or "Equal"),
            str(t.get("value") or ""),
            str(t.get("effect") or ""),
        )
        for t in spec.get("tolerations") or []
    )


@functools.lru_cache(maxsize=1024)
def _toleration(key: str, operator: str, value: str, effect: str) -> Toleration:
    """One toleration, made once: every pod carries the same few (not-ready, unreachable)."""
    try:
        return Toleration(key, operator, value, effect)
    except ClusterError as err:
        raise ValueError(str(err)) from None


def _number(text: str | None) -> float | None:
    """A number the agent wrote, or None (absent, or not one: then it is as if absent)."""
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None
