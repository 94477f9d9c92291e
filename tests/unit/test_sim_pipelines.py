"""The simulator replays jobs that run after others (`TraceJob.after`) through the same core as
the server: a chain runs in order, each stage starting when the one before it ends."""

from __future__ import annotations

import pytest

from toposched.core import JobState
from toposched.perf import PerfModel
from toposched.sim.engine import SimResult, Simulation
from toposched.sim.metrics import summarise
from toposched.sim.traces import Trace, TraceJob
from toposched.topology.clusterfile import parse_shorthand

PERF = PerfModel()


def stage(name: str, gpus: int, duration: float, *after: str, line: int = 2) -> TraceJob:
    return TraceJob(name, 0.0, gpus, duration, "q", "resnet50", line, after=after)


def run(*jobs: TraceJob) -> SimResult:
    trace = Trace(jobs, "test", "<test>")
    return Simulation(trace, parse_shorthand("1*dgx1-v100"), "toposched", perf=PERF).run()


def test_a_chain_of_three_runs_one_stage_after_another() -> None:
    # Submitted together on a node with room for all three, each waits for the one before.
    result = run(
        stage("prep", 1, 100),
        stage("train", 8, 200, "prep", line=3),
        stage("eval", 1, 50, "train:ok", line=4),
    )
    got = {j.trace.name: (j.first_start, j.finish) for j in result.jobs}
    assert got == {"prep": (0, 100), "train": (100, 300), "eval": (300, 350)}
    summary = summarise(result)
    assert (summary["finished"], summary["dependency_failed"]) == (3, 0)
    assert summary["avg_queue_s"] == pytest.approx((0 + 100 + 300) / 3)


def test_a_stage_after_one_that_cannot_run_never_runs() -> None:
    # `huge` asks for more GPUs than the cluster has: rejected, so `after` ends
    # dependency-failed at once; `cleanup` runs after it all the same (any).
    result = run(
        stage("huge", 16, 100),
        stage("after", 1, 100, "huge", line=3),
        stage("cleanup", 1, 10, "huge:any", line=4),
    )
    states = {j.trace.name: j.state for j in result.jobs}
    assert states == {
        "huge": JobState.REJECTED,
        "after": JobState.DEPENDENCY_FAILED,
        "cleanup": JobState.SUCCEEDED,
    }
    summary = summarise(result)
    assert (summary["finished"], summary["unfinished"], summary["dependency_failed"]) == (1, 2, 1)
