"""Declared network levels: the best bottleneck, then the fewest nodes, against brute force."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.brute import GangCase, nvlink_mesh, spreads
from toposched.placement.capacity import Capacity
from toposched.placement.gang import GangRequest, Placement, place_gang
from toposched.topology.cluster import Cluster, Node, Tier
from toposched.topology.levels import Level

# Inside a node every ring is 25 GB/s (nvlink_mesh), faster than any network level below: the
# network is the bottleneck of every gang across nodes.


@st.composite
def cases(draw: st.DrawFn) -> GangCase:
    # Leaf and spine as fast (a non-blocking fabric) or the spine slower (oversubscribed);
    # beyond the spines as fast or slower still.
    leaf = 10.0
    spine = draw(st.sampled_from((leaf, leaf / 2)))
    beyond = draw(st.sampled_from((spine, spine / 2)))
    levels = (Level("leaf", leaf, 1.0), Level("spine", spine, 3.0))
    nodes: list[Node] = []
    busy: list[int] = []
    leaves = 0
    for spine_no in range(draw(st.integers(1, 2))):
        for _ in range(draw(st.integers(1, 2))):
            for _ in range(draw(st.integers(1, 3))):
                size = draw(st.integers(2, 4))
                values = {"leaf": f"l{leaves}", "spine": f"s{spine_no}"}
                nodes.append(Node(f"n{len(nodes)}", nvlink_mesh(size), levels=values))
                busy.append(draw(st.integers(0, (1 << size) - 1)))
            leaves += 1
    cluster = Cluster(tuple(nodes), {Tier.CLUSTER: beyond}, levels=levels)
    request = GangRequest(draw(st.integers(2, 6)), draw(st.integers(1, 2)))
    return GangCase(cluster, tuple(busy), request)


def outcome(cluster: Cluster, used: set[int]) -> tuple[float, int, int]:
    """(network GB/s, nodes, level: 0 leaf, 1 spine, 2 beyond) of a gang on `used`."""
    nodes = cluster.nodes
    for at, level in enumerate(cluster.levels):
        if len({tuple(nodes[i].levels[lv.name] for lv in cluster.levels[at:]) for i in used}) == 1:
            return level.gbps, len(used), at
    return cluster.beyond_gbps, len(used), len(cluster.levels)


@settings(max_examples=400, deadline=None)
@given(cases())
def test_the_best_bottleneck_then_the_fewest_nodes(case: GangCase) -> None:
    """Whole inside the fastest level that holds it (a split across a slower uplink never
    wins for fewer nodes); among levels as fast, the fewest nodes, then the narrower level."""
    cluster, g = case.cluster, case.request.gpus_per_worker
    free = [n.size - bin(b).count("1") for n, b in zip(cluster.nodes, case.busy, strict=True)]
    if any(f >= case.request.gpus for f in free):
        return  # one node holds it
    found = [
        outcome(cluster, {i for i, w in enumerate(spread) if w})
        for spread in spreads(case.request.workers, [f // g for f in free])
    ]
    cap = Capacity(cluster.nodes, cluster.all_levels, declared=True)
    for i, mask in enumerate(case.busy):
        if mask:
            cap.take(i, mask)
    result = place_gang(cap, case.request, cluster.network_gbps)
    if not found:
        assert not isinstance(result, Placement)
        return
    assert isinstance(result, Placement), result
    index = {n.name: i for i, n in enumerate(cluster.nodes)}
    used = {index[slot.node] for slot in result.workers}
    best = max(found, key=lambda o: (o[0], -o[1], -o[2]))
    assert outcome(cluster, used) == best
    assert result.bandwidth_gbps == best[0]
    assert result.gpus == case.request.gpus
