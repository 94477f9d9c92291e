"""Capacity's per-domain tally stays equal to a count from scratch as nodes and GPUs change."""

from __future__ import annotations

import random

from toposched.placement.capacity import Capacity
from toposched.topology.clusterfile import parse_shorthand


def recount(cap: Capacity) -> tuple[list[dict[tuple[str, ...], int]], list[set[tuple[str, ...]]]]:
    free: list[dict[tuple[str, ...], int]] = [{} for _ in cap.levels]
    in_use: list[set[tuple[str, ...]]] = [set() for _ in cap.levels]
    for i in cap.present_indices():
        for at, key in enumerate(cap.domains[i]):
            free[at][key] = free[at].get(key, 0) + cap.free[i].bit_count()
            if cap.free[i].bit_count() < cap.nodes[i].size:
                in_use[at].add(key)
    return free, in_use


def test_the_tally_follows_takes_gives_removals_and_returns() -> None:
    cluster = parse_shorthand("16*hgx-h100/leaf=4/spine=8")
    cap = Capacity(cluster.nodes, cluster.all_levels, declared=True)
    rng = random.Random(5)
    for _ in range(300):
        i = rng.randrange(len(cluster.nodes))
        action = rng.random()
        if not cap.present[i]:
            cap.add_node(cluster.nodes[i])
        elif action < 0.1:
            cap.remove_node(i)
        elif action < 0.55 and cap.free[i]:
            cap.take(i, 1 << rng.choice([g for g in range(8) if cap.free[i] >> g & 1]))
        elif cap.free[i] != 0xFF:
            cap.give(i, 1 << rng.choice([g for g in range(8) if not cap.free[i] >> g & 1]))
        free, in_use = recount(cap)
        for at in range(len(cap.levels)):
            assert {k: v for k, v in cap.tally.free[at].items() if v} == {
                k: v for k, v in free[at].items() if v
            }
            assert {k for k, v in cap.tally.in_use[at].items() if v > 0} == in_use[at]
