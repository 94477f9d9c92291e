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


class Precision(StrEnum):
    """Arithmetic a model trains in: `mixed` runs on the GPU's fp16 tensor cores."""

    FP32 = "fp32"
    MIXED = "mixed"


class Allreduce(StrEnum):
    """How an all-reduce runs: a ring whose every step waits for its slowest hop (latency per
    step), a pipelined ring whose chunks stream through every hop (latency per hop, as NCCL),
    or hierarchical stages (inside each node, across nodes, inside each node again)."""

    RING = "ring"
    PIPELINED = "pipelined"
    HIERARCHICAL = "hierarchical"


@dataclass(frozen=True)
class ModelSpec:
    """A DL model: how much it computes per sample and how many gradient bytes it synchronises.

    `throughput` holds measured single-GPU samples/s (batch 64 unless the source says
    otherwise, in the model's `precision`) by GPU type; GPU types without a measurement are
    scaled from one that has one, and a model without any is estimated from `forward_gflops`.
    `fixed_s` is the part of a 1-GPU step that does not grow with the batch (optimizer, launches),
    by GPU type, where a fit measured it.
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
    precision: Precision = Precision.FP32
    fixed_s: Mapping[str, float] = field(default_factory=dict)
    source: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "throughput", _frozen(self.throughput))
        object.__setattr__(self, "fixed_s", _frozen(self.fixed_s))

    @property
    def gradient_gb(self) -> float:
        """Bytes synchronised per iteration, in GB (one full set of gradients)."""
        return self.params_m * 1e6 * self.gradient_bytes / BYTES_PER_GB


@dataclass(frozen=True)
class GpuSpec:
    """A GPU type: its training speed relative to a V100, its fp32 peak and (where it has tensor
    cores) its dense fp16 peak, in TFLOPS."""

    name: str
    speed: float
    fp32_tflops: float
    memory_gb: float | None = None
    fp16_tflops: float | None = None
    source: str = ""


@dataclass(frozen=True)
class NetworkProfile:
    """The network between nodes: GB/s one way per node at each tier, as a collective gets it.

    `flow_gbps` caps the traffic from one node to one peer node (per-flow limits of TCP clouds);
    `contention` is the extra share of the NIC each further GPU of the job on a node takes.
    """

    name: str
    bandwidth_gbps: Mapping[Tier, float]
    efficiency: float = 1.0
    latency_us: float = 0.0
    flow_gbps: float | None = None
    contention: float = 0.0
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

    def node_gbps(self, tier: Tier, peers: int) -> float:
        """GB/s one node gets when its traffic goes to `peers` distinct nodes: the NIC's rate, or
        the per-flow cap times the peers where that is lower."""
        nic = self.gbps(tier)
        if self.flow_gbps is None:
            return nic
        return min(nic, peers * self.flow_gbps)


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
    `interference` the slowdown one busy GPU of another job adds at each distance;
    `exposed_buckets` how many fusion buffers' worth of traffic can never hide (the last
    bucket is ready only when the backward pass ends); `step_overhead_ms` the fixed cost a
    distributed step adds (hooks, launches, bookkeeping); `colocation` the compute slowdown
    each further GPU of the same job on a node adds (shared host CPU, memory and PCIe);
    `bridge_sharing` how much the job's GPUs on a node share the links of their ring (0:
    independent links, 1: one host bridge that all their hops cross).
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
    allreduce: Allreduce = Allreduce.RING
    exposed_buckets: float = 0.0
    step_overhead_ms: float = 0.0
    colocation: float = 0.0
    bridge_sharing: float = 0.0
    source: str = ""
    # The penalties of the switch, socket and node levels, in that order (from `interference`).
    level_penalties: tuple[float, float, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "interference", _frozen(self.interference))
        penalties = tuple(self.penalty(level) for level in (Level.SWITCH, Level.SOCKET, Level.NODE))
        object.__setattr__(self, "level_penalties", penalties)

    def penalty(self, level: Level) -> float:
        return self.interference.get(level.value, 0.0)
