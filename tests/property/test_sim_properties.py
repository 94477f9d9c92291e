"""The simulator on random small traces and clusters, under every policy: every job ends, none
sooner than its ideal run time allows, and each job's stop figures agree with one another.

The clusters are of one node kind, with CPUs and memory counted on some of them and jobs that
ask for CPUs, so that CPUs rather than GPUs bound the workers a node takes (the openb pod list
crashed the model's placer in just that case, 9185a1f). Every job fits an empty node's CPUs
and a gang accepts any placement after its locality relaxes, so each can run once the cluster
drains: a job left unfinished is a fault, but for the deadlock that binding a gang's pods one
by one can reach (k8s-default), which the simulator reports.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from toposched.core import SCHEDULER_POLICIES
from toposched.perf import PerfModel
from toposched.sim.engine import Simulation
from toposched.sim.traces import Trace, TraceJob
from toposched.sim.workload import Workload
from toposched.topology import preset
from toposched.topology.cluster import Cluster, Node
from toposched.topology.resources import Hardware

SCALE = int(os.environ.get("TOPOSCHED_HYPOTHESIS_SCALE", "1"))
PERF = PerfModel()
KINDS = ("dgx1-v100", "pcie-8gpu-2socket", "pcie-4gpu-2socket", "g4dn-12xlarge")
MODELS = ("resnet50", "vgg16", "bert-large", "lstm", "gpt2")
GIB = 2**30
# Parameters that move the policies off their defaults onto paths a short trace reaches:
# demotion thresholds its jobs cross, no patience, and each way of splitting a gang.
TOPOSCHED_PARAMS = st.fixed_dictionaries(
    {
        "demote_after_gpu_h": st.sampled_from([0.01, 0.5]),
        "preempt_patience_s": st.sampled_from([0.0, 120.0]),
    },
    optional={
        "spread_by_model": st.sampled_from([None, 0.0, 0.1]),
        "extra_nodes": st.sampled_from([None, 0, 1]),
        "promote_after_s": st.sampled_from([None, 900.0]),
    },
)
# toposched (the policy that stops jobs for service) three times as often as each peer.
POLICIES = ("toposched", "toposched", *sorted(SCHEDULER_POLICIES))


@st.composite
def replays(draw: st.DrawFn) -> tuple[Trace, Cluster, str, dict[str, object], Workload]:
    kind = preset(draw(st.sampled_from(KINDS)))
    count = draw(st.integers(1, 3))
    racks = draw(st.integers(1, 2))
    nodes = []
    for i in range(count):
        # CPUs for two cores per GPU, or not counted; memory likewise.
        cpus = draw(st.sampled_from([None, kind.size * 2000]))
        memory = draw(st.sampled_from([None, kind.size * 8 * GIB]))
        hardware = Hardware(cpus=cpus, memory=memory)
        nodes.append(Node(f"n{i}", kind, rack=f"r{i % racks}", hardware=hardware))
    cluster = Cluster(tuple(nodes))
    jobs = []
    at = 0.0
    for i in range(draw(st.integers(4, 24))):
        at += draw(st.sampled_from([5.0, 0.0, 60.0, 900.0]))
        jobs.append(
            TraceJob(
                f"j{i}",
                at,
                min(draw(st.sampled_from([1, 1, 1, 2, 4, 8, 12])), cluster.gpus),
                draw(st.sampled_from([3600.0, 30.0, 600.0, 20000.0])),
                draw(st.sampled_from(["a", "b"])),
                draw(st.sampled_from(MODELS)),
                i + 1,
                cpus=draw(st.sampled_from([0, 1000, 2000])),
                memory=draw(st.sampled_from([0, 4 * GIB])),
            )
        )
    policy = draw(st.sampled_from(POLICIES))
    params = draw(TOPOSCHED_PARAMS) if policy == "toposched" else {}
    # Jobs that checkpoint (every 5 or 30 minutes of work) or start over when stopped.
    workload = Workload(
        checkpoint_grace_s=draw(st.sampled_from([None, 30.0])),
        checkpoint_interval_s=draw(st.sampled_from([300.0, 1800.0])),
    )
    return Trace(tuple(jobs), "test", "<test>"), cluster, policy, params, workload


@settings(
    max_examples=100 * SCALE,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(replays())
def test_every_job_ends_no_sooner_than_its_ideal_run_and_its_stops_add_up(
    replay: tuple[Trace, Cluster, str, dict[str, object], Workload],
) -> None:
    trace, cluster, policy, params, workload = replay
    result = Simulation(
        trace, cluster, policy, perf=PERF, workload=workload, policy_params=params
    ).run()
    # Only a policy that binds a gang's pods one by one (k8s-default) can deadlock: partial
    # gangs holding GPUs that the rest of each is waiting for. The simulator says so, and
    # then some job is left unfinished; otherwise every job finishes.
    if result.deadlocked:
        assert not SCHEDULER_POLICIES[policy].base.gang
        assert any(j.finish is None for j in result.jobs)
    for job in result.jobs:
        t = job.trace
        if result.deadlocked and job.finish is None:
            continue
        assert job.finish is not None, f"{t.name} never finished"
        assert job.first_start is not None and job.first_start >= t.submit_s
        # No placement beats the ideal one alone, and lost work is done again: the work done
        # at the ideal speed is at least the job's run time, and takes at least as long.
        assert job.speed_s >= t.duration_s * (1 - 1e-9), (t.name, job.speed_s, t.duration_s)
        assert job.run_s >= job.speed_s * (1 - 1e-9)
        assert job.finish - t.submit_s >= t.duration_s * (1 - 1e-9)
        assert job.finish - job.first_start >= job.run_s * (1 - 1e-9)
        # A finished job resumed after each preemption and migration it had.
        assert job.preemptions + job.migrations <= job.stops
        assert job.lost_gpu_s >= 0.0
        if not job.stops:
            assert job.lost_gpu_s == 0.0
    # What the examples reached (shown by --hypothesis-show-statistics).
    event("some job stopped" if any(j.stops for j in result.jobs) else "no job stopped")
    event("deadlocked" if result.deadlocked else "drained")
