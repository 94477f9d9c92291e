"""The Philly trace on g4dn.12xlarge nodes, `toposched` with and without `spread_by_model`.

Run: .venv/bin/python benchmarks/sim_spread.py [--cluster 128*g4dn-12xlarge/8] [--limit N]
     [--spread 0,0.1] [--catalog FITTED.yaml] [--json] [--smoke]

Fits the performance catalog to data/measurements/pollux-t4 (`toposched perf fit`, into a
temporary file) unless --catalog names one, then replays the trace with the `aws-50g` network
and the `pytorch-ddp` framework once without the option and once per --spread value, each in
the same process one after the other, and prints the figures side by side (docs/placement.md,
"Across nodes, by the performance model").

`--smoke` (CI, seconds): the catalog fitted to bert's measurements alone (all three take 40 s),
the first 50 jobs on 4 nodes, --spread 0.1.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from toposched.discovery.catalog_files import load_catalog
from toposched.discovery.files import load_cluster
from toposched.perf import PerfModel
from toposched.sim.engine import Simulation
from toposched.sim.metrics import comparable, summarise
from toposched.sim.traces import read_trace

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "data" / "traces" / "philly" / "philly.csv"
MEASURED = ROOT / "data" / "measurements" / "pollux-t4"
JOBS = ("bert", "cifar10", "imagenet")
KEYS = (
    ("finished", "{:,}"),
    ("avg_jct_s", "{:,.0f}"),
    ("p50_jct_s", "{:,.0f}"),
    ("p99_jct_s", "{:,.0f}"),
    ("avg_queue_s", "{:,.0f}"),
    ("makespan_s", "{:,.0f}"),
    ("gpu_alloc_util", "{:.3f}"),
    ("effective_util", "{:.3f}"),
    ("placement_quality_mean", "{:.3f}"),
    ("placement_quality_alone_mean", "{:.3f}"),
    ("fragmentation_mean", "{:.3f}"),
    ("preemptions", "{:,}"),
    ("migrations", "{:,}"),
    ("wall_s", "{:.1f}"),
)


def fit(out: Path, jobs: tuple[str, ...]) -> None:
    measured = [str(MEASURED / job) for job in jobs]
    subprocess.run(
        [sys.executable, "-m", "toposched", "perf", "fit", *measured, "--topology", "g4dn-12xlarge",
         "--network", "aws-50g", "--framework", "pytorch-ddp", "--out", str(out)],
        check=True,
        capture_output=True,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", default="128*g4dn-12xlarge/8")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--spread", default="0", help="spread_by_model values, comma-separated")
    parser.add_argument("--catalog", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--smoke", action="store_true", help="fit to bert alone, 50 jobs on 4 nodes (CI)"
    )
    args = parser.parse_args()
    if args.smoke:
        args.cluster, args.limit, args.spread = "4*g4dn-12xlarge/8", 50, "0.1"
    with tempfile.TemporaryDirectory() as tmp:
        catalog = args.catalog
        if catalog is None:
            catalog = Path(tmp) / "pollux-t4.yaml"
            fit(catalog, JOBS[:1] if args.smoke else JOBS)
        perf = PerfModel(load_catalog([str(catalog)]))
    trace = read_trace(str(TRACE), None, limit=args.limit, seed=0)
    cluster = load_cluster(args.cluster)
    runs: dict[str, dict[str, object]] = {"off": {"spread_by_model": None}}
    for value in args.spread.split(","):
        runs[f"spread_by_model={value}"] = {"spread_by_model": float(value)}
    figures = {}
    for label, params in runs.items():
        sim = Simulation(
            trace,
            cluster,
            "toposched",
            perf=perf,
            network="aws-50g",
            framework="pytorch-ddp",
            policy_params=params,
        )
        figures[label] = comparable(summarise(sim.run()))
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{len(trace.jobs):,} Philly jobs on {args.cluster}, aws-50g, pytorch-ddp")
    print("| | " + " | ".join(figures) + " |")
    print("|---" * (len(figures) + 1) + "|")
    for key, style in KEYS:
        cells = [
            "n/a" if figures[label].get(key) is None else style.format(figures[label][key])
            for label in figures
        ]
        print(f"| {key} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
