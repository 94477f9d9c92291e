"""Per-topology tables over every GPU subset: exact ring bandwidth, best sub-rings, pair sums.

A node of n GPUs has 2^n subsets; for the node sizes that exist (8, 16) the tables are small
and are built once per distinct topology, after which every placement decision is a few
vectorised look-ups. Ring bandwidth is solved exactly (a bottleneck Hamiltonian cycle by
dynamic programming over subsets), never approximated.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from toposched.placement.request import PlacementError
from toposched.topology.node import NodeTopology

MAX_TABLE_GPUS = 20
"""Largest node the exact tables cover: 2^20 subsets, about 50 MB of tables."""

IntArray = npt.NDArray[np.int64]
LevelArray = npt.NDArray[np.uint8]
FloatArray = npt.NDArray[np.float64]


class NodeTooLarge(PlacementError):
    """The node has more GPUs than the exact placement tables cover."""


@dataclass(frozen=True, eq=False)
class SubsetTables:
    """Tables indexed by GPU bitmask (bit i set = GPU i in the set).

    Bandwidths are kept as levels (1 = slowest distinct bandwidth of the node) so that the
    dynamic programme works on small integers; `levels[l]` maps a level back to GB/s.
    `ring[m]` is the ring level of set m (the pair's link for two GPUs; `top` for one GPU, 0
    for the empty set). `best[m, k]` is the best ring level over k-subsets of m (0 if m has
    fewer than k GPUs). `pair_sum[m]` is the total pairwise bandwidth inside m.
    """

    n: int
    levels: tuple[float, ...]
    ring: LevelArray
    best: LevelArray
    pair_sum: FloatArray
    popcount: IntArray
    by_size: tuple[IntArray, ...]
    reverse: IntArray

    @property
    def top(self) -> int:
        return len(self.levels)

    def gbps(self, level: int) -> float:
        return self.levels[level - 1]


def _bit_reverse(masks: IntArray, n: int) -> IntArray:
    out = np.zeros_like(masks)
    for i in range(n):
        out |= ((masks >> i) & 1) << (n - 1 - i)
    return out


def _ring_levels(level: LevelArray, n: int, top: int) -> LevelArray:
    """Bottleneck Hamiltonian cycle of every subset, by DP over Hamiltonian paths.

    path[m, v] is the best bottleneck of a path that starts at the lowest GPU of m, visits all
    of m, and ends at v (0 if none). Subsets are extended one GPU at a time, layer by layer,
    so each layer is one vectorised step.
    """
    size = 1 << n
    masks = np.arange(size, dtype=np.int64)
    popcount = np.zeros(size, dtype=np.int64)
    for i in range(n):
        popcount += (masks >> i) & 1
    low = np.zeros(size, dtype=np.int64)
    for i in reversed(range(n)):
        low = np.where((masks >> i) & 1 == 1, i, low)

    path = np.zeros((size, n), dtype=np.uint8)
    for v in range(n):
        path[1 << v, v] = top + 1
    for p in range(1, n):
        layer = masks[popcount == p]
        for u in range(n):
            grow = layer[((layer >> u) & 1 == 0) & (low[layer] < u)]
            if grow.size == 0:
                continue
            reach = np.minimum(path[grow], level[:, u]).max(axis=1)
            path[grow | (1 << u), u] = reach

    ring = np.zeros(size, dtype=np.uint8)
    ring[popcount == 1] = top
    for i in range(n):
        for j in range(i + 1, n):
            ring[(1 << i) | (1 << j)] = level[i, j]
    many = masks[popcount >= 3]
    closing = level[:, low[many]].T
    ring[many] = np.minimum(path[many], closing).max(axis=1)
    return ring


@lru_cache(maxsize=64)
def subset_tables(topology: NodeTopology) -> SubsetTables:
    """Build (once per distinct topology) the subset tables of `topology`."""
    n = topology.size
    if n > MAX_TABLE_GPUS:
        raise NodeTooLarge(
            f"topology-aware placement covers nodes of up to {MAX_TABLE_GPUS} GPUs; "
            f"this node has {n}"
        )
    bw = np.array(topology.bandwidth_matrix, dtype=np.float64)
    distinct = sorted({float(bw[i, j]) for i in range(n) for j in range(n) if i != j})
    levels = tuple(distinct) if distinct else (0.0,)
    level = np.zeros((n, n), dtype=np.uint8)
    for idx, value in enumerate(levels, start=1):
        level[(bw == value) & ~np.eye(n, dtype=bool)] = idx
    top = len(levels)

    size = 1 << n
    masks = np.arange(size, dtype=np.int64)
    popcount = np.zeros(size, dtype=np.int64)
    for i in range(n):
        popcount += (masks >> i) & 1

    ring = _ring_levels(level, n, top)

    best = np.zeros((size, n + 1), dtype=np.uint8)
    for k in range(1, n + 1):
        col = np.where(popcount == k, ring, 0).astype(np.uint8)
        # A max over all subsets of each mask, one bit at a time (a subset-sum transform).
        for i in range(n):
            bit = 1 << i
            has = masks[(masks & bit) != 0]
            col[has] = np.maximum(col[has], col[has ^ bit])
        best[:, k] = col

    pair_sum = np.zeros(size, dtype=np.float64)
    for i in range(n):
        for j in range(i + 1, n):
            both = ((masks >> i) & 1) & ((masks >> j) & 1)
            pair_sum += both * bw[i, j]

    by_size = tuple(masks[popcount == k] for k in range(n + 1))
    return SubsetTables(
        n=n,
        levels=levels,
        ring=ring,
        best=best,
        pair_sum=pair_sum,
        popcount=popcount,
        by_size=by_size,
        reverse=_bit_reverse(masks, n),
    )


def to_mask(gpus: object) -> int:
    """Bitmask of an iterable of GPU indices."""
    mask = 0
    for g in gpus:  # type: ignore[attr-defined]
        mask |= 1 << int(g)
    return mask


def from_mask(mask: int) -> tuple[int, ...]:
    """Sorted GPU indices of a bitmask."""
    out = []
    i = 0
    while mask:
        if mask & 1:
            out.append(i)
        mask >>= 1
        i += 1
    return tuple(out)
