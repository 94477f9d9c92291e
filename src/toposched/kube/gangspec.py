"""The gangs pods form, as the core sees them: a PodGroup's least number of pods, the job
spec of a gang (its annotations read), and what its pods ask of a node in common.

Pure, as kube/objects.py: JSON of Kubernetes objects in, core types or ObjectError out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from toposched.common.durations import DurationError, parse_duration
from toposched.core import Checkpoint, IdleAction, IdleRule, JobError, JobSpec, LocalityRule
from toposched.kube.objects import (
    ACCEPT_UNKNOWN,
    CHECKPOINT,
    CHECKPOINT_INTERVAL,
    COUNTED,
    EVICTION_SIGNAL,
    FREE,
    GPU_TYPE,
    IDLE,
    KNOWN_ONLY,
    LOCALITY,
    MAX_CHECKPOINT_INTERVAL_S,
    MODEL,
    NODE_NAME,
    UPSTREAM,
    Obj,
    ObjectError,
    Pod,
    key_of,
    meta,
)
from toposched.topology.cluster import (
    EVERY_NODE,
    ClusterError,
    NodeSelector,
    Requirement,
    Toleration,
)
from toposched.topology.resources import type_key

MOST_TERMS = 64  # node affinity terms a gang may have once its pods' are combined


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
