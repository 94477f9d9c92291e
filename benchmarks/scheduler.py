"""Scheduler core speed: admissions/s and handle() latency while a cluster fills and drains.

Run: .venv/bin/python benchmarks/scheduler.py [--nodes 1000] [--jobs 10000] [--seed 7]
     [--preset dgx1-v100] [--queue-mix 1,1,1,1] [--guarantees] [--no-limits] [--tracemalloc]
     [--profile] [--smoke]

The cluster is --nodes identical nodes of --preset, eight nodes to a rack and eight racks to a pod.
Jobs are drawn (seeded) from the GPU-count mix of the Microsoft Philly trace as prepared for the
Pollux simulator (petuum/adaptdl, branch osdi21-artifact, simulator/traces/philly.csv, from
msr-fiddle/philly-traces; the trace is CC BY 4.0, adaptdl is Apache-2.0): of 82,247 jobs, 1 GPU:
76,627 · 2: 1,818 · 4: 1,870 · 8: 1,643 · 12: 7 · 16: 199 · 24: 7 · 32: 67 · 64: 6 · 128: 3
(counted from data/traces/philly/philly.csv at start). A job of at most 8 GPUs is one worker of G
GPUs with locality `node`; a larger one is G/8 workers of 8 GPUs (12 is 3 x 4) with locality `any`.
Each job goes to one of four queues at random (weighted by --queue-mix, even by default) and
declares its (seeded, log-normal) run time as `limit_s`, so that reservations know when GPUs free
up (--no-limits: jobs declare nothing).

1. submit: every job arrives, one JobSubmitted per handle() call at increasing times; the
   cluster fills and the rest wait.
2. drain:  the running job with the earliest end finishes (one JobFinished per call), and so on
   until every job has run.

Every StartJob counts as an admission. With --guarantees each queue is guaranteed a quarter of
the GPUs, so jobs within their share reclaim borrowed GPUs (which happens only when the mix is
uneven, e.g. --queue-mix 4,3,2,1): each StopJob is answered at once
with JobStopped (its own timed call) and the preempted job queues again.

Admissions/s is admissions over the time spent inside handle(). Peak memory is the process's max
RSS, and with --tracemalloc also tracemalloc's peak: tracing makes every call about three times
slower, so the timings of such a run are not the scheduler's.
--profile runs the whole thing under cProfile and prints the top 25 functions by cumulative time.
--smoke (CI, seconds): 8 nodes, 300 jobs, --guarantees with --queue-mix 4,3,2,1, so that jobs
wait, and some are stopped and queue again.
"""

from __future__ import annotations

import argparse
import cProfile
import heapq
import io
import math
import pstats
import random
import resource
import sys
import time
import tracemalloc
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from toposched.core import (
    Action,
    Event,
    JobFinished,
    JobSpec,
    JobState,
    JobStopped,
    JobSubmitted,
    Locality,
    LocalityRule,
    Scheduler,
    StartJob,
    StopJob,
    Transition,
)
from toposched.sim.traces import read_trace
from toposched.topology import preset
from toposched.topology.cluster import Cluster, Node

PHILLY = Path(__file__).resolve().parents[1] / "data" / "traces" / "philly" / "philly.csv"
QUEUES = ("q0", "q1", "q2", "q3")
NODES_PER_RACK = 8
RACKS_PER_POD = 8
SUBMIT_GAP_S = 0.001  # between arrivals: the whole trace lands as one burst
RUNTIME_MEDIAN_S = 3600.0  # log-normal run times: median one hour, heavy tail
RUNTIME_SIGMA = 1.5


def make_cluster(nodes: int, preset_name: str) -> Cluster:
    topology = preset(preset_name)
    per_pod = NODES_PER_RACK * RACKS_PER_POD
    return Cluster(
        tuple(
            Node(
                f"n{i:05d}",
                topology,
                rack=f"r{i // NODES_PER_RACK:04d}",
                pod=f"p{i // per_pod:03d}",
            )
            for i in range(nodes)
        ),
        name=f"{nodes}x{preset_name}",
    )


def gang_shape(gpus: int, node_size: int) -> tuple[int, int, Locality]:
    """(workers, GPUs per worker, locality) for a job of `gpus` GPUs."""
    if gpus <= node_size:
        return 1, gpus, Locality.NODE
    per = node_size if gpus % node_size == 0 else math.gcd(gpus, node_size)
    return gpus // per, per, Locality.ANY


def make_jobs(
    count: int, node_size: int, limits: bool, mix: list[float], rng: random.Random
) -> list[tuple[JobSpec, float]]:
    """Seeded jobs with their true run times (declared as `limit_s` when `limits`)."""
    by_gpus = Counter(job.gpus for job in read_trace(PHILLY).jobs)  # jobs per GPU count
    sizes = sorted(by_gpus)
    weights = [by_gpus[g] for g in sizes]
    out = []
    for n, gpus in enumerate(rng.choices(sizes, weights, k=count)):
        workers, per, locality = gang_shape(gpus, node_size)
        runtime = round(max(60.0, rng.lognormvariate(math.log(RUNTIME_MEDIAN_S), RUNTIME_SIGMA)), 3)
        spec = JobSpec(
            f"job-{n:06d}",
            workers=workers,
            gpus_per_worker=per,
            queue=rng.choices(QUEUES, mix)[0],
            locality=LocalityRule(locality),
            limit_s=runtime if limits else None,
        )
        out.append((spec, runtime))
    return out


@dataclass
class Phase:
    name: str
    latencies: list[float] = field(default_factory=list)  # seconds per handle() call
    admissions: int = 0
    stops: int = 0
    wall: float = 0.0

    def report(self) -> str:
        spent = sum(self.latencies)
        ordered = sorted(self.latencies)
        rate = self.admissions / spent if spent else 0.0
        return (
            f"{self.name:<8} {len(ordered):>8} {self.admissions:>10} {self.stops:>6} "
            f"{spent:>9.2f} {rate:>12,.0f} {1e3 * pct(ordered, 0.50):>9.3f} "
            f"{1e3 * pct(ordered, 0.99):>9.3f} {1e3 * (ordered[-1] if ordered else 0):>9.2f} "
            f"{self.wall:>8.1f}"
        )


def pct(ordered: list[float], q: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Driver:
    """Feeds the scheduler and plays the cluster: runs what it starts, stops what it stops."""

    def __init__(self, scheduler: Scheduler, runtime: dict[str, float]) -> None:
        self.scheduler = scheduler
        self.runtime = runtime
        self.clock = 0.0
        self.running: dict[str, float] = {}  # job -> end time of its current run
        self.ends: list[tuple[float, str]] = []  # heap; stale entries skipped
        self.started: set[str] = set()
        self.finished = 0
        self.rejected = 0

    def feed(self, event: Event, phase: Phase) -> None:
        todo = [event]
        while todo:
            ev = todo.pop()
            start = time.perf_counter()
            actions = self.scheduler.handle(ev)
            phase.latencies.append(time.perf_counter() - start)
            todo.extend(self._carry_out(actions, phase))

    def _carry_out(self, actions: list[Action], phase: Phase) -> list[Event]:
        replies: list[Event] = []
        for action in actions:
            if isinstance(action, StartJob):
                phase.admissions += 1
                self.started.add(action.job)
                end = self.clock + self.runtime[action.job]
                self.running[action.job] = end
                heapq.heappush(self.ends, (end, action.job))
            elif isinstance(action, StopJob):
                phase.stops += 1
                self.running.pop(action.job, None)
                replies.append(JobStopped(self.clock, action.job))
            elif isinstance(action, Transition) and action.new is JobState.REJECTED:
                self.rejected += 1
        return replies

    def next_end(self) -> tuple[float, str] | None:
        while self.ends:
            end, job = heapq.heappop(self.ends)
            if self.running.get(job) == end:
                del self.running[job]
                return end, job
        return None


def run(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    cluster = make_cluster(args.nodes, args.preset)
    node_size = cluster.nodes[0].size
    mix = [float(w) for w in args.queue_mix.split(",")]
    if len(mix) != len(QUEUES) or min(mix) < 0 or not sum(mix) > 0:
        raise SystemExit(f"--queue-mix: {len(QUEUES)} non-negative weights, got {args.queue_mix!r}")
    jobs = make_jobs(args.jobs, node_size, not args.no_limits, mix, rng)
    specs = [spec for spec, _ in jobs]
    runtime = {spec.name: seconds for spec, seconds in jobs}
    queues = {q: cluster.gpus // len(QUEUES) if args.guarantees else 0 for q in QUEUES}
    demand = sum(s.gpus for s in specs)
    shape: dict[int, int] = {}
    for s in specs:
        shape[s.gpus] = shape.get(s.gpus, 0) + 1
    print(
        f"cluster: {args.nodes} x {args.preset} ({cluster.gpus:,} GPUs), "
        f"{math.ceil(args.nodes / NODES_PER_RACK)} racks, "
        f"{math.ceil(args.nodes / NODES_PER_RACK / RACKS_PER_POD)} pods; queues "
        + ", ".join(f"{q}={g}" for q, g in queues.items())
    )
    print(
        f"jobs: {args.jobs:,} asking {demand:,} GPUs in all; by GPUs "
        + " ".join(f"{g}:{n}" for g, n in sorted(shape.items())),
        flush=True,
    )
    if args.tracemalloc:
        print("tracemalloc: on (every call about 3x slower; timings are not the scheduler's)")

    scheduler = Scheduler(cluster, queues=queues, validate=False)
    driver = Driver(scheduler, runtime)
    if args.tracemalloc:
        tracemalloc.start()
    begin = time.perf_counter()

    submit = Phase("submit")
    step = max(1, args.jobs // 10)
    t0 = time.perf_counter()
    for n, spec in enumerate(specs):
        driver.clock = n * SUBMIT_GAP_S
        driver.feed(JobSubmitted(driver.clock, spec), submit)
        if (n + 1) % step == 0 or n + 1 == len(specs):
            progress("submit", n + 1, len(specs), submit, driver, begin)
    submit.wall = time.perf_counter() - t0

    drain = Phase("drain")
    t0 = time.perf_counter()
    total = args.jobs - driver.rejected
    next_mark = step
    while True:
        nxt = driver.next_end()
        if nxt is None:
            break
        end, job = nxt
        driver.clock = max(driver.clock, end)
        driver.feed(JobFinished(driver.clock, job, succeeded=True), drain)
        driver.finished += 1
        if driver.finished >= next_mark or driver.finished == total:
            progress("drain", driver.finished, total, drain, driver, begin)
            next_mark += step
    drain.wall = time.perf_counter() - t0
    wall = time.perf_counter() - begin

    traced = tracemalloc.get_traced_memory()[1] if tracemalloc.is_tracing() else None
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_mib = rss / 2**20 if sys.platform == "darwin" else rss / 2**10

    print(
        f"\n{'phase':<8} {'calls':>8} {'admitted':>10} {'stops':>6} {'handle s':>9} "
        f"{'admit/s':>12} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9} {'wall s':>8}"
    )
    print(submit.report())
    print(drain.report())
    overall = Phase("overall", submit.latencies + drain.latencies)
    overall.admissions = submit.admissions + drain.admissions
    overall.stops = submit.stops + drain.stops
    overall.wall = wall
    print(overall.report())
    stuck = sum(1 for _ in scheduler.pending())
    print(
        f"\njobs started: {len(driver.started):,} of {args.jobs:,} "
        f"(admissions {overall.admissions:,}, rejected {driver.rejected}, "
        f"finished {driver.finished:,}, still pending {stuck:,})"
    )
    memory = f"peak memory: max RSS {rss_mib:,.0f} MiB"
    if traced is not None:
        memory += f", tracemalloc peak {traced / 2**20:,.1f} MiB"
    else:
        memory += ", tracemalloc peak not traced (--tracemalloc)"
    print(memory)
    print(f"wall time: {wall:.1f} s (simulated clock reached t={driver.clock:,.0f} s)")


def progress(name: str, done: int, total: int, phase: Phase, driver: Driver, begin: float) -> None:
    spent = sum(phase.latencies)
    rate = phase.admissions / spent if spent else 0.0
    print(
        f"  [{time.perf_counter() - begin:7.1f} s] {name}: {done:,}/{total:,} "
        f"({100 * done / max(total, 1):3.0f}%), running {len(driver.running):,}, "
        f"admitted {phase.admissions:,}, {rate:,.0f} admissions/s",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--preset", default="dgx1-v100")
    parser.add_argument("--queue-mix", default="1,1,1,1", help="weights of queues q0..q3")
    parser.add_argument(
        "--guarantees", action="store_true", help="guarantee each queue a quarter of the GPUs"
    )
    parser.add_argument("--no-limits", action="store_true", help="jobs declare no run time")
    parser.add_argument(
        "--tracemalloc", action="store_true", help="trace Python allocations (about 3x slower)"
    )
    parser.add_argument("--profile", action="store_true", help="cProfile; top 25 by cumulative")
    parser.add_argument(
        "--smoke", action="store_true", help="8 nodes, 300 jobs, uneven guaranteed queues (CI)"
    )
    args = parser.parse_args()
    if args.smoke:
        args.nodes, args.jobs, args.guarantees, args.queue_mix = 8, 300, True, "4,3,2,1"
    if args.profile and args.tracemalloc:
        parser.error("--profile and --tracemalloc distort each other; pick one")
    if not args.profile:
        run(args)
        return
    profiler = cProfile.Profile()
    profiler.enable()
    run(args)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(25)
    print("\ncProfile, top 25 by cumulative time (figures above include its overhead):")
    print(out.getvalue())


if __name__ == "__main__":
    main()
