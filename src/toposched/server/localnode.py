"""This machine as a one-node cluster: its GPUs through NVML, or an emulated topology."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from toposched.discovery.files import load_topology
from toposched.discovery.nvml import NvmlUnavailable, discover_topology
from toposched.topology.cluster import Node
from toposched.topology.node import NodeTopology

DEFAULT_EMULATION = "dgx1-v100"


@dataclass(frozen=True)
class LocalNode:
    node: Node
    source: str  # "nvml", or "emulated (...)": what the GPU indices refer to


def local_node(emulate: str | None, name: str | None = None) -> LocalNode:
    """The node the server schedules. With `emulate` (a preset or topology file) the jobs still
    run as real processes, with CUDA_VISIBLE_DEVICES naming GPUs this machine may not have."""
    node_name = name or socket.gethostname() or "localhost"
    if emulate is not None:
        topology = load_topology(emulate)
        return LocalNode(Node(node_name, topology), f"emulated ({emulate})")
    try:
        topology = discover_topology()
    except NvmlUnavailable as err:
        topology = load_topology(DEFAULT_EMULATION)
        why = str(err).split(";")[0]
        return LocalNode(Node(node_name, topology), f"emulated ({DEFAULT_EMULATION}; {why})")
    return LocalNode(Node(node_name, topology), "nvml")


def topology_name(topology: NodeTopology) -> str:
    return topology.name or f"{topology.size} GPUs"
