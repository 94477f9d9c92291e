"""The node's GPUs as a Dynamic Resource Allocation ResourceSlice (resource.k8s.io/v1).

One slice per node, named `<node>-gpu.toposched.io`, driver `gpu.toposched.io`, its pool the
node's name (generation bumped at each change), owned by the Node. One device `gpu-<index>`
per GPU with the attributes DRA drivers use (`index`, `healthy`, `productName`, `uuid`,
`pciBusID`, `resource.kubernetes.io/pcieRoot`, `numaNode` where known), its memory as capacity,
and `gpu.toposched.io/nvlinkPeers`: the GPUs it has an NVLink to. The links themselves stay in
the Node's `toposched.io/topology` annotation, which `index` keys. An unhealthy GPU stays in the
slice with `healthy: false`, so that a claim allocated on it still names a device that exists.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toposched.kube.api import ApiError, KubeApi
from toposched.kube.claims import API, DRIVER
from toposched.topology.links import Path
from toposched.topology.node import NodeTopology
from toposched.topology.resources import memory_text

log = logging.getLogger(__name__)

CHECK_EVERY = 6  # unchanged polls between reads that the slice still exists (a minute at 10 s)

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class GpuFacts:
    """What NVML says of one GPU besides its links (empty where unknown)."""

    product: str = ""
    uuid: str = ""
    pci_bus_id: str = ""
    memory: int = 0  # bytes


def slice_name(node: str) -> str:
    return f"{node}-{DRIVER}"


def devices(
    topology: NodeTopology, unhealthy: frozenset[int], facts: Sequence[GpuFacts] = ()
) -> list[dict[str, Any]]:
    """One device per GPU, in index order."""
    out = []
    for i in range(topology.size):
        fact = facts[i] if i < len(facts) else GpuFacts()
        peers = [j for j in range(topology.size) if _nvlink(topology, i, j)]
        attributes: dict[str, Any] = {
            "index": {"int": i},
            "healthy": {"bool": i not in unhealthy},
            f"{DRIVER}/nvlinkPeers": {"string": ",".join(map(str, peers))},
        }
        if topology.numa[i] is not None:
            attributes["numaNode"] = {"int": topology.numa[i]}
        for name, value in (
            ("productName", fact.product),
            ("uuid", fact.uuid),
            ("pciBusID", fact.pci_bus_id),
            ("resource.kubernetes.io/pcieRoot", _pcie_root(fact.pci_bus_id)),
        ):
            if value:
                attributes[name] = {"string": value}
        device: dict[str, Any] = {"name": f"gpu-{i}", "attributes": attributes}
        if fact.memory:
            device["capacity"] = {"memory": {"value": memory_text(fact.memory)}}
        out.append(device)
    return out


def _nvlink(topology: NodeTopology, i: int, j: int) -> bool:
    link = topology.link(i, j)
    return link is not None and link.path is Path.NV


def _pcie_root(bus_id: str) -> str:
    """The PCIe root complex of a bus id (`0000:0a:00.0` -> `pci0000:00`), as the
    resource.kubernetes.io/pcieRoot attribute names it; empty where the id is unknown."""
    domain = bus_id.split(":", 1)[0] if ":" in bus_id else ""
    return f"pci{domain[-4:]}:00" if domain else ""


def resource_slice(
    node: Obj,
    topology: NodeTopology,
    unhealthy: frozenset[int] = frozenset(),
    facts: Sequence[GpuFacts] = (),
    generation: int = 1,
) -> dict[str, Any]:
    """The ResourceSlice of `node` (the Node object, its owner)."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name") or "")
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": slice_name(name),
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": name, "uid": str(meta.get("uid"))}
            ],
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": name,
            "pool": {"name": name, "generation": generation, "resourceSliceCount": 1},
            "devices": devices(topology, unhealthy, facts),
        },
    }


class SlicePublisher:
    """Keeps the node's ResourceSlice in step with its GPUs, writing only when they change."""

    def __init__(self, api: KubeApi, node: str, facts: Sequence[GpuFacts] = ()) -> None:
        self.api = api
        self.node = node
        self.facts = tuple(facts)
        self.published: list[dict[str, Any]] | None = None
        self.generation = 0
        self._unchecked = 0  # polls since the slice was last seen to exist

    def publish(self, topology: NodeTopology, unhealthy: frozenset[int]) -> None:
        wanted = devices(topology, unhealthy, self.facts)
        path = f"{API}/resourceslices/{slice_name(self.node)}"
        if wanted == self.published:
            # The kubelet deletes a driver's slices when it starts (and when the driver's
            # plugin goes away): every CHECK_EVERY polls, one read to see that it is there.
            self._unchecked += 1
            if self._unchecked < CHECK_EVERY or self._exists(path):
                return
            log.warning("node %s: its ResourceSlice is gone; publishing it again", self.node)
        self._unchecked = 0
        try:
            node = self.api.request("GET", f"/api/v1/nodes/{self.node}")
            try:
                current = self.api.request("GET", path)
            except ApiError as err:
                if err.status != 404:
                    raise
                current = None
            old = int(((current or {}).get("spec") or {}).get("pool", {}).get("generation", 0))
            body = resource_slice(
                node, topology, unhealthy, self.facts, max(old, self.generation) + 1
            )
            if current is None:
                self.api.request("POST", f"{API}/resourceslices", body=body)
            else:
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                self.api.request("PUT", path, body=body)
        except ApiError as err:  # tried again at the next step
            log.error("node %s: cannot write its ResourceSlice: %s", self.node, err)
            return
        self.published = wanted
        self.generation = body["spec"]["pool"]["generation"]
        log.info(
            "node %s: ResourceSlice %s, generation %d",
            self.node,
            slice_name(self.node),
            self.generation,
        )

    def _exists(self, path: str) -> bool:
        self._unchecked = 0
        try:
            self.api.request("GET", path)
        except ApiError as err:
            return err.status != 404  # another failure: not known to be gone
        return True


def facts_from_nvml(nvml: Any) -> tuple[GpuFacts, ...]:
    """Each GPU's product, UUID, PCI bus id and memory from NVML, in index order; what a call
    does not answer is left unknown."""
    from toposched.discovery.nvml import normalise_bus_id

    api = nvml
    api.nvmlInit()
    try:
        found = []
        for i in range(int(api.nvmlDeviceGetCount())):
            handle = api.nvmlDeviceGetHandleByIndex(i)
            values: dict[str, Any] = {}
            for key, read in (
                ("product", lambda h: _text(api.nvmlDeviceGetName(h))),
                ("uuid", lambda h: _text(api.nvmlDeviceGetUUID(h))),
                ("pci_bus_id", lambda h: normalise_bus_id(api.nvmlDeviceGetPciInfo(h).busId)),
                ("memory", lambda h: int(api.nvmlDeviceGetMemoryInfo(h).total)),
            ):
                try:
                    values[key] = read(handle)
                except (api.NVMLError, AttributeError):
                    continue  # unknown: left out of the device's attributes
            found.append(GpuFacts(**values))
        return tuple(found)
    finally:
        with contextlib.suppress(api.NVMLError):
            api.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return (value.decode() if isinstance(value, bytes) else str(value)).strip()
