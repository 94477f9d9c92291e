"""Dynamic Resource Allocation (resource.k8s.io/v1): the GPUs a pod asks through its
ResourceClaims of toposched's DeviceClass, and the allocation toposched writes on them.

The node agent publishes each node's GPUs in a ResourceSlice of driver `gpu.toposched.io`, its
pool the node's name, one device `gpu-<index>` per GPU (the index of the Node's
`toposched.io/topology`, which keeps the links). A pod whose scheduler is toposched may ask for
GPUs by claims of the DeviceClass `gpu.toposched.io` (ExactCount requests, no selectors): the
scheduler places the gang as it places GPU limits, then writes each claim's `status.allocation`
(those devices, and the node) with `reservedFor` the pod, before it binds the pod. What it
cannot honour is refused with an Event naming the claim and the request (`ClaimError`): a
request of another DeviceClass, CEL selectors, `All` devices, `firstAvailable` alternatives,
a claim shared by several pods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from toposched.kube.objects import Obj

DRIVER = "gpu.toposched.io"
DEVICE_CLASS = "gpu.toposched.io"
API = "/apis/resource.k8s.io/v1"


class ClaimError(ValueError):
    """A claim toposched does not allocate; the message names the claim and the request."""


@dataclass(frozen=True)
class PodClaim:
    """One of a pod's spec.resourceClaims: its name in the pod and the ResourceClaim it is
    (None until the resource claim controller has made it from its template)."""

    name: str
    claim: str | None


def pod_claims(pod: Obj) -> tuple[PodClaim, ...]:
    """The claims a pod references, each with its ResourceClaim's name once known."""
    spec = pod.get("spec") or {}
    made = {
        str(s.get("name")): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    found = []
    for entry in spec.get("resourceClaims") or []:
        name = str(entry.get("name") or "")
        claim = entry.get("resourceClaimName") or made.get(name)
        found.append(PodClaim(name, str(claim) if claim else None))
    return tuple(found)


def requested(claim: Obj) -> list[tuple[str, int]]:
    """(request name, GPU count) of each request of a claim, in order; ClaimError for what
    toposched does not allocate."""
    meta = claim.get("metadata") or {}
    shown = f"ResourceClaim {meta.get('namespace')}/{meta.get('name')}"
    devices = (claim.get("spec") or {}).get("devices") or {}
    if devices.get("constraints") or devices.get("config"):
        raise ClaimError(f"{shown}: constraints and config are not evaluated by toposched")
    out = []
    for request in devices.get("requests") or []:
        name = str(request.get("name") or "")
        where = f"{shown} request {name!r}"
        if request.get("firstAvailable"):
            raise ClaimError(f"{where}: firstAvailable alternatives are not allocated by toposched")
        exactly = request.get("exactly") or {}
        device_class = exactly.get("deviceClassName")
        if device_class != DEVICE_CLASS:
            raise ClaimError(
                f"{where}: device class {device_class!r} is not toposched's ({DEVICE_CLASS}); "
                "give the pod to a scheduler that allocates it"
            )
        if exactly.get("selectors"):
            raise ClaimError(f"{where}: CEL selectors are not evaluated by toposched")
        if (exactly.get("allocationMode") or "ExactCount") != "ExactCount":
            raise ClaimError(
                f"{where}: allocationMode {exactly['allocationMode']!r}: ExactCount only"
            )
        count = exactly.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ClaimError(f"{where}: count {count!r} must be a whole number >= 1")
        out.append((name, count))
    return out


def claim_gpus(pod: Obj, claims: Mapping[tuple[str, str], Obj]) -> int | None:
    """The GPUs a pod asks through its claims; None while one is not made yet. ClaimError for
    a claim toposched does not allocate, or one already reserved for another pod."""
    meta = pod.get("metadata") or {}
    ns = str(meta.get("namespace") or "default")
    uid = meta.get("uid")
    total = 0
    for ref in pod_claims(pod):
        if ref.claim is None:
            return None
        claim = claims.get((ns, ref.claim))
        if claim is None:
            return None
        holders = (claim.get("status") or {}).get("reservedFor") or []
        if any(h.get("uid") != uid for h in holders):
            raise ClaimError(
                f"ResourceClaim {ns}/{ref.claim} is reserved for another pod: toposched "
                "allocates a claim for one pod (use a ResourceClaimTemplate per worker)"
            )
        total += sum(count for _, count in requested(claim))
    return total


def allocation(claim: Obj, node: str, gpus: Sequence[int]) -> Obj:
    """The status.allocation of `claim` with `gpus` (as many as it asks, its requests in order)
    of `node`'s pool."""
    results = []
    left = list(gpus)
    for request, count in requested(claim):
        for gpu in left[:count]:
            results.append(
                {"request": request, "driver": DRIVER, "pool": node, "device": f"gpu-{gpu}"}
            )
        left = left[count:]
    return {
        "devices": {"results": results},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }


def status_path(namespace: str, claim: str) -> str:
    return f"{API}/namespaces/{namespace}/resourceclaims/{claim}/status"


def allocated_devices(claim: Obj) -> list[tuple[str, int]]:
    """(node, GPU index) of toposched's devices a claim holds, whoever allocated it."""
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
        "results"
    ) or []
    found = []
    for result in results:
        device = str(result.get("device") or "")
        if result.get("driver") == DRIVER and device.startswith("gpu-") and device[4:].isdigit():
            found.append((str(result.get("pool") or ""), int(device[4:])))
    return found
