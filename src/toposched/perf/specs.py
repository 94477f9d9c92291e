"""Immutable catalog entries: DL models, GPU types, network profiles and training frameworks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from toposched.topology.cluster import Tier

REFERENCE_GPU = "V100"
"""GPU type whose `speed` is 1 and whose fp32 peak anchors throughputs estimated from FLOPs."""

BYTES_PER_GB = 1e9


def _frozen(mapping: Mapping[str, float] | None) -> Mapping[str, float]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class ModelSpec:
    """A DL model: how much it computes per sample and how many gradient bytes it synchronises.

    `throughput` holds measured single-GPU samples/s (batch 64 unless the source says
    otherwise, fp32, synthetic data) by GPU type; GPU types without a measurement are scaled
    from one that has one, and a model without any is estimated from `forward_gflops`.
    """

    name: str
    params_m: float
    forward_gflops: float
    throughput: Mapping[str, float] = field(default_factory=dict)
    sample: str = "sample"
    flops_efficiency: float = 0.35
    backward_fraction: float = 2.0 / 3.0
    gradient_bytes: float = 4.0
    interference: float = 1.0
    source: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "throughput", _frozen(self.throughput))

    @property
    def gradient_gb(self) -> float:
        """Bytes synchronised per iteration, in GB (one full set of gradients)."""
        return self.params_m * 1e6 * self.gradient_bytes / BYTES_PER_GB


@dataclass(frozen=True)
class GpuSpec:
    """A GPU type: its training speed relative to a V100 and its fp32 peak (TFLOPS)."""

    name: str
    speed: float
    fp32_tflops: float
    memory_gb: float | None = None
    source: str = ""


@dataclass(frozen=True)
class NetworkProfile:
    """The network between nodes: GB/s one way per node at each tier, as a collective gets it."""

    name: str
    bandwidth_gbps: Mapping[Tier, float]
    efficiency: float = 1.0
    latency_us: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "bandwidth_gbps", MappingProxyType(dict(self.bandwidth_gbps)))

    @classmethod
    def from_tiers(
        cls, name: str, bandwidth_gbps: Mapping[Tier, float], *, efficiency: float = 1.0
    ) -> NetworkProfile:
        """A profile from a cluster's own tier bandwidths (`Cluster.network_gbps`)."""
        tiers: dict[Tier, float] = {t: v for t, v in bandwidth_gbps.items() if t != Tier.NODE}
        return cls(name=name, bandwidth_gbps=tiers, efficiency=efficiency)

    def gbps(self, tier: Tier) -> float:
        """Effective GB/s between nodes joined at `tier` (RACK, POD or CLUSTER)."""
        return self.bandwidth_gbps[tier] * self.efficiency


class Pattern(StrEnum):
    """How gradients are synchronised."""

    ALLREDUCE = "allreduce"
    PS = "ps"


class PsPlacement(StrEnum):
    """Where a multi-node job's parameter servers run."""

    DEDICATED = "dedicated"
    COLOCATED = "colocated"


class Level(StrEnum):
    """How close another job's GPU is to one of ours (interference)."""

    SWITCH = "switch"
    SOCKET = "socket"
    NODE = "node"


@dataclass(frozen=True)
class FrameworkSpec:
    """A training framework and its communication library, as the model sees them.

    `overlap` is the fraction of the backward pass that gradient traffic can hide behind;
    `link_efficiency` the fraction of an intra-node link's nominal bandwidth its collectives
    reach; `compute_scale` its compute time relative to the catalog's measured throughputs;
    `interference` the slowdown one busy GPU of another job adds at each distance.
    """

    name: str
    pattern: Pattern
    overlap: float
    link_efficiency: float
    compute_scale: float = 1.0
    fusion_mb: float = 64.0
    step_latency_us: float = 10.0
    interference: Mapping[str, float] = field(default_factory=dict)
    ps_placement: PsPlacement = PsPlacement.DEDICATED
    ps_shards: int = 1
    source: str = ""
    # The penalties of the switch, socket and node levels, in that order (from `interference`).
    level_penalties: tuple[float, float, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "interference", _frozen(self.interference))
        penalties = tuple(self.penalty(level) for level in (Level.SWITCH, Level.SOCKET, Level.NODE))
        object.__setattr__(self, "level_penalties", penalties)

    def penalty(self, level: Level) -> float:
        return self.interference.get(level.value, 0.0)
