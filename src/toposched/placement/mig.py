"""Where a MIG instance goes: the (GPU, start) that keeps the largest profiles placeable.

A GPU in MIG mode is carved on demand (as Kubernetes DRA's partitionable devices are): its
state is the instances placed on it, each a profile at a memory-slice start. An instance fits
where its profile may start, on memory slices no other instance holds, within the profile's
count and the GPU's compute slices (topology/mig.py has NVIDIA's tables).

How much a GPU can still give of a profile is its `capacity`: the free starts of that profile,
at most the count and compute left (a profile's starts are aligned to its size, so they never
overlap one another and counting the free ones is exact). Placing an instance at a start
lowers some capacities; `choose` takes the position whose losses, compared profile by profile
from the largest, are least: summed over the GPUs, the capacities of the largest profiles stay
the highest possible, and so the largest profile still placeable anywhere is the largest any
choice leaves. Ties go to the fewest memory slices left that no profile can use, then the
lowest node, GPU and start.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from toposched.topology.mig import COMPUTE_SLICES, MEMORY_SLICES, MigProfile, MigTable

Instance = tuple[str, int]  # (profile name, memory-slice start)


@dataclass(frozen=True)
class MigGpu:
    """A GPU in MIG mode as the placer sees it: node and GPU index, its table, the instances
    on it."""

    node: int
    gpu: int
    table: MigTable
    used: tuple[Instance, ...] = ()


@dataclass(frozen=True)
class MigChoice:
    node: int
    gpu: int
    start: int


def _span(profile: MigProfile, start: int) -> int:
    return ((1 << profile.slices) - 1) << start


def occupied(table: MigTable, used: Iterable[Instance]) -> int:
    """The memory slices the instances `used` hold, as a bitmask."""
    mask = 0
    for name, start in used:
        profile = table.profile(name)
        if profile is None:
            raise ValueError(f"{table.model} has no MIG profile {name!r}")
        mask |= _span(profile, start)
    return mask


def _state(table: MigTable, used: Iterable[Instance]) -> tuple[int, int, dict[str, int]]:
    """Slices held, compute slices held, instances per profile."""
    held = compute = 0
    counts: dict[str, int] = {}
    for name, start in used:
        profile = table.profile(name)
        if profile is None:
            raise ValueError(f"{table.model} has no MIG profile {name!r}")
        held |= _span(profile, start)
        compute += profile.compute
        counts[name] = counts.get(name, 0) + 1
    return held, compute, counts


def _capacity(profile: MigProfile, held: int, compute: int, counts: dict[str, int]) -> int:
    free_starts = sum(1 for s in profile.starts if not held & _span(profile, s))
    by_count = profile.most - counts.get(profile.name, 0)
    by_compute = (COMPUTE_SLICES - compute) // profile.compute
    return max(0, min(free_starts, by_count, by_compute))


def capacity(table: MigTable, used: Iterable[Instance], name: str) -> int:
    """How many more instances of profile `name` fit beside `used`."""
    profile = table.profile(name)
    if profile is None:
        raise ValueError(f"{table.model} has no MIG profile {name!r}")
    return _capacity(profile, *_state(table, used))


def starts(gpu: MigGpu, name: str) -> list[int]:
    """The memory-slice starts where an instance of profile `name` fits on `gpu` now (none
    where its table has no such profile)."""
    profile = gpu.table.profile(name)
    if profile is None:
        return []
    held, compute, counts = _state(gpu.table, gpu.used)
    if counts.get(name, 0) >= profile.most or compute + profile.compute > COMPUTE_SLICES:
        return []
    return [s for s in profile.starts if not held & _span(profile, s)]


def wasted(table: MigTable, used: Iterable[Instance]) -> int:
    """Free memory slices that no instance of any profile could take now."""
    held, compute, counts = _state(table, used)
    usable = 0
    for profile in table.profiles:
        if _capacity(profile, held, compute, counts):
            for s in profile.starts:
                if not held & _span(profile, s):
                    usable |= _span(profile, s)
    free = ~held & ((1 << MEMORY_SLICES) - 1)
    return (free & ~usable).bit_count()


def loss(gpu: MigGpu, name: str, start: int) -> tuple[int, ...]:
    """What an instance of `name` at `start` costs `gpu`: each profile's capacity lost, the
    largest profile first."""
    before = _state(gpu.table, gpu.used)
    after = _state(gpu.table, (*gpu.used, (name, start)))
    return tuple(_capacity(p, *before) - _capacity(p, *after) for p in gpu.table.profiles)


def choose(gpus: Iterable[MigGpu], name: str) -> MigChoice | None:
    """The position for an instance of profile `name` among `gpus` (module docstring), or
    None where it fits on none."""
    best: tuple[tuple[int, ...], int, int, int, int] | None = None
    for gpu in gpus:
        for start in starts(gpu, name):
            key = (
                loss(gpu, name, start),
                wasted(gpu.table, (*gpu.used, (name, start))),
                gpu.node,
                gpu.gpu,
                start,
            )
            if best is None or key < best:
                best = key
    return None if best is None else MigChoice(best[2], best[3], best[4])
