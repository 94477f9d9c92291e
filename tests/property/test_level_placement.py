"""Gangs whole inside one domain of the fastest level, against brute force on small clusters."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.brute import GangCase, nvlink_mesh, spreads
from toposched.placement.capacity import Capacity
from toposched.placement.gang import GangRequest, Placement, Shortfall, place_gang
from toposched.topology.cluster import Cluster, Node, Tier
from toposched.topology.levels import Level

CLIQUE = Level("clique", 100.0, nvlink=True)
LEAF = Level("leaf", 10.0)
BEYOND = 5.0
LINK_GBPS = 25.0  # NV1 between every pair of GPUs inside a node: rings nest


@st.composite
def cases(draw: st.DrawFn, level: str | None = None) -> GangCase:
    leaves = draw(st.integers(1, 2))
    nodes: list[Node] = []
    busy: list[int] = []
    clique = 0
    for leaf in range(leaves):
        for _ in range(draw(st.integers(1, 2))):
            for _ in range(draw(st.integers(1, 3))):
                size = draw(st.integers(2, 4))
                values = {"clique": f"c{clique}", "leaf": f"l{leaf}"}
                nodes.append(Node(f"n{len(nodes)}", nvlink_mesh(size), levels=values))
                busy.append(draw(st.integers(0, (1 << size) - 1)))
            clique += 1
    cluster = Cluster(tuple(nodes), {Tier.CLUSTER: BEYOND}, levels=(CLIQUE, LEAF))
    g = draw(st.integers(1, 2))
    request = GangRequest(draw(st.integers(2, 6)), g, level=level)
    return GangCase(cluster, tuple(busy), request)


def capacity(case: GangCase) -> Capacity:
    cap = Capacity(case.cluster.nodes, case.cluster.all_levels)
    for i, mask in enumerate(case.busy):
        if mask:
            cap.take(i, mask)
    return cap


@dataclass(frozen=True)
class Option:
    nodes: tuple[int, ...]
    level: int | None  # narrowest level one domain of which holds every node (None: none)
    rank: tuple[int, ...]  # (free GPUs of that domain, 1 if the leaf above is wholly free)
    bottleneck: float


def options(case: GangCase) -> list[Option]:
    """Every spread of the workers over the nodes' free GPUs, on more than one node."""
    nodes, g = case.cluster.nodes, case.request.gpus_per_worker
    free = [n.size - bin(b).count("1") for n, b in zip(nodes, case.busy, strict=True)]
    out = []
    for spread in spreads(case.request.workers, [f // g for f in free]):
        used = tuple(i for i, w in enumerate(spread) if w)
        if len(used) < 2:
            continue
        cliques = {nodes[i].levels["clique"] for i in used}
        leaves = {nodes[i].levels["leaf"] for i in used}
        level = 0 if len(cliques) == 1 else 1 if len(leaves) == 1 else None
        rank: tuple[int, ...] = ()
        if level == 0:
            (clique,) = cliques
            (leaf,) = leaves
            members = [i for i, n in enumerate(nodes) if n.levels["clique"] == clique]
            in_leaf = [i for i, n in enumerate(nodes) if n.levels["leaf"] == leaf]
            whole = all(case.busy[i] == 0 for i in in_leaf)
            rank = (sum(free[i] for i in members), int(whole))
        gbps = [CLIQUE.gbps if level == 0 else LEAF.gbps if level == 1 else BEYOND]
        gbps += [LINK_GBPS for i in used if spread[i] * g >= 2]
        out.append(Option(used, level, rank, min(gbps)))
    return out


def one_node_holds(case: GangCase) -> bool:
    k = case.request.gpus
    return any(
        n.size - bin(b).count("1") >= k for n, b in zip(case.cluster.nodes, case.busy, strict=True)
    )


def used_nodes(case: GangCase, result: Placement) -> tuple[int, ...]:
    names = [n.name for n in case.cluster.nodes]
    return tuple(sorted({names.index(s.node) for s in result.workers}))


@settings(max_examples=300, deadline=None)
@given(cases())
def test_a_gang_goes_whole_into_the_best_nvlink_domain(case: GangCase) -> None:
    """In one clique whenever one holds it (its bottleneck, 100 GB/s or the nodes' 25, beats
    any split's 10 or 5); then the fewest nodes, the smallest clique, one under a leaf already
    in use; then the best bottleneck among those."""
    if one_node_holds(case):
        return
    found = options(case)
    result = place_gang(capacity(case), case.request, case.cluster.network_gbps)
    inside = [o for o in found if o.level == 0]
    if not inside:
        return  # across the network: the fewest-nodes rule, checked by test_gang_placement
    assert isinstance(result, Placement), result
    used = used_nodes(case, result)
    chosen = next(o for o in found if o.nodes == used)
    assert chosen.level == 0
    assert max(o.bottleneck for o in found) == max(o.bottleneck for o in inside)
    best = min((len(o.nodes), o.rank) for o in inside)
    assert (len(chosen.nodes), chosen.rank) == best
    ties = [o for o in inside if (len(o.nodes), o.rank) == best]
    assert result.bandwidth_gbps == max(o.bottleneck for o in ties)
    assert result.gpus == case.request.gpus


@settings(max_examples=200, deadline=None)
@given(cases(level="leaf"))
def test_a_required_level_holds_the_gang_or_says_why(case: GangCase) -> None:
    """topology_level=leaf: the fastest level that holds it, up to one leaf; none: the reason
    names the level."""
    if one_node_holds(case):
        return
    found = [o for o in options(case) if o.level is not None]
    result = place_gang(capacity(case), case.request, case.cluster.network_gbps)
    if not found:
        assert isinstance(result, Shortfall)
        assert "within one leaf (topology_level)" in result.reason
        return
    assert isinstance(result, Placement), result
    chosen = next(o for o in options(case) if o.nodes == used_nodes(case, result))
    assert chosen.level == min(o.level for o in found if o.level is not None)
