"""A gang whole inside one domain of a network level: the fastest level, then the best domain."""

from __future__ import annotations

from toposched.placement.capacity import Capacity
from toposched.topology.levels import Level

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
        out.setdefault(cap.domains[entry[0]][at], []).append(entry)
    return out


def domain_rank(cap: Capacity, at: int, key: tuple[str, ...]) -> tuple[int, ...]:
    """What ranks domain `key` of level `at` among those that hold a gang: its free GPUs (the
    smallest that holds it, so that larger free domains stay free), then, level by level
    upward, whether the domain above it is wholly free (a gang in a domain already in use keeps
    the most larger domains whole)."""
    tally = cap.tally
    above = (1 if tally.in_use[at + k].get(key[k:], 0) <= 0 else 0 for k in range(1, len(key)))
    return (tally.free[at].get(key, 0), *above)
