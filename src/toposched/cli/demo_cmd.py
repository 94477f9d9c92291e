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

MOST_BUSY = 2  # cases have up to this many GPUs busy already (one case per count and size)


def _choice(topology: NodeTopology, policy: str, k: int, busy: frozenset[int]) -> dict[str, Any]:
    placed = make_policy(policy).place(NodeRequest(topology, k, busy, Mode.PACK))
    return {"policy": policy, "gpus": list(placed.gpus), "ring": placed.ring_bandwidth_gbps}


def _cases(topology: NodeTopology, k: int) -> list[dict[str, Any]]:
    """For each count of busy GPUs (none, one, two), the busy set on which topology-aware
    placement beats index order by the widest margin (the first such set in index order among
    equals): where the choice of GPUs matters. No row where both get the same ring."""
    out: list[dict[str, Any]] = []
    for count in range(MOST_BUSY + 1):
        if topology.size - count < k:
            break
        best: tuple[float, frozenset[int]] | None = None
        for busy in map(frozenset, combinations(range(topology.size), count)):
            aware = _choice(topology, "topology", k, busy)["ring"] or 0.0
            plain = _choice(topology, "index-order", k, busy)["ring"] or 0.0
            if aware > plain and (best is None or aware / plain > best[0]):
                best = (aware / plain if plain else float("inf"), busy)
        if best is not None:
            busy = best[1]
            out.append(
                {
                    "busy": sorted(busy),
                    "gpus": k,
                    "choices": [_choice(topology, name, k, busy) for name in POLICIES],
                }
            )
    return out


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


def _gpus(gpus: list[int]) -> str:
    return ",".join(map(str, gpus)) or "none"


def _ring(ring: float | None) -> str:
    return "-" if ring is None else f"{ring:g}"


def demo(
    topology: str = typer.Option("dgx1-v100", "--topology", "-t", help="Preset name or file."),
    gpus: list[int] = typer.Option(
        [2, 4], "--gpus", "-k", help="Size of the multi-GPU jobs (repeatable; default 2 and 4)."
    ),
    json_out: bool = typer.Option(False, "--json", help="JSON instead of tables."),
) -> None:
    """Compare policies on one node: where topology-aware placement picks better GPUs than
    index order (some GPUs busy already), then a k-GPU job after 1-GPU jobs."""
    try:
        node = load_topology(topology)
    except TopologyError as err:
        fail(str(err))
    sizes = sorted(set(gpus))
    if not sizes or not all(2 <= k <= node.size for k in sizes):
        fail(f"--gpus must be between 2 and {node.size} on this node")
    about = []
    for k in sizes:
        rings = [ring_bandwidth(node, s) or 0.0 for s in combinations(range(node.size), k)]
        best = max(rings)
        about.append(
            {
                "gpus": k,
                "sets": len(rings),
                "sets_at_best_ring": sum(1 for r in rings if r == best),
                "best_ring_bandwidth_gbps": best,
            }
        )
    cases = [case for k in sizes for case in _cases(node, k)]
    k = sizes[-1]
    singles = node.size - k
    after: list[dict[str, Any]] = [
        _fragmentation(node, name, Mode.PACK, singles, k) for name in POLICIES
    ]
    after.append(_fragmentation(node, "topology", Mode.SPREAD, singles, k))
    report = {
        "topology": node.name or topology,
        "sizes": about,
        "cases": cases,
        "after_single_gpu_jobs": after,
    }
    if json_out:
        emit_json(report)
        return
    for size in about:
        console.print(
            f"[bold]{report['topology']}[/]: {size['sets']} ways to pick {size['gpus']} GPUs; "
            f"{size['sets_at_best_ring']} reach the best ring of "
            f"{size['best_ring_bandwidth_gbps']:g} GB/s."
        )
    if cases:
        table = Table(
            "busy GPUs",
            "job",
            *POLICIES,
            title="Where topology matters: the GPUs each policy picks (ring GB/s)",
            title_justify="left",
        )
        for case in cases:
            table.add_row(
                _gpus(case["busy"]),
                f"{case['gpus']} GPUs",
                *(f"{_gpus(c['gpus'])} ({_ring(c['ring'])})" for c in case["choices"]),
            )
        console.print(table)
    else:
        console.print(
            f"On this node index order gets the best ring with up to {MOST_BUSY} GPUs busy "
            "(every pair of GPUs is joined alike, as through NVSwitch): topology-aware "
            "placement cannot do better."
        )
    table = Table(
        "policy",
        "mode",
        "1-GPU jobs on",
        f"{k}-GPU job on",
        "ring GB/s",
        title=f"{singles} one-GPU jobs arrive first, then the {k}-GPU job",
        title_justify="left",
    )
    for row in after:
        table.add_row(
            row["policy"],
            row["mode"],
            ",".join(map(str, row["singles"])),
            ",".join(map(str, row["gpus"])),
            _ring(row["ring_bandwidth_gbps"]),
        )
    console.print(table)
