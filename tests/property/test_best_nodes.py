"""A domain's best nodes counted per class of alike nodes equal the node-by-node reckoning."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.placement.capacity import Capacity
from toposched.placement.levels import Usable
from toposched.placement.nodesets import best_nodes_now, fewest_of, ring_for
from toposched.topology import preset
from toposched.topology.cluster import Node

KINDS = ("dgx1-v100", "hgx-h100", "pcie-8gpu-2socket", "pcie-4gpu-2socket")


def node_by_node(cap: Capacity, members: Usable, workers: int, g: int, m: int) -> object:
    """The reckoning before classes (main at 7f82e13): every node's prefix capacity at every
    threshold, sorted node by node."""

    def prefix(i: int, free: int, threshold: float, most: int) -> int:
        w = 0
        while (
            w < most
            and ring_for(cap.nodes[i].topology, free, (w + 1) * g, cap.aware[i]) >= threshold
        ):
            w += 1
        return w

    thresholds = {math.inf}
    for i, free, most in members:
        for c in range(g, most * g + 1, g):
            thresholds.add(ring_for(cap.nodes[i].topology, free, c, cap.aware[i]))
    for threshold in sorted(thresholds, reverse=True):
        caps = [(prefix(i, free, threshold, most), i, free) for i, free, most in members]
        caps = [c for c in caps if c[0] > 0]
        caps.sort(key=lambda c: (-c[0], c[2].bit_count(), c[1]))
        if sum(c[0] for c in caps[:m]) < workers:
            continue
        taken = caps[: m - 1]
        remainder = workers - sum(c[0] for c in taken)
        last = min(
            (c for c in caps[m - 1 :] if c[0] >= remainder),
            key=lambda c: (c[2].bit_count(), c[1]),
        )
        plan = [(i, free, w) for w, i, free in taken] + [(last[1], last[2], remainder)]
        spare = sum(free.bit_count() for _, free, _ in plan) - workers * g
        return (-threshold, spare, min(i for i, _, _ in plan)), plan
    return None


@st.composite
def domains(draw: st.DrawFn) -> tuple[Capacity, Usable, int, int]:
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=2, max_size=12))
    cap = Capacity([Node(f"n{i}", preset(kind)) for i, kind in enumerate(kinds)])
    g = draw(st.sampled_from((1, 2, 3, 4)))
    members: Usable = []
    for i, node in enumerate(cap.nodes):
        busy = draw(st.integers(0, (1 << node.size) - 1))
        if draw(st.booleans()):  # alike nodes: the same busy set as the one before
            busy = cap.free[i - 1] ^ ((1 << cap.nodes[i - 1].size) - 1) if i else busy
            busy &= (1 << node.size) - 1
        if busy:
            cap.take(i, busy)
        free = cap.free[i]
        most = free.bit_count() // g
        if most:
            members.append((i, free, draw(st.integers(1, most))))
    workers = draw(st.integers(2, 24))
    return cap, members, workers, g


@settings(max_examples=400, deadline=None)
@given(domains())
def test_classes_give_the_node_by_node_answer(domain: tuple[Capacity, Usable, int, int]) -> None:
    """As the placers ask it: with the fewest nodes that hold the gang."""
    cap, members, workers, g = domain
    m = fewest_of([most for _, _, most in members], workers)
    if m is None:
        return
    found = best_nodes_now(cap, members, workers, g, m)
    assert found is not None
    assert found == node_by_node(cap, members, workers, g, m)
