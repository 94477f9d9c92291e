"""place_gang against a brute force over every placement of a gang on small clusters.

The reference enumerates every way to spread the workers over the nodes (w_i workers on node i)
and, for each node, every free subset of w_i x gpus_per_worker GPUs, with ring bandwidths from
tests/brute.py. It knows nothing of toposched's subset tables, prefixes or thresholds.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from functools import cache
from itertools import combinations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.brute import brute_ring
from tests.strategies import topologies
from toposched.placement.capacity import Capacity
from toposched.placement.gang import GangRequest, Placement, Shortfall, place_gang
from toposched.placement.request import Mode
from toposched.topology import NodeTopology, preset
from toposched.topology.cluster import (
    SCHEDULE_LABEL,
    Eligibility,
    Node,
    NodeSelector,
    Tier,
    tier_of,
)
from toposched.topology.resources import ANY_FIT, UNKNOWN_HARDWARE, Hardware, WorkerFit

GIB = 2**30

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Values below, between and above the node links (SYS 6 .. NV18 450 GB/s), so that sometimes the
# network and sometimes a node's ring is the bottleneck.
NETWORK_VALUES = (3.125, 6.25, 12.5, 100.0, 1000.0)
NESTED_PRESETS = ("pcie-4gpu-2socket", "pcie-8gpu-2socket", "hgx-h100")


# ---------------------------------------------------------------- brute-force reference


@cache
def rings_of(topology: NodeTopology) -> dict[tuple[int, ...], float]:
    """Brute-force ring of every subset of two or more GPUs, keyed by sorted tuple."""
    bw = topology.bandwidth_matrix
    out: dict[tuple[int, ...], float] = {}
    for size in range(2, topology.size + 1):
        for subset in combinations(range(topology.size), size):
            ring = brute_ring(bw, subset)
            assert ring is not None
            out[subset] = ring
    return out


def ring_or_inf(topology: NodeTopology, gpus: Sequence[int]) -> float:
    """Ring of a node's share of a gang; one GPU has nothing to cross (no limit)."""
    members = tuple(sorted(gpus))
    return math.inf if len(members) < 2 else rings_of(topology)[members]


@cache
def best_ring(topology: NodeTopology, avail: tuple[int, ...], count: int) -> float:
    """Best ring over every `count`-subset of the available GPUs."""
    return max(ring_or_inf(topology, s) for s in combinations(avail, count))


def spreads(workers: int, room: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Every vector w with sum(w) == workers and 0 <= w[i] <= room[i]."""
    if not room:
        if workers == 0:
            yield ()
        return
    for w in range(min(workers, room[0]) + 1):
        for rest in spreads(workers - w, room[1:]):
            yield (w, *rest)


@dataclass(frozen=True)
class Case:
    nodes: tuple[Node, ...]
    busy: tuple[frozenset[int], ...]
    excluded: tuple[frozenset[int], ...]
    present: tuple[bool, ...]
    aware: tuple[bool, ...]
    request: GangRequest
    network: dict[Tier, float]
    held: tuple[tuple[int, int], ...] = ()  # millicores and bytes other jobs hold, per node

    def avail(self, i: int) -> tuple[int, ...]:
        """GPUs of node i the gang may use: present, admitted by its eligibility (labels, GPU
        type and memory), not busy, not excluded."""
        node = self.nodes[i]
        if not self.present[i] or not self.request.where.admits(node, node.labels):
            return ()
        blocked = self.busy[i] | self.excluded[i]
        return tuple(g for g in range(self.nodes[i].size) if g not in blocked)

    def room(self, i: int) -> int:
        """Workers node i holds: by its usable GPUs, and by its free CPUs and memory."""
        by_gpus = len(self.avail(i)) // self.request.gpus_per_worker
        if not self.held:
            return by_gpus
        hw, (cpus, memory) = self.nodes[i].hardware, self.held[i]
        fit = self.request.fit
        for need, total, used in ((fit.cpus, hw.cpus, cpus), (fit.memory, hw.memory, memory)):
            if need and total is not None:
                by_gpus = min(by_gpus, max(0, total - used) // need)
        return by_gpus

    def capacity(self) -> Capacity:
        cap = Capacity(self.nodes)
        for i, busy in enumerate(self.busy):
            mask = sum(1 << g for g in busy)
            if mask:
                cap.take(i, mask)
        for i, (cpus, memory) in enumerate(self.held):
            cap.hold(i, cpus, memory)
        for i, up in enumerate(self.present):
            if not up:
                cap.remove_node(i)
        return cap

    def exclude(self) -> dict[int, int]:
        return {i: sum(1 << g for g in ex) for i, ex in enumerate(self.excluded) if ex}


def brute_optima(case: Case) -> dict[tuple[int, Tier], float]:
    """For each (nodes used, tier) that admits a placement, the best bottleneck of the nodes'
    rings over every placement with that many nodes at that tier (inf: no node has a ring)."""
    req = case.request
    g = req.gpus_per_worker
    avails = [case.avail(i) for i in range(len(case.nodes))]
    room = [case.room(i) for i in range(len(case.nodes))]
    out: dict[tuple[int, Tier], float] = {}
    for w in spreads(req.workers, room):
        used = [i for i, wi in enumerate(w) if wi]
        tier = tier_of(case.nodes[i] for i in used)
        if tier > req.widest and len(used) > 1:
            continue
        bottleneck = min(
            (best_ring(case.nodes[i].topology, avails[i], w[i] * g) for i in used),
            default=math.inf,
        )
        key = (len(used), tier)
        out[key] = max(out.get(key, -math.inf), bottleneck)
    return out


# ---------------------------------------------------------------- strategies


@st.composite
def hierarchical_topologies(draw: st.DrawFn, max_gpus: int = 5) -> NodeTopology:
    """A PCIe tree (sockets > switches > optional NVLink-bridged pairs): its rings nest."""
    n = draw(st.integers(2, max_gpus))
    socket = [draw(st.integers(0, 1)) for _ in range(n)]
    switch = [(socket[i], draw(st.integers(0, 1))) for i in range(n)]
    bridge = [(switch[i], draw(st.integers(0, 1))) for i in range(n)]
    bridged = draw(st.booleans())
    nv = draw(st.sampled_from(["NV1", "NV2", "NV4"]))
    under_switch = draw(st.sampled_from(["PIX", "PXB"]))
    same_socket = draw(st.sampled_from(["PHB", "NODE"]))

    def code(i: int, j: int) -> str:
        if i == j:
            return "X"
        if bridged and bridge[i] == bridge[j]:
            return nv
        if switch[i] == switch[j]:
            return under_switch
        return same_socket if socket[i] == socket[j] else "SYS"

    return NodeTopology.from_codes(
        [[code(i, j) for j in range(n)] for i in range(n)], numa=socket, name="tree"
    )


@st.composite
def uniform_topologies(draw: st.DrawFn, max_gpus: int = 5) -> NodeTopology:
    """Every pair on the same link (NVSwitch, or one PCIe switch)."""
    n = draw(st.integers(2, max_gpus))
    link = draw(st.sampled_from(["NV6", "NV12", "NV18", "PIX"]))
    codes = [["X" if i == j else link for j in range(n)] for i in range(n)]
    return NodeTopology.from_codes(codes, name="uniform")


any_small_topology = st.one_of(
    topologies(min_gpus=2, max_gpus=4), st.just(preset("pcie-4gpu-2socket"))
)
tree_topology = st.one_of(
    st.sampled_from([preset("pcie-4gpu-2socket"), preset("pcie-8gpu-2socket")]),
    hierarchical_topologies(),
)
nested_topology = st.one_of(
    st.sampled_from([preset(name) for name in NESTED_PRESETS]),
    hierarchical_topologies(),
    uniform_topologies(),
)
networks = st.builds(
    lambda r, p, c: {Tier.RACK: r, Tier.POD: p, Tier.CLUSTER: c},
    *(st.sampled_from(NETWORK_VALUES) for _ in range(3)),
)


@st.composite
def cases(
    draw: st.DrawFn,
    topology: st.SearchStrategy[NodeTopology],
    max_workers: int = 4,
    max_per_worker: int = 2,
    extras: bool = True,
    labels: bool = False,
    pools: bool = False,
    hardware: bool = False,
) -> Case:
    count = draw(st.integers(2, 4))
    nodes, busy, excluded, present, aware = [], [], [], [], []
    held: list[tuple[int, int]] = []
    for i in range(count):
        topo = draw(topology)
        node_aware = not (labels and draw(st.booleans()))
        node_labels = {} if node_aware else {SCHEDULE_LABEL: "default"}
        if pools:
            node_labels["pool"] = draw(st.sampled_from(["a", "b"]))
        nodes.append(
            Node(
                f"n{i}",
                topo,
                rack=draw(st.sampled_from(["r0", "r1"])),
                pod=draw(st.sampled_from(["p0", "p0", "p1"])),
                labels=node_labels,
                hardware=draw(machines()) if hardware else UNKNOWN_HARDWARE,
            )
        )
        held.append((draw(st.integers(0, 4)) * 1000, draw(st.integers(0, 4)) * GIB))
        aware.append(node_aware)
        gpus = st.integers(0, topo.size - 1)
        busy.append(frozenset(draw(st.sets(gpus, max_size=topo.size - 1))))
        excluded.append(frozenset(draw(st.sets(gpus, max_size=2))) if extras else frozenset())
        present.append(not (extras and draw(st.integers(0, 5)) == 0))
    case = Case(
        tuple(nodes),
        tuple(busy),
        tuple(excluded),
        tuple(present),
        tuple(aware),
        GangRequest(1, 1),
        draw(networks),
        tuple(held) if hardware else (),
    )
    g = draw(st.integers(1, max_per_worker))
    # Mostly gangs the cluster could hold (one more worker at most); half the time more
    # workers than any one node can take: the multi-node cases random requests meet rarely.
    room = [len(case.avail(i)) // g for i in range(count)]
    workers = st.integers(1, max(1, min(max_workers, sum(room) + 1)))
    where, fit = Eligibility(), ANY_FIT
    if hardware:
        types = draw(st.sampled_from([(), ("A",), ("b",), ("A", "B")]))
        gpu_memory = draw(st.sampled_from([0, 0, 16 * GIB, 32 * GIB]))
        cpus = draw(st.sampled_from([0, 500, 1000, 2000, 3000]))
        memory = draw(st.sampled_from([0, GIB, 3 * GIB]))
        fit = WorkerFit(types, gpu_memory, cpus, memory)
        where = Eligibility(gpu_types=types, gpu_memory=gpu_memory)
    largest = max(len(case.avail(i)) for i in range(count))
    lo, hi = largest // g + 1, min(sum(room), largest // g + 3)
    if lo <= hi and draw(st.booleans()):
        workers = st.integers(lo, hi)
    widest = st.sampled_from([Tier.NODE, Tier.RACK, Tier.POD, Tier.CLUSTER, Tier.CLUSTER])
    selector = NodeSelector()
    if pools:
        selector = draw(st.sampled_from([NodeSelector.of({"pool": p}) for p in "ab"]))
    where = replace(where, selector=selector)
    request = GangRequest(
        draw(workers), g, draw(widest), draw(st.sampled_from(list(Mode))), where, fit=fit
    )
    return replace(case, request=request)


# ---------------------------------------------------------------- the checks


def check_against_brute_force(case: Case, exact_multi: bool) -> None:
    req = case.request
    result = place_gang(case.capacity(), req, case.network, case.exclude())
    optima = brute_optima(case)
    if not optima:
        assert isinstance(result, Shortfall), result
        assert result.reason
        return
    assert isinstance(result, Placement), (result, optima)

    # Valid: a whole gang on GPUs that are free, not excluded, on present nodes, each used once.
    index = {node.name: i for i, node in enumerate(case.nodes)}
    assert len(result.workers) == req.workers
    seen: set[tuple[str, int]] = set()
    for slot in result.workers:
        assert len(slot.gpus) == req.gpus_per_worker, slot
        avail = case.avail(index[slot.node])
        for gpu in slot.gpus:
            assert gpu in avail, (slot, avail)
            assert (slot.node, gpu) not in seen, slot
            seen.add((slot.node, gpu))
    by_node = result.gpus_by_node()
    used = [index[name] for name in by_node]
    tier = tier_of(case.nodes[i] for i in used)
    assert result.tier == tier
    assert tier <= req.widest or len(used) == 1

    # Fewest nodes, then the lowest tier among placements with that many nodes.
    fewest = min(m for m, _ in optima)
    lowest = min(t for m, t in optima if m == fewest)
    assert (len(used), tier) == (fewest, lowest), (len(used), tier, sorted(optima))

    # Nodes labelled `default` give their lowest usable indices.
    for name, gpus in by_node.items():
        i = index[name]
        if not case.aware[i]:
            assert gpus == case.avail(i)[: len(gpus)], (name, gpus)

    rings = [ring_or_inf(case.nodes[index[n]].topology, gpus) for n, gpus in by_node.items()]
    bottleneck = min(rings)
    if len(used) == 1:
        # Rule 1, exactly: the best ring over every node and every usable k-set.
        if req.gpus == 1:
            assert result.bandwidth_gbps is None
        else:
            assert result.bandwidth_gbps == bottleneck
            if all(case.aware):
                assert bottleneck == optima[(1, Tier.NODE)], (bottleneck, optima)
        return
    assert result.bandwidth_gbps == min(case.network[tier], bottleneck)
    if not all(case.aware):
        return
    best = optima[(fewest, lowest)]
    if exact_multi:
        assert bottleneck == best, (bottleneck, best, by_node)
    else:
        assert bottleneck <= best


@SETTINGS
@given(cases(any_small_topology))
def test_gang_placement_matches_brute_force(case: Case) -> None:
    """Random topologies: existence, validity, fewest nodes and tier, rule 1 in one node; across
    nodes the prefix rule may under-estimate (rings that do not nest), never over-estimate."""
    check_against_brute_force(case, exact_multi=False)


@SETTINGS
@given(cases(nested_topology, max_workers=5, max_per_worker=3))
def test_gang_bottleneck_is_optimal_when_rings_nest(case: Case) -> None:
    """PCIe trees and uniform links: the multi-node bottleneck is the brute-force best too."""
    check_against_brute_force(case, exact_multi=True)


@SETTINGS
@given(cases(any_small_topology, labels=True))
def test_gang_placement_with_default_labelled_nodes(case: Case) -> None:
    """Nodes opted out of topology placement: still whole, valid, fewest nodes, lowest tier."""
    check_against_brute_force(case, exact_multi=False)


@SETTINGS
@given(cases(any_small_topology, labels=True, pools=True))
def test_gang_placement_only_on_nodes_its_selector_matches(case: Case) -> None:
    """A selector (`pool=a` or `pool=b`): the brute force sees only the matching nodes, and the
    placement must equal its optimum there, never touching a node of the other pool."""
    check_against_brute_force(case, exact_multi=False)


@st.composite
def machines(draw: st.DrawFn) -> Hardware:
    """GPU type A or B (or none), 16 or 32 GiB per GPU, 1 to 6 cores or uncounted, 2 to 8 GiB
    or uncounted."""
    return Hardware(
        draw(st.sampled_from(["A", "B", ""])),
        draw(st.sampled_from([16 * GIB, 32 * GIB])),
        draw(st.one_of(st.none(), st.integers(1, 6).map(lambda c: c * 1000))),
        draw(st.one_of(st.none(), st.integers(2, 8).map(lambda m: m * GIB))),
    )


@SETTINGS
@given(cases(any_small_topology, hardware=True))
def test_gang_placement_with_types_cpus_and_memory(case: Case) -> None:
    """GPU types and memory rule nodes out; CPUs and memory bound the workers a node takes:
    the brute force sees only what fits, and the placement must equal its optimum there."""
    check_against_brute_force(case, exact_multi=False)


@SETTINGS
@given(cases(nested_topology, max_workers=5, max_per_worker=3, hardware=True))
def test_gang_bottleneck_with_cpus_and_memory_is_optimal_when_rings_nest(case: Case) -> None:
    check_against_brute_force(case, exact_multi=True)


@st.composite
def multi_node_cases(draw: st.DrawFn, topology: st.SearchStrategy[NodeTopology]) -> Case:
    """Gangs that no one node can take but the cluster can (where a wider tier allows)."""
    case = draw(cases(topology, max_per_worker=2))
    g = case.request.gpus_per_worker
    room = [case.room(i) for i in range(len(case.nodes))]
    largest = max(len(case.avail(i)) for i in range(len(case.nodes)))
    assume(largest // g + 1 <= sum(room))
    workers = draw(st.integers(largest // g + 1, min(sum(room), largest // g + 2)))
    widest = draw(st.sampled_from([Tier.RACK, Tier.POD, Tier.CLUSTER, Tier.CLUSTER]))
    return replace(case, request=replace(case.request, workers=workers, widest=widest))


@SETTINGS
@given(multi_node_cases(st.one_of(tree_topology, nested_topology)))
def test_multi_node_bottleneck_is_optimal_when_rings_nest(case: Case) -> None:
    check_against_brute_force(case, exact_multi=True)


@SETTINGS
@given(multi_node_cases(any_small_topology))
def test_multi_node_placement_on_random_topologies(case: Case) -> None:
    check_against_brute_force(case, exact_multi=False)


# ---------------------------------------------------------------- how far a gang may split


def brute_fewest_ever(case: Case, failed: Sequence[frozenset[int]], tier: Tier) -> int | None:
    """The fewest nodes of one domain of `tier` that could hold the gang with nothing else
    running: every present node it may use, less its failed GPUs, less what its CPUs and
    memory cannot hold; by enumerating every spread of the workers."""
    req = case.request
    g = req.gpus_per_worker
    room: list[int] = []
    for i, node in enumerate(case.nodes):
        if not case.present[i] or not req.where.admits(node, node.labels):
            room.append(0)
            continue
        most = (node.size - len(failed[i])) // g
        hw = node.hardware
        fit = req.fit
        for need, total in ((fit.cpus, hw.cpus), (fit.memory, hw.memory)):
            if need and total is not None:
                most = min(most, total // need)
        room.append(most)
    best: int | None = None
    for w in spreads(req.workers, room):
        used = [i for i, wi in enumerate(w) if wi]
        if len(used) > 1 and tier_of(case.nodes[i] for i in used) > tier:
            continue
        if best is None or len(used) < best:
            best = len(used)
    return best


def brute_allowed(
    case: Case, failed: Sequence[frozenset[int]], extra: int
) -> tuple[int, Tier] | None:
    """The fewest nodes, then the lowest tier, of the placements now that `extra_nodes` allows:
    one node, or a split over at most `extra` more nodes than the fewest that could ever hold
    the gang in one domain of the split's own tier (a wider tier never tightens a narrower
    one's limit). None: no placement now is allowed."""
    req = case.request
    g = req.gpus_per_worker
    room = [case.room(i) for i in range(len(case.nodes))]
    ever: dict[Tier, int | None] = {}
    best: tuple[int, Tier] | None = None
    for w in spreads(req.workers, room):
        used = [i for i, wi in enumerate(w) if wi]
        tier = tier_of(case.nodes[i] for i in used)
        if len(used) > 1:
            if tier > req.widest:
                continue
            if tier not in ever:
                ever[tier] = brute_fewest_ever(case, failed, tier)
            fewest = ever[tier]
            assert fewest is not None  # it fits now, so on an empty cluster
            if len(used) > fewest + extra:
                continue
        assert all(len(case.avail(i)) >= w[i] * g for i in used)
        if best is None or (len(used), tier) < best:
            best = (len(used), tier)
    return best


@st.composite
def split_cases(draw: st.DrawFn) -> tuple[Case, tuple[frozenset[int], ...], int]:
    """Multi-node gangs on nodes with failed GPUs (never free: a subset of the busy ones), and
    how many nodes beyond the fewest they may span."""
    case = draw(cases(any_small_topology, extras=False, hardware=draw(st.booleans())))
    failed = tuple(
        draw(st.one_of(st.just(busy), st.sets(st.sampled_from(sorted(busy))).map(frozenset)))
        if busy
        else frozenset()
        for busy in case.busy
    )
    # Mostly gangs more than one node must take, where the limit can bite.
    g = case.request.gpus_per_worker
    room = [case.room(i) for i in range(len(case.nodes))]
    largest = max(len(case.avail(i)) for i in range(len(case.nodes)))
    if largest // g + 1 <= sum(room) and draw(st.integers(0, 3)):
        workers = draw(st.integers(largest // g + 1, sum(room)))
        widest = draw(st.sampled_from([Tier.RACK, Tier.POD, Tier.CLUSTER]))
        case = replace(case, request=replace(case.request, workers=workers, widest=widest))
    return case, failed, draw(st.sampled_from([0, 0, 1, 2]))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(split_cases())
def test_a_gang_spans_no_more_nodes_than_the_fewest_plus_extra(
    drawn: tuple[Case, tuple[frozenset[int], ...], int],
) -> None:
    """`extra_nodes`, against a brute force over every spread of the workers: a placement when
    one is allowed (one node, or at most `extra` nodes more than the fewest that could ever
    hold the gang in a domain of its tier, failed GPUs less), on the fewest nodes and the
    lowest tier of those allowed; else a shortfall that says the limit where one is refused."""
    case, failed, extra = drawn
    cap = case.capacity()
    for i, gpus in enumerate(failed):
        cap.set_unusable(i, sum(1 << g for g in gpus))
    free = place_gang(cap, case.request, case.network, case.exclude())
    capped = place_gang(cap, replace(case.request, extra_nodes=extra), case.network, case.exclude())
    expected = brute_allowed(case, failed, extra)
    if expected is None:
        assert isinstance(capped, Shortfall), (capped, extra)
        if isinstance(free, Placement):  # refused by the limit alone
            assert "on one node" in capped.reason or "on at most" in capped.reason, capped.reason
        return
    assert isinstance(capped, Placement), (capped, expected)
    used = list(capped.gpus_by_node())
    index = {node.name: i for i, node in enumerate(case.nodes)}
    assert len(capped.workers) == case.request.workers
    assert (len(used), tier_of(case.nodes[index[n]] for n in used)) == expected
    if isinstance(free, Placement) and len(free.gpus_by_node()) == expected[0]:
        assert capped == free  # the limit changes nothing where it allows the best
