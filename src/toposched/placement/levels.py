"""A gang whole inside one domain of a network level: the fastest level, then the best domain."""

from __future__ import annotations

from toposched.placement.capacity import Capacity
from toposched.topology.levels import Level, domain_key

# (node index, free GPUs less those excluded, workers it holds)
Usable = list[tuple[int, int, int]]


def level_index(levels: tuple[Level, ...], name: str) -> int | None:
    for i, level in enumerate(levels):
        if level.name == name:
            return i
    return None


def domains_at(cap: Capacity, usable: Usable, at: int) -> dict[tuple[str, ...], Usable]:
    """The usable nodes grouped by their domain at level `at`."""
    out: dict[tuple[str, ...], Usable] = {}
    for entry in usable:
        values = cap.nodes[entry[0]].level_values()
        out.setdefault(domain_key(cap.levels, values, at), []).append(entry)
    return out


def domain_ranks(cap: Capacity, at: int) -> dict[tuple[str, ...], tuple[int, ...]]:
    """What ranks each domain of level `at` among those that hold a gang: its free GPUs (the
    smallest that holds it, so that larger free domains stay free), then, level by level
    upward, whether the domain above it is wholly free (a gang in a domain already in use keeps
    the most larger domains whole)."""
    free: dict[tuple[str, ...], int] = {}
    partly: set[tuple[str, ...]] = set()
    for i in cap.present_indices():
        key = domain_key(cap.levels, cap.nodes[i].level_values(), at)
        free[key] = free.get(key, 0) + cap.free[i].bit_count()
        if cap.free[i].bit_count() < cap.nodes[i].size:
            partly.update(key[k:] for k in range(len(key)))
    return {
        key: (count, *(0 if key[k:] in partly else 1 for k in range(1, len(key))))
        for key, count in free.items()
    }
