"""Kubernetes objects as the core sees them: nodes, pods, and the gangs pods form.

Everything here is pure: it reads the JSON of Kubernetes objects (as the API returns them) and
answers with core types, or with an error that says what is wrong with which object.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toposched.core import Checkpoint, JobError, JobSpec, LocalityRule
from toposched.kube.annotations import (
    GPUS,
    TOPOLOGY,
    AnnotationError,
    NodeGpus,
    decode_gpus,
    decode_topology,
    opted_in,
)
from toposched.topology.cluster import EVERY_NODE, SCHEDULE_LABEL, ClusterError, Node, NodeSelector
from toposched.topology.node import NodeTopology

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
EVICTION_SIGNAL = "SIGTERM"
DEFAULT_GRACE_S = 30.0  # Kubernetes' default terminationGracePeriodSeconds

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
GANG_KINDS = (SCHEDULER_PLUGINS, VOLCANO)


class ObjectError(ValueError):
    """A Kubernetes object toposched cannot use; the message names it and says why."""


def meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def key_of(obj: Obj) -> tuple[str, str]:
    m = meta(obj)
    return (m.get("namespace") or "", m.get("name") or "")


# ---------------------------------------------------------------------- nodes


def node_from(obj: Obj, rack_label: str = DEFAULT_RACK_LABEL) -> tuple[Node, NodeGpus, str | None]:
    """The core's node for a Kubernetes Node, from its topology annotation, labels and
    allocatable GPUs, and what is wrong with its annotation (None if nothing). A node whose
    annotation is missing, unreadable or stale has unknown topology: its allocatable GPUs,
    counted only, for jobs that accept that. ObjectError if it has no GPUs to offer at all."""
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
    rack = labels.get(rack_label) or "rack-0"
    zone = labels.get(ZONE_LABEL) or "pod-0"
    try:
        return Node(name, gpus.topology, rack=rack, pod=zone, labels=core_labels), gpus, problem
    except ClusterError as err:
        raise ObjectError(str(err)) from None


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
    grace_s: float = DEFAULT_GRACE_S  # its terminationGracePeriodSeconds
    group_kind: GangKind = SCHEDULER_PLUGINS  # which kind of PodGroup `group` names

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
    # own PodGroups were read.
    volcano = not labels.get(GROUP_LABEL) and bool(annotations.get(VOLCANO_GROUP))
    return Pod(
        namespace=ns,
        name=name,
        uid=m.get("uid") or "",
        gpus=gpus,
        group=labels.get(GROUP_LABEL) or annotations.get(VOLCANO_GROUP),
        queue=labels.get(QUEUE_LABEL) or ns,
        priority=priority,
        node=spec.get("nodeName") or None,
        bound_gpus=bound_gpus,
        phase=(obj.get("status") or {}).get("phase") or "Pending",
        deleting=bool(m.get("deletionTimestamp")),
        locality=annotations.get(LOCALITY),
        labels=labels,
        accept_unknown=annotations.get(ACCEPT_UNKNOWN) or "false",
        checkpoint=annotations.get(CHECKPOINT) or "false",
        grace_s=float(grace),
        group_kind=VOLCANO if volcano else SCHEDULER_PLUGINS,
    )


# ---------------------------------------------------------------------- gangs


def min_member(group: Obj) -> int:
    """A PodGroup's minMember (ObjectError if it is not a positive integer)."""
    value = (group.get("spec") or {}).get("minMember")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        ns, name = key_of(group)
        api = f" ({group['apiVersion']})" if group.get("apiVersion") else ""
        raise ObjectError(
            f"podgroup {ns}/{name}{api}: spec.minMember {value!r} is not a positive integer"
        )
    return value


def gang_spec(job: str, pods: list[Pod], workers: int, group: Obj | None = None) -> JobSpec:
    """The core's job for a gang of pods (or one pod): `workers` pods of the same GPU count,
    the queue and priority of its pods, the locality of its PodGroup (default: any)."""
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
    # The shortest grace of the gang: an eviction gives each pod its own.
    checkpoint = (
        Checkpoint(EVICTION_SIGNAL, min(p.grace_s for p in pods)) if saves == "true" else None
    )
    try:
        return JobSpec(
            job,
            workers=workers,
            gpus_per_worker=counts[0] if counts else 1,
            queue=first.queue,
            owner=first.namespace,
            priority=max(p.priority for p in pods),
            locality=LocalityRule.parse(text),
            selector=EVERY_NODE if accept == "true" else KNOWN_ONLY,
            checkpoint=checkpoint,
        )
    except JobError as err:
        raise ObjectError(f"{job}: {err}") from None
