"""GPU sharing by the FGD paper's protocol: GPUs allocated as demand grows, and those left over.

Run: .venv/bin/python benchmarks/gpu_share.py --trace PODS.csv [--nodes NODES.csv]
     [--policy toposched,fgd,best-fit,gpu-packing,random] [--seed 42] [--tune 1.3] [--smoke]

An openb pod list (any: openb_pod_list_default.csv, the gpushare*, multigpu*, cpu* lists;
Alibaba PAI 2023, Weng et al. ATC '23, see data/traces/openb/SOURCE.md) on the openb GPU node
list (data/clusters/openb/openb_node_list_gpu_node.csv, 1,213 nodes, 6,212 GPUs), packed
pod by pod by each share policy of placement/sharing.py under the protocol of the paper's
simulator (sim/packing.py: inflated to --tune x the cluster's GPUs, shuffled with --seed,
nobody leaves). Prints per policy the GPUs allocated (%) at 50..130% of demand, the pods that
failed, the GPUs left unallocated once 100% of the cluster's GPUs were asked (where the
paper's bar charts read it) and at the end, and FGD's fragmentation measure then; as its last
line a JSON object with `trace`, `toposched_unallocated_gpus` and `toposched_alloc_ratio` (at
100% asked), the same at the end (`..._end`), and the same for every policy run.

--smoke (CI, seconds): the 14-pod fixture on the 15-node fixture, every policy.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from toposched.placement.sharing import SHARE_POLICIES  # noqa: E402
from toposched.sim.clusters import read_machine_list  # noqa: E402
from toposched.sim.packing import SEED, TUNE, PackingResult, pack, read_pods  # noqa: E402

NODES = ROOT / "data" / "clusters" / "openb" / "openb_node_list_gpu_node.csv"
SMOKE_PODS = ROOT / "tests" / "fixtures" / "traces" / "openb" / "gpuspec.csv"
SMOKE_NODES = ROOT / "tests" / "fixtures" / "traces" / "openb" / "nodes.csv"
POINTS = (50, 80, 90, 100, 110, 120, 130)


def external_columns(trace: Path, nodes: Path) -> dict[str, float]:
    """The seam for FGD's own simulator (hkust-adsl/kubernetes-scheduler-simulator, issue 42
    item 6): `fgd_sim_unallocated_gpus`, `bestfit_sim_unallocated_gpus` and
    `fgd_sim_alloc_ratio` measured on the same node and pod lists. Not built yet: none."""
    return {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, help="an openb pod list")
    parser.add_argument("--nodes", type=Path, default=NODES, help="an openb node list")
    parser.add_argument("--policy", default=",".join(SHARE_POLICIES))
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--tune", type=float, default=TUNE)
    parser.add_argument(
        "--smoke", action="store_true", help="the 14-pod fixture on 15 nodes (CI, seconds)"
    )
    args = parser.parse_args()
    if args.smoke:
        args.trace, args.nodes = SMOKE_PODS, SMOKE_NODES
    if args.trace is None:
        parser.error("--trace is needed (or --smoke)")
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    unknown = [p for p in policies if p not in SHARE_POLICIES]
    if unknown:
        parser.error(f"--policy: unknown {', '.join(unknown)}; known: {', '.join(SHARE_POLICIES)}")
    pods = read_pods(args.trace)
    cluster = read_machine_list(args.nodes)
    results: list[tuple[PackingResult, float]] = []
    for name in policies:
        began = time.monotonic()
        results.append((pack(pods, cluster, name, args.seed, args.tune), time.monotonic() - began))
    total = results[0][0].total_gpus
    print(
        f"{args.trace.name} on {args.nodes.name} ({total} GPUs), tune {args.tune}, seed {args.seed}"
    )
    points = [p for p in POINTS if p <= int(args.tune * 100)]
    head = "policy".ljust(12) + "".join(f"{p:>7}%" for p in points)
    print(head + "   failed  unalloc@100%  unalloc@end  frag GPUs  seconds")
    for r, seconds in results:
        at = dict(r.curve)
        row = "".join(f"{at.get(p, at[max(at)]):>8.2f}" for p in points)
        print(
            f"{r.policy:<12}{row} {r.failed:>8} {r.unallocated_gpus_at(100):>13.1f}"
            f" {r.unallocated_gpus:>12.1f}"
            f" {r.fragmentation:>10.1f} {seconds:>8.1f}"
        )
    summary: dict[str, object] = {"trace": args.trace.name, "nodes": args.nodes.name}
    summary["total_gpus"] = total
    for r, _ in results:
        key = r.policy.replace("-", "_")
        summary[f"{key}_unallocated_gpus"] = round(r.unallocated_gpus_at(100), 2)
        summary[f"{key}_alloc_ratio"] = round(r.alloc_ratio_at(100), 5)
        summary[f"{key}_unallocated_gpus_end"] = round(r.unallocated_gpus, 2)
        summary[f"{key}_alloc_ratio_end"] = round(r.alloc_ratio, 5)
        summary[f"{key}_failed_pods"] = r.failed
    summary.update(external_columns(args.trace, args.nodes))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
