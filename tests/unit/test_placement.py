"""Placement on preset topologies: exact answers worked out by hand, and the request errors.

Each expected answer below was derived by hand from the link matrices in
toposched/topology/presets.py (the reasoning is in the comments) and, for nodes of up to
8 GPUs, is also re-checked here against a brute-force ring over every cyclic order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import combinations, pairwise

import pytest

from tests.brute import brute_ring
from toposched.placement import (
    POLICIES,
    Mode,
    NodePlacement,
    NodeRequest,
    NotEnoughGPUs,
    PlacementError,
    make_policy,
    ring_bandwidth,
)
from toposched.topology import NodeTopology, preset

DGX1 = "dgx1-v100"


def place(
    name: str,
    k: int,
    busy: Iterable[int] = (),
    mode: Mode = Mode.PACK,
    policy: str = "topology",
) -> NodePlacement:
    return make_policy(policy).place(NodeRequest(preset(name), k, frozenset(busy), mode))


def run_sequence(
    topology: NodeTopology,
    sizes: Sequence[int],
    *,
    policy: str,
    mode: Mode = Mode.PACK,
    busy: Iterable[int] = (),
) -> list[NodePlacement]:
    """Place requests one after another; each sees the earlier ones as busy."""
    chosen = make_policy(policy)
    taken = frozenset(busy)
    out = []
    for k in sizes:
        placed = chosen.place(NodeRequest(topology, k, taken, mode))
        taken |= set(placed.gpus)
        out.append(placed)
    return out


# ---------------------------------------------------------------- DGX-1 V100 facts

# NV2 (50 GB/s) pairs of the hybrid cube-mesh: every GPU has exactly two of them.
DGX1_NV2 = {(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)}


def test_dgx1_link_facts_from_the_brief() -> None:
    codes = preset(DGX1).codes()
    assert codes[0][3] == codes[0][4] == "NV2"
    assert codes[0][1] == codes[0][2] == "NV1"
    assert codes[0][5] == codes[0][6] == codes[0][7] == "SYS"
    nv2 = {(i, j) for i in range(8) for j in range(i + 1, 8) if codes[i][j] == "NV2"}
    assert nv2 == DGX1_NV2


def test_dgx1_has_an_nv2_hamiltonian_cycle() -> None:
    # Walk the NV2 pairs: 0-3-2-1-5-6-7-4 and back to 0; each GPU has two NV2 links, so the NV2
    # graph is this single 8-cycle (hence no 4-set has an all-NV2 ring).
    codes = preset(DGX1).codes()
    cycle = (0, 3, 2, 1, 5, 6, 7, 4, 0)
    assert sorted(cycle[:-1]) == list(range(8))
    assert all(codes[a][b] == "NV2" for a, b in pairwise(cycle))
    assert ring_bandwidth(preset(DGX1), range(8)) == 50.0
    assert brute_ring(preset(DGX1).bandwidth_matrix, range(8)) == 50.0


def test_dgx1_exactly_eight_four_sets_ring_at_25() -> None:
    # NVLink graph = two NVLink-complete quads {0..3}, {4..7} plus the matching i <-> i+4. A 4-set
    # has an NVLink ring iff it is a quad, or {a, b, a+4, b+4} (6 ways): 2 + 6 = 8 of C(8,4) = 70.
    topology = preset(DGX1)
    good = {s for s in combinations(range(8), 4) if ring_bandwidth(topology, s) >= 25.0}
    expected = {(0, 1, 2, 3), (4, 5, 6, 7)} | {
        tuple(sorted((a, b, a + 4, b + 4))) for a, b in combinations(range(4), 2)
    }
    assert good == expected
    assert len(good) == 8
    assert all(ring_bandwidth(topology, s) == 25.0 for s in good)
    assert all(
        ring_bandwidth(topology, s) == 6.0 for s in combinations(range(8), 4) if s not in good
    )
    assert all(
        brute_ring(topology.bandwidth_matrix, s) == ring_bandwidth(topology, s) for s in good
    )


# ---------------------------------------------------------------- table-driven placements

CASES: list[tuple[str, tuple[int, ...], int, Mode, tuple[int, ...], float | None, str]] = [
    (DGX1, (), 1, Mode.PACK, (0,), None, "all tie; lowest index"),
    (DGX1, (), 2, Mode.PACK, (0, 3), 50.0, "an NV2 pair; every one leaves 25/50; lowest"),
    # NVLink triangles live in a quad; {0,2,3} and {1,2,3} hold two NV2 links (pair sum 125).
    (DGX1, (), 3, Mode.PACK, (0, 2, 3), 25.0, "NVLink triangle with two NV2 links"),
    (DGX1, (), 4, Mode.PACK, (0, 1, 2, 3), 25.0, "a quad: pair sum 225 beats 162 of a face"),
    (DGX1, (), 5, Mode.PACK, (0, 2, 3, 4, 7), 25.0, "0-4-7-3-2-0 is NVLink"),
    (DGX1, (), 8, Mode.PACK, tuple(range(8)), 50.0, "the NV2 Hamiltonian cycle"),
    # (1,2) and (4,7) both leave a 25 GB/s quad and an NV2 pair; equal pair sum; lowest.
    (DGX1, (0, 3), 2, Mode.PACK, (1, 2), 50.0, "rule 2 rejects (1,5), (5,6), (6,7)"),
    # {4,5,6,7}, {1,2,5,6}, {2,3,6,7} leave an NV2 pair ({1,3,5,7} leaves 25); rule 3: 225 wins.
    (DGX1, (0,), 4, Mode.PACK, (4, 5, 6, 7), 25.0, "rule 3 decides"),
    ("dgx-a100", (), 2, Mode.PACK, (0, 1), 300.0, "NV12 everywhere"),
    ("dgx-a100", (), 8, Mode.PACK, tuple(range(8)), 300.0, "whole node"),
    ("hgx-h100", (), 4, Mode.PACK, (0, 1, 2, 3), 450.0, "NV18 everywhere"),
    ("pcie-8gpu-2socket", (), 2, Mode.PACK, (0, 1), 16.0, "a PIX pair"),
    ("pcie-8gpu-2socket", (), 3, Mode.PACK, (0, 1, 2), 12.0, "three in one socket: PHB"),
    ("pcie-8gpu-2socket", (), 4, Mode.PACK, (0, 1, 2, 3), 12.0, "one socket"),
    ("pcie-8gpu-2socket", (), 5, Mode.PACK, (0, 1, 2, 3, 4), 6.0, "4+1 pair sum 104 > 3+2 92"),
    # (2,3) leaves socket 1 whole (4-ring 12); (4,5) or (6,7) would leave only SYS 4-rings.
    ("pcie-8gpu-2socket", (0,), 2, Mode.PACK, (2, 3), 16.0, "rule 2 keeps socket 1 whole"),
    ("pcie-8gpu-2socket", (0,), 1, Mode.SPREAD, (4,), None, "away from GPU0's socket"),
    ("pcie-8gpu-2socket", (0,), 1, Mode.PACK, (1,), None, "beside GPU0, under its switch"),
    ("pcie-4gpu-2socket", (), 2, Mode.PACK, (0, 1), 10.0, "NODE pair"),
    ("pcie-4gpu-2socket", (0,), 2, Mode.PACK, (2, 3), 10.0, "NODE beats SYS"),
    ("pcie-4gpu-2socket", (), 3, Mode.PACK, (0, 1, 2), 6.0, "every 3-set crosses sockets"),
    ("pcie-16gpu-nvbridge", (), 2, Mode.PACK, (0, 1), 100.0, "an NV4 bridge pair"),
    ("pcie-16gpu-nvbridge", (), 4, Mode.PACK, (0, 1, 2, 3), 16.0, "NV4-PIX-NV4-PIX"),
    ("pcie-16gpu-nvbridge", (), 8, Mode.PACK, tuple(range(8)), 10.0, "one socket: NODE"),
    ("pcie-16gpu-nvbridge", (), 16, Mode.PACK, tuple(range(16)), 6.0, "whole node: SYS"),
    ("dgx2-v100", (), 2, Mode.PACK, (0, 1), 150.0, "NV6 everywhere"),
    ("dgx2-v100", (), 16, Mode.PACK, tuple(range(16)), 150.0, "whole node"),
]


@pytest.mark.parametrize(
    ("name", "busy", "k", "mode", "expected", "ring", "why"),
    CASES,
    ids=[f"{c[0]}-busy{list(c[1])}-k{c[2]}-{c[3]}" for c in CASES],
)
def test_topology_policy_on_presets(
    name: str,
    busy: tuple[int, ...],
    k: int,
    mode: Mode,
    expected: tuple[int, ...],
    ring: float | None,
    why: str,
) -> None:
    placed = place(name, k, busy, mode)
    assert placed.gpus == expected, why
    assert placed.ring_bandwidth_gbps == ring
    topology = preset(name)
    assert ring_bandwidth(topology, expected) == ring
    if topology.size <= 8 and k >= 2:
        assert brute_ring(topology.bandwidth_matrix, expected) == ring
        free = [g for g in range(topology.size) if g not in busy]
        assert ring == max(
            brute_ring(topology.bandwidth_matrix, s) or 0.0 for s in combinations(free, k)
        )


# ---------------------------------------------------------------- fragmentation sequences


def test_dgx1_pack_single_gpu_jobs_keep_a_quad_for_the_4gpu_job() -> None:
    # The NVIDIA k8s-device-plugin #1193 pattern: 1-GPU jobs first, then a larger job.
    # Pack puts the four 1-GPU jobs in one quad (the 4th must be 3: taking any of 4..7 leaves
    # no NVLink quad), so the 4-GPU job gets the other quad, NVLink only.
    topology = preset(DGX1)
    pack = run_sequence(topology, [1, 1, 1, 1, 4], policy="topology", mode=Mode.PACK)
    assert [p.gpus for p in pack[:4]] == [(0,), (1,), (2,), (3,)]
    assert pack[4].gpus == (4, 5, 6, 7)
    assert pack[4].ring_bandwidth_gbps == 25.0  # >= 25: not through SYS

    # On an empty DGX-1 the baselines do not lose here: index order also fills GPU0-3, and
    # spread's 0, 4, 2, 6 leaves {1,3,5,7} = {a, b, a+4, b+4}, an NVLink face (1-5 NV2, NV1 rest).
    index = run_sequence(topology, [1, 1, 1, 1, 4], policy="index-order")
    spread = run_sequence(topology, [1, 1, 1, 1, 4], policy="topology", mode=Mode.SPREAD)
    assert [p.gpus for p in spread[:4]] == [(0,), (4,), (2,), (6,)]
    assert index[4].gpus == (4, 5, 6, 7)
    assert spread[4].gpus == (1, 3, 5, 7)
    assert index[4].ring_bandwidth_gbps == 25.0
    assert spread[4].ring_bandwidth_gbps == 25.0


def test_dgx1_pack_beats_index_order_when_gpu4_is_already_held() -> None:
    # GPU4 held by an earlier job; three 1-GPU jobs, then a 4-GPU job. Index order takes 0, 1, 2
    # and leaves {3,5,6,7}: GPU3's only NVLink there is to 7, so the ring crosses SYS (6 GB/s).
    # Pack takes 5, 6, 7 (beside GPU4) and keeps the quad {0,1,2,3} whole.
    topology = preset(DGX1)
    sizes = [1, 1, 1, 4]
    pack = run_sequence(topology, sizes, policy="topology", busy={4})
    index = run_sequence(topology, sizes, policy="index-order", busy={4})
    assert [p.gpus for p in pack[:3]] == [(5,), (6,), (7,)]
    assert pack[3].gpus == (0, 1, 2, 3)
    assert pack[3].ring_bandwidth_gbps == 25.0
    assert [p.gpus for p in index[:3]] == [(0,), (1,), (2,)]
    assert index[3].gpus == (3, 5, 6, 7)
    assert index[3].ring_bandwidth_gbps == 6.0


def test_issue_1193_topology_spread_splits_nvlink_pairs_pack_does_not() -> None:
    # The node of k8s-device-plugin #1193: NV4 pairs 0-1, 2-3, 4-5, 6-7, SYS elsewhere.
    # Four 1-GPU jobs, then two 2-GPU jobs.
    codes = [
        ["X" if i == j else ("NV4" if i // 2 == j // 2 else "SYS") for j in range(8)]
        for i in range(8)
    ]
    topology = NodeTopology.from_codes(codes, name="issue-1193")
    sizes = [1, 1, 1, 1, 2, 2]
    pack = run_sequence(topology, sizes, policy="topology", mode=Mode.PACK)
    index = run_sequence(topology, sizes, policy="index-order")
    spread = run_sequence(topology, sizes, policy="topology", mode=Mode.SPREAD)
    assert [p.gpus for p in pack] == [(0,), (1,), (2,), (3,), (4, 5), (6, 7)]
    assert [p.ring_bandwidth_gbps for p in pack[4:]] == [100.0, 100.0]
    # Index order happens to fill pairs too here.
    assert [p.gpus for p in index] == [p.gpus for p in pack]
    # Spread keeps the 1-GPU jobs apart (one per socket = NV4 pair), which is exactly what
    # #1193 complains about: the 2-GPU jobs then only get SYS pairs.
    assert [p.gpus for p in spread] == [(0,), (2,), (4,), (6,), (1, 3), (5, 7)]
    assert [p.ring_bandwidth_gbps for p in spread[4:]] == [6.0, 6.0]


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("k", [0, -1, True, 2.0, "2"])
def test_bad_request_size(k: object) -> None:
    with pytest.raises(PlacementError, match="positive integer"):
        NodeRequest(preset(DGX1), k, frozenset())  # type: ignore[arg-type]


def test_request_larger_than_node_is_a_placement_error_not_a_shortage() -> None:
    with pytest.raises(PlacementError, match="8 GPUs; 9 were requested") as err:
        NodeRequest(preset(DGX1), 9)
    assert not isinstance(err.value, NotEnoughGPUs)


@pytest.mark.parametrize("busy", [{8}, {-1}, {0, 99}])
def test_busy_out_of_range(busy: set[int]) -> None:
    with pytest.raises(PlacementError, match=r"out of range 0\.\.7") as err:
        NodeRequest(preset(DGX1), 1, frozenset(busy))
    assert not isinstance(err.value, NotEnoughGPUs)


def test_too_few_free_gpus() -> None:
    with pytest.raises(NotEnoughGPUs, match="5 GPUs requested but only 4 of 8 are free"):
        NodeRequest(preset(DGX1), 5, frozenset({0, 1, 2, 3}))
    # A full node cannot take even one.
    with pytest.raises(NotEnoughGPUs):
        NodeRequest(preset(DGX1), 1, frozenset(range(8)))


def test_unknown_policy_lists_known_names() -> None:
    with pytest.raises(PlacementError) as err:
        make_policy("best")
    message = str(err.value)
    assert "'best'" in message
    for name in ("topology", "index-order", "random", "pair-score"):
        assert name in message
    assert set(POLICIES) == {"topology", "index-order", "random", "pair-score"}


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("topology", {"bogus": 1}, "no parameter 'bogus'; valid: keep_sizes"),
        ("random", {"speed": 1}, "no parameter 'speed'; valid: seed"),
        ("index-order", {"seed": 1}, "no parameter 'seed'; valid: none"),
        ("random", {"rng": 1}, "no parameter 'rng'"),
        ("random", {"seed": "7"}, "must be an integer"),
        ("random", {"seed": True}, "must be an integer"),
        ("topology", {"keep_sizes": [1]}, "keep_sizes"),
        ("topology", {"keep_sizes": 4}, "keep_sizes"),
    ],
)
def test_bad_policy_parameters(name: str, params: dict[str, object], match: str) -> None:
    with pytest.raises(PlacementError, match=match):
        make_policy(name, params)


def test_every_policy_builds_with_defaults_and_places() -> None:
    for name in POLICIES:
        placed = make_policy(name).place(NodeRequest(preset(DGX1), 2))
        assert len(placed.gpus) == 2
