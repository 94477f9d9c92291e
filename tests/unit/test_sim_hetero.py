"""The simulator on clusters of several GPU types: speeds per type, typed jobs, typed shares."""

from __future__ import annotations

import pytest

from tests.unit.test_sim import DATA
from toposched.perf import PerfModel
from toposched.perf.typespeeds import TypeSpeeds
from toposched.sim.engine import SimResult, Simulation
from toposched.sim.traces import Trace, TraceJob, read_trace
from toposched.sim.typed import cluster_types, type_share
from toposched.topology.cluster import ClusterError
from toposched.topology.clusterfile import parse_cluster_yaml, parse_shorthand
from toposched.topology.presets import preset

PERF = PerfModel()

MIXED = """\
groups:
  - {count: 1, topology: g4dn-12xlarge, name_prefix: t4}
  - {count: 1, topology: dgx1-v100, name_prefix: v100}
  - {count: 1, topology: pcie-8gpu-2socket, name_prefix: p100, gpu_type: P100}
"""


def trace(*jobs: tuple[str, float, int, float, tuple[str, ...]]) -> Trace:
    """(name, submit_s, gpus, duration_s, gpu_types) rows; every job trains resnet50."""
    rows = tuple(
        TraceJob(name, submit, gpus, duration, "q", "resnet50", line, gpu_types=types)
        for line, (name, submit, gpus, duration, types) in enumerate(jobs, start=2)
    )
    return Trace(rows, "test", "<test>")


def run(t: Trace, cluster: str, policy: str) -> SimResult:
    built = parse_cluster_yaml(cluster) if "\n" in cluster else parse_shorthand(cluster)
    return Simulation(t, built, policy, perf=PERF).run()


def test_catalog_types_of_nodes() -> None:
    speeds = TypeSpeeds(PERF)
    assert speeds.catalog_type("V100M32") == "V100"
    assert speeds.catalog_type("v100m16") == "V100"
    assert speeds.catalog_type("T4") == "T4"
    assert speeds.catalog_type("", "g4dn-12xlarge") == "T4"  # the instance family says T4
    assert speeds.catalog_type("G2", "pcie-8gpu-2socket") == "V100"  # unknown: the reference
    assert speeds.catalog_type("A10", "pcie-1gpu") == "V100"
    nodes = parse_cluster_yaml(MIXED).nodes
    assert [speeds.of_node(n) for n in nodes] == ["T4", "V100", "P100"]


def test_type_speed_is_throughput_relative_to_the_reference() -> None:
    speeds = TypeSpeeds(PERF)
    assert speeds(None, "V100") == 1.0
    assert speeds(None, "T4") == pytest.approx(0.5)  # the catalog's speed, for any model
    assert speeds("no-such-model", "P100") == pytest.approx(0.59)
    resnet = PERF.catalog.model("resnet50")
    t4 = PERF.catalog.throughput(resnet, PERF.catalog.gpu("T4"))
    v100 = PERF.catalog.throughput(resnet, PERF.catalog.gpu("V100"))
    assert speeds("resnet50", "T4") == pytest.approx(t4 / v100)
    assert speeds.slowest("resnet50", ["V100", "T4", "P100"]) == "T4"  # 0.5 of a V100


def test_a_job_on_a_slower_type_runs_slower() -> None:
    # a takes the whole DGX-1; b can only go to the T4 node, where resnet50 runs at the T4's
    # pace over the V100's (its duration is its run time on the fastest type it accepts).
    result = run(
        trace(("a", 0, 8, 10_000, ()), ("b", 1, 1, 1_000, ())),
        "1*dgx1-v100+1*g4dn-12xlarge",
        "fifo-gang-firstfit",
    )
    jobs = {j.trace.name: j for j in result.jobs}
    assert jobs["b"].placements == [("g4dn-12xlarge-0",)]
    t4 = PERF.ideal("resnet50", "T4", 1, preset("g4dn-12xlarge")).throughput
    v100 = PERF.ideal("resnet50", "V100", 1, preset("dgx1-v100")).throughput
    assert t4 < v100
    assert jobs["b"].finish == pytest.approx(1 + 1_000 * v100 / t4)
    assert jobs["a"].finish == pytest.approx(10_000)


def test_a_job_typed_for_the_slower_type_runs_at_full_speed_there() -> None:
    result = run(trace(("t", 0, 1, 500, ("T4",))), "1*g4dn-12xlarge+1*dgx1-v100", "toposched")
    (job,) = result.jobs
    assert job.placements == [("g4dn-12xlarge-0",)]
    assert job.finish == pytest.approx(500)


def test_a_gang_over_several_types_goes_at_the_slowest_ones_pace() -> None:
    sim = Simulation(trace(("x", 0, 1, 1, ())), parse_cluster_yaml(MIXED), "toposched", perf=PERF)
    assert sim._placement_type("resnet50", ("v100-0",)) == "V100"
    assert sim._placement_type("resnet50", ("v100-0", "p100-0")) == "P100"
    assert sim._placement_type("resnet50", ("v100-0", "t4-0", "p100-0")) == "T4"


@pytest.mark.parametrize("policy", ["toposched", "fifo-gang-firstfit"])
def test_a_v100_only_job_never_runs_on_another_type(policy: str) -> None:
    # The T4 node comes first in node order, so a placement blind to types would use it.
    jobs = trace(
        ("v1", 0, 1, 300, ("V100",)),
        ("any1", 0, 2, 200, ()),
        ("v4", 10, 4, 400, ("v100",)),
        ("t4", 20, 2, 100, ("T4",)),
        ("any4", 30, 4, 300, ()),
        ("v8", 40, 8, 100, ("V100",)),
        ("p1", 50, 1, 100, ("P100",)),
    )
    result = run(jobs, MIXED, policy)
    node_type = {"t4-0": "t4", "v100-0": "v100", "p100-0": "p100"}
    for job in result.jobs:
        assert job.finish is not None, job.trace.name
        wanted = {t.lower() for t in job.trace.gpu_types}
        for nodes in job.placements:
            assert not wanted or {node_type[n] for n in nodes} <= wanted, (job.trace.name, nodes)
    v8 = next(j for j in result.jobs if j.trace.name == "v8")
    assert v8.placements and all(nodes == ("v100-0",) for nodes in v8.placements)


# ---------------------------------------------------------------- typed shares


def test_cluster_types_count_gpus_per_type() -> None:
    assert cluster_types(parse_cluster_yaml(MIXED)) == {"T4": 4, "V100": 8, "P100": 8}
    assert cluster_types(parse_shorthand("2*pcie-8gpu-2socket")) == {}


def test_typed_share_draws_types_by_gpus_and_keeps_prefixes() -> None:
    philly = read_trace(DATA, limit=4_000)
    cluster = parse_cluster_yaml(MIXED)
    typed = type_share(philly, cluster, 0.3, seed=1)
    chosen = [j for j in typed.jobs if j.gpu_types]
    assert typed.notes == {"typed-at-random": len(chosen)}
    assert 0.27 * 4_000 < len(chosen) < 0.33 * 4_000
    share = {t: sum(j.gpu_types == (t,) for j in chosen) / len(chosen) for t in ("V100", "P100")}
    assert share["V100"] == pytest.approx(0.4, abs=0.05)  # 8 of 20 GPUs (fewer for big jobs)
    assert all(j.gpus <= 8 for j in chosen)  # no type holds more than 8 GPUs
    assert all(j.gpu_types != ("T4",) or j.gpus <= 4 for j in chosen)
    # the same seed gives the same types; a prefix of the trace types its jobs alike
    assert type_share(philly, cluster, 0.3, seed=1) == typed
    head = type_share(read_trace(DATA, limit=100), cluster, 0.3, seed=1)
    assert head.jobs == typed.jobs[:100]
    assert type_share(philly, cluster, 0.3, seed=2) != typed
    assert type_share(philly, cluster, 0.0) is philly


def test_typed_share_needs_typed_nodes_and_a_share_in_range() -> None:
    philly = read_trace(DATA, limit=10)
    with pytest.raises(ClusterError, match="no node has a GPU type"):
        type_share(philly, parse_shorthand("1*pcie-8gpu-2socket"), 0.5)
    with pytest.raises(ValueError, match=r"between 0 and 1, got 1\.5"):
        type_share(philly, parse_cluster_yaml(MIXED), 1.5)


def test_a_run_can_stop_at_a_time() -> None:
    jobs = trace(("a", 0, 8, 100, ()), ("b", 50, 8, 100, ()), ("c", 500, 1, 10, ()))
    sim = Simulation(jobs, parse_shorthand("1*dgx1-v100"), "fifo-gang-firstfit", perf=PERF)
    result = sim.run(until=120)
    done = {j.trace.name: (j.first_start, j.finish) for j in result.jobs}
    assert done == {"a": (0, 100), "b": (100, None), "c": (None, None)}
    assert result.end == 100  # the last instant handled
