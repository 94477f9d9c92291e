"""The exact topology-aware choice of k GPUs in one node (docs/placement.md, rules 1-3).

Rule 1 maximises ring bandwidth over every free k-set (exact, from the subset tables). For the
GPUs of several workers of a gang (`per_worker`), rule 1b then keeps the sets whose split among
the workers gives their own rings the most bandwidth (placement/split.py). Rule 2 breaks ties by
what the choice leaves behind: the best ring still available for later requests of common
sizes, compared largest size first. Rule 3 prefers higher total pairwise bandwidth. Lowest GPU
indices break any remaining tie, so the answer is deterministic. 1-GPU requests have no ring:
`spread` keeps away from busy GPUs under the same PCIe switch, then the same socket; `pack`
harms rule 2 least and sits beside busy GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from toposched.placement.request import Mode, NodePlacement, NodeRequest
from toposched.placement.split import split_gbps
from toposched.placement.tables import IntArray, SubsetTables, from_mask, subset_tables, to_mask
from toposched.topology.node import NodeTopology

DEFAULT_KEEP_SIZES = (8, 4, 2)


@dataclass(frozen=True)
class TopologyAware:
    """The `topology` policy. `keep_sizes`: request sizes whose rings rule 2 protects."""

    keep_sizes: tuple[int, ...] = DEFAULT_KEEP_SIZES

    def place(self, request: NodeRequest) -> NodePlacement:
        gpus = _choose(
            request.topology,
            to_mask(request.free),
            request.gpus,
            request.mode,
            tuple(sorted(set(self.keep_sizes), reverse=True)),
        )
        tables = subset_tables(request.topology)
        ring = None if len(gpus) < 2 else tables.gbps(int(tables.ring[to_mask(gpus)]))
        return NodePlacement(gpus=gpus, ring_bandwidth_gbps=ring)


def _keep_best(candidates: IntArray, score: npt.NDArray[Any]) -> IntArray:
    kept: IntArray = candidates[score == score.max()]
    return kept


def _by_leftover(
    tables: SubsetTables, free: int, candidates: IntArray, sizes: tuple[int, ...]
) -> IntArray:
    """Rule 2: keep the candidates that leave the best rings, largest protected size first."""
    leftover = free & ~candidates
    for size in sizes:
        if candidates.size == 1:
            break
        if 2 <= size <= tables.n:
            candidates = _keep_best(candidates, tables.best[leftover, size])
            leftover = free & ~candidates
    return candidates


def _lowest_indices(tables: SubsetTables, candidates: IntArray) -> int:
    """The candidate whose sorted indices are lexicographically smallest."""
    return int(candidates[np.argmax(tables.reverse[candidates])])


def choose(
    topology: NodeTopology,
    free: int,
    k: int,
    mode: Mode = Mode.PACK,
    keep_sizes: tuple[int, ...] = DEFAULT_KEEP_SIZES,
    per_worker: int = 0,
) -> tuple[int, ...]:
    """The `topology` policy's k GPUs out of the `free` bitmask (k <= free GPUs; memoised),
    for workers of `per_worker` GPUs each where given."""
    return _choose(topology, free, k, mode, keep_sizes, per_worker)


def clear_decision_memo() -> None:
    """Forget memoised decisions (benchmarks time the cost of a question never asked before)."""
    _choose.cache_clear()


# Decisions are memoised per (topology, free set, size, mode): a cluster of identical nodes
# asks the same few questions again and again. The cache is bounded.
@lru_cache(maxsize=1 << 16)
def _choose(
    topology: NodeTopology,
    free: int,
    k: int,
    mode: Mode,
    sizes: tuple[int, ...],
    per_worker: int = 0,
) -> tuple[int, ...]:
    tables = subset_tables(topology)
    if k == 1:
        return (_choose_one(topology, tables, free, mode, sizes),)
    subsets = tables.by_size[k]
    candidates = subsets[(subsets & ~free) == 0]
    candidates = _keep_best(candidates, tables.ring[candidates])
    if 2 <= per_worker < k and candidates.size > 1:
        split = [split_gbps(topology, from_mask(int(c)), per_worker) for c in candidates]
        candidates = _keep_best(candidates, np.array(split))
    candidates = _by_leftover(tables, free, candidates, sizes)
    candidates = _keep_best(candidates, tables.pair_sum[candidates])
    return from_mask(_lowest_indices(tables, candidates))


def _choose_one(
    topology: NodeTopology, tables: SubsetTables, free: int, mode: Mode, sizes: tuple[int, ...]
) -> int:
    n = topology.size
    free_gpus = [g for g in range(n) if free >> g & 1]
    busy = [g for g in range(n) if not free >> g & 1]
    switches, sockets = topology.switches, topology.sockets

    def neighbours(g: int) -> tuple[int, int]:
        same_switch = sum(1 for b in busy if switches[b] == switches[g])
        same_socket = sum(1 for b in busy if sockets[b] == sockets[g])
        return same_switch, same_socket

    candidates = np.array([1 << g for g in free_gpus], dtype=np.int64)
    if mode is Mode.SPREAD:
        quietest = min(neighbours(g) for g in free_gpus)
        candidates = np.array(
            [1 << g for g in free_gpus if neighbours(g) == quietest], dtype=np.int64
        )
        candidates = _by_leftover(tables, free, candidates, sizes)
    else:
        candidates = _by_leftover(tables, free, candidates, sizes)
        crowd = np.array([neighbours(from_mask(int(c))[0]) for c in candidates], dtype=np.int64)
        score = crowd[:, 0] * (n + 1) + crowd[:, 1]
        candidates = _keep_best(candidates, score)
    return from_mask(_lowest_indices(tables, candidates))[0]
