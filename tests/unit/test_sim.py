"""The simulator on small hand-checked traces: exact outcomes, the k8s-default deadlock, seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toposched.core import JobState
from toposched.perf import PerfModel
from toposched.sim.engine import _STOPPED, SimResult, Simulation
from toposched.sim.metrics import percentile, summarise, team_shares
from toposched.sim.traces import Trace, TraceJob, read_trace
from toposched.sim.workload import Workload
from toposched.topology.clusterfile import parse_shorthand

PERF = PerfModel()
DATA = Path(__file__).resolve().parents[2] / "data" / "traces" / "philly" / "philly.csv"


def trace(*jobs: tuple[str, float, int, float, str]) -> Trace:
    """(name, submit_s, gpus, duration_s, queue) rows; every job trains resnet50."""
    rows = tuple(
        TraceJob(name, submit, gpus, duration, queue, "resnet50", line)
        for line, (name, submit, gpus, duration, queue) in enumerate(jobs, start=2)
    )
    return Trace(rows, "test", "<test>")


def run(t: Trace, cluster: str, policy: str = "toposched", **options: object) -> SimResult:
    return Simulation(t, parse_shorthand(cluster), policy, perf=PERF, **options).run()  # type: ignore[arg-type]


def outcome(result: SimResult) -> dict[str, tuple[float | None, float | None]]:
    return {j.trace.name: (j.first_start, j.finish) for j in result.jobs}


def test_whole_node_jobs_run_at_full_speed_and_a_gang_waits_for_both_nodes() -> None:
    # a and b each take a whole DGX-1 (the ideal placement: speed 1); c needs both nodes and
    # starts when a ends at 100 (b ended at 60), running 30 s on two whole nodes of one rack.
    result = run(
        trace(("a", 0, 8, 100, "q"), ("b", 10, 8, 50, "q"), ("c", 20, 16, 30, "q")),
        "2*dgx1-v100/2",
    )
    assert outcome(result) == {"a": (0, 100), "b": (10, 60), "c": (100, 130)}
    summary = summarise(result)
    assert summary["finished"] == 3
    assert summary["avg_jct_s"] == pytest.approx((100 + 50 + 110) / 3)
    assert summary["avg_queue_s"] == pytest.approx(80 / 3)
    assert summary["makespan_s"] == 130
    assert summary["placement_quality_mean"] == pytest.approx(1.0)
    # 8 GPUs busy 0-100 and 10-60, 16 GPUs 100-130: (800 + 400 + 480) of 16 x 130 GPU-s.
    assert summary["gpu_alloc_util"] == pytest.approx(1680 / (16 * 130))


def test_a_one_gpu_job_beside_another_runs_slower() -> None:
    # Two 1-GPU jobs on one 2-GPU-per-switch PCIe node: spread puts them on different
    # switches; the second one's neighbour costs it some speed, so it ends after 100 s.
    result = run(trace(("a", 0, 1, 100, "q"), ("b", 0, 1, 100, "q")), "1*pcie-8gpu-2socket")
    ends = sorted(j.finish or 0 for j in result.jobs)
    assert ends[0] > 100 and ends[1] > 100
    assert all(0 < j.speed_s / j.run_s < 1 for j in result.jobs)


def test_k8s_default_deadlocks_where_gang_policies_finish() -> None:
    # x holds 2 of 4 GPUs; a (4 workers) binds the 2 free ones and waits; when x ends, a and
    # b bind one worker each in turn: a holds 3, b 1, and each waits for GPUs the other
    # holds, forever. Gang policies hold nothing while they wait.
    jobs = trace(("x", 0, 2, 100, "qx"), ("a", 1, 4, 50, "qa"), ("b", 2, 4, 50, "qb"))
    stuck = run(jobs, "1*pcie-4gpu-2socket", "k8s-default")
    assert stuck.deadlocked
    states = {j.trace.name: j.state for j in stuck.jobs}
    assert states == {"x": JobState.SUCCEEDED, "a": JobState.PENDING, "b": JobState.PENDING}
    summary = summarise(stuck)
    assert summary["unfinished"] == 2
    # a held 2 GPUs from t=1; from t=100 a and b hold all 4 until the run's last event, the
    # locality tick of b at 1802 (submitted at 2, relaxing after 1800 s).
    assert stuck.end == 1802
    assert summary["partial_hold_gpu_hours"] == pytest.approx((2 * 99 + 4 * 1702) / 3600)
    for policy in ("toposched", "fifo-gang-firstfit", "hived-like", "gandiva-like"):
        fine = run(jobs, "1*pcie-4gpu-2socket", policy)
        assert not fine.deadlocked
        assert summarise(fine)["finished"] == 3, policy


@pytest.mark.parametrize(
    ("checkpoint", "interval", "restore", "a_runs", "lost"),
    [
        # No checkpoint: a is told to stop at 10 (the policy's 10 s grace), b runs 20-70,
        # and a starts over: 100 s more, from 70; with no restart cost, 10 s x 8 GPUs lost.
        (None, 1800.0, 0.0, (0, 170), 10 * 8),
        # The same, and its restart costs 120 s: 100 + 120 s from 70.
        (None, 1800.0, 120.0, (0, 290), (10 + 120) * 8),
        # A 30 s checkpoint grace, a checkpoint every 5 s of work: a stops at 40 having done
        # 10 s, all saved; b runs 40-90, a does the 90 s left from 90.
        (30.0, 5.0, 0.0, (0, 180), 0),
        # Checkpoints every 1800 s of work: the 10 s done are lost, and the restore costs
        # 120 s: 100 + 120 s from 90.
        (30.0, 1800.0, 120.0, (0, 310), (10 + 120) * 8),
    ],
)
def test_a_reclaimed_job_pays_its_checkpoint_contract(
    checkpoint: float | None,
    interval: float,
    restore: float,
    a_runs: tuple[float, float],
    lost: float,
) -> None:
    # Queue b is guaranteed the whole node; a borrowed it, so b's job reclaims it.
    workload = Workload(
        relax_after_s=None,
        checkpoint_grace_s=checkpoint,
        checkpoint_interval_s=interval,
        restore_s=restore,
    )
    result = run(
        trace(("a", 0, 8, 100, "a"), ("b", 10, 8, 50, "b")),
        "1*dgx1-v100",
        workload=workload,
        guarantees={"b": 8},
    )
    stop = 10 + (checkpoint if checkpoint is not None else 10)
    assert outcome(result) == {"a": a_runs, "b": (stop, stop + 50)}
    assert [j.stops for j in result.jobs] == [1, 0]
    assert [j.lost_gpu_s for j in result.jobs] == [pytest.approx(lost), 0]
    summary = summarise(result)
    assert summary["preemptions_per_job"] == 0.5 and summary["stopped_share"] == 0.5
    assert summary["lost_gpu_hours"] == pytest.approx(lost / 3600)
    assert [j.preemptions for j in result.jobs] == [1, 0]
    shares = team_shares(result)
    assert shares["b"]["guaranteed"] == 1.0
    assert shares["a"]["guaranteed"] == 0.0


def test_same_seed_same_result() -> None:
    t = read_trace(DATA, limit=300, seed=3)

    def figures(seed: int) -> str:
        s = summarise(run(t, "4*dgx1-v100/2", "k8s-default", seed=seed))
        s.pop("wall_s")
        return json.dumps(s, sort_keys=True)

    assert figures(1) == figures(1)
    assert figures(1) != figures(2)  # random placement really depends on the seed


def test_percentile() -> None:
    assert percentile([], 50) == 0.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 100) == 4.0


def test_no_job_is_stopped_more_often_than_the_stop_rule_allows() -> None:
    """The stop rule's cap, after every stop of a replay where least attained service preempts
    often (3,000 Philly jobs on 8 DGX-1s, demoted after 1 GPU-hour; no guarantees and one
    priority, so every stop is the rule's to allow): without the cap some job is stopped far
    more often."""
    t = read_trace(DATA, limit=3000, seed=0)
    fast = {
        "demote_after_gpu_h": 1.0,
        "stop_protect_s": 0.0,
        "pay_margin": None,
        "preempt_patience_s": 0.0,
    }
    capped = run(t, "8*dgx1-v100/8", policy_params={**fast, "max_stops": 2})
    free = run(t, "8*dgx1-v100/8", policy_params={**fast, "max_stops": None})
    assert max(j.stops for j in capped.jobs) <= 2
    assert sum(j.stops for j in capped.jobs) > 0
    assert max(j.stops for j in free.jobs) > 2
    for result in (capped, free):
        assert all(j.finish is not None for j in result.jobs)


def test_a_gang_requeued_after_a_stop_widens_and_starts_with_no_other_event() -> None:
    """A preempted gang waits again from its requeue, so its locality widens half an hour
    later; the simulator must wake the core then (`Scheduler.next_due`), though nothing else
    happens: it used to end the replay with the gang still waiting. j0 (8 GPUs over two
    single-rack 4-GPU nodes) starts once it accepts any placement (1,805 s), is preempted
    for j3 (demoted after 36 GPU-s, no patience), is requeued at 1,850 s, and can start
    again only at 3,650 s, when it accepts two racks again."""
    t = trace(("j0", 5, 8, 3600, "a"), ("j3", 20, 8, 30, "a"))
    params = {"demote_after_gpu_h": 0.01, "preempt_patience_s": 0.0}
    result = run(
        t,
        "2*pcie-4gpu-2socket/1",
        workload=Workload(checkpoint_interval_s=300.0),
        policy_params=params,
    )
    jobs = {j.trace.name: j for j in result.jobs}
    assert jobs["j0"].preemptions == 1
    assert jobs["j0"].finish is not None
    assert [round(j.first_start or 0.0) for j in result.jobs] == [1805, 1850]
    assert result.end == jobs["j0"].finish
    assert result.end > 3650 + 3600


def test_two_jobs_promoted_in_turn_end_once_the_stop_cap_holds_them() -> None:
    """Two 4-GPU jobs on one 4-GPU node, demoted after half a GPU-hour (450 s each) and
    promoted after 15 minutes' wait: each preempts the other every 900 s, before either
    saves its 30-minute checkpoint, so neither gains any work. The cap on stops ends it:
    after `max_stops` stops a job is not stopped for its service again, and both finish."""
    t = trace(("a", 0, 4, 3600, "q"), ("b", 0, 4, 3600, "q"))
    params = {
        "demote_after_gpu_h": 0.5,
        "promote_after_s": 900.0,
        "preempt_patience_s": 0.0,
        "max_stops": 3,
    }
    result = run(t, "1*pcie-4gpu-2socket", policy_params=params)
    assert all(j.finish is not None for j in result.jobs)
    assert max(j.stops for j in result.jobs) == 3
    # Cut short with a cap too high to reach by then: they are still stopping each other.
    loose = Simulation(
        t,
        parse_shorthand("1*pcie-4gpu-2socket"),
        "toposched",
        perf=PERF,
        policy_params={**params, "max_stops": 1000},
    ).run(until=200_000.0)
    assert all(j.finish is None for j in loose.jobs)
    assert min(j.stops for j in loose.jobs) > 50


def test_a_stop_report_for_a_job_that_finished_in_the_same_instant_is_dropped() -> None:
    """Found on the whole Philly trace (patience 1 h, promotion after 3 days): a cycle of one
    instant stopped a job whose finish the same instant reported next; the core took the
    finish (a job may end within its stop's grace), and the stop's report 30 s later was fed
    to the core for a job that had succeeded (SchedulingError). The report is stale: no
    event."""
    sim = Simulation(trace(("a", 0, 1, 100, "q")), parse_shorthand("1*dgx1-v100"), "toposched")
    result = sim.run()
    assert [j.state for j in result.jobs] == [JobState.SUCCEEDED]
    assert sim._event(_STOPPED, "a", 0) is None
