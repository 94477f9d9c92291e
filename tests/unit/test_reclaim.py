"""Reclaim's search on one node, case by case: where stopping early is right and where not."""

from __future__ import annotations

from toposched.core.reclaim import _search_node
from toposched.placement.request import Mode
from toposched.topology import preset

# Two PCIe switches per socket, two GPUs per switch: (0,1) and (2,3) are PIX pairs (16 GB/s).
PCIE8 = preset("pcie-8gpu-2socket")


def test_two_cheaper_victims_beat_one_dearer_with_the_same_ring() -> None:
    """One priority-1 job on GPUs 0,1 gives the best ring alone, but two priority-0 jobs on
    GPUs 2,3 give it too: the larger set is cheaper, so the search must not stop at size 1
    (it may stop only once the lowest priority among the victims is reached)."""
    victims = ((1 << 2, (0, 0, 1)), (1 << 3, (0, 0, 1)), (0b11, (0, 1, 2)))
    found = _search_node(PCIE8, 0, 0, victims, 2, True, Mode.PACK)
    assert found == ((0, -16.0, 0, 2, 2), (0, 1), 0b1100)


def test_one_victim_of_the_lowest_priority_with_the_best_ring_ends_the_search() -> None:
    victims = ((1 << 2, (0, 0, 1)), (1 << 3, (0, 0, 1)), (0b11, (0, 0, 2)))
    found = _search_node(PCIE8, 0, 0, victims, 2, True, Mode.PACK)
    assert found == ((0, -16.0, 0, 1, 2), (2,), 0b11)
