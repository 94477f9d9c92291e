"""Which pod a kubelet request is for: the kubelet's Allocate names devices, never the pod.

The kubelet admits the pods bound to its node one at a time and asks the device plugin for
each container's devices while it admits the pod: GetPreferredAllocation, then Allocate, each
with the container's device count alone. The pod is found by asking the kubelet itself, through
its pod resources API (`PodResourcesReader`): the kubelet lists a pod from the moment it starts
admitting it, and each container's devices once they are given. So the pod being admitted is
the one it lists whose next GPU container (in the pod's order) has no device yet and asks that
many; of the pods bound to this node (field selector `spec.nodeName`), only those that carry
`toposched.io/gpus`, are still Pending and were placed by toposched (`placed_by`) take part.
Its containers take the annotated GPUs in order (sorted indices, split by the containers' GPU
counts).

Anyone who may edit a pod may write the annotation, so it is toposched's word only on a pod
whose `spec.schedulerName` is one of toposched's (immutable once the pod is made) and that was
bound through a Binding (the API server then sets the PodScheduled condition, which a pod made
with `spec.nodeName` lacks until its kubelet runs it, and which `edit` cannot write). The
plugin still never gives a container a device the kubelet did not pass for it (plugin.py): a
pod that toposched bound but whose annotation was edited after gets the kubelet's devices.

Where the pod resources API cannot be reached (its socket not mounted, an old kubelet), the
pod is guessed as GPU-sharing plugins guess it (Alibaba's gpushare does the same): the oldest
such pod (creation time, then namespace/name) whose next GPU container asks that many devices.
That guess is wrong when two pods of one size bound close together reach the kubelet in the
other order: they then swap GPUs. `AllocationBook` records the pods served, in a file beside
the plugin's socket, so that a restarted agent does not serve the same pod twice while it is
still Pending (pulling its image, say); docs/node-agent.md says more.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toposched.kube.annotations import GPUS, AnnotationError, decode_gpus

log = logging.getLogger(__name__)

JSON = dict[str, Any]

# The scheduler name of deploy/kubernetes/scheduler.yaml (`toposched kube scheduler`'s default).
DEFAULT_SCHEDULERS = ("toposched",)


@dataclass(frozen=True)
class Claim:
    """The GPUs the scheduler chose for one container of a pod (`error` when unreadable)."""

    pod: str  # namespace/name
    uid: str
    size: int  # the container's GPU count
    gpus: tuple[int, ...] = ()
    error: str = ""


def gpu_counts(pod: JSON, resource: str) -> list[int]:
    """The GPU count of each container that asks for `resource`, in the pod's order."""
    return [count for _, count in gpu_containers(pod, resource)]


def gpu_containers(pod: JSON, resource: str) -> list[tuple[str, int]]:
    """(name, GPU count) of each container that asks for `resource`, in the pod's order."""
    counts = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        value = (resources.get("limits") or {}).get(resource)
        if value is None:
            value = (resources.get("requests") or {}).get(resource)
        try:
            count = int(str(value)) if value is not None else 0
        except ValueError:
            continue  # the API server refuses such a quantity; a pod here has none
        if count > 0:
            counts.append((str(container.get("name") or ""), count))
    return counts


def waiting(pod: JSON) -> bool:
    """Bound, not started, not being deleted: a pod the kubelet may be admitting now."""
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    return phase == "Pending" and not meta.get("deletionTimestamp")


def placed_by(pod: JSON, schedulers: Sequence[str]) -> str:
    """Why the pod's `toposched.io/gpus` is not the word of a scheduler in `schedulers`; ""
    when it is (the pod asks for one of them, and was bound through a Binding)."""
    meta = pod.get("metadata") or {}
    name = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
    asked = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
    if asked not in schedulers:
        return (
            f"pod {name} carries {GPUS} but asks scheduler {asked!r}, not "
            f"{' or '.join(map(repr, schedulers))}: the annotation is ignored"
        )
    conditions = (pod.get("status") or {}).get("conditions") or []
    if not any(c.get("type") == "PodScheduled" and c.get("status") == "True" for c in conditions):
        return (
            f"pod {name} carries {GPUS} but was not bound by a scheduler (made with "
            "spec.nodeName): the annotation is ignored"
        )
    return ""


def pod_uid(pod: JSON) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")


def next_claim(pod: JSON, resource: str, served: int) -> Claim | None:
    """The claim of the pod's next container after the `served` ones; None when all are."""
    meta = pod.get("metadata") or {}
    name = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
    uid = pod_uid(pod)
    counts = gpu_counts(pod, resource)
    if served >= len(counts):
        return None
    size = counts[served]
    try:
        gpus = decode_gpus(str((meta.get("annotations") or {}).get(GPUS)))
    except AnnotationError as err:
        return Claim(name, uid, size, error=f"pod {name}: {err}")
    if len(gpus) != sum(counts):
        return Claim(
            name,
            uid,
            size,
            error=f"pod {name}: {GPUS} names {len(gpus)} GPUs ({','.join(map(str, gpus))}) "
            f"but its containers ask {sum(counts)} {resource}",
        )
    start = sum(counts[:served])
    return Claim(name, uid, size, gpus[start : start + size])


# What the kubelet has taken in: (namespace, name) -> container -> devices given of the resource.
KubeletPods = Mapping[tuple[str, str], Mapping[str, int]]


def find_claim(
    pods: Iterable[JSON],
    size: int,
    resource: str,
    book: AllocationBook,
    kubelet: KubeletPods | None = None,
    schedulers: Sequence[str] = DEFAULT_SCHEDULERS,
) -> Claim | None:
    """The claim of the pod the kubelet is admitting (`kubelet`, its pod resources) whose next
    GPU container asks `size`; without the kubelet's word, of the oldest waiting annotated pod
    whose next container asks it. Only pods that `schedulers` placed (`placed_by`) claim: the
    annotation of any other pod the kubelet is admitting is logged and ignored."""
    annotated = []
    for p in pods:
        if not waiting(p) or GPUS not in ((p.get("metadata") or {}).get("annotations") or {}):
            continue
        why = placed_by(p, schedulers)
        if not why:
            annotated.append(p)
        elif kubelet is not None and _admitted(p, resource, kubelet) is not None:
            log.warning("%s", why)
    found: list[Claim] = []
    for pod in sorted(annotated, key=_age_key):
        served = book.served(pod_uid(pod)) if kubelet is None else _admitted(pod, resource, kubelet)
        if served is None:
            continue
        claim = next_claim(pod, resource, served)
        if claim is not None and claim.size == size:
            found.append(claim)
            if kubelet is None:
                break
    if len(found) > 1:
        log.warning(
            "the kubelet admits %s at once; %s, the oldest, is served",
            ", ".join(c.pod for c in found),
            found[0].pod,
        )
    return found[0] if found else None


def _admitted(pod: JSON, resource: str, kubelet: KubeletPods) -> int | None:
    """How many of the pod's GPU containers the kubelet has given devices, if it is admitting
    the pod (it has taken it in, and a GPU container has none yet); None otherwise."""
    given = kubelet.get(_key(pod))
    if given is None:
        return None
    containers = gpu_containers(pod, resource)
    return next((i for i, (name, _) in enumerate(containers) if not given.get(name)), None)


def _key(pod: JSON) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))


class PodResourcesReader:
    """The pods the kubelet has taken in, and the devices each container has, from its pod
    resources API on `socket`; None where it cannot be asked (that is logged once)."""

    def __init__(self, socket: Path, resource: str, timeout_s: float = 2.0) -> None:
        self.socket = socket
        self.resource = resource
        self.timeout_s = timeout_s
        self._warned = False

    def pods(self) -> dict[tuple[str, str], dict[str, int]] | None:
        from toposched.agent.proto import grpc, pod_resources

        messages, services = pod_resources()
        try:
            with grpc().insecure_channel(f"unix:{self.socket}") as channel:
                stub = services.PodResourcesListerStub(channel)
                answer = stub.List(messages.ListPodResourcesRequest(), timeout=self.timeout_s)
        except grpc().RpcError as err:
            if not self._warned:
                self._warned = True
                log.warning(
                    "the kubelet's pod resources API at %s cannot be read (%s): the "
                    "pod being admitted is guessed, oldest first",
                    self.socket,
                    err.details() if hasattr(err, "details") else err,
                )
            return None
        self._warned = False
        return {
            (p.namespace, p.name): {
                c.name: sum(
                    len(d.device_ids) for d in c.devices if d.resource_name == self.resource
                )
                for c in p.containers
            }
            for p in answer.pod_resources
        }


def _age_key(pod: JSON) -> tuple[str, str, str]:
    meta = pod.get("metadata") or {}
    # RFC 3339 times in UTC ("2026-01-02T03:04:05Z") sort as text.
    return (str(meta.get("creationTimestamp") or ""), meta.get("namespace") or "", meta["name"])


class AllocationBook:
    """How many GPU containers of each pod (by uid) were served; kept in `path` if given."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._served: dict[str, int] = self._load()

    def served(self, uid: str) -> int:
        with self._lock:
            return self._served.get(uid, 0)

    def record(self, uid: str) -> None:
        with self._lock:
            self._served[uid] = self._served.get(uid, 0) + 1
            self._save()

    def keep_only(self, uids: Sequence[str]) -> None:
        """Forget the pods that are no longer on the node."""
        with self._lock:
            keep = set(uids)
            if set(self._served) - keep:
                self._served = {u: n for u, n in self._served.items() if u in keep}
                self._save()

    def _load(self) -> dict[str, int]:
        if self.path is None or not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text())
            return {str(k): int(v) for k, v in data.items()}
        except (OSError, ValueError, AttributeError) as err:
            log.warning("%s cannot be read (%s); starting with no pod served", self.path, err)
            return {}

    def _save(self) -> None:
        if self.path is None:
            return
        temporary = self.path.with_name(self.path.name + ".tmp")
        try:
            temporary.write_text(json.dumps(self._served, sort_keys=True))
            os.replace(temporary, self.path)  # whole or not at all, even on a crash
        except OSError as err:
            log.warning("%s cannot be written: %s", self.path, err)
