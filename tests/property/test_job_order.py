"""The order in which waiting jobs start (issue 12), seen from the driver's side.

Under `order: fifo` (fifo-gang-firstfit, gandiva-like) jobs start in submission order whatever
their shape or priority; under `order: fair` (toposched, hived-like) a higher priority goes
first. Issue 12: under a FIFO policy a later high-priority job started before an earlier job
of the same gang shape, though not before one of another shape (the waiting lists, filed per
queue and shape, were each sorted by priority whatever the policy, while the merge across lists
used the policy's rank).

Only the public API is used: `Scheduler(...)`, `handle(...)`, the actions it returns, job views
(`state`, `placement`), `pending()` and `partial_holds()`. Which GPUs are free is worked out
from the placements of the jobs that hold GPUs (running or stopping), and whether a job "could
be placed" with `place_gang` on a `Capacity` built for the cluster, as the core asks it.

The generated jobs have no `limit_s`, no elastic range and no checkpoint: nothing is shrunk,
grown or migrated, and a reservation (toposched's, or the one a preemption leaves) excludes
every job behind its holder alike.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from tests.builders import DGX1, HGX, PCIE4, PCIE8, job, node, uniform
from toposched.core import (
    SCHEDULER_POLICIES,
    Action,
    Event,
    JobCancelled,
    JobFinished,
    JobSpec,
    JobState,
    JobStopped,
    JobSubmitted,
    Locality,
    LocalityRule,
    Placement,
    Scheduler,
    StartJob,
    StopJob,
    Tick,
    Transition,
    make_scheduler_policy,
)
from toposched.placement.capacity import Capacity
from toposched.placement.gang import GangRequest, place_gang
from toposched.topology.cluster import Cluster, Tier

# More examples for a long local run: TOPOSCHED_HYPOTHESIS_SCALE=10.
SCALE = int(os.environ.get("TOPOSCHED_HYPOTHESIS_SCALE", "1"))
SETTINGS = settings(
    max_examples=60 * SCALE,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    # No explain phase: on a failure it replays the case hundreds of times (tens of seconds).
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)

P, R, S = JobState.PENDING, JobState.RUNNING, JobState.STOPPING
HOLDING = (R, S)

GANG_POLICIES = sorted(name for name, info in SCHEDULER_POLICIES.items() if info.base.gang)
FIFO_POLICIES = [p for p in GANG_POLICIES if SCHEDULER_POLICIES[p].base.order == "fifo"]
FAIR_POLICIES = [p for p in GANG_POLICIES if SCHEDULER_POLICIES[p].base.order == "fair"]
PRESETS = (DGX1, PCIE8, PCIE4, HGX)
LOCALITIES = (
    LocalityRule(),
    LocalityRule(Locality.NODE),
    LocalityRule(Locality.RACK),
    LocalityRule(Locality.NODE, Locality.ANY, 5.0),
)


def test_the_policy_lists_are_what_the_tests_assume() -> None:
    assert FIFO_POLICIES == ["fifo-gang-firstfit", "gandiva-like"]
    assert FAIR_POLICIES == ["hived-like", "toposched"]
    assert not SCHEDULER_POLICIES["k8s-default"].base.gang


def started(actions: Sequence[Action]) -> list[str]:
    """Jobs that went from pending to running, in the order of the actions (a migration or a
    resize also emits StartJob, but resumes from stopping: not a start)."""
    return [a.job for a in actions if isinstance(a, Transition) and a.old is P and a.new is R]


# ---------------------------------------------------------------- 1. the regression, exactly


def play(policy: str, *specs: JobSpec) -> tuple[list[str], list[list[str]]]:
    """One DGX-1 taken whole by `x` (8 GPUs); `specs` submitted in turn while it runs. Returns
    the waiting order `pending()` gives just before `x` ends, and the jobs each later event
    starts: `x` ends, then the running jobs end one at a time, the earliest started first."""
    s = Scheduler(uniform(DGX1, 1), make_scheduler_policy(policy), validate=True)
    assert started(s.handle(JobSubmitted(0.0, job("x", 8)))) == ["x"]
    for t, spec in enumerate(specs, start=1):
        assert started(s.handle(JobSubmitted(float(t), spec))) == []
    waiting = [r.name for r in s.pending()]
    batches = [started(s.handle(JobFinished(10.0, "x", True)))]
    running = list(batches[0])
    t = 10.0
    while running:
        t += 1.0
        batch = started(s.handle(JobFinished(t, running.pop(0), True)))
        running += batch
        batches.append(batch)
    assert all(s.job(spec.name).state is JobState.SUCCEEDED for spec in specs)
    return waiting, [b for b in batches if b]


# Each case: jobs submitted in this order while `x` holds the node, then what each order
# starts when `x` ends (and then as the started jobs end). Only one of `a` (priority 0) and
# `b` (priority 5, later) fits the 8 GPUs beside whatever starts with it.
SAME_SHAPE = (job("a", 6), job("b", 6, priority=5))  # 1 worker x 6 GPUs each
OTHER_SHAPES = (job("a", 6), job("b", 3, workers=2, priority=5))  # 1 x 6 against 2 x 3
THIRD_JOB = (job("c", 4), job("a", 4), job("b", 4, priority=5))  # three of 1 x 4: two fit


@pytest.mark.parametrize("policy", FIFO_POLICIES)
@pytest.mark.parametrize(
    ("specs", "starts"),
    [
        pytest.param(SAME_SHAPE, [["a"], ["b"]], id="same-shape"),
        pytest.param(OTHER_SHAPES, [["a"], ["b"]], id="other-shapes"),
        pytest.param(THIRD_JOB, [["c", "a"], ["b"]], id="same-shape-third-job"),
    ],
)
def test_fifo_starts_the_earlier_job_first_whatever_the_priority(
    policy: str, specs: tuple[JobSpec, ...], starts: list[list[str]]
) -> None:
    """Issue 12: a FIFO policy ignores priority, for jobs of one shape as for jobs of two:
    `pending()` lists them in submission order, and they start in it."""
    waiting, batches = play(policy, *specs)
    assert {"starts": batches, "pending": waiting} == {
        "starts": starts,
        "pending": [spec.name for spec in specs],
    }


@pytest.mark.parametrize("policy", FAIR_POLICIES)
@pytest.mark.parametrize(
    ("specs", "starts"),
    [
        pytest.param(SAME_SHAPE, [["b"], ["a"]], id="same-shape"),
        pytest.param(OTHER_SHAPES, [["b"], ["a"]], id="other-shapes"),
        pytest.param(THIRD_JOB, [["b", "c"], ["a"]], id="same-shape-third-job"),
    ],
)
def test_fair_starts_the_higher_priority_job_first(
    policy: str, specs: tuple[JobSpec, ...], starts: list[list[str]]
) -> None:
    """Under `fair` the priority-5 job goes first, whatever the shapes."""
    waiting, batches = play(policy, *specs)
    assert {"starts": batches, "pending": waiting} == {
        "starts": starts,
        "pending": [name for batch in starts for name in batch],
    }


# ---------------------------------------------------------------- the driver for properties


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    """1 to 3 preset nodes in one or two racks."""
    kinds = draw(st.lists(st.sampled_from(PRESETS), min_size=1, max_size=3), label="nodes")
    racks = draw(st.integers(1, 2), label="racks")
    nodes = (node(f"n{i}", kind, rack=f"r{i % racks}") for i, kind in enumerate(kinds))
    return Cluster(tuple(nodes))


@dataclass
class Run:
    """Feeds one scheduler and keeps what a driver knows: the specs in submission order, when
    each job last began to wait, and a log for failure messages."""

    cluster: Cluster
    policy: str
    seed: int = 0  # for the policies that pick at random
    sched: Scheduler = field(init=False)
    specs: dict[str, JobSpec] = field(default_factory=dict)
    waiting_since: dict[str, float] = field(default_factory=dict)
    now: float = 0.0
    log: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        policy = make_scheduler_policy(self.policy)
        rng = random.Random(self.seed)
        self.sched = Scheduler(self.cluster, policy, validate=True, rng=rng)

    def seq(self, name: str) -> int:
        return list(self.specs).index(name)

    def states(self) -> dict[str, JobState]:
        return {name: self.sched.job(name).state for name in self.specs}

    def named(self, *states: JobState) -> list[str]:
        return [name for name, state in self.states().items() if state in states]

    def held(self, skip: frozenset[str] = frozenset()) -> dict[str, int]:
        """Busy GPUs (node -> mask): those of running and stopping jobs, but `skip`'s."""
        busy: dict[str, int] = {}
        for name in self.specs:
            view = self.sched.job(name)
            if view.state in HOLDING and name not in skip:
                assert view.placement is not None, f"{name} is {view.state} with no GPUs"
                for n, gpu in view.placement.pairs():
                    assert not busy.get(n, 0) >> gpu & 1, f"GPU {gpu} of {n} held twice"
                    busy[n] = busy.get(n, 0) | 1 << gpu
        return busy

    def placeable(self, name: str, busy: dict[str, int]) -> Placement | None:
        """Where job `name` could start, if only the GPUs in `busy` were taken (with the
        locality its wait allows now)."""
        cap = Capacity(self.cluster.nodes)
        for n, mask in busy.items():
            cap.take(cap.index[n], mask)
        spec = self.specs[name]
        since, locality = self.waiting_since[name], spec.locality
        waited = self.now - since
        relax = locality.relax_after_s
        if relax is not None and self.now >= since + relax:
            waited = max(waited, relax)
        tier = locality.allowed(waited).tier if spec.min_workers > 1 else Tier.NODE
        # As the core asks: no split wider than the policy's `extra_nodes` allows.
        extra = self.sched.policy.extra_nodes
        found = place_gang(
            cap,
            GangRequest(spec.min_workers, spec.gpus_per_worker, tier, extra_nodes=extra),
            self.cluster.network_gbps,
        )
        return found if isinstance(found, Placement) else None

    def send(self, ev: Event) -> tuple[set[str], list[Action]]:
        """Handle `ev`; returns the jobs pending before it and the actions."""
        before = set(self.named(P))
        self.now = max(self.now, ev.time)
        if isinstance(ev, JobSubmitted):
            self.specs[ev.spec.name] = ev.spec
        self.log.append(repr(ev))
        actions = self.sched.handle(ev)
        for action in actions:
            self.log.append(f"  -> {action!r}")
            if isinstance(action, Transition) and action.new is P:
                self.waiting_since[action.job] = ev.time
        return before, actions

    def fail(self, message: str) -> AssertionError:
        tail = "\n  ".join(self.log[-40:])
        shapes = {n: describe(s) for n, s in self.specs.items()}
        return AssertionError(
            f"{message}\n  policy {self.policy}; jobs in submission order {shapes}\n"
            f"  cluster {[(n.name, n.topology.name, n.rack) for n in self.cluster.nodes]}\n"
            f"  last events:\n  {tail}"
        )


def describe(spec: JobSpec) -> str:
    """`2x4 p5 node,any@5`: workers x GPUs, priority, locality."""
    rule = spec.locality
    where = rule.prefer.value
    if rule.accept is not None:
        where += f",{rule.accept.value}@{rule.relax_after_s:g}"
    return f"{spec.workers}x{spec.gpus_per_worker} p{spec.priority} {where}"


def order_violations(
    run: Run,
    before: set[str],
    actions: Sequence[Action],
    rank: Callable[[str], tuple[int, ...]],
    *,
    strict: bool,
    shadowed: bool,
) -> list[str]:
    """For each job B started by the event and each job A that ranks ahead of B and was
    pending before it: A must not start after B in the same event (a cycle tries A first, and
    nothing frees up during a cycle); if A still waits, then with `strict` that alone is wrong,
    else A must not fit on the GPUs free after the event together with those taken by the
    jobs ranked behind A that started in it (which the cycle tried after A: the GPUs A was
    denied). B's own GPUs are among those.

    With `shadowed`, a reservation may keep GPUs from A for a job that ranks ahead of it
    (which the public API does not show), so the placement check is made only for an A that
    ranks ahead of every job still pending."""
    starts = started(actions)
    placed = {a.job: a.placement for a in actions if isinstance(a, StartJob)}
    pending_after = set(run.named(P))
    out: list[str] = []
    for i, b in enumerate(starts):
        for a in sorted(before - {b}, key=rank):
            if rank(a) >= rank(b):
                break
            event("pair: A ranked ahead of a starting B was pending")
            if a in starts[i + 1 :]:
                out.append(f"{b} started before {a} in the same event, though {a} ranks ahead")
                continue
            if a not in pending_after:
                continue  # started earlier in the event
            if strict:
                out.append(f"{b} started while {a}, ahead of it, still waits")
                continue
            if shadowed and any(rank(x) < rank(a) for x in pending_after):
                event("pair: skipped, A may be behind a reservation")
                continue
            later = frozenset(n for n in starts if rank(n) > rank(a))
            assert b in later
            found = run.placeable(a, run.held(skip=later))
            event("pair: checked whether A fits" + (" (it does: violation)" if found else ""))
            if found is not None:
                out.append(
                    f"{b} started on {placed[b].describe()} while {a}, ahead of it, still "
                    f"waits and fits on {found.describe()} (free GPUs and those of "
                    f"{sorted(later)})"
                )
    return out


@st.composite
def job_specs(
    draw: st.DrawFn,
    name: str,
    priorities: st.SearchStrategy[int],
    localities: Sequence[LocalityRule] = LOCALITIES,
) -> JobSpec:
    """Small gangs of a few shapes (so that shapes repeat), random priority and locality; no
    limit_s, elastic range or checkpoint."""
    return JobSpec(
        name,
        workers=draw(st.sampled_from([1, 1, 2, 3]), label="workers"),
        gpus_per_worker=draw(st.sampled_from([1, 2, 2, 4, 8]), label="gpus"),
        priority=draw(priorities, label="priority"),
        locality=draw(st.sampled_from(localities), label="locality"),
    )


def fitting(run: Run, spec: JobSpec) -> JobSpec:
    """`spec`, or one worker of it if it could not run even on the empty cluster."""
    if run.sched.never_fits(spec) is None:
        return spec
    largest = max(n.size for n in run.cluster.nodes)
    return replace(spec, workers=1, gpus_per_worker=min(spec.gpus_per_worker, largest))


Checker = Callable[[set[str], Sequence[Action]], list[str]]


def fill_then_drain(
    run: Run,
    data: st.DataObject,
    priorities: st.SearchStrategy[int],
    check: Checker,
    late_submissions: bool = False,
) -> None:
    """A blocker takes every GPU; jobs are submitted while it runs; it ends; then stops are
    answered and running jobs end one at a time, in an order hypothesis picks (with
    `late_submissions`, more jobs come in meanwhile), until every job has ended."""

    def send(ev: Event) -> None:
        before, actions = run.send(ev)
        problems = check(before, actions)
        if problems:
            raise run.fail("\n  ".join(problems))

    total = sum(n.size for n in run.cluster.nodes)
    send(JobSubmitted(0.0, JobSpec.total("blocker", total)))
    assert run.named(R) == ["blocker"], run.sched.job("blocker").reason
    count = data.draw(st.integers(2, 8), label="jobs")
    for i in range(count):
        spec = data.draw(job_specs(f"j{i}", priorities), label="spec")
        send(JobSubmitted(float(i + 1), fitting(run, spec)))
    assert run.named(P) == [f"j{i}" for i in range(count)]  # nothing starts while it is full
    send(JobFinished(20.0, "blocker", True))
    extra = data.draw(st.integers(0, 4), label="late jobs") if late_submissions else 0
    for _ in range(20 * (count + extra + 2)):
        running, stopping, pending = run.named(R), run.named(S), run.named(P)
        dt = data.draw(st.sampled_from([0.0, 1.0, 3.0]), label="dt")
        t = run.now + dt
        if extra and data.draw(st.booleans(), label="submit now"):
            extra -= 1
            name = f"late{len(run.specs)}"
            send(JobSubmitted(t, fitting(run, data.draw(job_specs(name, priorities)))))
        elif stopping:
            send(JobStopped(t, data.draw(st.sampled_from(stopping), label="stopped")))
        elif running:
            send(JobFinished(t, data.draw(st.sampled_from(running), label="finish"), True))
        elif pending:
            send(Tick(t + 10.0))  # idle: a job may wait for its locality to widen
        elif not extra:
            break
    left = {n: s for n, s in run.states().items() if s is not JobState.SUCCEEDED}
    if left:
        raise run.fail(f"jobs never ended: {left}")


# ---------------------------------------------------------------- 2. FIFO: submission order


@SETTINGS
@pytest.mark.parametrize(
    "priorities",
    [pytest.param(st.integers(0, 5), id="mixed"), pytest.param(st.just(0), id="equal")],
)
@pytest.mark.parametrize("policy", FIFO_POLICIES)
@given(cluster=clusters(), data=st.data())
def test_fifo_starts_jobs_in_submission_order(
    policy: str, priorities: st.SearchStrategy[int], cluster: Cluster, data: st.DataObject
) -> None:
    """Under a FIFO policy jobs of any shape and priority start in submission order: without
    backfill (fifo-gang-firstfit) strictly; with it (gandiva-like) a later job B may start
    first only if the earlier A could not have been placed on the GPUs free then together with
    those B (and any other later job started with it) took. `equal` gives every job one
    priority, which issue 12 leaves in order."""
    run = Run(cluster, policy)
    backfill = SCHEDULER_POLICIES[policy].base.backfill

    def check(before: set[str], actions: Sequence[Action]) -> list[str]:
        return order_violations(
            run, before, actions, lambda n: (run.seq(n),), strict=not backfill, shadowed=False
        )

    fill_then_drain(run, data, priorities, check)


# ---------------------------------------------------------------- 3. every gang policy: rank


@SETTINGS
@pytest.mark.parametrize("policy", GANG_POLICIES)
@given(cluster=clusters(), data=st.data())
def test_no_job_starts_ahead_of_a_higher_ranked_job_that_fits(
    policy: str, cluster: Cluster, data: st.DataObject
) -> None:
    """In one queue with no guarantee and no demotion (runs are seconds long, far below the
    8 GPU-hour threshold), the rank is (-priority, submission) under `fair` and submission
    alone under `fifo`. When B starts, no job A ranked ahead of it that was pending before the
    event and still is after it may fit on the GPUs free after it together with those taken by
    the jobs ranked behind A that started in it (B's among them). No job is ever stopped:
    none can checkpoint, and the one queue borrows nothing."""
    run = Run(cluster, policy)
    base = SCHEDULER_POLICIES[policy].base
    fifo = base.order == "fifo"
    # A reservation comes from policy `reservation` alone: these jobs are not elastic nor
    # checkpointable, so nothing shrinks or migrates for one, and in one queue with no
    # guarantee none is preempted either (issue 16: a job that cannot checkpoint goes only to
    # give back GPUs its queue borrowed).
    shadowed = base.reservation

    def rank(name: str) -> tuple[int, ...]:
        seq = run.seq(name)
        return (seq,) if fifo else (-run.specs[name].priority, seq)

    def check(before: set[str], actions: Sequence[Action]) -> list[str]:
        stopped = [f"{a.job} was stopped ({a.kind})" for a in actions if isinstance(a, StopJob)]
        return stopped + order_violations(
            run, before, actions, rank, strict=False, shadowed=shadowed
        )

    fill_then_drain(run, data, st.integers(0, 5), check, late_submissions=True)


# ---------------------------------------------------------------- 4. k8s-default: no idle worker


@SETTINGS
@given(cluster=clusters(), data=st.data(), seed=st.integers(0, 1000))
def test_k8s_default_leaves_no_worker_unbound_that_could_bind(
    cluster: Cluster, data: st.DataObject, seed: int
) -> None:
    """k8s-default binds one worker at a time and holds partial gangs, so it keeps no order
    between gangs, only this: after each event, no waiting job that has fewer workers bound
    than it needs could bind its next one (no node has `gpus_per_worker` free GPUs).

    The public API says how many GPUs each waiting job holds (`partial_holds()`), not on
    which nodes, so this checks what the invariant implies for the counts: on each node, the
    GPUs that running and stopping jobs leave, less g - 1, must be held by partial gangs, so
    the sum of those over the nodes is at most the GPUs partial gangs hold. For g = 1, or with
    no partial gang held, that is the invariant itself."""
    run = Run(cluster, "k8s-default", seed)

    def check() -> None:
        holds = run.sched.partial_holds()
        held = sum(holds.values())
        busy = run.held()
        room = {n.name: n.size - busy.get(n.name, 0).bit_count() for n in cluster.nodes}
        for name in run.named(P):
            spec = run.specs[name]
            g = spec.gpus_per_worker
            bound = holds.get(name, 0) // g
            assert bound < spec.min_workers, f"{name} has every worker bound but waits"
            must_hold = sum(max(0, r - (g - 1)) for r in room.values())
            event("waiting job checked" + (" (partial holds count)" if must_hold else ""))
            if holds:
                event("a partial gang is held")
            if must_hold > held:
                raise run.fail(
                    f"{name} waits with {bound} of {spec.min_workers} workers x {g} GPUs "
                    f"bound, but partial gangs hold {held} GPUs ({holds}) and the nodes have "
                    f"{room} GPUs not held by running jobs: some node has {g} free"
                )

    for i in range(data.draw(st.integers(3, 25), label="steps")):
        t = float(i)
        move = data.draw(st.sampled_from(["submit", "submit", "finish", "cancel"]), label="move")
        running, pending = run.named(R), run.named(P)
        if move == "finish" and running:
            run.send(JobFinished(t, data.draw(st.sampled_from(running), label="which"), True))
        elif move == "cancel" and pending:
            run.send(JobCancelled(t, data.draw(st.sampled_from(pending), label="which")))
        else:
            # Locality `any` only: k8s-default binds each worker to a random node whatever the
            # job's locality, which validate mode refuses ("placed wider than its locality
            # allows"), a defect apart from the one checked here.
            spec = data.draw(job_specs(f"j{i}", st.integers(0, 5), [LocalityRule()]))
            run.send(JobSubmitted(t, fitting(run, spec)))
        check()
    run.send(Tick(run.now + 1.0))
    check()
