"""Kubernetes objects as the core sees them: nodes, pods, and the gangs pods form.

Everything here is pure: it reads the JSON of Kubernetes objects (as the API returns them) and
answers with core types, or with an error that says what is wrong with which object.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toposched.common.durations import DurationError, parse_duration
from toposched.core import Checkpoint, IdleAction, IdleRule, JobError, JobSpec, LocalityRule
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
    EVERY_NODE,
    SCHEDULE_LABEL,
    ClusterError,
    Node,
    NodeSelector,
    Requirement,
    Taint,
    Toleration,
)
from toposched.topology.node import NodeTopology
from toposched.topology.resources import Hardware, gpu_type_from_product, parse_quantity, type_key

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


# ---------------------------------------------------------------------- gangs


def min_member(group: Obj) -> int:
    """A PodGroup's least number of pods: spec.minMember, or a Kubernetes PodGroup's
    spec.schedulingPolicy.gang.minCount (ObjectError if it is not a positive integer, or the
    group is no gang)."""
    spec = group.get("spec") or {}
    field_name, value = "spec.minMember", spec.get("minMember")
    if str(group.get("apiVersion") or "") == UPSTREAM.api_version:
        gang = (spec.get("schedulingPolicy") or {}).get("gang")
        field_name = "spec.schedulingPolicy.gang.minCount"
        value = gang.get("minCount") if isinstance(gang, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        ns, name = key_of(group)
        api = f" ({group['apiVersion']})" if group.get("apiVersion") else ""
        raise ObjectError(
            f"podgroup {ns}/{name}{api}: {field_name} {value!r} is not a positive integer"
        )
    return value


def is_gang(group: Obj) -> bool:
    """Whether the PodGroup binds its pods together: every kind but a Kubernetes PodGroup
    whose scheduling policy is `basic` (its pods are scheduled one by one)."""
    if str(group.get("apiVersion") or "") != UPSTREAM.api_version:
        return True
    policy = (group.get("spec") or {}).get("schedulingPolicy") or {}
    return not (isinstance(policy, Mapping) and "basic" in policy and "gang" not in policy)


def gang_spec(
    job: str,
    pods: list[Pod],
    workers: int,
    group: Obj | None = None,
    *,
    extra: Sequence[Pod] = (),
    excluded: Iterable[str] = (),
    filters: bool = True,
) -> JobSpec:
    """The core's job for a gang of pods (or one pod): `workers` pods of the same GPU count,
    the queue and priority of its pods, the locality and model of its PodGroup (else of its
    first pod; default: any locality, no model).

    Every pod of the gang, `extra` (those without GPUs, bound beside its first worker) too,
    must find on its node what it asks: the gang takes the strictest of its pods' nodeSelectors,
    required node affinities and tolerations (what all of them accept), the most CPUs and memory
    one worker requests, and for each resource the core does not count, the most one pod
    requests (see `gang_selector`). `excluded` nodes are kept off. Without `filters` (a running
    gang given back after a restart, whose placement its pods no longer accept: Kubernetes
    ignores that during execution) it asks nothing of its nodes."""
    first = pods[0]
    counts = sorted({p.gpus for p in pods if p.gpus})
    if len(counts) > 1:
        raise ObjectError(
            f"{job}: a gang's pods must ask the same number of GPUs, these ask "
            f"{', '.join(map(str, counts))}"
        )
    queues = sorted({p.queue for p in pods})
    if len(queues) > 1:
        raise ObjectError(f"{job}: a gang's pods are in one queue, these in {', '.join(queues)}")
    annotations = (meta(group).get("annotations") or {}) if group else {}
    text = annotations.get(LOCALITY) or first.locality or "any"
    accept = annotations.get(ACCEPT_UNKNOWN) or first.accept_unknown
    if accept not in ("true", "false"):
        raise ObjectError(f'{job}: {ACCEPT_UNKNOWN} must be "true" or "false", not {accept!r}')
    saves = annotations.get(CHECKPOINT) or first.checkpoint
    if saves not in ("true", "false"):
        raise ObjectError(f'{job}: {CHECKPOINT} must be "true" or "false", not {saves!r}')
    interval = checkpoint_interval(
        job, annotations.get(CHECKPOINT_INTERVAL) or first.checkpoint_interval, saves == "true"
    )
    # The shortest grace of the gang: an eviction gives each pod its own.
    checkpoint = (
        Checkpoint(EVICTION_SIGNAL, min(p.grace_s for p in pods), interval)
        if saves == "true"
        else None
    )
    idle = parse_idle(job, annotations.get(IDLE) or first.idle)
    base = EVERY_NODE if accept == "true" else KNOWN_ONLY
    everyone = [*pods, *extra]
    try:
        asks: dict[str, Any] = {"selector": base}
        if filters:
            asks = {
                "selector": gang_selector(job, everyone, base, excluded),
                "tolerations": common_tolerations([p.tolerations for p in everyone]),
                "gpu_types": gpu_types(job, everyone, annotations.get(GPU_TYPE) or ""),
                "cpus": max(p.requests.get("cpu", 0) for p in pods),
                "memory": max(p.requests.get("memory", 0) for p in pods),
            }
        return JobSpec(
            job,
            workers=workers,
            gpus_per_worker=counts[0] if counts else 1,
            queue=first.queue,
            owner=first.namespace,
            priority=max(p.priority for p in pods),
            locality=LocalityRule.parse(text),
            checkpoint=checkpoint,
            model=annotations.get(MODEL) or first.model or None,
            idle=idle,
            **asks,
        )
    except (JobError, ClusterError) as err:
        raise ObjectError(f"{job}: {err}") from None


def checkpoint_interval(job: str, text: str, saves: bool) -> float | None:
    """A gang's CHECKPOINT_INTERVAL annotation in seconds (None where there is none); it says
    how often a job that checkpoints does, so it needs CHECKPOINT "true"."""
    if not text:
        return None
    if not saves:
        raise ObjectError(
            f"{job}: {CHECKPOINT_INTERVAL} says how often a job checkpoints; it needs "
            f'{CHECKPOINT}: "true"'
        )
    try:
        seconds = parse_duration(text, CHECKPOINT_INTERVAL)
    except DurationError as err:
        raise ObjectError(f"{job}: {err}") from None
    if seconds > MAX_CHECKPOINT_INTERVAL_S:
        raise ObjectError(f"{job}: {CHECKPOINT_INTERVAL} must be at most 30d, got {text!r}")
    return seconds


def parse_idle(job: str, text: str) -> IdleRule | None:
    """The IDLE annotation's rule (`after=30m,below=5,action=stop`), None where there is none;
    ObjectError names what is wrong."""
    if not text:
        return None
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or key not in ("after", "below", "action") or key in fields:
            raise ObjectError(
                f"{job}: {IDLE} must read after=TIME[,below=PERCENT][,action=notify|stop], "
                f"not {text!r}"
            )
        fields[key] = value.strip()
    if "after" not in fields:
        raise ObjectError(f"{job}: {IDLE} needs after=TIME (e.g. after=30m), got {text!r}")
    try:
        return IdleRule(
            parse_duration(fields["after"], f"{IDLE} after"),
            float(fields.get("below", "5")),
            IdleAction(fields.get("action", "notify")),
        )
    except (DurationError, JobError) as err:
        raise ObjectError(f"{job}: {err}") from None
    except ValueError:
        raise ObjectError(
            f"{job}: {IDLE}: below must be a percentage and action notify or stop, got {text!r}"
        ) from None


def encode_idle(rule: IdleRule | None) -> str:
    """The IDLE annotation of `rule` (empty for none): what the scheduler writes on pods."""
    if rule is None:
        return ""
    return f"after={rule.after_s:g},below={rule.below_pct:g},action={rule.action.value}"


def _number(text: str | None) -> float | None:
    """A number the agent wrote, or None (absent, or not one: then it is as if absent)."""
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


MOST_TERMS = 64  # node affinity terms a gang may have once its pods' are combined


def gang_selector(
    job: str, pods: Sequence[Pod], base: NodeSelector, excluded: Iterable[str] = ()
) -> NodeSelector:
    """The nodes every pod of a gang accepts: all their nodeSelectors' labels (two values of
    one label are refused: no node has both), their required node affinities combined (a term
    of each, every way: their AND), and in every term, room for the most one pod asks of each
    resource the core does not count (the driver's FREE labels) and `excluded` nodes kept off.
    Room is checked for one pod per node: the driver checks the sum before it binds."""
    match = dict(base.match)
    for pod in pods:
        for key, value in pod.node_selector.items():
            if match.setdefault(key, value) != value:
                raise ObjectError(
                    f"{job}: its pods' nodeSelectors ask both {key}={match[key]} and "
                    f"{key}={value}: no node has both"
                )
    terms: tuple[tuple[Requirement, ...], ...] = ((),)
    for affinity in dict.fromkeys(p.affinity for p in pods if p.affinity):
        terms = tuple(a + b for a in terms for b in affinity)
        if len(terms) > MOST_TERMS:
            raise ObjectError(
                f"{job}: its pods' required node affinities differ; combined they make more "
                f"than {MOST_TERMS} terms"
            )
    also = free_requirements(pods)
    nodes = tuple(sorted(set(excluded)))
    if nodes:
        also += (Requirement(NODE_NAME, "NotIn", nodes),)
    any_of = tuple(term + also for term in terms) if terms != ((),) or also else ()
    return NodeSelector(tuple(sorted(match.items())), any_of)


def free_requirements(pods: Sequence[Pod]) -> tuple[Requirement, ...]:
    """For each resource the core does not count, a node with more free than one pod asks."""
    most: dict[str, int] = {}
    for pod in pods:
        for resource, amount in pod.requests.items():
            if resource not in COUNTED:
                most[resource] = max(most.get(resource, 0), amount)
    return tuple(
        Requirement(FREE + resource, "Gt", (str(amount - 1),))
        for resource, amount in sorted(most.items())
    )


def common_tolerations(sets: Sequence[tuple[Toleration, ...]]) -> tuple[Toleration, ...]:
    """Tolerations that let a gang past exactly the taints each of `sets` tolerates: each
    pod's, met pairwise (key, value and effect narrowed to what both match)."""
    distinct = list(dict.fromkeys(sets))
    common = distinct[0] if distinct else ()
    for more in distinct[1:]:
        met = (_meet(a, b) for a in common for b in more)
        common = tuple(dict.fromkeys(t for t in met if t is not None))
    return common


def _meet(a: Toleration, b: Toleration) -> Toleration | None:
    """The toleration of the taints both `a` and `b` tolerate, None if there is none."""
    if (a.key and b.key and a.key != b.key) or (a.effect and b.effect and a.effect != b.effect):
        return None
    if a.operator == "Exists":
        operator, value = b.operator, b.value
    elif b.operator == "Exists" or a.value == b.value:
        operator, value = a.operator, a.value
    else:
        return None
    return Toleration(a.key or b.key, operator, value, a.effect or b.effect)


def gpu_types(job: str, pods: Sequence[Pod], named: str) -> tuple[str, ...]:
    """The GPU types of the PodGroup's GPU_TYPE annotation, else those every pod's accepts."""
    if named:
        return _type_list(named)
    common: set[str] | None = None
    names: dict[str, str] = {}
    for pod in pods:
        if pod.gpu_type:
            types = {type_key(t): t for t in _type_list(pod.gpu_type)}
            names.update(types)
            common = set(types) if common is None else common & set(types)
            if not common:
                raise ObjectError(f"{job}: its pods' {GPU_TYPE} annotations share no GPU type")
    return tuple(sorted(names[k] for k in common or ()))


def _type_list(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())
