"""Every policy's decisions on the first N Philly jobs, as digests: a refactor must keep them.

Run: .venv/bin/python benchmarks/sim_outcome.py [--policy P1,P2] [--limit N]
     [--cluster 64*dgx1-v100/8] [--seed N] [--json] [--smoke]

Each policy replays the trace in this process, one after another, through the public
simulator API (read_trace, load_cluster, Simulation(...).run()), and prints the headline
outcome and `digest`: the SHA-256 (first 16 hex characters) of every job's outcome, jobs in
name order. A job's outcome is its final state, its first start and its finish, its run time,
preemption and migration counts and GPU-seconds held partly bound (all from SimResult.jobs;
a non-gang policy's worker-by-worker binding shows only there), and what the scheduler told the
simulator to do with it, in order: each start with its time, network tier and GPUs (node and
GPU indices, worker by worker), each stop with its time, kind and grace, and each state
change with its time. Times are rounded to 6 decimals; the actions' reason texts are left out,
so that rewording them changes nothing. The actions are seen by wrapping the simulation's
`decide` (the driver kit's one call into the core), which returns them unchanged. --json also
gives `result_digest` (the SimResult fields alone) and `stream_digest`
(every action in the order the scheduler emitted it, so a reordering within an instant shows
even where each job's own story is the same).
The same seed gives the same digests on every run; wall time is printed but is not the point
(benchmarks/sim_philly.py times the policies, each in its own process).
--smoke (CI, seconds): the first 50 jobs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path

from toposched.core import (
    SCHEDULER_POLICIES,
    Action,
    Event,
    PolicyError,
    StartJob,
    StopJob,
    Transition,
)
from toposched.discovery.files import load_cluster
from toposched.sim.engine import SimResult, Simulation
from toposched.sim.metrics import summarise
from toposched.sim.traces import read_trace

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "data" / "traces" / "philly" / "philly.csv"
DIGEST_HEX = 16


def _t(x: float | None) -> str | None:
    """A time (or other float) rounded to 6 decimals, as text: no float repr in the digest."""
    return None if x is None else f"{x:.6f}"


def _describe(action: Action, now: str | None) -> list[object] | None:
    """What the digest keeps of one action (its reason text is left out)."""
    if isinstance(action, StartJob):
        p = action.placement
        workers = [[slot.node, list(slot.gpus)] for slot in p.workers]
        return ["start", now, p.tier.name, workers]
    if isinstance(action, StopJob):
        return ["stop", now, action.kind.value, _t(action.grace_s)]
    if isinstance(action, Transition):
        old = None if action.old is None else action.old.value
        return ["state", now, old, action.new.value]
    return None


class Recorder:
    """Keeps every action the simulation's scheduler returns, per job and in order."""

    def __init__(self, simulation: Simulation) -> None:
        self.by_job: dict[str, list[list[object]]] = {}
        self.stream = hashlib.sha256()
        self.actions = 0
        decide: Callable[[Event], list[Action]] = simulation.decide

        def recorded(event: Event) -> list[Action]:
            actions = decide(event)
            now = _t(simulation.now)
            for action in actions:
                item = _describe(action, now)
                if item is None:
                    item = [type(action).__name__, now]
                self.actions += 1
                self.by_job.setdefault(action.job, []).append(item)
                self.stream.update(_line([action.job, *item]))
            return actions

        simulation.decide = recorded  # type: ignore[method-assign]


def _line(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"


def digests(result: SimResult, recorder: Recorder) -> dict[str, str]:
    """`digest` (each job's outcome and actions), `result_digest` and `stream_digest`."""
    full, bare = hashlib.sha256(), hashlib.sha256()
    for job in sorted(result.jobs, key=lambda j: j.trace.name):
        name = job.trace.name
        outcome = [
            name,
            None if job.state is None else job.state.value,
            _t(job.first_start),
            _t(job.finish),
            _t(job.run_s),
            job.preemptions,
            job.migrations,
            _t(job.partial_gpu_s),
        ]
        bare.update(_line(outcome))
        full.update(_line([*outcome, recorder.by_job.get(name, [])]))
    return {
        "digest": full.hexdigest()[:DIGEST_HEX],
        "result_digest": bare.hexdigest()[:DIGEST_HEX],
        "stream_digest": recorder.stream.hexdigest()[:DIGEST_HEX],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default=",".join(SCHEDULER_POLICIES))
    parser.add_argument("--cluster", default="64*dgx1-v100/8")
    parser.add_argument("--limit", type=int, default=30_000, help="first N jobs (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="one JSON object per policy")
    parser.add_argument("--smoke", action="store_true", help="the first 50 jobs (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.limit = 50
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    if not policies:
        raise SystemExit(f"--policy: name at least one of {', '.join(SCHEDULER_POLICIES)}")
    unknown = [p for p in policies if p not in SCHEDULER_POLICIES]
    if unknown:
        known = ", ".join(SCHEDULER_POLICIES)
        raise SystemExit(f"--policy: unknown {', '.join(unknown)} (known: {known})")
    if args.limit < 0:
        raise SystemExit(f"--limit must be at least 0, got {args.limit}")
    trace = read_trace(TRACE, limit=args.limit or None, seed=args.seed)
    cluster = load_cluster(args.cluster)
    for policy in policies:
        began = time.perf_counter()
        try:
            simulation = Simulation(trace, cluster, policy, seed=args.seed)
        except PolicyError as err:
            raise SystemExit(f"{policy}: {err}") from None
        recorder = Recorder(simulation)
        result = simulation.run()
        wall_s = time.perf_counter() - began
        summary = summarise(result)
        found = digests(result, recorder)
        if args.json:
            record = {
                "policy": policy,
                "jobs": len(result.jobs),
                "cluster": args.cluster,
                "seed": args.seed,
                "finished": summary["finished"],
                "unfinished": summary["unfinished"],
                "avg_jct_s": summary["avg_jct_s"],
                "preemptions": summary["preemptions"],
                "migrations": summary["migrations"],
                "deadlocked": summary["deadlocked"],
                "actions": recorder.actions,
                **found,
                "wall_s": round(wall_s, 2),
            }
            print(json.dumps(record), flush=True)
            continue
        print(
            f"{policy:<20} jobs {len(result.jobs):,}  finished {summary['finished']:,}  "
            f"unfinished {summary['unfinished']:,}  avg JCT {summary['avg_jct_s']:,.3f} s  "
            f"preempt {summary['preemptions']:,}  migrate {summary['migrations']:,}  "
            f"digest {found['digest']}  wall {wall_s:.1f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
