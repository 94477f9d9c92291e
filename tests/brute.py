"""Brute-force references the optimised code is checked against (small nodes only)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise, permutations

from toposched.placement.gang import GangRequest
from toposched.topology.cluster import Cluster
from toposched.topology.mig import COMPUTE_SLICES, MEMORY_SLICES, MigTable
from toposched.topology.node import NodeTopology


def brute_ring(bw: Sequence[Sequence[float]], gpus: Iterable[int]) -> float | None:
    """Max over cyclic orders (first GPU fixed) of the slowest link along the cycle."""
    members = sorted(set(gpus))
    if len(members) < 2:
        return None
    if len(members) == 2:
        return bw[members[0]][members[1]]
    first, rest = members[0], members[1:]
    return max(
        min(bw[a][b] for a, b in pairwise(cycle))
        for cycle in ((first, *order, first) for order in permutations(rest))
    )


# MIG: a GPU's instances as sets of memory slices, straight from a table's profiles.
MigLayout = Sequence[tuple[MigTable, Sequence[tuple[str, int]]]]


def brute_mig_fits(table: MigTable, used: Sequence[tuple[str, int]], name: str, start: int) -> bool:
    """Whether an instance of `name` at `start` may join `used`: one of its starts, no memory
    slice taken twice, no more of it than allowed, no more compute slices than the GPU has."""
    profile = next((p for p in table.profiles if p.name == name), None)
    if profile is None or start not in profile.starts:
        return False
    taken: set[int] = set()
    compute = profile.compute
    for other, at in used:
        p = next(q for q in table.profiles if q.name == other)
        taken |= set(range(at, at + p.slices))
        compute += p.compute
    mine = set(range(start, start + profile.slices))
    same = sum(1 for other, _ in used if other == name)
    return not mine & taken and same < profile.most and compute <= COMPUTE_SLICES


def brute_mig_largest(layout: MigLayout) -> tuple[int, int]:
    """The (compute, memory) slices of the largest profile placeable anywhere in `layout`
    ((0, 0): none), trying every profile at every start of every GPU."""
    return max(
        (
            (p.compute, p.slices)
            for table, used in layout
            for p in table.profiles
            for start in range(MEMORY_SLICES)
            if brute_mig_fits(table, used, p.name, start)
        ),
        default=(0, 0),
    )


def brute_mig_best(layout: MigLayout, name: str) -> tuple[int, int] | None:
    """The largest profile left placeable by the best placement of one `name` instance in
    `layout` (every GPU, every start), or None where it fits nowhere."""
    results = [
        brute_mig_largest(
            [(t, (*u, (name, start)) if k == g else u) for k, (t, u) in enumerate(layout)]
        )
        for g, (table, used) in enumerate(layout)
        for start in range(MEMORY_SLICES)
        if brute_mig_fits(table, used, name, start)
    ]
    return max(results) if results else None


@dataclass(frozen=True)
class GangCase:
    """A small cluster, each node's busy GPUs (a mask), and the gang asked of it."""

    cluster: Cluster
    busy: tuple[int, ...]
    request: GangRequest


def nvlink_mesh(n: int) -> NodeTopology:
    """`n` GPUs, one NVLink between every pair: every ring inside the node is alike (25 GB/s),
    so only the network and the node count tell placements apart."""
    return NodeTopology.from_codes([["X" if i == j else "NV1" for j in range(n)] for i in range(n)])


def spreads(workers: int, room: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Every way to put `workers` on nodes that hold at most `room[i]` each, in node order."""
    if not room:
        if workers == 0:
            yield ()
        return
    for here in range(min(workers, room[0]) + 1):
        for rest in spreads(workers - here, room[1:]):
            yield (here, *rest)
