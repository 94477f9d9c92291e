"""Slowdown from other jobs' GPUs on the same node: shared PCIe switch, shared socket, or node."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from toposched.perf.specs import FrameworkSpec, Level, ModelSpec
from toposched.topology.node import NodeTopology

_INDEX = {Level.SWITCH: 0, Level.SOCKET: 1, Level.NODE: 2}


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
    counts = []
    for ours in gpus:
        per_level = [0, 0, 0]
        for theirs in others:
            per_level[_INDEX[level(topology, ours, theirs)]] += 1
        counts.append((per_level[0], per_level[1], per_level[2]))
    return factor_from_counts(counts, framework, model)


def factor_from_counts(
    counts: Iterable[tuple[int, int, int]], framework: FrameworkSpec, model: ModelSpec
) -> float:
    """`interference_factor` from how many neighbours each of our GPUs has under its switch,
    on its socket and elsewhere on the node (`neighbour_counts`)."""
    if model.interference == 0.0:
        return 1.0
    penalty = framework.level_penalties
    worst = 0.0
    for switch, socket, node in counts:
        worst = max(worst, switch * penalty[0] + socket * penalty[1] + node * penalty[2])
    return 1.0 + model.interference * worst


def level_masks(topology: NodeTopology) -> tuple[tuple[int, int, int], ...]:
    """Per GPU of `topology`, the GPUs at each level from it, as bit masks: those under its PCIe
    switch, those on its socket under another switch, and the rest of the node (itself in
    none)."""
    out = []
    for g in range(topology.size):
        masks = [0, 0, 0]
        for h in range(topology.size):
            if h != g:
                masks[_INDEX[level(topology, g, h)]] |= 1 << h
        out.append((masks[0], masks[1], masks[2]))
    return tuple(out)


def neighbour_counts(
    levels: tuple[tuple[int, int, int], ...], gpus: int, neighbours: int
) -> tuple[tuple[int, int, int], ...]:
    """What `interference_factor` depends on, for the GPUs in mask `gpus` beside the other
    jobs' GPUs in mask `neighbours` (`levels` from `level_masks`): per GPU of ours, how many
    neighbours it has at each level. Equal counts give an equal factor, so a caller can key
    a memo on them instead of on which GPUs the neighbours hold."""
    out = []
    rest = gpus
    while rest:
        low = rest & -rest
        switch, socket, node = levels[low.bit_length() - 1]
        out.append(
            (
                (neighbours & switch).bit_count(),
                (neighbours & socket).bit_count(),
                (neighbours & node).bit_count(),
            )
        )
        rest ^= low
    return tuple(out)
