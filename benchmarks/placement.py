"""Placement speed: decisions/s and p50/p99 latency per request size, per policy and node.

Run: .venv/bin/python benchmarks/placement.py [--requests N] [--budget SECONDS] [--smoke]

Each request has a seeded random busy set leaving at least k GPUs free. `topology` is timed
with its decision memo cleared before every request (the cost of a new question) and again
with the memo warm (what a cluster of identical nodes mostly pays); the one-off cost of
building a topology's subset tables is printed separately. `pair-score` enumerates every
partition of the free GPUs, so each cell stops after --budget seconds.

`--smoke` (CI, seconds): 20 requests per cell, and pair-score on the 8-GPU nodes only (one
request of it on a 16-GPU node can take 20 s, whatever the budget).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from toposched.placement import NodeRequest, make_policy
from toposched.placement.pair_score import best_partition_group
from toposched.placement.tables import subset_tables
from toposched.placement.topology_aware import clear_decision_memo
from toposched.topology import NodeTopology, preset

NODES = ("dgx1-v100", "pcie-8gpu-2socket", "hgx-h100", "dgx2-v100", "pcie-16gpu-nvbridge")


def requests_for(
    topology: NodeTopology, k: int, count: int, rng: random.Random
) -> list[NodeRequest]:
    out = []
    for _ in range(count):
        busy_count = rng.randint(0, topology.size - k)
        busy = frozenset(rng.sample(range(topology.size), busy_count))
        out.append(NodeRequest(topology, k, busy))
    return out


def timed(
    run: Callable[[NodeRequest], object],
    requests: list[NodeRequest],
    budget: float,
    before: Callable[[], None] = lambda: None,
) -> list[float]:
    """Latency of each request in ms, stopping once `budget` seconds have been spent."""
    samples: list[float] = []
    spent = 0.0
    for request in requests:
        before()
        start = time.perf_counter()
        run(request)
        elapsed = time.perf_counter() - start
        samples.append(elapsed * 1e3)
        spent += elapsed
        if spent > budget:
            break
    return samples


def row(node: str, k: int, policy: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    rate = len(samples) / (sum(samples) / 1e3)
    return (
        f"{node:<20} {k:>3} {policy:<16} {len(samples):>6} {rate:>12.0f} "
        f"{statistics.median(ordered):>9.3f} {p99:>9.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per cell")
    parser.add_argument("--budget", type=float, default=20.0, help="seconds per pair-score cell")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--smoke", action="store_true", help="20 requests per cell, pair-score on 8 GPUs (CI)"
    )
    args = parser.parse_args()
    if args.smoke:
        args.requests = 20
    most = 8 if args.smoke else float("inf")  # the most GPUs of a node pair-score is timed on
    rng = random.Random(args.seed)

    print("one-off subset tables per topology:")
    for node in NODES:
        topology = preset(node)
        subset_tables.cache_clear()
        start = time.perf_counter()
        subset_tables(topology)
        print(
            f"  {node:<20} {topology.size:>2} GPUs  {1e3 * (time.perf_counter() - start):8.1f} ms"
        )

    print(
        f"\n{'node':<20} {'k':>3} {'policy':<16} {'n':>6} {'decisions/s':>12} "
        f"{'p50 ms':>9} {'p99 ms':>9}"
    )
    topology_policy = make_policy("topology")
    pair = make_policy("pair-score")
    for node in NODES:
        topology = preset(node)
        sizes = [k for k in (1, 2, 4, 8, 16) if k <= topology.size]
        for k in sizes:
            requests = requests_for(topology, k, args.requests, rng)
            cold = timed(topology_policy.place, requests, float("inf"), clear_decision_memo)
            print(row(node, k, "topology", cold))
            warm = timed(topology_policy.place, requests, float("inf"))
            print(row(node, k, "topology(memo)", warm))
            if k == 1 or topology.size > most:
                continue
            print(row(node, k, "pair-score", timed(pair.place, requests, args.budget)), flush=True)

    print("\npartitions pair-score scores on an empty node:")
    for node in NODES:
        topology = preset(node)
        for k in (2, 4, 8):
            if k >= topology.size or topology.size > most:
                continue
            start = time.perf_counter()
            _, scored = best_partition_group(topology, tuple(range(topology.size)), k)
            print(
                f"  {node:<20} k={k}: {scored:>9} partitions, {time.perf_counter() - start:7.2f} s"
            )


if __name__ == "__main__":
    main()
