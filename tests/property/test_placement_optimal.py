"""The placement core against an independent brute force: rules 1-3, 1-GPU modes, baselines.

Nothing here uses toposched.placement.tables: ring bandwidth is recomputed by trying every
cyclic order, rules 2 and 3 by scoring every free k-set, pair-score by listing every partition.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from itertools import combinations, permutations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.brute import brute_ring
from tests.strategies import LINK_CODES, busy_sets, topologies
from toposched.placement import Mode, NodeRequest, make_policy, ring_bandwidth
from toposched.placement.pair_score import pair_score
from toposched.topology import NodeTopology, preset

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

DEFAULT_SIZES = (8, 4, 2)
# go-gpuallocator's pair scores as docs/placement.md (Baselines) and the pair-score docstring
# give them.
PCIE_SCORE = {"PIX": 50, "PXB": 40, "PHB": 30, "NODE": 20, "SYS": 10}
SMALL_PRESETS = ("dgx1-v100", "dgx-a100", "hgx-h100", "pcie-8gpu-2socket", "pcie-4gpu-2socket")


# ---------------------------------------------------------------- brute-force reference


@cache
def all_rings(topology: NodeTopology) -> dict[tuple[int, ...], float]:
    """Brute-force ring of every subset of two or more GPUs, keyed by sorted tuple."""
    bw = topology.bandwidth_matrix
    out: dict[tuple[int, ...], float] = {}
    for size in range(2, topology.size + 1):
        for subset in combinations(range(topology.size), size):
            ring = brute_ring(bw, subset)
            assert ring is not None
            out[subset] = ring
    return out


def free_of(topology: NodeTopology, busy: frozenset[int]) -> tuple[int, ...]:
    return tuple(g for g in range(topology.size) if g not in busy)


def best_ring_among(rings: dict[tuple[int, ...], float], gpus: tuple[int, ...], size: int) -> float:
    """Best ring over size-subsets of `gpus`, 0 if there are too few."""
    if size < 2 or len(gpus) < size:
        return 0.0
    return max(rings[s] for s in combinations(gpus, size))


def leftover_vector(
    rings: dict[tuple[int, ...], float],
    free: tuple[int, ...],
    chosen: tuple[int, ...],
    sizes: tuple[int, ...],
) -> tuple[float, ...]:
    rest = tuple(g for g in free if g not in chosen)
    return tuple(best_ring_among(rings, rest, s) for s in sizes)


def pair_total(topology: NodeTopology, gpus: tuple[int, ...]) -> float:
    bw = topology.bandwidth_matrix
    return sum(bw[a][b] for a, b in combinations(gpus, 2))


def brute_choice(
    topology: NodeTopology, busy: frozenset[int], k: int, sizes: tuple[int, ...]
) -> tuple[int, ...]:
    """Rules 1-3 by exhaustion; the first best in lexicographic order wins remaining ties."""
    rings = all_rings(topology)
    free = free_of(topology, busy)
    best_key: tuple[object, ...] | None = None
    best: tuple[int, ...] = ()
    for cand in combinations(free, k):  # lexicographic order of sorted tuples
        key = (rings[cand], leftover_vector(rings, free, cand, sizes), pair_total(topology, cand))
        if best_key is None or key > best_key:
            best_key, best = key, cand
    return best


def pair_points(topology: NodeTopology, a: int, b: int) -> int:
    code = topology.codes()[a][b]
    if code.startswith("NV"):
        return 100 * int(code[2:])
    return PCIE_SCORE[code]


def group_points(topology: NodeTopology, group: Iterable[int]) -> int:
    return sum(pair_points(topology, a, b) for a, b in combinations(sorted(group), 2))


def all_partitions(
    free: tuple[int, ...], k: int
) -> set[tuple[frozenset[frozenset[int]], frozenset[int]]]:
    """Every way to cut `free` into groups of k, len(free) % k GPUs left unscored."""
    groups_n = len(free) // k
    out = set()
    for perm in permutations(free):
        groups = frozenset(frozenset(perm[i * k : (i + 1) * k]) for i in range(groups_n))
        out.add((groups, frozenset(perm[groups_n * k :])))
    return out


# ---------------------------------------------------------------- strategies


@st.composite
def coarse_topologies(draw: st.DrawFn, max_gpus: int = 8) -> NodeTopology:
    """Topologies over two or three link kinds: many ties, so rules 2 and 3 and the final
    lowest-index rule decide often (random codes from all kinds rarely tie under rule 1)."""
    n = draw(st.integers(1, max_gpus))
    kinds = draw(st.lists(st.sampled_from(LINK_CODES), min_size=1, max_size=3, unique=True))
    codes = [["X"] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            codes[i][j] = codes[j][i] = draw(st.sampled_from(kinds))
    numa = [draw(st.integers(0, 1)) for _ in range(n)] if draw(st.booleans()) else []
    return NodeTopology.from_codes(codes, numa=numa, name="coarse")


@st.composite
def node_and_busy(draw: st.DrawFn, max_gpus: int = 8) -> tuple[NodeTopology, frozenset[int]]:
    topology = draw(st.one_of(topologies(max_gpus=max_gpus), coarse_topologies(max_gpus)))
    return topology, draw(busy_sets(topology))


@st.composite
def node_busy_subset(draw: st.DrawFn) -> tuple[NodeTopology, tuple[int, ...]]:
    topology = draw(topologies(max_gpus=8))
    subset = draw(st.sets(st.integers(0, topology.size - 1), min_size=1))
    return topology, tuple(sorted(subset))


@st.composite
def any_node(draw: st.DrawFn, max_gpus: int = 8) -> tuple[NodeTopology, frozenset[int]]:
    """A random topology or a small preset, with a random busy set."""
    if draw(st.booleans()):
        topology = preset(draw(st.sampled_from(SMALL_PRESETS)))
    else:
        topology = draw(st.one_of(topologies(max_gpus=max_gpus), coarse_topologies(max_gpus)))
    return topology, draw(busy_sets(topology))


# ---------------------------------------------------------------- the reference itself


def test_brute_ring_hand_cases() -> None:
    bw = ((0, 5, 1, 9), (5, 0, 7, 2), (1, 7, 0, 3), (9, 2, 3, 0))
    assert brute_ring(bw, [0]) is None
    assert brute_ring(bw, [2, 0]) == 1
    # 0-1-2-0: min(5, 7, 1) = 1; the triangle has one cycle.
    assert brute_ring(bw, [0, 1, 2]) == 1
    # 0-3-2-1-0: min(9, 3, 7, 5) = 3; 0-1-3-2-0: min(5, 2, 3, 1) = 1; 0-1-2-3-0: min(5,7,3,9) = 3.
    assert brute_ring(bw, [0, 1, 2, 3]) == 3


# ---------------------------------------------------------------- rule 1, exactly


@FAST
@given(node_busy_subset())
def test_ring_bandwidth_matches_brute_force(case: tuple[NodeTopology, tuple[int, ...]]) -> None:
    topology, subset = case
    assert ring_bandwidth(topology, subset) == brute_ring(topology.bandwidth_matrix, subset)


@FAST
@given(node_and_busy())
def test_topology_policy_ring_is_optimal(case: tuple[NodeTopology, frozenset[int]]) -> None:
    topology, busy = case
    free = free_of(topology, busy)
    rings = all_rings(topology)
    policy = make_policy("topology")
    for k in range(2, len(free) + 1):
        placed = policy.place(NodeRequest(topology, k, busy))
        gpus = placed.gpus
        assert len(gpus) == k
        assert list(gpus) == sorted(set(gpus))
        assert not set(gpus) & busy
        assert all(0 <= g < topology.size for g in gpus)
        optimum = max(rings[s] for s in combinations(free, k))
        assert rings[gpus] == optimum, (k, gpus, optimum)
        assert placed.ring_bandwidth_gbps == brute_ring(topology.bandwidth_matrix, gpus)


# ---------------------------------------------------------------- rules 2 and 3, exactly


@SLOW
@given(node_and_busy(max_gpus=7))
def test_topology_policy_is_the_brute_force_argmax(
    case: tuple[NodeTopology, frozenset[int]],
) -> None:
    topology, busy = case
    free = free_of(topology, busy)
    policy = make_policy("topology")
    for k in range(2, len(free) + 1):
        placed = policy.place(NodeRequest(topology, k, busy))
        assert placed.gpus == brute_choice(topology, busy, k, DEFAULT_SIZES), k


@SLOW
@given(
    node_and_busy(max_gpus=7),
    st.lists(st.integers(2, 8), min_size=1, max_size=3, unique=True),
)
def test_keep_sizes_parameter_is_respected(
    case: tuple[NodeTopology, frozenset[int]], keep: list[int]
) -> None:
    topology, busy = case
    free = free_of(topology, busy)
    policy = make_policy("topology", {"keep_sizes": keep})
    sizes = tuple(sorted(keep, reverse=True))
    for k in range(2, len(free) + 1):
        placed = policy.place(NodeRequest(topology, k, busy))
        assert placed.gpus == brute_choice(topology, busy, k, sizes), (k, sizes)


# ---------------------------------------------------------------- 1-GPU modes


def crowding(topology: NodeTopology, busy: frozenset[int], g: int) -> tuple[int, int]:
    """Busy GPUs under g's PCIe switch, then on g's socket."""
    switches, sockets = topology.switches, topology.sockets
    return (
        sum(1 for b in busy if switches[b] == switches[g]),
        sum(1 for b in busy if sockets[b] == sockets[g]),
    )


@FAST
@given(any_node())
def test_spread_picks_a_quietest_gpu(case: tuple[NodeTopology, frozenset[int]]) -> None:
    topology, busy = case
    free = free_of(topology, busy)
    assume(free)  # a node with nothing free asks nothing
    placed = make_policy("topology").place(NodeRequest(topology, 1, busy, Mode.SPREAD))
    assert len(placed.gpus) == 1
    assert placed.ring_bandwidth_gbps is None
    (g,) = placed.gpus
    assert g in free
    assert crowding(topology, busy, g) == min(crowding(topology, busy, f) for f in free)


@FAST
@given(any_node())
def test_pack_leaves_the_best_leftover(case: tuple[NodeTopology, frozenset[int]]) -> None:
    topology, busy = case
    free = free_of(topology, busy)
    assume(free)  # a node with nothing free asks nothing
    rings = all_rings(topology)
    placed = make_policy("topology").place(NodeRequest(topology, 1, busy, Mode.PACK))
    assert placed.ring_bandwidth_gbps is None
    (g,) = placed.gpus
    assert g in free
    vectors = {f: leftover_vector(rings, free, (f,), DEFAULT_SIZES) for f in free}
    best = max(vectors.values())
    assert vectors[g] == best
    # Among the GPUs that leave the best leftover, pack sits beside busy ones.
    ties = [f for f in free if vectors[f] == best]
    assert crowding(topology, busy, g) == max(crowding(topology, busy, f) for f in ties)


# ---------------------------------------------------------------- baselines


@FAST
@given(any_node(), st.sampled_from(["topology", "index-order", "random"]), st.data())
def test_every_policy_returns_a_valid_placement(
    case: tuple[NodeTopology, frozenset[int]], name: str, data: st.DataObject
) -> None:
    topology, busy = case
    free = free_of(topology, busy)
    assume(free)  # a node with nothing free asks nothing
    k = data.draw(st.integers(1, len(free)))
    mode = data.draw(st.sampled_from(list(Mode)))
    placed = make_policy(name).place(NodeRequest(topology, k, busy, mode))
    assert len(placed.gpus) == k
    assert list(placed.gpus) == sorted(set(placed.gpus))
    assert set(placed.gpus) <= set(free)
    assert placed.ring_bandwidth_gbps == brute_ring(topology.bandwidth_matrix, placed.gpus)


@FAST
@given(any_node(), st.data())
def test_index_order_takes_lowest_free(
    case: tuple[NodeTopology, frozenset[int]], data: st.DataObject
) -> None:
    topology, busy = case
    free = free_of(topology, busy)
    assume(free)  # a node with nothing free asks nothing
    k = data.draw(st.integers(1, len(free)))
    placed = make_policy("index-order").place(NodeRequest(topology, k, busy))
    assert placed.gpus == free[:k]


@FAST
@given(any_node(), st.integers(0, 2**32), st.data())
def test_random_is_seeded_and_deterministic(
    case: tuple[NodeTopology, frozenset[int]], seed: int, data: st.DataObject
) -> None:
    topology, busy = case
    free = free_of(topology, busy)
    assume(free)  # a node with nothing free asks nothing
    sizes = data.draw(st.lists(st.integers(1, len(free)), min_size=1, max_size=6))
    first = make_policy("random", {"seed": seed})
    second = make_policy("random", {"seed": seed})
    one = [first.place(NodeRequest(topology, k, busy)).gpus for k in sizes]
    two = [second.place(NodeRequest(topology, k, busy)).gpus for k in sizes]
    assert one == two
    for k, gpus in zip(sizes, one, strict=True):
        assert len(gpus) == k
        assert list(gpus) == sorted(set(gpus))
        assert set(gpus) <= set(free)


@FAST
@given(any_node(), st.data())
def test_pair_score_picks_the_best_group_of_a_best_partition(
    case: tuple[NodeTopology, frozenset[int]], data: st.DataObject
) -> None:
    topology, busy = case
    free = free_of(topology, busy)
    if len(free) > 6:
        # Keep the brute force small: busy out the highest free GPUs down to six.
        busy = busy | frozenset(free[6:])
        free = free[:6]
    assume(free)  # a node with nothing free asks nothing
    k = data.draw(st.integers(1, len(free)))
    placed = make_policy("pair-score").place(NodeRequest(topology, k, busy))
    assert len(placed.gpus) == k and set(placed.gpus) <= set(free)
    assert list(placed.gpus) == sorted(placed.gpus)

    def total(groups: frozenset[frozenset[int]]) -> int:
        return sum(group_points(topology, grp) for grp in groups)

    partitions = all_partitions(free, k)
    best_total = max(total(groups) for groups, _ in partitions)
    chosen = frozenset(placed.gpus)
    assert any(
        chosen in groups
        and total(groups) == best_total
        and group_points(topology, chosen) == max(group_points(topology, g) for g in groups)
        for groups, _ in partitions
    ), (placed.gpus, best_total)


def test_pair_scores_follow_design() -> None:
    codes = [
        ["X", "NV2", "PIX", "PXB", "PHB", "NODE", "SYS"],
        ["NV2", "X", "SYS", "SYS", "SYS", "SYS", "SYS"],
        ["PIX", "SYS", "X", "SYS", "SYS", "SYS", "SYS"],
        ["PXB", "SYS", "SYS", "X", "SYS", "SYS", "SYS"],
        ["PHB", "SYS", "SYS", "SYS", "X", "SYS", "SYS"],
        ["NODE", "SYS", "SYS", "SYS", "SYS", "X", "SYS"],
        ["SYS", "SYS", "SYS", "SYS", "SYS", "SYS", "X"],
    ]
    topology = NodeTopology.from_codes(codes)
    expected = [200, 50, 40, 30, 20, 10]
    assert [pair_points(topology, 0, j) for j in range(1, 7)] == expected
    assert [pair_score(topology, 0, j) for j in range(1, 7)] == expected  # the product's own
    # With GPU0 free and one partner, pair-score takes GPU0's best-scoring partner (NV2).
    placed = make_policy("pair-score").place(NodeRequest(topology, 2, frozenset({3, 4, 5, 6})))
    assert placed.gpus == (0, 1)
