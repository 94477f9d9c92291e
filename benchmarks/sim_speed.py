"""The simulator's wall time per policy on the whole Philly trace, this checkout beside an older
commit in the same run (issue 30 item 4: each policy at least 4x faster than at 95b5b9b).

Run: .venv/bin/python benchmarks/sim_speed.py [--policy toposched,hived-like] [--against REV]
     [--limit N] [--cluster 64*dgx1-v100/8] [--repeat N] [--json] [--smoke]

The older code (--against, default 95b5b9b; `none` for this checkout alone) is `git archive`d
into a temporary folder. Each policy runs in a fresh process per code, with PYTHONPATH at that
code's src/, the codes taking turns (old, new, old, new with --repeat 2), so that the load of a
shared machine falls on both alike; both replay this checkout's trace file. The time is the
simulation's own (`SimResult.wall_s`, the trace read before it), the fastest of the repeats,
with its process's CPU seconds beside it. Each run's finished jobs and average JCT are printed
too: the older code may decide differently (its features were fewer), but it did the same
trace. --smoke (CI, seconds): the first 200 jobs, this checkout alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "data" / "traces" / "philly" / "philly.csv"
DEFAULT_AGAINST = "95b5b9b"

# Run in the child, under either code: only APIs both have.
CHILD = """
import json, sys, time
from toposched.discovery.files import load_cluster
from toposched.sim.engine import Simulation
from toposched.sim.metrics import summarise
from toposched.sim.traces import read_trace
path, limit, cluster, policy = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
trace = read_trace(path, limit=int(limit) if limit else None, seed=0)
before = time.process_time()
result = Simulation(trace, load_cluster(cluster), policy, seed=0).run()
cpu = time.process_time() - before
summary = summarise(result)
print(json.dumps({"wall_s": result.wall_s, "cpu_s": cpu, "finished": summary["finished"],
                  "avg_jct_s": summary["avg_jct_s"]}))
"""


def export(rev: str, into: Path) -> Path:
    """The src/ folder of commit `rev`, written under `into`."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "src"], capture_output=True, check=False
    )
    if archive.returncode != 0:
        raise SystemExit(f"git archive {rev}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src"


def run_once(src: Path, policy: str, args: argparse.Namespace) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    limit = "" if args.limit is None else str(args.limit)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(TRACE), limit, args.cluster, policy],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{policy} under {src}: exit {done.returncode}\n{done.stderr[-3000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="toposched,hived-like")
    parser.add_argument("--cluster", default="64*dgx1-v100/8")
    parser.add_argument("--limit", type=int, default=None, help="only the first N jobs")
    parser.add_argument("--against", default=DEFAULT_AGAINST, help="older commit, or none")
    parser.add_argument("--repeat", type=int, default=1, help="runs per policy and code")
    parser.add_argument("--json", action="store_true", help="print all figures as JSON")
    parser.add_argument("--smoke", action="store_true", help="200 jobs, this checkout alone (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.limit, args.against, args.repeat = 200, "none", 1
    if args.repeat < 1:
        raise SystemExit("--repeat must be at least 1")
    policies = [p for p in args.policy.split(",") if p]
    with tempfile.TemporaryDirectory(prefix="sim-speed-") as tmp:
        codes = {"head": ROOT / "src"}
        if args.against != "none":
            codes = {args.against: export(args.against, Path(tmp)), **codes}
        results: dict[str, dict[str, dict[str, float]]] = {}
        for policy in policies:
            runs: dict[str, list[dict[str, float]]] = {code: [] for code in codes}
            for _ in range(args.repeat):
                for code, src in codes.items():
                    runs[code].append(run_once(src, policy, args))
            results[policy] = {}
            for code, got in runs.items():
                best = min(got, key=lambda r: r["wall_s"])
                results[policy][code] = best
                print(
                    f"{policy:<12} {code:<10} wall {best['wall_s']:7.1f} s  "
                    f"cpu {best['cpu_s']:7.1f} s  finished {best['finished']:>7,}  "
                    f"avg JCT {best['avg_jct_s']:>12,.0f} s",
                    flush=True,
                )
            if args.against != "none":
                old, new = runs[args.against], runs["head"]
                ratio = min(r["wall_s"] for r in old) / min(r["wall_s"] for r in new)
                results[policy]["speedup"] = {"wall": ratio}
                print(f"{policy:<12} head is {ratio:.2f}x as fast as {args.against}", flush=True)
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
