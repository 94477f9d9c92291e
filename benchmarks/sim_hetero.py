"""Heterogeneous clusters: GPU-type-aware placement against type-blind first fit (issue 19).

Run: .venv/bin/python benchmarks/sim_hetero.py [--philly-limit 10000] [--typed-share 0.3]
     [--only philly|openb] [--openb-limit N] [--workers 2] [--json] [--smoke]

(a) Philly: the first --philly-limit jobs of data/traces/philly/philly.csv (CC BY 4.0 and
Apache-2.0, see its SOURCE.md), --typed-share of them given one GPU type (drawn with seed 0 in
proportion to the types' GPUs, `toposched sim --typed-share`), on
examples/clusters/mixed-v100-p100-t4.yaml (256 V100, 128 P100, 128 T4: the 512 GPUs of the
homogeneous cluster benchmarks/sim_philly.py uses). Prints JCT, queueing and utilisation per
configuration, and the same prefix, untyped, on 512 V100 (64*dgx1-v100/8) for reference.

(b) openb: data/traces/openb/openb_pod_list_gpuspec33.csv on the 1,213 nodes of
data/clusters/openb/openb_node_list_gpu_node.csv (Alibaba PAI 2023, Weng et al. ATC'23; see
their SOURCE.md). Pods that ask for part of a GPU take a whole one (no GPU sharing yet); pods
without GPUs are left out. Two replays: `replay`, each pod for its own run time, and `fill`,
every pod staying to the end (as the FGD paper's experiments fill the cluster), which stops at
the last arrival. Prints the GPU allocation rate (GPUs held over the cluster's) and the pods
waiting when half, three quarters, 90%, 95% and all of the pods have arrived.

Configurations (policies of docs/scheduler.md, parameters as `toposched sim --param` sets):
  aware          toposched                               (type_choice=fastest, the default)
  blind          toposched, type_choice=blind            (the first type in node order)
  firstfit       fifo-gang-firstfit, type_choice=blind   (FIFO, index-order: type-blind first fit)
  firstfit-aware fifo-gang-firstfit, type_choice=fastest
  backfill       fifo-gang-firstfit, type_choice=blind, backfill=true (a pod that fits starts
                 even if pods before it wait: each pod placed on arrival if it fits, as the
                 FGD paper's simulator does)
  backfill-aware fifo-gang-firstfit, type_choice=fastest, backfill=true
A type-blind placement depends on the node order, so (a) runs the blind ones with the V100
nodes listed first (the file's order) and last (`T4 first`: the node list reversed); (b) keeps
the node list's order (P100 nodes first).
Each replay runs in its own process, --workers at a time; wall times are each replay's own.
--openb-limit N replays the first N pods of openb only (0, the default: all).
--smoke (CI, seconds): the first 50 Philly jobs and the first 50 openb pods, every replay.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PHILLY = ROOT / "data" / "traces" / "philly" / "philly.csv"
MIXED = ROOT / "examples" / "clusters" / "mixed-v100-p100-t4.yaml"
OPENB_TRACE = ROOT / "data" / "traces" / "openb" / "openb_pod_list_gpuspec33.csv"
OPENB_NODES = ROOT / "data" / "clusters" / "openb" / "openb_node_list_gpu_node.csv"

CONFIGS: dict[str, tuple[str, dict[str, object]]] = {
    "aware": ("toposched", {}),
    "blind": ("toposched", {"type_choice": "blind"}),
    "firstfit": ("fifo-gang-firstfit", {"type_choice": "blind"}),
    "firstfit-aware": ("fifo-gang-firstfit", {"type_choice": "fastest"}),
    "backfill": ("fifo-gang-firstfit", {"type_choice": "blind", "backfill": True}),
    "backfill-aware": ("fifo-gang-firstfit", {"type_choice": "fastest", "backfill": True}),
}
# (label, configuration, cluster, node order reversed)
PHILLY_RUNS = (
    ("aware", "aware", "mixed", False),
    ("blind, V100 first", "blind", "mixed", False),
    ("blind, T4 first", "blind", "mixed", True),
    ("firstfit, V100 first", "firstfit", "mixed", False),
    ("firstfit, T4 first", "firstfit", "mixed", True),
    ("firstfit-aware", "firstfit-aware", "mixed", True),
    ("reference: 512 V100", "aware", "64*dgx1-v100/8", False),
)
# toposched is left out of `fill`: with pods that never end, a replay of it had not finished
# after 5 minutes (docs/simulator.md, "Heterogeneous clusters").
OPENB_RUNS = (
    ("aware", "aware", "replay"),
    ("backfill", "backfill", "replay"),
    ("backfill-aware", "backfill-aware", "replay"),
    ("backfill", "backfill", "fill"),
    ("backfill-aware", "backfill-aware", "fill"),
)
STAY_S = 1e9  # a run time longer than the openb trace's span: the pod stays to the end
ARRIVED = (0.5, 0.75, 0.9, 0.95, 1.0)


def philly(label: str, config: str, cluster: str, reverse: bool, limit: int, share: float) -> Any:
    from toposched.discovery.files import load_cluster
    from toposched.sim.engine import Simulation
    from toposched.sim.metrics import summarise
    from toposched.sim.traces import read_trace
    from toposched.sim.typed import type_share

    policy, params = CONFIGS[config]
    trace = read_trace(PHILLY, limit=limit)
    if cluster == "mixed":
        built = load_cluster(str(MIXED))
        trace = type_share(trace, built, share, seed=0)
    else:
        built = load_cluster(cluster)
    if reverse:
        built = replace(built, nodes=tuple(reversed(built.nodes)))
    result = Simulation(trace, built, policy, policy_params=params).run()
    summary: dict[str, Any] = dict(summarise(result))
    # GPU-time of the untyped jobs by the type it ran on: where a type choice puts them.
    by_type: dict[str, float] = {}
    hardware = {n.name: n.hardware.gpu_type for n in built.nodes}
    for job in result.jobs:
        if not job.trace.gpu_types and job.placements:
            kind = hardware[job.placements[-1][0]]
            by_type[kind] = by_type.get(kind, 0.0) + job.gpu_s
    total = sum(by_type.values()) or 1.0
    summary["untyped_gpu_time_share"] = {k: v / total for k, v in sorted(by_type.items())}
    summary["typed_jobs"] = trace.notes.get("typed-at-random", 0)
    return label, summary


def openb(label: str, config: str, mode: str, limit: int) -> Any:
    from toposched.sim.clusters import read_machine_list
    from toposched.sim.engine import Simulation
    from toposched.sim.traces import read_trace

    policy, params = CONFIGS[config]
    trace = read_trace(OPENB_TRACE, limit=limit or None)
    cluster = read_machine_list(OPENB_NODES)
    if mode == "fill":
        jobs = tuple(replace(j, duration_s=STAY_S) for j in trace.jobs)
        trace = replace(trace, jobs=jobs)
    last = trace.jobs[-1].submit_s
    began = time.perf_counter()
    result = Simulation(trace, cluster, policy, policy_params=params).run(until=last)
    wall = time.perf_counter() - began
    points = []
    for part in ARRIVED:
        index = max(0, round(part * len(trace.jobs)) - 1)
        at = trace.jobs[index].submit_s
        sample = [s for s in result.samples if s.time <= at][-1]
        points.append(
            {
                "arrived": index + 1,
                "time_s": at,
                "alloc_rate": sample.allocated / cluster.gpus,
                "waiting": sample.queued,
            }
        )
    return label, {
        "mode": mode,
        "points": points,
        "wall_s": wall,
        "jobs": len(trace.jobs),
        "skipped": trace.skip_reasons,
        "notes": trace.notes,
        "cluster_gpus": cluster.gpus,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--philly-limit", type=int, default=10_000)
    parser.add_argument("--typed-share", type=float, default=0.3)
    parser.add_argument("--only", choices=("philly", "openb"))
    parser.add_argument("--openb-limit", type=int, default=0, help="first N pods (0: all)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="50 Philly jobs, 50 openb pods (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.philly_limit, args.openb_limit = 50, 50
    began = time.perf_counter()
    ctx = mp.get_context("spawn")
    with ctx.Pool(args.workers) as pool:
        philly_runs = []
        if args.only != "openb":
            philly_runs = [
                pool.apply_async(philly, (*run, args.philly_limit, args.typed_share))
                for run in PHILLY_RUNS
            ]
        openb_runs = []
        if args.only != "philly":
            openb_runs = [pool.apply_async(openb, (*run, args.openb_limit)) for run in OPENB_RUNS]
        philly_results = dict(r.get() for r in philly_runs)
        openb_results = [r.get() for r in openb_runs]
    if args.json:
        print(
            json.dumps(
                {
                    "philly": philly_results,
                    "openb": [{"config": label, **fig} for label, fig in openb_results],
                },
                indent=2,
            )
        )
        return
    if philly_results:
        print_philly(philly_results, args)
    if openb_results:
        print_openb(openb_results)
    print(f"\ntotal wall {time.perf_counter() - began:.0f} s")


def print_philly(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    typed = next(iter(results.values()))["typed_jobs"]
    print(
        f"(a) the first {args.philly_limit:,} Philly jobs, {typed:,} typed "
        f"(--typed-share {args.typed_share}), on 256 V100 + 128 P100 + 128 T4"
    )
    rows = (
        ("finished", "{:,}"),
        ("avg_jct_s", "{:,.0f}"),
        ("p50_jct_s", "{:,.0f}"),
        ("p99_jct_s", "{:,.0f}"),
        ("avg_queue_s", "{:,.0f}"),
        ("gpu_alloc_util", "{:.3f}"),
        ("effective_util", "{:.3f}"),
        ("placement_quality_mean", "{:.3f}"),
        ("preemptions", "{:,}"),
        ("wall_s", "{:.1f}"),
    )
    print(f"{'':<24}" + "".join(f"{label:>22}" for label in results))
    for key, style in rows:
        cells = "".join(f"{style.format(r[key]):>22}" for r in results.values())
        print(f"{key:<24}{cells}")
    for kind in ("V100", "P100", "T4"):
        cells = "".join(
            f"{r['untyped_gpu_time_share'].get(kind, 0.0):>22.3f}" for r in results.values()
        )
        print(f"{'untyped GPU-time ' + kind:<24}{cells}")


def print_openb(results: list[tuple[str, dict[str, Any]]]) -> None:
    _, first = results[0]
    print(
        f"\n(b) openb gpuspec33: {first['jobs']:,} pods on {first['cluster_gpus']:,} GPUs "
        f"(left out: {first['skipped']}; {first['notes']})"
    )
    for label, fig in results:
        cells = "  ".join(
            f"{p['arrived']:>5,} arrived: {p['alloc_rate']:.3f} alloc, {p['waiting']:>4,} waiting"
            for p in fig["points"]
        )
        print(f"{fig['mode']:<7}{label:<15}{cells}  ({fig['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
