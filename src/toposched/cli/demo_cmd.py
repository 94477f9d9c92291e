"""`toposched demo`: what topology-aware placement buys on one node, policy by policy."""

from __future__ import annotations

from itertools import combinations
from typing import Any

import typer
from rich.table import Table

from toposched.cli.output import console, emit_json, fail
from toposched.discovery.files import load_topology
from toposched.placement import POLICIES, Mode, NodeRequest, make_policy, ring_bandwidth
from toposched.topology import NodeTopology, TopologyError


def _fragmentation(
    topology: NodeTopology, policy: str, mode: Mode, singles: int, k: int
) -> dict[str, Any]:
    """Place `singles` 1-GPU jobs one after another, then one k-GPU job."""
    chooser = make_policy(policy)
    busy: set[int] = set()
    for _ in range(singles):
        busy |= set(chooser.place(NodeRequest(topology, 1, frozenset(busy), mode)).gpus)
    big = chooser.place(NodeRequest(topology, k, frozenset(busy), mode))
    return {
        "policy": policy,
        "mode": mode.value,
        "singles": sorted(busy),
        "gpus": list(big.gpus),
        "ring_bandwidth_gbps": big.ring_bandwidth_gbps,
    }


def demo(
    topology: str = typer.Option("dgx1-v100", "--topology", "-t", help="Preset name or file."),
    gpus: int = typer.Option(4, "--gpus", "-k", help="Size of the multi-GPU job."),
    json_out: bool = typer.Option(False, "--json", help="JSON instead of tables."),
) -> None:
    """Compare policies on one node: a k-GPU job on an empty node, then after 1-GPU jobs."""
    try:
        node = load_topology(topology)
    except TopologyError as err:
        fail(str(err))
    if not 2 <= gpus <= node.size:
        fail(f"--gpus must be between 2 and {node.size} on this node")
    rings = [ring_bandwidth(node, s) or 0.0 for s in combinations(range(node.size), gpus)]
    best = max(rings)
    empty: list[dict[str, Any]] = [
        {"policy": name, **{"gpus": list(p.gpus), "ring_bandwidth_gbps": p.ring_bandwidth_gbps}}
        for name in POLICIES
        for p in [make_policy(name).place(NodeRequest(node, gpus))]
    ]
    singles = node.size - gpus
    after: list[dict[str, Any]] = [
        _fragmentation(node, name, Mode.PACK, singles, gpus) for name in POLICIES
    ]
    after.append(_fragmentation(node, "topology", Mode.SPREAD, singles, gpus))
    report = {
        "topology": node.name or topology,
        "gpus": gpus,
        "sets": len(rings),
        "sets_at_best_ring": sum(1 for r in rings if r == best),
        "best_ring_bandwidth_gbps": best,
        "empty_node": empty,
        "after_single_gpu_jobs": after,
    }
    if json_out:
        emit_json(report)
        return
    console.print(
        f"[bold]{report['topology']}[/]: {len(rings)} ways to pick {gpus} GPUs; "
        f"{report['sets_at_best_ring']} reach the best ring of {best:g} GB/s."
    )
    table = Table(
        "policy",
        "GPUs",
        "ring GB/s",
        title=f"A {gpus}-GPU job on an empty node",
        title_justify="left",
    )
    for row in empty:
        table.add_row(
            row["policy"], ",".join(map(str, row["gpus"])), f"{row['ring_bandwidth_gbps']:g}"
        )
    console.print(table)
    table = Table(
        "policy",
        "mode",
        "1-GPU jobs on",
        f"{gpus}-GPU job on",
        "ring GB/s",
        title=f"{singles} one-GPU jobs arrive first, then the {gpus}-GPU job",
        title_justify="left",
    )
    for row in after:
        ring = row["ring_bandwidth_gbps"]
        table.add_row(
            row["policy"],
            row["mode"],
            ",".join(map(str, row["singles"])),
            ",".join(map(str, row["gpus"])),
            "-" if ring is None else f"{ring:g}",
        )
    console.print(table)
