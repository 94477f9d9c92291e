"""What a placement inside one node is asked for, and what it answers."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from toposched.topology.node import NodeTopology


class Mode(StrEnum):
    """How 1-GPU requests are placed: away from busy neighbours, or packed beside them."""

    SPREAD = "spread"
    PACK = "pack"


class PlacementError(ValueError):
    """A request that cannot be answered as asked (bad size, unknown GPU index)."""


class NotEnoughGPUs(PlacementError):
    """Fewer GPUs are free than the request needs."""


@dataclass(frozen=True)
class NodeRequest:
    """k GPUs on `topology`, with `busy` GPUs already taken."""

    topology: NodeTopology
    gpus: int
    busy: frozenset[int] = frozenset()
    mode: Mode = Mode.PACK

    def __post_init__(self) -> None:
        n = self.topology.size
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 1:
            raise PlacementError(f"gpus must be a positive integer, got {self.gpus!r}")
        if self.gpus > n:
            raise PlacementError(f"the node has {n} GPUs; {self.gpus} were requested")
        bad = sorted(g for g in self.busy if not 0 <= g < n)
        if bad:
            raise PlacementError(f"busy GPU indices {bad} are out of range 0..{n - 1}")
        free = n - len(self.busy)
        if free < self.gpus:
            raise NotEnoughGPUs(f"{self.gpus} GPUs requested but only {free} of {n} are free")

    @property
    def free(self) -> tuple[int, ...]:
        return tuple(g for g in range(self.topology.size) if g not in self.busy)


@dataclass(frozen=True)
class NodePlacement:
    """The chosen GPUs (sorted) and their ring bandwidth (None for a single GPU)."""

    gpus: tuple[int, ...]
    ring_bandwidth_gbps: float | None
