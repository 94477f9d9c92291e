"""Mixed clusters in the core: GPU types, GPU memory, CPUs and memory per worker, taints and
node affinity; each test feeds events and compares where jobs start, or why they wait."""

from __future__ import annotations

import pytest

from tests.builders import DGX1, PCIE4, PCIE8, cluster, job
from toposched.core import (
    Action,
    Checkpoint,
    JobFinished,
    JobSubmitted,
    LocalityRule,
    NodeAdded,
    NodeChanged,
    Scheduler,
    StartJob,
    StopJob,
    make_scheduler_policy,
)
from toposched.core.errors import SchedulingError
from toposched.topology import preset
from toposched.topology.cluster import (
    Node,
    NodeSelector,
    Requirement,
    Taint,
    Toleration,
)
from toposched.topology.resources import (
    Hardware,
    QuantityError,
    cpus_text,
    memory_text,
    parse_cpus,
    parse_memory,
)

GIB = 2**30
V100 = Hardware("V100", 16 * GIB, 32_000, 256 * GIB)
T4 = Hardware("T4", 16 * GIB, 32_000, 256 * GIB)


def typed(name: str, hw: Hardware, kind: str = DGX1, **fields: object) -> Node:
    return Node(name, preset(kind), hardware=hw, **fields)  # type: ignore[arg-type]


def sched(*nodes: Node, speeds: dict[str, float] | None = None, **policy: object) -> Scheduler:
    table = {k.casefold(): v for k, v in (speeds or {}).items()}
    return Scheduler(
        cluster(*nodes),
        make_scheduler_policy("toposched", policy),
        validate=True,
        type_speed=(lambda model, gpu_type: table.get(gpu_type)) if speeds else None,
    )


def started(actions: list[Action]) -> dict[str, set[str]]:
    """Job -> the nodes its StartJob gives it."""
    return {
        a.job: {node for node, _ in a.placement.pairs()} for a in actions if isinstance(a, StartJob)
    }


def test_a_job_runs_only_on_the_gpu_types_it_accepts() -> None:
    s = sched(typed("t0", T4), typed("v0", V100))
    out = started(s.handle(JobSubmitted(0, job("a", gpus=4, gpu_types=("v100",)))))
    assert out == {"a": {"v0"}}  # types compare without case
    s.handle(JobSubmitted(1, job("b", gpus=8, gpu_types=("V100",))))
    reason = s.job("b").reason
    assert s.job("b").state.value == "pending"
    assert "1 T4 node(s) excluded by gpu_type" in reason, reason
    assert "on the node(s) it may use: 1 V100" in reason, reason


def test_a_job_whose_type_no_node_has_waits_saying_so() -> None:
    s = sched(typed("t0", T4), typed("v0", V100))
    s.handle(JobSubmitted(0, job("a", gpus=1, gpu_types=("A100",))))
    view = s.job("a")
    assert view.state.value == "pending"
    assert view.reason.startswith("no node it may use:"), view.reason
    assert "1 T4 node(s) excluded by gpu_type" in view.reason
    assert "1 V100 node(s) excluded by gpu_type" in view.reason


def test_gpu_memory_rules_out_smaller_gpus() -> None:
    big = Hardware("V100", 32 * GIB)
    s = sched(typed("small", V100), typed("big", big))
    out = started(s.handle(JobSubmitted(0, job("a", gpus=1, gpu_memory=20 * GIB))))
    assert out == {"a": {"big"}}


def test_cpus_per_worker_bound_how_many_jobs_share_a_node() -> None:
    # The example: eight 1-GPU jobs that want 16 cores each on a 32-core server.
    s = sched(typed("v0", V100))
    for i in range(8):
        s.handle(JobSubmitted(i, job(f"j{i}", cpus=16_000)))
    running = [f"j{i}" for i in range(8) if s.job(f"j{i}").state.value == "running"]
    assert running == ["j0", "j1"]
    reason = s.job("j2").reason
    assert "16 CPUs" in reason and "room for 0" in reason, reason
    out = started(s.handle(JobFinished(10, "j0", succeeded=True)))
    assert out == {"j2": {"v0"}}


def first_fit_on_small_nodes(count: int = 1) -> Scheduler:
    """The FIFO first-fit baseline on `count` 4-GPU nodes of 8 CPUs."""
    small = Hardware("P100", 16 * GIB, 8_000, 64 * GIB)
    return Scheduler(
        cluster(*(typed(f"n{i}", small, PCIE4) for i in range(count))),
        make_scheduler_policy("fifo-gang-firstfit", {}),
        validate=True,
    )


def test_the_first_fit_baseline_says_when_cpus_not_gpus_keep_a_job_waiting() -> None:
    # Hypothesis found it: a gang of 3 workers of 4 CPUs on an empty 4-GPU node of 8 CPUs was
    # told "first fit found none", as though GPUs were short.
    here = LocalityRule.parse("node")
    s = first_fit_on_small_nodes()
    s.handle(JobSubmitted(0, job("cpu-bound", gpus=1, workers=3, cpus=4_000, locality=here)))
    reason = s.job("cpu-bound").reason
    assert "3 worker(s) with 4 CPUs each" in reason, reason
    assert "3 free GPUs only on nodes without room for them" in reason, reason
    s = first_fit_on_small_nodes()
    s.handle(JobSubmitted(0, job("spread", gpus=1, workers=3, cpus=4_000)))
    reason = s.job("spread").reason
    assert "needs 3 workers x 1 GPUs with 4 CPUs; first fit found no room" in reason, reason
    # Where GPUs are what is short (one free on each node), it says so, as before.
    s = first_fit_on_small_nodes(2)
    s.handle(JobSubmitted(0, job("h0", gpus=3)))
    s.handle(JobSubmitted(1, job("h1", gpus=3)))
    s.handle(JobSubmitted(2, job("gpu-bound", gpus=2, locality=here)))
    assert s.job("gpu-bound").reason.endswith("needs 2 GPUs on one node; first fit found none")


def test_memory_per_worker_spreads_a_gang_over_nodes() -> None:
    small = Hardware("V100", 16 * GIB, None, 64 * GIB)
    s = sched(typed("a", small), typed("b", small))
    actions = s.handle(JobSubmitted(0, job("g", gpus=1, workers=4, memory=32 * GIB)))
    start = next(a for a in actions if isinstance(a, StartJob))
    per_node: dict[str, int] = {}
    for slot in start.placement.workers:
        per_node[slot.node] = per_node.get(slot.node, 0) + 1
    assert per_node == {"a": 2, "b": 2}  # 64 GiB holds two workers of 32 GiB


def test_a_gang_runs_on_one_gpu_type_unless_it_says_mixed_types() -> None:
    # Six GPUs of one type: neither type has them, so the job could never start, and is
    # refused at once (kept, it would wait for ever and hold GPUs reserved for itself).
    s = sched(typed("t0", T4, PCIE4), typed("v0", V100, PCIE4))
    s.handle(JobSubmitted(0, job("one", gpus=1, workers=6)))
    view = s.job("one")
    assert view.state.value == "rejected"
    assert "of one GPU type (mixed_types is off)" in view.reason, view.reason
    # Eight V100s, four of them busy, and four T4s: neither type has six free, so it waits.
    s = sched(typed("t0", T4, PCIE4), typed("v0", V100, PCIE4), typed("v1", V100, PCIE4))
    s.handle(JobSubmitted(0, job("v", gpus=2, gpu_types=("V100",))))
    s.handle(JobSubmitted(0, job("w", gpus=2, gpu_types=("V100",))))
    s.handle(JobSubmitted(0, job("six", gpus=1, workers=6)))
    view = s.job("six")
    assert view.state.value == "pending"
    assert view.reason.startswith("a gang of one GPU type (mixed_types is off)"), view.reason
    s = sched(typed("t0", T4, PCIE4), typed("v0", V100, PCIE4))
    out = started(s.handle(JobSubmitted(1, job("mixed", gpus=1, workers=6, mixed_types=True))))
    assert out == {"mixed": {"t0", "v0"}}


def test_the_fastest_type_wins_when_nobody_waits_for_it() -> None:
    s = sched(typed("t0", T4), typed("v0", V100), speeds={"V100": 1.0, "T4": 0.9})
    out = started(s.handle(JobSubmitted(0, job("a", gpus=8, gpu_types=("V100", "T4")))))
    assert out == {"a": {"v0"}}


def busy_v100s(speeds: dict[str, float]) -> Scheduler:
    """A T4 node and two V100 nodes with 3 free GPUs each; a V100-only job waits for 8 (and
    reserves one node's 3): the other 3 V100s are free to take."""
    s = sched(typed("t0", T4), typed("v0", V100), typed("v1", V100), speeds=speeds)
    s.handle(JobSubmitted(0, job("hog0", gpus=5, gpu_types=("V100",))))
    s.handle(JobSubmitted(0, job("hog1", gpus=5, gpu_types=("V100",))))
    s.handle(JobSubmitted(1, job("v-only", gpus=8, gpu_types=("V100",))))
    assert s.job("v-only").state.value == "pending"
    return s


def test_a_job_about_as_fast_on_t4_leaves_the_v100s_to_a_v100_only_job() -> None:
    s = busy_v100s({"V100": 1.0, "T4": 0.9})
    out = started(s.handle(JobSubmitted(2, job("either", gpus=3, gpu_types=("V100", "T4")))))
    assert out == {"either": {"t0"}}


def test_a_much_slower_type_is_not_taken_to_spare_a_waiting_job() -> None:
    s = busy_v100s({"V100": 1.0, "T4": 0.5})
    out = started(s.handle(JobSubmitted(2, job("either", gpus=3, gpu_types=("V100", "T4")))))
    assert len(out) == 1 and out["either"] <= {"v0", "v1"}, out


def test_type_blind_choice_takes_the_first_node_that_fits() -> None:
    s = sched(typed("t0", T4), typed("v0", V100), speeds={"V100": 1.0}, type_choice="blind")
    out = started(s.handle(JobSubmitted(0, job("a", gpus=8))))
    assert out == {"a": {"t0"}}


def test_a_taint_keeps_jobs_off_unless_they_tolerate_it() -> None:
    s = sched(typed("v0", V100), typed("v1", V100))
    tainted = typed("v0", V100, taints=(Taint("gpu", "reserved", "NoSchedule"),))
    s.handle(NodeChanged(0, tainted))
    out = started(s.handle(JobSubmitted(1, job("a", gpus=8))))
    assert out == {"a": {"v1"}}
    s.handle(JobSubmitted(2, job("b", gpus=8)))
    assert "tainted gpu=reserved:NoSchedule not tolerated" in s.job("b").reason
    allowed = (Toleration("gpu", "Equal", "reserved", "NoSchedule"),)
    out = started(s.handle(JobSubmitted(3, job("c", gpus=8, tolerations=allowed, priority=1))))
    assert out == {"c": {"v0"}}


def test_required_node_affinity_terms() -> None:
    zone = {"zone": "a"}
    s = sched(typed("v0", V100, labels=zone), typed("v1", V100, labels={"zone": "b"}))
    not_a = NodeSelector(any_of=((Requirement("zone", "NotIn", ("a",)),),))
    out = started(s.handle(JobSubmitted(0, job("a", gpus=8, selector=not_a))))
    assert out == {"a": {"v1"}}


def test_a_node_changed_under_running_jobs_keeps_them() -> None:
    s = sched(typed("v0", V100))
    s.handle(JobSubmitted(0, job("a", gpus=1, cpus=16_000)))
    shrunk = typed("v0", Hardware("V100", 16 * GIB, 8_000, 256 * GIB))
    s.handle(NodeChanged(1, shrunk))
    assert s.job("a").state.value == "running"
    s.handle(JobSubmitted(2, job("b", gpus=1, cpus=1_000)))
    assert s.job("b").state.value == "pending"  # the node holds more than it now has
    out = started(s.handle(JobFinished(3, "a", succeeded=True)))
    assert out == {"b": {"v0"}}


def test_a_node_change_of_wiring_is_refused() -> None:
    s = sched(typed("v0", V100))
    with pytest.raises(SchedulingError, match="wiring changed"):
        s.handle(NodeChanged(0, typed("v0", V100, PCIE4)))


@pytest.mark.parametrize(
    ("text", "milli"), [("500m", 500), ("4", 4000), (2.5, 2500), (4, 4000), ("0.1", 100)]
)
def test_cpu_quantities(text: object, milli: int) -> None:
    assert parse_cpus(text) == milli


@pytest.mark.parametrize(
    ("text", "size"),
    [("16Gi", 16 * GIB), ("512Mi", 512 * 2**20), ("16G", 16 * 10**9), (1024, 1024), ("1e3", 1000)],
)
def test_memory_quantities(text: object, size: int) -> None:
    assert parse_memory(text) == size


@pytest.mark.parametrize(
    ("text", "says"),
    [("4 cores", "expected a count of CPUs"), ("-1", "must not be negative"), ("2x", "unit")],
)
def test_bad_cpu_quantities_say_what_is_accepted(text: str, says: str) -> None:
    with pytest.raises(QuantityError, match=says):
        parse_cpus(text)


def test_gb_is_refused_naming_the_suffixes_meant() -> None:
    with pytest.raises(QuantityError, match="for GB write Gi or G"):
        parse_memory("16GB")
    with pytest.raises(QuantityError, match="must not be negative"):
        parse_memory(-5)


def test_quantities_print_back_exactly() -> None:
    assert [cpus_text(m) for m in (4000, 2500, 250)] == ["4", "2.5", "250m"]
    assert [memory_text(b) for b in (16 * GIB, 1536 * 2**20, 1000)] == ["16Gi", "1536Mi", "1000"]


def test_migrations_to_open_a_node_count_the_cpus_of_each_move() -> None:
    # x and y (4 CPUs each) on n0; big needs n0's 32 CPUs. n1 has CPUs for one of them only:
    # moving both there would over-commit it (validate mode would raise).
    s = sched(typed("n0", Hardware("V100", 16 * GIB, 64_000)))
    for name in ("x", "y"):
        s.handle(JobSubmitted(0, job(name, cpus=4_000, checkpoint=Checkpoint())))
    s.handle(NodeAdded(1, typed("n1", Hardware("V100", 16 * GIB, 6_000))))
    actions = s.handle(JobSubmitted(2, job("big", gpus=8, cpus=32_000, checkpoint=Checkpoint())))
    stopped = {a.job for a in actions if isinstance(a, StopJob)}
    assert stopped != {"x", "y"}, actions
    assert s.job("big").state.value == "pending"


def test_a_job_whose_workers_cpus_a_node_lacks_stops_nothing_there() -> None:
    # low (3 workers x 2 GPUs, 2 CPUs each) runs on n0, whose 8 CPUs hold two of high's
    # 4-CPU workers, not three: preempting low would free GPUs high still cannot use, and
    # high would keep them reserved, idle, with low waiting behind it (a draw of
    # tests/property/test_scheduler_machine.py found that: the cluster idle, a job waiting).
    # n1 could hold high, but runs a job that cannot checkpoint (never preempted for priority).
    here = LocalityRule.parse("node")
    n1 = typed("n1", Hardware("V100", 16 * GIB, 64_000), PCIE8)
    s = sched(typed("n0", Hardware("V100", 16 * GIB, 8_000), PCIE8), n1)
    low = job("low", gpus=2, workers=3, cpus=2_000, checkpoint=Checkpoint(), locality=here)
    assert started(s.handle(JobSubmitted(0, job("pinned", gpus=8, cpus=16_000)))) == {
        "pinned": {"n1"}
    }
    assert started(s.handle(JobSubmitted(0, low))) == {"low": {"n0"}}
    high = job(
        "high", gpus=1, workers=3, cpus=4_000, priority=1, checkpoint=Checkpoint(), locality=here
    )
    actions = s.handle(JobSubmitted(1, high))
    assert not [a for a in actions if isinstance(a, StopJob)], actions
    assert s.job("low").state.value == "running"
    assert s.job("high").state.value == "pending"
    # Nor does it keep n0's GPUs for itself: n0's CPUs never hold its three workers.
    kept = s.books.reservation
    assert kept is not None and kept.job == "high"
    assert set(kept.gpus) == {s.books.capacity.index["n1"]}, kept
    # With CPUs for its three workers, the same job does preempt low.
    roomy = sched(typed("n0", Hardware("V100", 16 * GIB, 16_000), PCIE8), n1)
    roomy.handle(JobSubmitted(0, job("pinned", gpus=8, cpus=16_000)))
    roomy.handle(JobSubmitted(0, low))
    stops = [a for a in roomy.handle(JobSubmitted(1, high)) if isinstance(a, StopJob)]
    assert [a.job for a in stops] == ["low"]


def test_a_gang_of_one_type_reserves_no_gpus_of_a_type_it_cannot_fill() -> None:
    # `big` needs 3 workers x 3 GPUs of one type: the three T4 nodes once `hold` ends (one
    # worker each), never the one V100 node (8 GPUs). Its reservation keeps T4s only, so `v`,
    # behind it, starts on the V100s; kept there too, they would idle for nothing.
    s = sched(
        typed("t0", T4, PCIE4), typed("t1", T4, PCIE4), typed("t2", T4, PCIE4), typed("v0", V100)
    )
    assert started(s.handle(JobSubmitted(0, job("hold", gpus=2, gpu_types=("T4",))))) == {
        "hold": {"t0"}
    }
    big = job("big", gpus=3, workers=3, locality=LocalityRule.parse("any"))
    assert started(s.handle(JobSubmitted(1, big))) == {}
    assert "reserved t0 GPUs" in s.job("big").reason, s.job("big").reason
    assert "v0" not in s.job("big").reason, s.job("big").reason
    out = started(s.handle(JobSubmitted(2, job("v", gpus=4, gpu_types=("V100",)))))
    assert out == {"v": {"v0"}}
