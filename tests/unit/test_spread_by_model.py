"""The `spread_by_model` policy option: in the scheduler, and the simulator's reference speed."""

from __future__ import annotations

import pytest

from tests.builders import project
from toposched.core import (
    GpuHealth,
    JobSpec,
    JobSubmitted,
    Locality,
    LocalityRule,
    PolicyError,
    Scheduler,
    StartJob,
    make_scheduler_policy,
)
from toposched.perf import PerfModel
from toposched.perf.steptime import fastest, step_time
from toposched.placement.by_model import StepTime
from toposched.sim.engine import Simulation
from toposched.sim.traces import Trace, TraceJob
from toposched.topology.clusterfile import parse_shorthand

PERF = PerfModel()
PREDICT = step_time(PERF, "T4", framework="pytorch-ddp", network="aws-50g")


DEFAULT = "default"  # `shape` with the policy's own spread_by_model


def shape(
    model: str | None, spread: float | str | None, predict: StepTime | None = PREDICT
) -> list[int]:
    """GPUs per node of a 4-GPU job on four g4dn nodes with two GPUs each (two lost to
    failures on every node)."""
    cluster = parse_shorthand("4*g4dn-12xlarge")
    params = {} if spread == DEFAULT else {"spread_by_model": spread}
    core = Scheduler(
        cluster,
        make_scheduler_policy("toposched", params),
        validate=True,
        step_time=predict,
    )
    core.handle(*(GpuHealth(0.0, n.name, g, False) for n in cluster.nodes for g in (0, 1)))
    spec = JobSpec("j", workers=4, locality=LocalityRule(Locality.RACK), model=model)
    actions = core.handle(JobSubmitted(0.0, spec))
    starts = [a for a in actions if isinstance(a, StartJob)]
    assert len(starts) == 1, project(actions)
    return sorted(len(g) for g in starts[0].placement.gpus_by_node().values())


def test_off_the_gang_takes_the_fewest_nodes() -> None:
    assert shape("resnet18-cifar10", None) == [2, 2]


def test_by_default_the_gang_takes_the_fewest_nodes_within_a_tenth_of_the_fastest() -> None:
    # `1111` is the fastest; `211` is a few percent slower, `22` about 1.5x.
    assert make_scheduler_policy("toposched").spread_by_model == 0.1
    assert shape("resnet18-cifar10", DEFAULT) == [1, 1, 2]


def test_on_the_gang_spreads_where_the_model_says_it_is_faster() -> None:
    assert shape("resnet18-cifar10", 0.0) == [1, 1, 1, 1]


def test_jobs_the_model_cannot_judge_keep_the_fewest_nodes() -> None:
    assert shape(None, 0.0) == [2, 2]  # names no model
    assert shape("no-such-model", 0.0) == [2, 2]  # one the catalog does not know
    assert shape("resnet18-cifar10", 0.0, predict=None) == [2, 2]  # a driver without a model


def test_a_tolerance_keeps_the_fewest_nodes_that_are_nearly_as_fast() -> None:
    # `22` is about 1.5x slower than `1111` for this job, `211` a few percent.
    assert shape("resnet18-cifar10", 1.0) == [2, 2]
    assert shape("resnet18-cifar10", 0.3) == [1, 1, 2]


def test_the_option_is_checked() -> None:
    with pytest.raises(PolicyError, match="spread_by_model must be >= 0"):
        make_scheduler_policy("toposched", {"spread_by_model": -0.1})


def test_fastest_is_the_spread_placement_where_spreading_wins() -> None:
    cluster = parse_shorthand("8*g4dn-12xlarge")
    ideal = PERF.ideal(
        "vgg16", "T4", 8, cluster.nodes[0].topology, framework="pytorch-ddp", network="aws-50g"
    )
    best = fastest(PREDICT, "vgg16", cluster.nodes, 8)
    assert best is not None and best < 0.8 * ideal.iteration_s  # `44` is far from the fastest
    assert fastest(PREDICT, "no-such-model", cluster.nodes, 8) is None


def test_the_simulator_measures_speed_against_the_fastest_placement() -> None:
    """An 8-GPU job alone on g4dn nodes: packed on two nodes it runs below full speed, since
    spreading it is faster; spread, it runs at full speed."""
    rows = (TraceJob("a", 0.0, 8, 3600.0, "q", "vgg16", 2),)
    speeds: dict[bool, tuple[float, float]] = {}
    for params in ({"spread_by_model": None}, {"spread_by_model": 0.0}):
        sim = Simulation(
            Trace(rows, "test", "<test>"),
            parse_shorthand("8*g4dn-12xlarge"),
            "toposched",
            perf=PERF,
            network="aws-50g",
            framework="pytorch-ddp",
            gpu_type="T4",
            policy_params=params,
        )
        result = sim.run()
        (job,) = result.jobs
        assert job.finish is not None
        speeds[params["spread_by_model"] is not None] = (job.speed_s / job.run_s, job.finish)
    packed, spread = speeds[False], speeds[True]
    assert packed[0] < 0.8 and spread[0] == pytest.approx(1.0)
    assert spread[1] == pytest.approx(3600.0) and packed[1] > 4500.0
