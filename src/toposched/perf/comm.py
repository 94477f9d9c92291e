"""Gradient synchronisation time: ring all-reduce and parameter servers, from bytes and GB/s."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from toposched.perf.specs import Allreduce, FrameworkSpec, PsPlacement


def ring_allreduce_s(gb: float, workers: int, gbps: float) -> float:
    """Bandwidth term of a ring all-reduce: each link carries 2(n-1)/n of the bytes."""
    if workers < 2:
        return 0.0
    return 2.0 * (workers - 1) / workers * gb / gbps


def buckets(gb: float, framework: FrameworkSpec) -> int:
    """Fused messages per iteration: frameworks batch small gradients into fusion buffers."""
    return max(1, math.ceil(gb * 1e3 / framework.fusion_mb))


@dataclass(frozen=True, slots=True)
class NetworkStage:
    """The network as one all-reduce sees it: GB/s per node to its peers, the NIC contention
    of the job's further GPUs on a node, and the per-message latency between nodes."""

    gbps: float
    contention: float = 0.0
    latency_us: float = 0.0


def ring_peers(nodes: int) -> int:
    """Distinct nodes one node's traffic goes to: the framework's rings run through the nodes in
    both directions, so each node sends to two neighbours, and with two nodes to the same one."""
    return min(nodes - 1, 2)


def allreduce_s(
    gb: float,
    sizes: Sequence[int],
    node_rings_gbps: Sequence[float | None],
    network: NetworkStage | None,
    framework: FrameworkSpec,
) -> float:
    """An all-reduce over every worker: a flat ring, or hierarchical stages (docs/perfmodel.md).

    `sizes` holds the job's GPUs on each node and `node_rings_gbps` the nominal ring bandwidth
    of each node's share (None for a node with one GPU); `network` is None for a job on one
    node. In the ring every node's GPUs sit next to each other, so every hop, inside a node or
    through a NIC, carries 2(n-1)/n of the bytes and the slowest stage bounds the ring. A node's
    hops share its host bridge as `bridge_sharing` says; its NIC carries the ring once, plus
    `contention` for each further GPU of the job there.
    """
    workers = sum(sizes)
    if workers < 2:
        return 0.0
    # Seconds per GB of each node's own stage, for the nodes with two or more GPUs.
    inside = [
        (size, size**framework.bridge_sharing / (framework.link_efficiency * bw))
        for size, bw in zip(sizes, node_rings_gbps, strict=True)
        if bw is not None and size > 1
    ]
    crowd = 1.0
    if network is not None:
        crowd += network.contention * (max(sizes) - 1)
    messages = buckets(gb, framework)
    if framework.allreduce is Allreduce.HIERARCHICAL and network is not None:
        nodes = len(sizes)
        local = max(
            (ring_allreduce_s(gb, size, 1.0 / per_gb) for size, per_gb in inside), default=0.0
        )
        across = ring_allreduce_s(gb, nodes, network.gbps) * crowd
        latency = 2 * (max(sizes) - 1) * framework.step_latency_us
        latency += 2 * (nodes - 1) * (framework.step_latency_us + network.latency_us)
        return local + across + messages * latency * 1e-6
    per_gb = max((per_gb for _, per_gb in inside), default=0.0)
    if network is not None:
        per_gb = max(per_gb, crowd / network.gbps)
    return (
        ring_allreduce_s(gb, workers, 1.0 / per_gb)
        + messages * _ring_latency_us(sizes, network, framework) * 1e-6
    )


def _ring_latency_us(
    sizes: Sequence[int], network: NetworkStage | None, framework: FrameworkSpec
) -> float:
    """Latency of one message through the ring: 2(n-1) steps each as slow as the slowest hop;
    pipelined, each of the two passes crosses every hop once, inside nodes and between them."""
    workers = sum(sizes)
    net_us = 0.0 if network is None else network.latency_us
    if framework.allreduce is Allreduce.PIPELINED:
        crossings = 0 if network is None else len(sizes)
        return 2.0 * ((workers - len(sizes)) * framework.step_latency_us + crossings * net_us)
    return 2.0 * (workers - 1) * (framework.step_latency_us + net_us)


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


def exposed_s(
    comm_s: float,
    compute_s: float,
    overlap: float,
    backward_fraction: float,
    tail: float = 0.0,
) -> float:
    """What the backward pass cannot hide: gradients leave as layers finish, so traffic overlaps
    at most `overlap` of the backward pass; the rest of the transfer adds to the step, and so
    does at least the `tail` share of it that only starts when the backward pass has ended."""
    window = overlap * backward_fraction * compute_s
    return max(tail * comm_s, comm_s - window)
