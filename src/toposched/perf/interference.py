"""Slowdown from other jobs' GPUs on the same node: shared PCIe switch, shared socket, or node."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from toposched.perf.specs import FrameworkSpec, Level, ModelSpec
from toposched.topology.node import NodeTopology


def level(topology: NodeTopology, ours: int, theirs: int) -> Level:
    """How close another job's GPU is to one of ours: the closest shared resource wins."""
    if topology.switches[ours] == topology.switches[theirs]:
        return Level.SWITCH
    if topology.sockets[ours] == topology.sockets[theirs]:
        return Level.SOCKET
    return Level.NODE


def interference_factor(
    topology: NodeTopology,
    gpus: Sequence[int],
    neighbours: Iterable[int],
    framework: FrameworkSpec,
    model: ModelSpec,
) -> float:
    """Compute-time multiplier (>= 1) of our GPUs on this node from the other jobs' GPUs.

    Each busy neighbour adds its level's penalty; a data-parallel step waits for its slowest
    worker, so the job pays the worst of its GPUs.
    """
    others = [g for g in set(neighbours) if g not in gpus]
    if not others or model.interference == 0.0:
        return 1.0
    worst = 0.0
    for ours in gpus:
        total = sum(framework.penalty(level(topology, ours, theirs)) for theirs in others)
        worst = max(worst, total)
    return 1.0 + model.interference * worst
