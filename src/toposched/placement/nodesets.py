"""The best nodes for a gang's workers: the best ring each node's free GPUs give per worker
count, how few nodes hold the workers, and the m nodes of one domain with the best bottleneck
ring then the best fit (worked out per class of alike nodes, remembered per domain)."""

from __future__ import annotations

import heapq
import math
from functools import lru_cache
from typing import cast

from toposched.placement.capacity import Capacity
from toposched.placement.levels import Usable
from toposched.placement.tables import from_mask, subset_tables, to_mask
from toposched.topology.node import NodeTopology


def ring_for(topology: NodeTopology, free: int, c: int, aware: bool) -> float:
    """Best ring of c GPUs the node would give (infinite for one GPU: nothing to cross)."""
    if c < 2:
        return math.inf
    tables = subset_tables(topology)
    if aware:
        return tables.gbps(int(tables.best[free, c]))
    return tables.gbps(int(tables.ring[to_mask(from_mask(free)[:c])]))


@lru_cache(maxsize=1 << 16)
def ring_profile(
    topology: NodeTopology, free: int, aware: bool, per_worker: int
) -> tuple[float, ...]:
    """The best ring of 1, 2, ... workers of `per_worker` GPUs the node's free GPUs give: asked
    of every node of every competing domain at every decision, and the same for every node of
    one kind with the same free GPUs."""
    most = free.bit_count() // per_worker
    return tuple(
        ring_for(topology, free, c, aware)
        for c in range(per_worker, most * per_worker + 1, per_worker)
    )


def prefix_capacity(profile: tuple[float, ...], threshold: float) -> int:
    """Most workers w such that every count up to w reaches `threshold` (`profile`: the ring
    of each count, `ring_profile`, cut to the workers the node holds)."""
    w = 0
    for ring in profile:
        if ring < threshold:
            break
        w += 1
    return w


def fewest_of(capacities: list[int], workers: int) -> int | None:
    total = 0
    for m, c in enumerate(sorted(capacities, reverse=True), start=1):
        total += c
        if total >= workers:
            return m
    return None


def least_nodes(domains: list[list[int]], workers: int) -> int | None:
    """The fewest nodes of any one domain (each its nodes' workers) that hold `workers`."""
    fewest: int | None = None
    for holds in domains:
        m = fewest_of(holds, workers)
        if m is not None and (fewest is None or m < fewest):
            fewest = m
    return fewest


# The sort key and plan of `best_nodes`, or None.
Best = tuple[tuple[float, ...], list[tuple[int, int, int]]] | None
# Domains remembered at most: past it the memo starts again.
NODES_MEMO_SIZE = 1 << 14


def best_nodes(cap: Capacity, members: Usable, workers: int, g: int, m: int) -> Best:
    """`best_nodes_now`, remembered in `cap` until a node, its labels or hardware change."""
    key = (workers, g, m, tuple(members))
    memo = cap.nodes_memo
    if key in memo:
        return cast(Best, memo[key])
    if len(memo) >= NODES_MEMO_SIZE:
        memo.clear()
    found = memo[key] = best_nodes_now(cap, members, workers, g, m)
    return found


def best_nodes_now(
    cap: Capacity, members: list[tuple[int, int, int]], workers: int, g: int, m: int
) -> Best:
    """The m nodes of one domain with the best bottleneck ring, then the best fit; `members`
    are (node index, free mask, most workers it holds).

    Returns (sort key, [(node index, free mask, workers there)]) or None if m nodes cannot.
    """
    # Nodes alike in the rings they give and their free GPUs differ only by index: counted
    # per class, most domains of alike nodes have a few classes however many nodes.
    classes: dict[tuple[tuple[float, ...], int], list[tuple[int, int]]] = {}
    for i, free, most in members:
        profile = ring_profile(cap.nodes[i].topology, free, cap.aware[i], g)[:most]
        classes.setdefault((profile, free.bit_count()), []).append((i, free))
    thresholds = {math.inf}
    for (profile, _), nodes in classes.items():
        thresholds.update(profile)
        nodes.sort()
    for threshold in sorted(thresholds, reverse=True):
        # (workers it holds, free GPUs) -> its nodes: the largest capacity first; among equals
        # the fullest node (best fit), then the lowest index.
        buckets: dict[tuple[int, int], list[list[tuple[int, int]]]] = {}
        for (profile, count), nodes in classes.items():
            holds = prefix_capacity(profile, threshold)
            if holds > 0:
                buckets.setdefault((holds, count), []).append(nodes)
        order = sorted(buckets, key=lambda b: (-b[0], b[1]))
        total, left = 0, m
        for bucket in order:
            take = min(left, sum(len(nodes) for nodes in buckets[bucket]))
            total, left = total + bucket[0] * take, left - take
            if not left:
                break
        if total < workers:
            continue
        merged = {
            b: nodes[0] if len(nodes) == 1 else list(heapq.merge(*nodes))
            for b, nodes in buckets.items()
        }
        taken: list[tuple[int, int, int]] = []
        used: dict[tuple[int, int], int] = {}
        left = m - 1
        for bucket in order:
            if not left:
                break
            take = used[bucket] = min(left, len(merged[bucket]))
            taken.extend((i, free, bucket[0]) for i, free in merged[bucket][:take])
            left -= take
        remainder = workers - sum(w for _, _, w in taken)
        # The fullest, then lowest, of the nodes not taken that hold the rest.
        last = min(
            (bucket[1], *merged[bucket][used.get(bucket, 0)])
            for bucket in order
            if bucket[0] >= remainder and used.get(bucket, 0) < len(merged[bucket])
        )
        plan = [*taken, (last[1], last[2], remainder)]
        spare = sum(free.bit_count() for _, free, _ in plan) - workers * g
        return (-threshold, spare, min(i for i, _, _ in plan)), plan
    return None
