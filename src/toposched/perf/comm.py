"""Gradient synchronisation time: ring all-reduce and parameter servers, from bytes and GB/s."""

from __future__ import annotations

import math
from collections.abc import Sequence

from toposched.perf.specs import FrameworkSpec, PsPlacement


def ring_allreduce_s(gb: float, workers: int, gbps: float) -> float:
    """Bandwidth term of a ring all-reduce: each link carries 2(n-1)/n of the bytes."""
    if workers < 2:
        return 0.0
    return 2.0 * (workers - 1) / workers * gb / gbps


def buckets(gb: float, framework: FrameworkSpec) -> int:
    """Fused messages per iteration: frameworks batch small gradients into fusion buffers."""
    return max(1, math.ceil(gb * 1e3 / framework.fusion_mb))


def allreduce_s(
    gb: float,
    workers: int,
    node_rings_gbps: Sequence[float],
    network_gbps: float | None,
    framework: FrameworkSpec,
    network_latency_us: float,
) -> float:
    """A ring through every worker: as slow as its slowest hop, inside a node or between nodes.

    `node_rings_gbps` holds the ring bandwidth of each node's share that has two or more
    GPUs; `network_gbps` is None for a job on one node. Every node's GPUs sit next to each
    other in the ring, so the ring crosses each node's network link once each way.
    """
    if workers < 2:
        return 0.0
    hops = [framework.link_efficiency * bw for bw in node_rings_gbps]
    latency_us = framework.step_latency_us
    if network_gbps is not None:
        hops.append(network_gbps)
        latency_us += network_latency_us
    bottleneck = min(hops)
    steps = 2 * (workers - 1)
    return (
        ring_allreduce_s(gb, workers, bottleneck)
        + steps * buckets(gb, framework) * latency_us * 1e-6
    )


def local_ps_s(
    gb: float, gpus_per_switch: int, host_gbps: float, framework: FrameworkSpec
) -> float:
    """Parameter servers on the node's CPUs: every GPU pushes gradients and pulls parameters
    through its PCIe switch, whose uplink to the host the GPUs under it share."""
    link = framework.link_efficiency * host_gbps
    transfers = 2 * buckets(gb, framework)
    return 2.0 * gpus_per_switch * gb / link + transfers * framework.step_latency_us * 1e-6


def remote_ps_s(
    gb: float,
    nodes: int,
    node_rings_gbps: Sequence[float],
    node_sizes: Sequence[int],
    network_gbps: float,
    framework: FrameworkSpec,
    network_latency_us: float,
) -> float:
    """Parameter servers across the network: each node first sums its GPUs' gradients, then its
    worker pushes them and pulls fresh parameters (two phases, each as slow as the busiest NIC).

    Dedicated hosts: `ps_shards` servers each take nodes/shards of the traffic. Colocated: one
    shard on each of the job's nodes, so a node exchanges (nodes-1)/nodes of it.
    """
    local = max(
        (
            ring_allreduce_s(gb, size, framework.link_efficiency * bw)
            for size, bw in zip(node_sizes, node_rings_gbps, strict=True)
        ),
        default=0.0,
    )
    if framework.ps_placement is PsPlacement.DEDICATED:
        fan_in = max(nodes / framework.ps_shards, 1.0)
    else:
        fan_in = (nodes - 1) / nodes
    transfers = 2 * buckets(gb, framework)
    latency = transfers * (framework.step_latency_us + network_latency_us) * 1e-6
    return local + 2.0 * fan_in * gb / network_gbps + latency


def exposed_s(comm_s: float, compute_s: float, overlap: float, backward_fraction: float) -> float:
    """What the backward pass cannot hide: gradients leave as layers finish, so traffic overlaps
    at most `overlap` of the backward pass; the rest of the transfer adds to the step."""
    window = overlap * backward_fraction * compute_s
    return max(0.0, comm_s - window)
