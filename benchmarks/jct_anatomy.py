"""Where a replay's average JCT goes: by job width, waiting against running, and the load.

Run: .venv/bin/python benchmarks/jct_anatomy.py [--trace data/traces/philly/philly.csv]
     [--cluster 64*dgx1-v100/8] [--limit N] [--policy toposched] [--param KEY=VALUE ...]
     [--quiet-neighbours] [--free-stops] [--smoke]

One replay in this process (the simulator of `toposched sim`, seed 0). Printed:

- the average JCT and its ratio to the lower bound no schedule can beat (every job alone at its
  ideal placement, without waiting: the trace's mean run time);
- the GPU-hours the jobs held against those the trace asks for, and what the difference went
  to: work lost to stops (restarts included), neighbours' interference, placements slower
  than the ideal one alone;
- per job width (GPUs): how many jobs, and what they add to the average JCT (their JCTs summed
  over all jobs), split into the wait before the first start, the time running, and the time
  stopped (waiting again after a stop); their stops per job;
- per week of submissions: the load the trace asks for (its jobs' GPU-hours over the cluster's
  GPU-hours in a week) and the load they held;
- sampled at events at least an hour of simulated time apart, while jobs of the width that
  adds most stopped time wait: how often, how many of them, and how many GPUs were free.

The last line is JSON with these figures. `--quiet-neighbours` replays with a framework
whose neighbours do not slow a job (the catalog's `pytorch-horovod` without its
`interference`), `--free-stops` with stops that lose nothing (a checkpoint every second, no
restart; the stop's grace period stays): what the average JCT would be without either cost,
an experiment on the model, not a setting of the scheduler. A job's stops are its
preemptions and migrations. The split of the GPU-hours held takes each job's GPUs as fixed,
as the simulator's trace jobs are (none is elastic).
--smoke (CI, seconds): the first 400 jobs on 4 DGX-1s.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

from toposched.cli.params import policy_params
from toposched.core import JobState, PolicyError
from toposched.discovery.files import load_cluster
from toposched.perf.model import PerfModel
from toposched.sim.engine import SimJob, Simulation
from toposched.sim.metrics import summarise
from toposched.sim.traces import read_trace
from toposched.sim.workload import Workload

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "data" / "traces" / "philly" / "philly.csv"
FRAMEWORK = "pytorch-horovod"
WEEK_S = 7 * 86_400.0
HOUR_S = 3_600.0


class Sampled(Simulation):
    """The simulator, noting once an hour of simulated time the free GPUs and the waiting
    jobs by width."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hourly: list[tuple[int, dict[int, int]]] = []
        self._next_hour = 0.0

    def _sample(self) -> None:
        super()._sample()
        if self.now < self._next_hour:
            return
        self._next_hour = self.now + HOUR_S
        books = self.core.books
        waiting: dict[int, int] = defaultdict(int)
        for rec in books.jobs.values():
            if rec.state is JobState.PENDING:
                waiting[rec.spec.min_workers * rec.spec.gpus_per_worker] += 1
        self.hourly.append((books.capacity.total_free, dict(waiting)))


def quiet_perf() -> PerfModel:
    """The catalog with `FRAMEWORK` replaced by a copy whose neighbours cost nothing."""
    catalog = PerfModel().catalog
    quiet = replace(catalog.framework(FRAMEWORK), interference={})
    return PerfModel(catalog.with_entries(frameworks=[quiet]))


def breakdown(jobs: list[SimJob]) -> dict[int, dict[str, float]]:
    """Per width: jobs, and their waits, run times and stopped times summed over all jobs."""
    done = [j for j in jobs if j.finish is not None and j.first_start is not None]
    n = len(done)
    out: dict[int, dict[str, float]] = {}
    for job in done:
        assert job.finish is not None and job.first_start is not None
        jct = job.finish - job.trace.submit_s
        queue = job.first_start - job.trace.submit_s
        row = out.setdefault(
            job.trace.gpus,
            {"jobs": 0, "jct": 0.0, "queue": 0.0, "run": 0.0, "stopped": 0.0, "stops": 0.0},
        )
        row["jobs"] += 1
        row["jct"] += jct / n
        row["queue"] += queue / n
        row["run"] += job.run_s / n
        row["stopped"] += (jct - queue - job.run_s) / n
        row["stops"] += job.preemptions + job.migrations
    for row in out.values():
        row["stops"] /= row["jobs"]
    return dict(sorted(out.items()))


def gpu_hours(jobs: list[SimJob]) -> dict[str, float]:
    """The GPU-hours held, and what held more than the trace asks for went to."""
    asked = sum(j.trace.gpus * j.trace.duration_s for j in jobs)
    held = sum(j.gpu_s for j in jobs)
    alone = sum(j.trace.gpus * j.alone_s for j in jobs)  # as fast as the placement allows
    useful = sum(j.gpu_speed_s for j in jobs)  # at the speed the neighbours left
    lost = sum(j.lost_gpu_s for j in jobs)
    return {
        "asked": asked / HOUR_S,
        "held": held / HOUR_S,
        "lost_to_stops": lost / HOUR_S,
        "neighbours": (alone - useful) / HOUR_S,
        "placement": (held - alone) / HOUR_S,
    }


def weekly_load(jobs: list[SimJob], gpus: int) -> list[tuple[int, float, float]]:
    """Per week of submissions: (week, load asked, load held)."""
    first = min(j.trace.submit_s for j in jobs)
    asked: dict[int, float] = defaultdict(float)
    held: dict[int, float] = defaultdict(float)
    for job in jobs:
        week = int((job.trace.submit_s - first) // WEEK_S)
        asked[week] += job.trace.gpus * job.trace.duration_s
        held[week] += job.gpu_s
    week_gpu_s = gpus * WEEK_S
    return [(w, asked[w] / week_gpu_s, held[w] / week_gpu_s) for w in sorted(asked)]


def hours_waiting(hourly: list[tuple[int, dict[int, int]]], width: int) -> dict[str, float]:
    """Of the sampled hours, those in which jobs of `width` waited: how many of them, and
    the GPUs free then (means)."""
    hours = [(free, waiting[width]) for free, waiting in hourly if waiting.get(width)]
    if not hours:
        return {"hours": len(hourly), "hours_waiting": 0}
    return {
        "hours": len(hourly),
        "hours_waiting": len(hours),
        "mean_waiting": sum(w for _, w in hours) / len(hours),
        "mean_free_gpus": sum(f for f, _ in hours) / len(hours),
        "hours_with_enough_free": sum(1 for f, _ in hours if f >= width),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE, help="a trace `sim` reads")
    parser.add_argument("--cluster", default="64*dgx1-v100/8", help="as `sim --cluster`")
    parser.add_argument("--limit", type=int, default=None, help="only the first N jobs")
    parser.add_argument("--policy", default="toposched", help="a scheduler policy")
    parser.add_argument(
        "--param", action="append", default=[], metavar="KEY=VALUE", help="a policy parameter"
    )
    parser.add_argument(
        "--quiet-neighbours", action="store_true", help="neighbours do not slow a job"
    )
    parser.add_argument("--free-stops", action="store_true", help="stops lose no work")
    parser.add_argument(
        "--smoke", action="store_true", help="CI: the first 400 jobs on 4 DGX-1s, in seconds"
    )
    args = parser.parse_args()
    if args.smoke:
        args.limit, args.cluster = 400, "4*dgx1-v100/4"
    try:
        params = policy_params(args.param, [args.policy])[args.policy]
    except PolicyError as err:
        parser.error(str(err))

    trace = read_trace(args.trace, limit=args.limit)
    cluster = load_cluster(args.cluster)
    workload = Workload(checkpoint_interval_s=1.0, restore_s=0.0) if args.free_stops else None
    sim = Sampled(
        trace,
        cluster,
        args.policy,
        perf=quiet_perf() if args.quiet_neighbours else None,
        workload=workload,
        framework=FRAMEWORK,
        policy_params=params,
    )
    result = sim.run()
    figures = summarise(result)
    bound = sum(j.duration_s for j in trace.jobs) / len(trace.jobs)
    avg = float(figures["avg_jct_s"])
    print(f"{args.policy} on {args.trace.name} ({len(trace.jobs)} jobs), {args.cluster}", end="")
    print(" [quiet neighbours]" * args.quiet_neighbours + " [free stops]" * args.free_stops)
    print(f"average JCT {avg:,.0f} s = {avg / bound:.2f}x the bound ({bound:,.0f} s)")

    hours = gpu_hours(result.jobs)
    print(f"\nGPU-hours: asked {hours['asked']:,.0f}, held {hours['held']:,.0f} ", end="")
    print(f"({hours['held'] / hours['asked']:.3f}x); the difference went to:")
    for key in ("lost_to_stops", "neighbours", "placement"):
        print(f"  {key.replace('_', ' '):<14} {hours[key]:>12,.0f}")

    widths = breakdown(result.jobs)
    print("\nper job width: what it adds to the average JCT (s)")
    heads = ("GPUs", "jobs", "JCT", "waiting", "running", "stopped", "stops/job")
    print(" ".join(f"{h:>{w}}" for h, w in zip(heads, (5, 7, 8, 8, 8, 8, 9), strict=True)))
    for width, row in widths.items():
        print(f"{width:>5} {row['jobs']:>7.0f} {row['jct']:>8,.0f} {row['queue']:>8,.0f} ", end="")
        print(f"{row['run']:>8,.0f} {row['stopped']:>8,.0f} {row['stops']:>9.2f}")

    weeks = weekly_load(result.jobs, cluster.gpus)
    print("\nper week of submissions: load asked, load held")
    for week, asked, held in weeks:
        print(f"  week {week + 1:>2}: {asked:5.2f} {held:5.2f}")

    worst = max(widths, key=lambda w: widths[w]["stopped"]) if widths else 0
    waits = hours_waiting(sim.hourly, worst)
    print(f"\nhours sampled (events an hour apart) {waits['hours']:.0f}; ", end="")
    print(f"with {worst}-GPU jobs waiting: ", end="")
    print(f"{waits['hours_waiting']:.0f}", end="")
    if waits["hours_waiting"]:
        print(
            f", {waits['mean_waiting']:.1f} of them on average, "
            f"{waits['mean_free_gpus']:.1f} GPUs free (at least {worst} free in "
            f"{waits['hours_with_enough_free']:.0f} of those hours)"
        )
    else:
        print()
    print(
        json.dumps(
            {
                "avg_jct_s": avg,
                "bound_s": bound,
                "over_bound": avg / bound,
                "gpu_hours": hours,
                "widths": {str(w): row for w, row in widths.items()},
                "weeks": [[w + 1, a, h] for w, a, h in weeks],
                "widest_stopped": {"gpus": worst, **waits},
            }
        )
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
