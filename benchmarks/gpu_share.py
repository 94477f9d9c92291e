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

Side by side with FGD's own simulator (benchmarks/fgd_peer.py, issue 42 item 6): `--peer` runs
its FGD and best-fit on the same node and pod lists (its binary built or found as fgd_peer.py
says), `--peer-logs LOG...` reads the logs of runs kept before (`fgd_peer.py --keep`); either
way toposched's side then replays the very arrivals the peer logged (its shuffle and its
tuning's copies, not this protocol's own), and the JSON line adds `fgd_sim_unallocated_gpus`,
`bestfit_sim_unallocated_gpus`, `fgd_sim_alloc_ratio`, `bestfit_sim_alloc_ratio` and
`arrivals` ("peer" or "own"). Without either, the peer's fields are null and say why.

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

sys.path.insert(0, str(ROOT / "benchmarks"))

import fgd_peer  # noqa: E402
from toposched.placement.sharing import SHARE_POLICIES  # noqa: E402
from toposched.sim.clusters import read_machine_list  # noqa: E402
from toposched.sim.packing import SEED, TUNE, PackingResult, pack, read_pods  # noqa: E402

NODES = ROOT / "data" / "clusters" / "openb" / "openb_node_list_gpu_node.csv"
SMOKE_PODS = ROOT / "tests" / "fixtures" / "traces" / "openb" / "gpuspec.csv"
SMOKE_NODES = ROOT / "tests" / "fixtures" / "traces" / "openb" / "nodes.csv"
POINTS = (50, 80, 90, 100, 110, 120, 130)


PEER_FIELDS = (
    "fgd_sim_unallocated_gpus",
    "bestfit_sim_unallocated_gpus",
    "fgd_sim_alloc_ratio",
    "bestfit_sim_alloc_ratio",
)


def peer_figures(
    args: argparse.Namespace,
) -> tuple[dict[str, object], tuple[str, ...] | None]:
    """FGD's own simulator's columns and the arrivals it logged (None where it did not run)."""
    if args.peer_logs:
        logs = [fgd_peer.parse_log(path.read_text(errors="replace")) for path in args.peer_logs]
        fields: dict[str, object] = {}
        arrivals: tuple[str, ...] | None = None
        for path, log in zip(args.peer_logs, logs, strict=True):
            policy = log.policy()
            if policy is None:
                raise SystemExit(f"--peer-logs {path}: not a log of the peer's fgd or best-fit")
            if log.scheduler_errors:
                raise SystemExit(
                    f"--peer-logs {path}: {log.scheduler_errors} placements failed in the "
                    "simulator's own scheduler (see docs/simulator.md): not its policy's figure"
                )
            prefix = fgd_peer.JSON_PREFIX[policy]
            try:
                fields[f"{prefix}_unallocated_gpus"] = log.unallocated_gpus()
                fields[f"{prefix}_alloc_ratio"] = round(log.alloc_ratio() / 100, 5)
            except fgd_peer.PeerError as err:
                raise SystemExit(f"--peer-logs {path}: {err}") from None
            arrivals = arrivals or tuple(fgd_peer.original_name(n) for n in log.arrivals)
        return {k: fields.get(k) for k in PEER_FIELDS}, arrivals
    if not args.peer:
        why = "not run: --peer runs FGD's own simulator, --peer-logs reads kept logs"
        return {**dict.fromkeys(PEER_FIELDS), "peer": why}, None
    try:
        binary = fgd_peer.build(lambda line: print(line, file=sys.stderr, flush=True))
    except fgd_peer.BuildError as err:
        return {**dict.fromkeys(PEER_FIELDS), "peer": f"not run: {err}"}, None
    figures = []
    for policy in ("fgd", "best-fit"):
        print(f"running FGD's own simulator, {policy} ...", file=sys.stderr, flush=True)
        run = fgd_peer.run(binary, args.trace, args.nodes, policy, args.seed, until=102)
        if run.scheduler_errors:
            raise SystemExit(
                f"FGD's simulator, {policy}: {run.scheduler_errors} placements failed in its "
                "own scheduler (see docs/simulator.md): not its policy's figure"
            )
        figures.append(run)
    got = fgd_peer.json_fields(figures)
    for key in ("fgd_sim_alloc_ratio", "bestfit_sim_alloc_ratio"):
        got[key] = round(got[key] / 100, 5)  # a share, as toposched's; the peer logs a %
    return {k: got.get(k) for k in PEER_FIELDS}, figures[0].arrivals


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
    parser.add_argument(
        "--peer", action="store_true", help="run FGD's own simulator beside (fgd_peer.py)"
    )
    parser.add_argument(
        "--peer-logs", type=Path, nargs="+", metavar="LOG", help="read the peer's kept logs"
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
    peer, order = peer_figures(args)
    results: list[tuple[PackingResult, float]] = []
    for name in policies:
        began = time.monotonic()
        packed = pack(pods, cluster, name, args.seed, args.tune, order)
        results.append((packed, time.monotonic() - began))
    total = results[0][0].total_gpus
    print(
        f"{args.trace.name} on {args.nodes.name} ({total} GPUs), tune {args.tune}, seed {args.seed}"
        + ("" if order is None else f", the {len(order):,} arrivals FGD's own simulator logged")
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
    for prefix, name in (
        ("fgd_sim", "fgd (FGD's own simulator)"),
        ("bestfit_sim", "best-fit (its)"),
    ):
        unallocated = peer.get(f"{prefix}_unallocated_gpus")
        if unallocated is not None:
            print(f"{name:<28} unallocated at 100% asked: {unallocated:.1f} GPUs")
    if "peer" in peer:
        print(f"FGD's own simulator: {peer['peer']}")
    summary: dict[str, object] = {"trace": args.trace.name, "nodes": args.nodes.name}
    summary["total_gpus"] = total
    for r, _ in results:
        key = r.policy.replace("-", "_")
        summary[f"{key}_unallocated_gpus"] = round(r.unallocated_gpus_at(100), 2)
        summary[f"{key}_alloc_ratio"] = round(r.alloc_ratio_at(100), 5)
        summary[f"{key}_unallocated_gpus_end"] = round(r.unallocated_gpus, 2)
        summary[f"{key}_alloc_ratio_end"] = round(r.alloc_ratio, 5)
        summary[f"{key}_failed_pods"] = r.failed
    summary["arrivals"] = "own" if order is None else "peer"
    summary.update(peer)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
