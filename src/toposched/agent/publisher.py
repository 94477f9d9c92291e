"""Publishes the node's GPU topology and health as the node annotation the scheduler reads.

Each `step` reads the topology (once, and again after a failure), the GPUs' health, and writes
`toposched.io/topology` on the agent's own Node with a JSON merge patch of its annotations when
what it would write differs from what it wrote last. When the topology or the health cannot be
read, the annotation is kept and marked `stale: true` (the scheduler then takes no new work
there), never deleted: the pods running on the node still hold their GPUs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from toposched.agent.dra import SlicePublisher
from toposched.agent.state import Gpus, NodeState
from toposched.discovery.nvml import NvmlUnavailable
from toposched.kube.annotations import TOPOLOGY, AnnotationError, decode_topology, encode_topology
from toposched.kube.api import ApiError, KubeApi
from toposched.topology.errors import TopologyError
from toposched.topology.node import NodeTopology

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
# What a topology source or a health check raises when it cannot read the GPUs.
READ_ERRORS = (NvmlUnavailable, TopologyError, OSError)


class Health(Protocol):
    def check(self) -> frozenset[int]: ...


def annotate_node(api: KubeApi, node: str, key: str, value: str) -> None:
    """One annotation on a Node, by a merge patch of its metadata (other keys stay)."""
    body = {"metadata": {"annotations": {key: value}}}
    api.request("PATCH", f"/api/v1/nodes/{node}", body=body, content_type=MERGE_PATCH)


class Publisher:
    """Reads the GPUs into `state` and keeps the Node's topology annotation in step with it."""

    def __init__(
        self,
        api: KubeApi,
        node: str,
        state: NodeState,
        read_topology: Callable[[], NodeTopology],
        health: Health | None = None,
        read_minors: Callable[[], tuple[int, ...]] | None = None,
        slices: SlicePublisher | None = None,
    ) -> None:
        self.api = api
        self.node = node
        self.state = state
        self.read_topology = read_topology
        self.health = health
        # Each GPU's device minor number (NVML's); without a source, the device files are
        # taken to be numbered as the GPUs are.
        self.read_minors = read_minors
        self.published: str | None = None
        self.slices = slices  # the node's ResourceSlice (DRA), where the cluster serves it

    def step(self) -> Gpus:
        """One poll: read, publish if changed; the reading is returned (and kept in `state`)."""
        gpus = self._read()
        if self.state.set(gpus):
            self._log_change(gpus)
        if gpus.topology is not None:
            self._publish(encode_topology(gpus.topology, sorted(gpus.unhealthy), gpus.stale))
            if self.slices is not None and not gpus.stale:
                self.slices.publish(gpus.topology, gpus.unhealthy)
        return gpus

    def _read(self) -> Gpus:
        last, _ = self.state.get()
        topology, minors = last.topology, last.minors
        try:
            if topology is None or last.stale:
                topology = self.read_topology()
                minors = self.read_minors() if self.read_minors else ()
            unhealthy = self.health.check() if self.health else frozenset[int]()
        except READ_ERRORS as err:
            if not last.stale:
                log.error("cannot read the GPUs: %s; the topology is marked stale", err)
            topology = topology or self._published_topology()
            return Gpus(topology, last.unhealthy, stale=True, minors=minors)
        healthy = frozenset(g for g in unhealthy if g < topology.size)
        return Gpus(topology, healthy, stale=False, minors=minors)

    def _published_topology(self) -> NodeTopology | None:
        """The topology already on the Node (a previous agent's), to mark it stale."""
        try:
            node = self.api.request("GET", f"/api/v1/nodes/{self.node}")
            text = ((node.get("metadata") or {}).get("annotations") or {}).get(TOPOLOGY)
            return decode_topology(text, self.node).topology if text else None
        except (ApiError, AnnotationError) as err:
            log.warning("node %s: its topology annotation cannot be read: %s", self.node, err)
            return None

    def _publish(self, text: str) -> None:
        if text == self.published:
            return
        try:
            annotate_node(self.api, self.node, TOPOLOGY, text)
        except ApiError as err:  # tried again at the next step
            log.error("node %s: cannot write %s: %s", self.node, TOPOLOGY, err)
            return
        self.published = text
        log.info("node %s: published %s", self.node, text)

    def _log_change(self, gpus: Gpus) -> None:
        if gpus.topology is None:
            return
        log.info(
            "%d GPUs, unhealthy %s%s",
            gpus.topology.size,
            sorted(gpus.unhealthy) or "none",
            " (stale)" if gpus.stale else "",
        )
