"""MIG placement against brute force on random A100 and H100 layouts: after each placement,
the largest profile still placeable anywhere is the largest any placement could have left."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.brute import brute_mig_best, brute_mig_fits, brute_mig_largest
from toposched.placement.mig import MigGpu, capacity, choose
from toposched.topology.mig import MEMORY_SLICES, MIG_TABLES, MigTable

TABLES = tuple(t for t in MIG_TABLES if t.model in ("A100-40GB", "A100-80GB", "H100-80GB"))
NAMES = sorted({name for t in TABLES for name in t.names})

Layout = list[tuple[MigTable, tuple[tuple[str, int], ...]]]


@st.composite
def layouts(draw: st.DrawFn) -> Layout:
    """1-4 GPUs, each of one table, with instances drawn where brute force says they fit."""
    out: Layout = []
    for _ in range(draw(st.integers(1, 4))):
        table = draw(st.sampled_from(TABLES))
        used: tuple[tuple[str, int], ...] = ()
        for _ in range(draw(st.integers(0, 6))):
            name = draw(st.sampled_from(table.names))
            start = draw(st.integers(0, MEMORY_SLICES - 1))
            if brute_mig_fits(table, used, name, start):
                used = (*used, (name, start))
        out.append((table, used))
    return out


@settings(max_examples=300, deadline=None)
@given(layouts(), st.lists(st.sampled_from(NAMES), min_size=1, max_size=8))
def test_each_placement_leaves_the_largest_profile_brute_force_can(
    layout: Layout, asks: list[str]
) -> None:
    for name in asks:
        gpus = [MigGpu(0, g, table, used) for g, (table, used) in enumerate(layout)]
        choice = choose(gpus, name)
        best = brute_mig_best(layout, name)
        if best is None:
            assert choice is None
            continue
        assert choice is not None
        table, used = layout[choice.gpu]
        assert brute_mig_fits(table, used, name, choice.start)
        layout[choice.gpu] = (table, (*used, (name, choice.start)))
        assert brute_mig_largest(layout) == best


@settings(max_examples=200, deadline=None)
@given(layouts())
def test_capacity_counts_the_instances_brute_force_can_add(layout: Layout) -> None:
    """A profile's capacity is how many of it can still be added one after another (its
    starts are aligned to its size: taking the free ones in turn is as good as any order)."""
    for table, used in layout:
        for profile in table.profiles:
            added, placed = 0, tuple(used)
            for start in range(MEMORY_SLICES):
                if brute_mig_fits(table, placed, profile.name, start):
                    placed = (*placed, (profile.name, start))
                    added += 1
            assert capacity(table, used, profile.name) == added
