"""Brute-force references the optimised code is checked against (small nodes only)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import pairwise, permutations


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
