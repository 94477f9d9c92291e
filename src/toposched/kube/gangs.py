"""A gang as the Kubernetes driver keeps it, and the keys that name gangs.

Every part of the driver (the cache, the binder, restore, the reconcile loop) names gangs by
these keys, so they live here rather than in any one of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toposched.kube.objects import GANG_KINDS, GangKind, Obj, Pod, key_of

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
    idle: str = ""  # its idle rule's annotation, written on each pod it binds (objects.IDLE)
    idle_told: bool = False  # its pods were told it is idle (this idle run)


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
