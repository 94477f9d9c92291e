"""The `pair-score` policy (a baseline): NVIDIA go-gpuallocator's published best effort.

A pair of GPUs scores 100 per NVLink, 50 under one PCIe switch, 40 across several switches,
30 through a host bridge, 20 within a socket and 10 across sockets; a group scores the sum
over its pairs.
The free GPUs are partitioned in every possible way into groups of the requested size (GPUs
left over when the count does not divide go unscored), the partition with the highest total
wins, and its best group is returned. Written from that description; the "same board" score
(60) is not modelled because neither nvidia-smi's matrix nor our topology records boards.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from toposched.placement.request import NodePlacement, NodeRequest
from toposched.placement.ring import placed
from toposched.topology.links import Path
from toposched.topology.node import NodeTopology

PAIR_SCORES = {Path.PIX: 50, Path.PXB: 40, Path.PHB: 30, Path.NODE: 20, Path.SYS: 10}
NVLINK_SCORE = 100


def pair_score(topology: NodeTopology, i: int, j: int) -> int:
    link = topology.links[i][j]
    if link is None:
        return 0
    if link.path is Path.NV:
        return NVLINK_SCORE * link.nvlinks
    return PAIR_SCORES[link.path]


@dataclass(frozen=True)
class PairScore:
    """The `pair-score` policy (go-gpuallocator's best effort), exhaustive over partitions."""

    def place(self, request: NodeRequest) -> NodePlacement:
        group, _ = best_partition_group(request.topology, request.free, request.gpus)
        return placed(request.topology, group)


def best_partition_group(
    topology: NodeTopology, free: tuple[int, ...], k: int
) -> tuple[tuple[int, ...], int]:
    """The best group of the best partition, and how many partitions were scored."""
    n = topology.size
    score = [[pair_score(topology, i, j) for j in range(n)] for i in range(n)]

    def group_score(group: tuple[int, ...]) -> int:
        return sum(score[a][b] for a, b in combinations(group, 2))

    spare = len(free) % k
    best_total = -1
    best_groups: list[tuple[int, ...]] = []
    groups: list[tuple[int, ...]] = []
    scored = 0

    def walk(rest: tuple[int, ...], spare_left: int, total: int) -> None:
        nonlocal best_total, best_groups, scored
        if not rest:
            scored += 1
            if total > best_total:
                best_total, best_groups = total, list(groups)
            return
        head, tail = rest[0], rest[1:]
        if spare_left:
            walk(tail, spare_left - 1, total)
        for others in combinations(tail, k - 1):
            group = (head, *others)
            groups.append(group)
            remaining = tuple(g for g in tail if g not in others)
            walk(remaining, spare_left, total + group_score(group))
            groups.pop()

    walk(tuple(sorted(free)), spare, 0)
    best_group = max(best_groups, key=lambda g: (group_score(g), [-x for x in g]))
    return best_group, scored
