"""How a node's GPUs for a gang are shared out among its workers there: each worker's own GPUs
talk to each other too (its processes' ring), so of all the ways to split them into workers,
the one whose workers' rings add up to the most bandwidth, lowest indices first among equals.

On a DGX-1, four 2-GPU workers on GPUs 0-7 split in index order get 0-1 (NV1, 25 GB/s), 2-3
(NV2, 50), 4-5 (NV1), 6-7 (NV2); split so, they get four NV2 pairs, 50 GB/s each.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import combinations

from toposched.placement.tables import subset_tables, to_mask
from toposched.topology.node import NodeTopology

# Past this many GPUs on one node the exact split (a search over the ways to split) is not
# tried; such nodes are NVSwitch boxes whose splits are all alike.
MOST_EXACT = 12


def split_workers(
    topology: NodeTopology, gpus: tuple[int, ...], per_worker: int
) -> tuple[tuple[int, ...], ...]:
    """`gpus` (sorted) split into groups of `per_worker`, the sum of the groups' ring
    bandwidths the greatest; among equal splits the one that comes first in index order."""
    if per_worker < 2 or len(gpus) <= per_worker or len(gpus) > MOST_EXACT:
        return in_order(gpus, per_worker)
    return _best(topology, tuple(sorted(gpus)), per_worker)[1]


def split_gbps(topology: NodeTopology, gpus: tuple[int, ...], per_worker: int) -> float:
    """The sum of the workers' ring bandwidths when `gpus` are split as `split_workers` does
    (0 where there is nothing to split)."""
    if per_worker < 2 or len(gpus) <= per_worker or len(gpus) > MOST_EXACT:
        return 0.0
    return _best(topology, tuple(sorted(gpus)), per_worker)[0]


def in_order(gpus: tuple[int, ...], per_worker: int) -> tuple[tuple[int, ...], ...]:
    return tuple(gpus[i : i + per_worker] for i in range(0, len(gpus), per_worker))


@lru_cache(maxsize=4096)
def _best(
    topology: NodeTopology, gpus: tuple[int, ...], per_worker: int
) -> tuple[float, tuple[tuple[int, ...], ...]]:
    """(total ring bandwidth, groups) of the best split of `gpus`: the lowest GPU left is in
    some group; every choice of its partners is tried, and the rest split the same way."""
    if not gpus:
        return 0.0, ()
    tables = subset_tables(topology)
    first, others = gpus[0], gpus[1:]
    best: tuple[float, tuple[tuple[int, ...], ...]] | None = None
    for partners in combinations(others, per_worker - 1):
        group = (first, *partners)
        rest = tuple(g for g in others if g not in partners)
        score, groups = _best(topology, rest, per_worker)
        score += tables.gbps(int(tables.ring[to_mask(group)]))
        if best is None or score > best[0] + 1e-9:  # strictly more: the first stays on ties
            best = (score, (group, *groups))
    assert best is not None
    return best


__all__ = ["MOST_EXACT", "in_order", "split_gbps", "split_workers"]
