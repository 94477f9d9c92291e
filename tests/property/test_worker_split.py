"""A gang's GPUs on a node, shared out among its workers (placement/split.py): checked against
every way to split them, on random topologies, and as a gang placement uses it."""

from __future__ import annotations

from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.brute import brute_ring
from tests.strategies import topologies
from toposched.placement.split import in_order, split_workers
from toposched.topology import preset
from toposched.topology.node import NodeTopology


def partitions(gpus: tuple[int, ...], size: int) -> Iterator[tuple[tuple[int, ...], ...]]:
    """Every split of `gpus` into groups of `size` (each once: a group holds the lowest left)."""
    if not gpus:
        yield ()
        return
    first, rest = gpus[0], gpus[1:]
    from itertools import combinations

    for partners in combinations(rest, size - 1):
        left = tuple(g for g in rest if g not in partners)
        for more in partitions(left, size):
            yield ((first, *partners), *more)


def total(topology: NodeTopology, groups: tuple[tuple[int, ...], ...]) -> float:
    return sum(brute_ring(topology.bandwidth_matrix, g) or 0.0 for g in groups)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_the_split_is_the_best_of_every_split(data: st.DataObject) -> None:
    topology = data.draw(topologies(min_gpus=4, max_gpus=8))
    size = data.draw(st.sampled_from([2, 3, 4]))
    workers = data.draw(st.integers(1, topology.size // size))
    gpus = tuple(sorted(data.draw(st.permutations(range(topology.size)))[: workers * size]))
    chosen = split_workers(topology, gpus, size)
    assert sorted(g for group in chosen for g in group) == list(gpus)
    assert all(len(group) == size for group in chosen)
    best = max(total(topology, split) for split in partitions(gpus, size))
    assert abs(total(topology, chosen) - best) < 1e-6


def test_four_pairs_on_a_dgx1_are_four_nvlink2_pairs() -> None:
    dgx1 = preset("dgx1-v100")
    split = split_workers(dgx1, tuple(range(8)), 2)
    assert split == ((0, 3), (1, 2), (4, 7), (5, 6))
    assert [brute_ring(dgx1.bandwidth_matrix, g) for g in split] == [50.0] * 4
    assert [brute_ring(dgx1.bandwidth_matrix, g) for g in in_order(tuple(range(8)), 2)] == [
        25.0,
        50.0,
        25.0,
        50.0,
    ]


def test_one_gpu_workers_and_one_worker_keep_index_order() -> None:
    dgx1 = preset("dgx1-v100")
    assert split_workers(dgx1, (1, 4, 6), 1) == ((1,), (4,), (6,))
    assert split_workers(dgx1, (2, 5, 6, 7), 4) == ((2, 5, 6, 7),)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_the_choice_for_workers_has_the_best_ring_then_the_best_split(
    data: st.DataObject,
) -> None:
    """Rule 1b: of the free sets with the best ring, one whose workers' rings add up to the
    most; checked against every set of that size."""
    from itertools import combinations

    from toposched.placement.tables import to_mask
    from toposched.placement.topology_aware import choose

    topology = data.draw(topologies(min_gpus=4, max_gpus=8))
    per_worker = data.draw(st.sampled_from([2, 3] if topology.size >= 6 else [2]))
    workers = data.draw(st.integers(2, topology.size // per_worker))
    k = workers * per_worker
    free = sorted(
        data.draw(st.permutations(range(topology.size)))[: data.draw(st.integers(k, topology.size))]
    )
    chosen = choose(topology, to_mask(free), k, per_worker=per_worker)
    bw = topology.bandwidth_matrix
    sets = list(combinations(free, k))
    best_ring = max(brute_ring(bw, s) or 0.0 for s in sets)
    assert abs((brute_ring(bw, chosen) or 0.0) - best_ring) < 1e-6
    best_split = max(
        max(total(topology, p) for p in partitions(s, per_worker))
        for s in sets
        if abs((brute_ring(bw, s) or 0.0) - best_ring) < 1e-6
    )
    assert abs(max(total(topology, p) for p in partitions(chosen, per_worker)) - best_split) < 1e-6
