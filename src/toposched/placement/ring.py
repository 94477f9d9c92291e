"""Ring bandwidth of a GPU set: the best cyclic order judged by its slowest link."""

from __future__ import annotations

from collections.abc import Iterable

from toposched.placement.request import NodePlacement
from toposched.placement.tables import subset_tables, to_mask
from toposched.topology.node import NodeTopology


def ring_bandwidth(topology: NodeTopology, gpus: Iterable[int]) -> float | None:
    """GB/s of the best ring through `gpus`; the link itself for two GPUs; None for one."""
    members = sorted(set(gpus))
    if len(members) < 2:
        return None
    tables = subset_tables(topology)
    return tables.gbps(int(tables.ring[to_mask(members)]))


def placed(topology: NodeTopology, gpus: tuple[int, ...]) -> NodePlacement:
    """The answer for `gpus`: sorted, with their ring bandwidth."""
    chosen = tuple(sorted(gpus))
    return NodePlacement(gpus=chosen, ring_bandwidth_gbps=ring_bandwidth(topology, chosen))
