"""The scheduler core driven by random event streams, checked from the driver's side.

A `Driver` feeds events to `Scheduler(validate=True)` and keeps only what a real driver would
know from the actions it got back: which jobs it started where, which it was told to stop and
has not yet confirmed, which nodes and GPUs are up. After every event it checks (the invariants
of docs/architecture.md and the job semantics of docs/scheduler.md, "Jobs"):

- actions are consistent with that knowledge: a job starts only while pending (or on its own
  stop, when a migration or resize resumes it), never twice without a stop in between, never
  after its cancellation; a StopJob targets a running job and names a cause that happened;
- every StartJob is a whole gang on present, healthy GPUs that no other job's processes hold,
  within the locality the job allows at that moment, on nodes its selector matches, of a
  GPU type it accepts and one type only unless it accepts mixed ones, and no node's CPUs or
  memory over-committed;
- state transitions follow the allowed edges, each from the right event; terminal states are
  final; a job leaves its GPUs only when its processes are gone (JobStopped or JobFinished);
- the scheduler's own view (`job(name)`) agrees with the driver's;
- an idle cluster does not keep a job waiting that could run on it now.

Then three liveness properties: a drain (no deadlock, no starvation), a job within its queue's
guarantee reclaiming borrowed GPUs, and elastic jobs settling.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from toposched.core import (
    SCHEDULER_POLICIES,
    Action,
    Checkpoint,
    Elastic,
    Event,
    GpuHealth,
    JobCancelled,
    JobFinished,
    JobSpec,
    JobState,
    JobStopped,
    JobSubmitted,
    Locality,
    LocalityRule,
    NodeAdded,
    NodeCordoned,
    NodeRemoved,
    Placement,
    RestartPolicy,
    Scheduler,
    SchedulerPolicy,
    SchedulingError,
    StartJob,
    StopJob,
    StopKind,
    Tick,
    Transition,
    WorkerFailed,
)
from toposched.core.policy import Order
from toposched.core.requests import gang_request
from toposched.perf import PerfModel
from toposched.perf.steptime import step_time
from toposched.placement.by_model import StepTime
from toposched.placement.capacity import Capacity
from toposched.placement.gang import WorkerSlot, place_gang
from toposched.placement.typed import OneType, first_in_node_order
from toposched.topology import preset
from toposched.topology.cluster import Cluster, Node, NodeSelector, tier_of
from toposched.topology.resources import Hardware

# More examples for a long local run: TOPOSCHED_HYPOTHESIS_SCALE=10.
SCALE = int(os.environ.get("TOPOSCHED_HYPOTHESIS_SCALE", "1"))

P, R, S = JobState.PENDING, JobState.RUNNING, JobState.STOPPING
OK, FAILED, CANCELLED, REJECTED = (
    JobState.SUCCEEDED,
    JobState.FAILED,
    JobState.CANCELLED,
    JobState.REJECTED,
)
ALLOWED: frozenset[tuple[JobState | None, JobState]] = frozenset(
    {
        (None, P),
        (None, REJECTED),
        (P, R),
        (P, CANCELLED),
        (R, S),
        (R, OK),
        (R, FAILED),
        (R, P),  # failed, restarted per its policy
        (S, R),  # a migration or resize resumes on its new GPUs
        (S, P),
        (S, OK),
        (S, FAILED),
        (S, CANCELLED),
        (S, JobState.TIMED_OUT),  # stopped at its time limit
    }
)
RESUMING = (StopKind.MIGRATE, StopKind.RESIZE)
# What a waiting job's reason states about the cluster, to check against it.
FREE_NOW = re.compile(r"needs \d+ GPUs; (\d+) are free")
BEHIND = re.compile(r"waiting behind ([\w.-]+)")
QUEUED = re.compile(r"queued behind ([\w.-]+(?:, [\w.-]+)*)")
HELD = re.compile(r"held by ([\w.-]+(?:, [\w.-]+)*)")

PRESETS = ("pcie-4gpu-2socket", "pcie-8gpu-2socket", "dgx1-v100", "hgx-h100")
GANG_POLICIES = sorted(name for name, info in SCHEDULER_POLICIES.items() if info.base.gang)
POOLS = st.sampled_from(["a", "b"])  # a label of every node, that some jobs select
GIB = 2**30
# Nodes of two GPU types, some with CPUs and memory counted; jobs that ask for them.
MACHINES = st.builds(
    Hardware,
    st.sampled_from(["V100", "T4"]),
    st.just(16 * GIB),
    st.sampled_from([None, 8000, 16000]),
    st.sampled_from([None, 64 * GIB]),
)
GPU_TYPES = ((), (), ("V100",), ("t4",), ("V100", "T4"))
# A performance model's step time, for the setups that place gangs by it (`spread_by_model`),
# and the models jobs may name (most name none: the model cannot judge those).
STEP_TIME = step_time(PerfModel(), "V100")
MODELS = (None, None, "resnet50", "bert-large", "vgg16")
# Whether some placement exists does not depend on which type is chosen.
ONE_TYPE = OneType(place_gang, first_in_node_order)
SELECTORS = (NodeSelector(), NodeSelector(), NodeSelector.of({"pool": "a"}))
LOCALITIES = (
    LocalityRule(),
    LocalityRule(Locality.NODE),
    LocalityRule(Locality.RACK),
    LocalityRule(Locality.NODE, Locality.RACK, 60.0),
    LocalityRule(Locality.NODE, Locality.ANY, 300.0),
)


def ends_stop(event: Event, name: str) -> bool:
    """The event says job `name`'s processes are gone after a StopJob: JobStopped, or a failed
    exit (the signal the stop sent makes workers exit non-zero; it counts as the stop)."""
    if isinstance(event, JobStopped):
        return event.job == name
    return isinstance(event, JobFinished) and event.job == name and not event.succeeded


class DriverError(AssertionError):
    """The scheduler told the driver something impossible; the message carries the event log."""


# ---------------------------------------------------------------- the driver's model


@dataclass
class Known:
    """What the driver knows of one job, from the actions it was given."""

    spec: JobSpec
    state: JobState | None = None
    placement: Placement | None = None  # GPUs its processes are on: StartJob until they end
    stop: StopKind | None = None  # a StopJob not yet answered
    ended_stop: StopKind | None = None  # the stop the last JobStopped answered
    ran_on: Placement | None = None  # where it ran before that
    cancelled: bool = False
    waiting_since: float = 0.0
    restarts: int = 0
    starts: int = 0
    served: float = 0.0  # GPU-seconds of the runs that have ended
    since: float = 0.0  # when its current run began
    run_began: float = 0.0  # when it last started from waiting (a move goes on with the run)

    def service(self, now: float) -> float:
        running = self.placement.gpus * (now - self.since) if self.placement else 0.0
        return self.served + running


@dataclass
class Driver:
    cluster: Cluster
    policy: SchedulerPolicy
    queues: dict[str, int]
    spare: tuple[Node, ...] = ()
    step: StepTime | None = None  # what `spread_by_model` places by (None: no model)
    sched: Scheduler = field(init=False)
    nodes: dict[str, Node] = field(init=False)
    present: set[str] = field(init=False)
    unhealthy: dict[str, set[int]] = field(default_factory=dict)
    cordoned: set[str] = field(default_factory=set)
    jobs: dict[str, Known] = field(default_factory=dict)
    now: float = 0.0
    log: list[str] = field(default_factory=list)
    counter: int = 0

    def __post_init__(self) -> None:
        self.sched = Scheduler(
            self.cluster, self.policy, dict(self.queues), validate=True, step_time=self.step
        )
        self.nodes = {n.name: n for n in (*self.cluster.nodes, *self.spare)}
        self.present = {n.name for n in self.cluster.nodes}

    # ------------------------------------------------------------ queries

    def named(self, *states: JobState) -> list[str]:
        return [name for name, k in self.jobs.items() if k.state in states]

    def waiting(self) -> list[Known]:
        return [k for k in self.jobs.values() if k.state is P]

    def owed(self) -> list[str]:
        return [name for name, k in self.jobs.items() if k.stop is not None]

    def fail(self, message: str) -> DriverError:
        tail = "\n  ".join(self.log[-25:])
        return DriverError(f"{message}\n  policy {self.policy.name}; last events:\n  {tail}")

    def expect(self, condition: bool, message: str) -> None:
        if not condition:
            raise self.fail(message)

    # ------------------------------------------------------------ events

    def advance(self, dt: float) -> float:
        self.now += dt
        return self.now

    def submit(self, spec: JobSpec) -> list[Action]:
        return self.send(JobSubmitted(self.now, spec))

    def new_name(self) -> str:
        self.counter += 1
        return f"j{self.counter}"

    def send(self, event: Event) -> list[Action]:
        self.log.append(repr(event))
        match event:
            case JobStopped(job=name) | JobFinished(job=name):
                known = self.jobs[name]
                known.served = known.service(event.time)
                known.ran_on, known.placement = known.placement, None  # its processes are gone
                known.ended_stop, known.stop = known.stop, None
            case JobCancelled(job=name):
                self.jobs[name].cancelled = True
            case NodeRemoved(node=name):
                self.present.discard(name)
                self.unhealthy.pop(name, None)
                self.cordoned.discard(name)
            case NodeAdded(node=node):
                self.present.add(node.name)
                self.unhealthy.pop(node.name, None)
                self.cordoned.discard(node.name)
            case NodeCordoned(node=name, cordoned=on):
                if on:
                    self.cordoned.add(name)
                else:
                    self.cordoned.discard(name)
            case GpuHealth(node=name, gpu=gpu, healthy=healthy):
                bad = self.unhealthy.setdefault(name, set())
                if healthy:
                    bad.discard(gpu)
                else:
                    bad.add(gpu)
        actions = self.sched.handle(event)
        for action in actions:
            self.log.append(f"  -> {action!r}")
            self._apply(event, action)
        self._check_views()
        due = self.sched.next_due()  # a driver without a clock ticks then: never in the past
        self.expect(due is None or due > self.now, f"next_due {due} is not after {self.now}")
        return actions

    # ------------------------------------------------------------ checks per action

    def _apply(self, event: Event, action: Action) -> None:
        known = self.jobs.get(action.job)
        if isinstance(action, Transition):
            if known is None:
                self.expect(
                    isinstance(event, JobSubmitted) and event.spec.name == action.job,
                    f"transition of unknown job {action.job}",
                )
                assert isinstance(event, JobSubmitted)
                known = self.jobs[action.job] = Known(event.spec)
            self._transition(event, known, action)
            return
        self.expect(known is not None, f"{action!r} for a job never submitted")
        assert known is not None
        if isinstance(action, StartJob):
            self._start(event, known, action)
        elif isinstance(action, StopJob):
            self._stop(event, known, action)
        else:
            raise self.fail(f"unknown action {action!r}")

    def _transition(self, event: Event, known: Known, action: Transition) -> None:
        name, old, new = action.job, action.old, action.new
        edge = f"{name}: {old} -> {new} on {event!r}"
        self.expect(known.state == old, f"{edge}, but the driver had it {known.state}")
        self.expect((old, new) in ALLOWED, f"forbidden transition {edge}")
        own = getattr(event, "job", None) == name
        if old is None:
            self.expect(isinstance(event, JobSubmitted), f"{edge}: not a submission")
        elif new is R:
            # StartJob comes first, in the same answer.
            self.expect(known.placement is not None and known.stop is None, f"{edge}: no StartJob")
            if old is S:
                self.expect(
                    ends_stop(event, name) and known.ended_stop in RESUMING,
                    f"{edge}: only a migration or resize resumes a stopping job",
                )
        elif new is S:
            self.expect(known.stop is not None, f"{edge}: no StopJob")
        elif new is CANCELLED:
            self.expect(known.cancelled, f"{edge}: nobody cancelled it")
            self.expect(
                (isinstance(event, JobCancelled) and old is P)
                or (old is S and ends_stop(event, name))
                # Cancelled while stopped for its time limit: a clean exit on the signal ends
                # that stop too, as it ends a time limit's (timed-out, below).
                or (
                    old is S
                    and isinstance(event, JobFinished)
                    and own
                    and known.ended_stop is StopKind.TIME_LIMIT
                ),
                f"{edge}: cancelled by the wrong event",
            )
        elif new is OK:
            self.expect(isinstance(event, JobFinished) and own and event.succeeded, edge)
        elif new is JobState.TIMED_OUT:
            self.expect(
                # Any end of its processes: a clean exit on the signal is still the limit's.
                isinstance(event, JobStopped | JobFinished)
                and own
                and known.ended_stop is StopKind.TIME_LIMIT,
                f"{edge}: not the end of a stop for its time limit",
            )
        elif new in (FAILED, P):
            failure = (
                old is R and isinstance(event, JobFinished) and own and not event.succeeded
            ) or (old is S and ends_stop(event, name) and known.ended_stop is StopKind.FAILURE)
            requeue = old is S and ends_stop(event, name) and known.ended_stop is not None
            self.expect(failure or (new is P and requeue), f"{edge}: no failure or stop")
            if new is P:
                self.expect(not known.cancelled, f"{edge}: a cancelled job is queued again")
                if failure:
                    known.restarts += 1
                    spec = known.spec
                    self.expect(
                        spec.restart is RestartPolicy.ON_FAILURE
                        and known.restarts <= spec.max_restarts,
                        f"{edge}: restart {known.restarts} with {spec.restart}, "
                        f"max {spec.max_restarts}",
                    )
        if new is P or new.terminal:
            # The scheduler frees GPUs only once the driver has said the processes are gone.
            self.expect(known.placement is None, f"{edge}: its processes still run")
        if known.cancelled and old is S and ends_stop(event, name):
            self.expect(new is CANCELLED, f"{edge}: a cancelled job must end cancelled")
        known.state = new
        if new is P:
            known.waiting_since = self.now

    def _start(self, event: Event, known: Known, action: StartJob) -> None:
        name, spec, placement = action.job, known.spec, action.placement
        where = f"StartJob {name} on {placement.describe()} ({event!r})"
        resume = known.state is S and ends_stop(event, name) and known.ended_stop in RESUMING
        self.expect(known.state is P or resume, f"{where}: the job is {known.state}")
        self.expect(known.placement is None, f"{where}: started twice without a stop")
        self.expect(not known.cancelled, f"{where}: the job was cancelled")
        workers = placement.workers
        self.expect(
            spec.min_workers <= len(workers) <= spec.max_workers
            and all(len(slot.gpus) == spec.gpus_per_worker for slot in workers),
            f"{where}: not a whole gang of {spec.min_workers}..{spec.max_workers} x "
            f"{spec.gpus_per_worker}",
        )
        pairs = list(placement.pairs())
        self.expect(len(set(pairs)) == len(pairs), f"{where}: a GPU twice")
        for node, gpu in pairs:
            self.expect(node in self.present, f"{where}: node {node} is not in the cluster")
            self.expect(0 <= gpu < self.nodes[node].size, f"{where}: no GPU {gpu} on {node}")
            self.expect(gpu not in self.unhealthy.get(node, ()), f"{where}: GPU {gpu} is unhealthy")
        busy: dict[tuple[str, int], list[str]] = {}
        for other, k in self.jobs.items():
            for pair in k.placement.pairs() if k.placement is not None else ():
                busy.setdefault(pair, []).append(other)
        clash = {pair: busy[pair] for pair in pairs if pair in busy}
        if spec.shared:
            for pair, others in clash.items():
                self.expect(
                    self.sharing_fits(pair, [*others, name]),
                    f"{where}: GPU {pair} shared past its room with {others}",
                )
        else:
            self.expect(not clash, f"{where}: GPUs still held by {clash}")
        for slot in workers:
            labels = self.nodes[slot.node].labels
            self.expect(
                spec.selector.matches(labels),
                f"{where}: node {slot.node} ({labels}) is not {spec.selector.describe()}",
            )
        types = {self.nodes[slot.node].hardware.gpu_type for slot in workers}
        self.expect(all(spec.fit.accepts_type(t) for t in types), f"{where}: on GPU types {types}")
        self.expect(len(types) == 1 or spec.mixed_types, f"{where}: on GPU types {types}")
        self._check_resources(name, spec, workers, where)
        tier = tier_of(self.nodes[slot.node] for slot in workers)
        self.expect(placement.tier == tier, f"{where}: says tier {placement.tier}, is {tier}")
        if resume:
            allowed = (spec.locality.accept or spec.locality.prefer).tier
        else:
            allowed = spec.locality.allowed(self.now - known.waiting_since).tier
        self.expect(tier <= allowed, f"{where}: tier {tier.name} wider than {allowed.name}")
        if resume and known.ended_stop is StopKind.MIGRATE and known.ran_on is not None:
            before = known.ran_on.bandwidth_gbps or 0.0
            self.expect(
                (placement.bandwidth_gbps or 0.0) >= before,
                f"{where}: migrated from {known.ran_on.describe()} to a slower ring",
            )
        known.placement = placement
        known.since = self.now
        if not resume:
            known.run_began = self.now
        known.starts += 1

    def _stop(self, event: Event, known: Known, action: StopJob) -> None:
        name, kind, spec = action.job, action.kind, known.spec
        where = f"StopJob({kind}) {name} ({event!r})"
        self.expect(known.state is R, f"{where}: the job is {known.state}")
        self.expect(known.stop is None and known.placement is not None, f"{where}: twice")
        assert known.placement is not None
        self.expect(action.grace_s >= 0, f"{where}: negative grace")
        if kind is StopKind.CANCEL:
            self.expect(isinstance(event, JobCancelled) and event.job == name, where)
        elif kind is StopKind.FAILURE:
            held = set(known.placement.pairs())
            nodes = {node for node, _ in held}
            self.expect(
                (isinstance(event, WorkerFailed) and event.job == name)
                or (
                    isinstance(event, GpuHealth)
                    and not event.healthy
                    and (event.node, event.gpu) in held
                )
                or (isinstance(event, NodeRemoved) and event.node in nodes),
                f"{where}: no failure of this job happened",
            )
        elif kind is StopKind.PREEMPT:
            # Only borrowed work (its queue above its guarantee) or checkpointable work of lower
            # priority than a job waiting in its own queue may be preempted (issue 16: a job
            # that cannot checkpoint loses its work, so only borrowing makes it a victim).
            queue = spec.queue
            used = sum(
                k.placement.gpus
                for k in self.jobs.values()
                if k.spec.queue == queue and k.placement is not None
            )
            outranked = spec.checkpointable and any(
                k.spec.queue == queue and k.spec.priority > spec.priority for k in self.waiting()
            )
            # Least attained service: checkpointable work that has had the demotion threshold
            # of service may go for a waiting job of no lower priority (a promotion forgives
            # service, so the threshold is a lower bound on what the victim has had).
            demote = self.policy.demote_after_gpu_h
            served = (
                demote is not None
                and spec.checkpointable
                and known.service(self.now) >= demote * 3600.0 * (1 - 1e-9)
                and any(k.spec.priority >= spec.priority for k in self.waiting())
            )
            self.expect(
                used > self.queues.get(queue, 0) or outranked or served,
                f"{where}: queue {queue} uses {used} of its {self.queues.get(queue, 0)} "
                "guaranteed GPUs, and it cannot checkpoint or nobody of higher priority waits "
                "in it and it is not demoted",
            )
        elif kind is StopKind.MIGRATE:
            self.expect(spec.checkpointable, f"{where}: migrating a job with no checkpoint")
        elif kind is StopKind.RESIZE:
            self.expect(spec.elastic is not None, f"{where}: resizing a job that is not elastic")
        elif kind is StopKind.TIME_LIMIT:
            limit = spec.limit_s
            self.expect(
                limit is not None and self.now - known.run_began >= limit,
                f"{where}: its run began at {known.run_began}, its limit is {limit}",
            )
        if spec.checkpoint is not None and kind in (StopKind.PREEMPT, *RESUMING):
            self.expect(action.signal == spec.checkpoint.signal, f"{where}: wrong signal")
        known.stop = kind

    # ------------------------------------------------------------ checks after each event

    def sharing_fits(self, pair: tuple[str, int], names: list[str]) -> bool:
        """Jobs may be on one GPU together only if each asks a share of it, their thousandths
        add up to no more than a GPU and their MiB to no more than its memory."""
        specs = [self.jobs[n].spec for n in names]
        if not all(spec.shared for spec in specs):
            return False
        mib = self.nodes[pair[0]].hardware.gpu_memory // 2**20
        return sum(spec.gpu_milli for spec in specs) <= 1000 and (
            sum(spec.gpu_share_mib for spec in specs) <= mib
        )

    def _check_views(self) -> None:
        held: dict[tuple[str, int], list[str]] = {}
        for name, known in self.jobs.items():
            view = self.sched.job(name)
            self.expect(view.state == known.state, f"{name}: scheduler {view.state}, {known}")
            self.expect(view.restarts == known.restarts, f"{name}: restarts {view.restarts}")
            state = known.state
            assert state is not None
            self.expect((state is S) == (known.stop is not None), f"{name}: {state}, {known}")
            if state in (R, S):
                self.expect(known.placement is not None, f"{name}: {state} with no GPUs")
            else:
                self.expect(known.placement is None, f"{name}: {state} but holds GPUs")
                self.expect(view.placement is None, f"{name}: {state}, scheduler gives GPUs")
            if state is R:
                self.expect(
                    view.placement == known.placement,
                    f"{name}: runs on {known.placement}, scheduler says {view.placement}",
                )
            for pair in known.placement.pairs() if known.placement else ():
                on_gpu = [*held.get(pair, []), name]
                self.expect(
                    len(on_gpu) == 1 or self.sharing_fits(pair, on_gpu),
                    f"GPU {pair} held by {on_gpu}",
                )
                held[pair] = on_gpu
        if not held and self.policy.backfill:
            self._check_idle()
        self._check_reasons()

    def _check_reasons(self) -> None:
        """What each waiting job's reason says is true now, so no two reasons contradict: the
        free GPU count, the jobs it waits behind (waiting themselves), the jobs queued ahead
        (waiting), and the jobs holding its reserved GPUs (running or stopping)."""
        free = sum(mask.bit_count() for _, _, mask in self.sched.view.free())
        pending = set(self.named(P))
        holding = set(self.named(R, S))
        for name in sorted(pending):
            reason = self.sched.job(name).reason
            where = f"{name} waits: {reason!r}"
            for count in FREE_NOW.findall(reason):
                self.expect(int(count) == free, f"{where}, but {free} GPUs are free")
            for other in BEHIND.findall(reason):
                if other != "it":
                    self.expect(other in pending - {name}, f"{where}, but {other} does not wait")
            for names in QUEUED.findall(reason):
                ahead = set(names.split(", "))
                self.expect(ahead <= pending - {name}, f"{where}: not all of {ahead} wait")
            for names in HELD.findall(reason):
                jobs = set(names.split(", "))
                self.expect(jobs <= holding, f"{where}: not all of {jobs} hold GPUs")

    def _check_resources(
        self, name: str, spec: JobSpec, workers: tuple[WorkerSlot, ...], where: str
    ) -> None:
        """With `name` started on `workers`, no node holds more CPUs or memory than it has."""
        held: dict[str, list[int]] = {}
        others = [
            (k.spec, k.placement.workers)
            for other, k in self.jobs.items()
            if other != name and k.placement is not None
        ]
        for job_spec, slots in [*others, (spec, workers)]:
            for slot in slots:
                use = held.setdefault(slot.node, [0, 0])
                use[0] += job_spec.cpus
                use[1] += job_spec.memory
        for node, (cpus, memory) in held.items():
            hw = self.nodes[node].hardware
            self.expect(hw.cpus is None or cpus <= hw.cpus, f"{where}: {node} CPUs over-committed")
            self.expect(
                hw.memory is None or memory <= hw.memory, f"{where}: {node} memory over-committed"
            )

    def capacity_now(self) -> Capacity:
        """Present nodes, their healthy GPUs free: the cluster as an idle driver sees it."""
        nodes = [self.nodes[name] for name in sorted(self.present)]
        cap = Capacity(nodes)
        for i, node in enumerate(nodes):
            bad = sum(1 << g for g in self.unhealthy.get(node.name, ()))
            if node.name in self.cordoned:
                bad = cap.free[i]  # a cordoned node takes no new work
            if bad:
                cap.take(i, bad)
        return cap

    def _check_idle(self) -> None:
        """No process runs, so nothing will change on its own: no job may wait that fits now."""
        cap = self.capacity_now()
        for name in self.named(P):
            spec = self.jobs[name].spec
            widest = spec.locality.allowed(self.now - self.jobs[name].waiting_since).tier
            request = gang_request(spec, spec.min_workers, widest)
            found = ONE_TYPE(cap, request, self.cluster.network_gbps)
            self.expect(
                not isinstance(found, Placement),
                f"the cluster is idle but {name} waits, and fits on {found}: "
                f"{self.sched.job(name).reason}",
            )

    # ------------------------------------------------------------ state snapshot

    def snapshot(self) -> object:
        views = {name: self.sched.job(name) for name in self.jobs}
        return (
            {n: (v.state, v.placement, v.restarts) for n, v in views.items()},
            list(self.sched.books.capacity.free),
            list(self.sched.books.capacity.present),
            dict(self.sched.books.owner),
            {q: rec.used for q, rec in self.sched.books.queues.items()},
            repr(self.sched.books.reservation),
        )


# ---------------------------------------------------------------- strategies


class Setup:
    """A cluster, a spare node to add later, queues with guarantees, a policy (short repr)."""

    def __init__(
        self,
        cluster: Cluster,
        spare: Node,
        queues: dict[str, int],
        policy: SchedulerPolicy,
        step: StepTime | None = None,
    ) -> None:
        self.cluster, self.spare, self.queues, self.policy = cluster, spare, queues, policy
        self.step = step  # the step time gangs are placed by, if any

    def __repr__(self) -> str:
        nodes = ", ".join(
            f"{n.name}={n.topology.name}@{n.rack}" for n in (*self.cluster.nodes, self.spare)
        )
        base = SCHEDULER_POLICIES[self.policy.name].base
        changed = {
            k: v for k, v in vars(self.policy).items() if getattr(base, k) != v and k != "name"
        }
        model = "; placed by a V100 step time" if self.step is not None else ""
        return f"Setup({nodes}; queues {self.queues}; policy {self.policy.name} {changed}{model})"


@st.composite
def setups(draw: st.DrawFn, policies: tuple[str, ...] | list[str] = GANG_POLICIES) -> Setup:
    kinds = draw(st.lists(st.sampled_from(PRESETS), min_size=2, max_size=3))
    racks = draw(st.integers(1, 2))
    nodes = tuple(
        Node(
            f"n{i}",
            preset(k),
            rack=f"r{i % racks}",
            labels={"pool": draw(POOLS)},
            hardware=draw(MACHINES),
        )
        for i, k in enumerate(kinds)
    )
    spare = Node(
        "spare",
        preset(draw(st.sampled_from(PRESETS))),
        rack=f"r{racks - 1}",
        labels={"pool": draw(POOLS)},
        hardware=draw(MACHINES),
    )
    total = sum(n.size for n in nodes)
    queues = {f"q{i}": draw(st.integers(0, total // 2)) for i in range(draw(st.integers(1, 2)))}
    policy = SCHEDULER_POLICIES[draw(st.sampled_from(sorted(policies)))].base
    runtime = draw(st.sampled_from([None, None, 50.0]))
    policy = replace(
        policy,
        default_runtime_s=runtime,
        grow_after_s=draw(st.sampled_from([0, 60])),
        # Least attained service, with thresholds the random streams cross (7 and 36 GPU-s).
        demote_after_gpu_h=(
            draw(st.sampled_from([None, 0.002, 0.01])) if policy.order is Order.FAIR else None
        ),
        promote_after_s=draw(st.sampled_from([None, 300.0])),
        # Levels of demoted jobs the streams' services cross (1, 2 and 4 times the threshold).
        demoted_levels=draw(st.sampled_from([1, 3])),
        level_ratio=draw(st.sampled_from([2.0, 4.0])),
        # Gangs held to the fewest nodes that could hold them, one more, or any split.
        extra_nodes=draw(st.sampled_from([None, 0, 1])),
        # Gangs that span nodes placed by the model (where the driver has one), or not.
        spread_by_model=draw(st.sampled_from([None, 0.0, 0.1])),
    )
    step = STEP_TIME if draw(st.booleans()) else None
    return Setup(Cluster(nodes), spare, queues, policy, step)


@st.composite
def job_specs(
    draw: st.DrawFn,
    name: str,
    queues: list[str],
    max_workers: int = 3,
    max_gpus: int = 4,
    elastic: bool = True,
    selector: bool = True,
) -> JobSpec:
    # A quarter of the jobs ask part of one GPU (thousandths and/or MiB of its memory), so
    # node loss, GPU health, cordons, cancels and restores meet shares beside whole GPUs.
    milli, share_mib = draw(
        st.sampled_from([(0, 0)] * 3 + [(250, 0), (500, 0), (999, 0), (0, 4096), (500, 4096)])
    )
    shared = bool(milli or share_mib)
    workers = 1 if shared else draw(st.integers(1, max_workers))
    stretch = None
    if not shared and elastic and draw(st.integers(0, 3)) == 0:
        lo = draw(st.integers(1, workers))
        stretch = Elastic(lo, draw(st.integers(workers, workers + 2)))
    per_worker = [g for g in (1, 1, 2, 2, 3, 4) if g <= max_gpus]
    return JobSpec(
        name,
        workers=workers,
        gpus_per_worker=1 if shared else draw(st.sampled_from(per_worker)),
        gpu_milli=milli,
        gpu_share_mib=share_mib,
        queue=draw(st.sampled_from(queues)),
        priority=draw(st.integers(0, 2)),
        locality=draw(st.sampled_from(LOCALITIES)),
        elastic=stretch,
        checkpoint=draw(st.sampled_from([None, Checkpoint(), Checkpoint("SIGUSR1", 5.0)])),
        restart=draw(st.sampled_from(list(RestartPolicy))),
        max_restarts=draw(st.integers(0, 2)),
        limit_s=draw(st.sampled_from([None, None, 20.0, 500.0])),
        selector=draw(st.sampled_from(SELECTORS)) if selector else NodeSelector(),
        cpus=draw(st.sampled_from([0, 0, 2000, 4000])) if selector else 0,
        memory=draw(st.sampled_from([0, 0, 16 * GIB])) if selector else 0,
        gpu_types=draw(st.sampled_from(GPU_TYPES)) if selector else (),
        mixed_types=draw(st.sampled_from([False, False, True])),
        model=draw(st.sampled_from(MODELS)),
    )


def pick(names: list[str], index: int) -> str:
    return names[index % len(names)]


INDEX = st.integers(0, 1 << 16)
SMALL_DT = st.sampled_from([0.0, 1.0, 7.0])


# ---------------------------------------------------------------- the state machine


class SchedulerMachine(RuleBasedStateMachine):
    """Random submissions, cancellations, completions, failures, stops, node and GPU churn."""

    driver: Driver

    @initialize(setup=setups())
    def setup(self, setup: Setup) -> None:
        self.driver = Driver(setup.cluster, setup.policy, setup.queues, (setup.spare,), setup.step)

    def _queues(self) -> list[str]:
        return sorted(self.driver.queues)

    @rule(data=st.data(), count=st.integers(1, 3), dt=SMALL_DT)
    def submit(self, data: st.DataObject, count: int, dt: float) -> None:
        d = self.driver
        d.advance(dt)
        for _ in range(count):
            d.submit(data.draw(job_specs(d.new_name(), self._queues()), label="spec"))

    @precondition(lambda self: self.driver.named(P, R, S))
    @rule(index=INDEX, dt=SMALL_DT)
    def cancel(self, index: int, dt: float) -> None:
        d = self.driver
        d.send(JobCancelled(d.advance(dt), pick(d.named(P, R, S), index)))

    @precondition(lambda self: self.driver.named(R, S))
    @rule(index=INDEX, ok=st.booleans(), dt=SMALL_DT)
    def finish(self, index: int, ok: bool, dt: float) -> None:
        d = self.driver
        d.send(JobFinished(d.advance(dt), pick(d.named(R, S), index), ok))

    @precondition(lambda self: self.driver.named(R))
    @rule(index=INDEX, worker=st.integers(0, 2), dt=SMALL_DT)
    def worker_fails(self, index: int, worker: int, dt: float) -> None:
        d = self.driver
        d.send(WorkerFailed(d.advance(dt), pick(d.named(R), index), worker, "oom"))

    @precondition(lambda self: self.driver.owed())
    @rule(index=INDEX, dt=SMALL_DT)
    def confirm_stop(self, index: int, dt: float) -> None:
        d = self.driver
        d.send(JobStopped(d.advance(dt), pick(d.owed(), index)))

    @precondition(lambda self: self.driver.owed())
    @rule(dt=SMALL_DT)
    def confirm_all_stops(self, dt: float) -> None:
        d = self.driver
        d.advance(dt)
        for name in d.owed():
            d.send(JobStopped(d.now, name))

    @precondition(lambda self: self.driver.present)
    @rule(index=INDEX, dt=SMALL_DT)
    def remove_node(self, index: int, dt: float) -> None:
        d = self.driver
        d.send(NodeRemoved(d.advance(dt), pick(sorted(d.present), index)))

    @precondition(lambda self: set(self.driver.nodes) - self.driver.present)
    @rule(index=INDEX, dt=SMALL_DT)
    def add_node(self, index: int, dt: float) -> None:
        d = self.driver
        name = pick(sorted(set(d.nodes) - d.present), index)
        d.send(NodeAdded(d.advance(dt), d.nodes[name]))

    @precondition(lambda self: self.driver.present)
    @rule(index=INDEX, gpu=st.integers(0, 7), healthy=st.booleans(), dt=SMALL_DT)
    def gpu_health(self, index: int, gpu: int, healthy: bool, dt: float) -> None:
        d = self.driver
        name = pick(sorted(d.present), index)
        d.send(GpuHealth(d.advance(dt), name, gpu % d.nodes[name].size, healthy))

    @precondition(lambda self: self.driver.present)
    @rule(index=INDEX, on=st.booleans(), dt=SMALL_DT)
    def cordon(self, index: int, on: bool, dt: float) -> None:
        d = self.driver
        d.send(NodeCordoned(d.advance(dt), pick(sorted(d.present), index), on))

    @rule(dt=st.sampled_from([1.0, 61.0, 400.0]))
    def tick(self, dt: float) -> None:
        d = self.driver
        d.send(Tick(d.advance(dt)))

    @rule(data=st.data())
    def bad_event(self, data: st.DataObject) -> None:
        """An event the core must refuse with SchedulingError, changing nothing."""
        d = self.driver
        t = d.now
        choices: list[Event] = [
            JobCancelled(t, "no-such-job"),
            NodeRemoved(t, "no-such-node"),
            JobStopped(t, "no-such-job"),
        ]
        choices += [JobCancelled(t, n) for n in d.named(OK, FAILED, CANCELLED, REJECTED)]
        choices += [JobFinished(t, n, True) for n in d.named(P)]
        choices += [JobStopped(t, n) for n in d.named(P, R)]
        choices += [JobSubmitted(t, d.jobs[n].spec) for n in list(d.jobs)[:3]]
        choices += [NodeAdded(t, d.nodes[n]) for n in sorted(d.present)]
        choices += [GpuHealth(t, n, d.nodes[n].size, False) for n in sorted(d.present)]
        event = data.draw(st.sampled_from(choices), label="bad event")
        before = d.snapshot()
        d.log.append(f"{event!r} (must be refused)")
        with pytest.raises(SchedulingError):
            d.sched.handle(event)
        d.expect(d.snapshot() == before, f"{event!r} was refused but changed the state")

    @invariant()
    def books_agree(self) -> None:
        if hasattr(self, "driver"):
            self.driver.sched.check()


SchedulerMachine.TestCase.settings = settings(
    max_examples=120 * SCALE,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestSchedulerMachine = SchedulerMachine.TestCase


# ---------------------------------------------------------------- liveness


LIVE = settings(
    max_examples=100 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def drain(d: Driver, data: st.DataObject, steps: int) -> None:
    """Answer every StopJob, finish running jobs one at a time, in an order hypothesis picks,
    and let time pass when nothing runs; stop when nothing is left."""
    for _ in range(steps):
        owed = d.owed()
        running = d.named(R)
        if owed:
            d.send(JobStopped(d.advance(1.0), pick(owed, data.draw(INDEX, label="stop"))))
        elif running:
            job = pick(running, data.draw(INDEX, label="finish"))
            d.send(JobFinished(d.advance(data.draw(SMALL_DT, label="dt")), job, True))
        elif d.named(P):
            d.send(Tick(d.advance(400.0)))
        else:
            return


@LIVE
@given(setups(), st.data())
def test_drain_ends_every_job(setup: Setup, data: st.DataObject) -> None:
    """After a random prefix, with no more submissions and no failures, every job that was
    accepted ends succeeded within a bounded number of steps: no deadlock, no starvation."""
    d = Driver(setup.cluster, setup.policy, setup.queues, step=setup.step)
    queues = sorted(setup.queues)
    for _ in range(data.draw(st.integers(1, 12), label="prefix")):
        move = data.draw(st.sampled_from(["submit", "submit", "finish", "stop", "tick"]))
        if move == "submit":
            d.submit(data.draw(job_specs(d.new_name(), queues), label="spec"))
        elif move == "finish" and d.named(R):
            d.send(JobFinished(d.advance(1.0), pick(d.named(R), data.draw(INDEX)), True))
        elif move == "stop" and d.owed():
            d.send(JobStopped(d.advance(1.0), pick(d.owed(), data.draw(INDEX))))
        else:
            d.send(Tick(d.advance(data.draw(SMALL_DT))))
    # Each job runs once per preemption, resize or migration; bound those generously.
    drain(d, data, steps=40 * (len(d.jobs) + 2))
    # A job whose selector leaves it too few GPUs even on the empty cluster waits, saying so
    # (never dropped); without backfill it holds up every job behind it (strict order).
    stuck = {n for n, k in d.jobs.items() if k.state is P and not fits_when_empty(d, k.spec)}
    # The cycle tries every stuck job under backfill; without, it stops at the first.
    head = next((rec.name for rec in d.sched.pending()), None)
    for name in stuck:
        reason = d.sched.job(name).reason
        if setup.policy.backfill or name == head:
            said = ("labelled", "labels", "may use", "CPUs", "memory", "one GPU type")
            d.expect(any(word in reason for word in said), f"{name} waits: {reason}")
    if stuck and not setup.policy.backfill:
        return
    left = {
        n: (k.state, d.sched.job(n).reason)
        for n, k in d.jobs.items()
        if not k.state.terminal and n not in stuck
    }
    d.expect(not left, f"jobs never ended: {left}")
    # A job with a time limit that the drain's clock ran past ends timed-out: that it reached
    # its limit before it ended is checked at the transition itself.
    wrong = {
        n: k.state
        for n, k in d.jobs.items()
        if k.state not in (OK, REJECTED, P)
        and not (k.state is JobState.TIMED_OUT and k.spec.limit_s is not None)
    }
    d.expect(not wrong, f"jobs ended other than succeeded: {wrong}")


def fits_when_empty(d: Driver, spec: JobSpec) -> bool:
    """Whether the job fits the present nodes its selector matches, with every GPU free."""
    cap = Capacity([d.nodes[name] for name in sorted(d.present)])
    widest = (spec.locality.accept or spec.locality.prefer).tier
    request = gang_request(spec, spec.min_workers, widest)
    return isinstance(ONE_TYPE(cap, request, d.cluster.network_gbps), Placement)


@LIVE
@given(
    setups(policies=[p for p in GANG_POLICIES if SCHEDULER_POLICIES[p].base.preemption]), st.data()
)
def test_guaranteed_job_runs_while_another_queue_borrows(setup: Setup, data: st.DataObject) -> None:
    """Queue `own` is guaranteed G GPUs; queue `lender` has no guarantee and keeps submitting
    work that borrows every idle GPU, finishing none of it. A job of `own` that asks for at
    most G GPUs and fits the cluster (on one GPU type unless it accepts mixed ones) must
    start: borrowed GPUs are reclaimed for it."""
    total = setup.cluster.gpus
    guaranteed = data.draw(st.integers(1, total), label="guarantee")
    d = Driver(setup.cluster, setup.policy, {"own": guaranteed, "lender": 0}, step=setup.step)

    def borrow() -> None:
        spec = data.draw(job_specs(d.new_name(), ["lender"], max_workers=2), label="borrow")
        d.submit(spec)
        for name in d.owed():
            d.send(JobStopped(d.advance(1.0), name))

    for _ in range(data.draw(st.integers(1, 8), label="before")):
        borrow()
    spec = data.draw(job_specs("owner", ["own"], elastic=False, selector=False), label="owner")
    if spec.gpus > guaranteed:
        spec = replace(spec, workers=1, gpus_per_worker=min(spec.gpus_per_worker, guaranteed))
    d.submit(spec)
    # A gang of one GPU type that only both types together hold waits for ever, saying so:
    # the property is for jobs that fit the cluster.
    if d.jobs["owner"].state is REJECTED or not fits_when_empty(d, spec):
        return
    for _ in range(30):
        if d.jobs["owner"].starts:  # it ran (it may have reached its time limit since)
            return
        borrow()
        d.send(Tick(d.advance(100.0)))
    raise d.fail(f"owner never ran: {d.sched.job('owner').reason}")


@LIVE
@given(setups(), st.data())
def test_elastic_jobs_settle(setup: Setup, data: st.DataObject) -> None:
    """With nobody waiting, elastic jobs grow into idle GPUs and then stop moving: growing is
    bounded (no job is resized forever)."""
    d = Driver(setup.cluster, setup.policy, setup.queues, step=setup.step)
    queues = sorted(setup.queues)
    for _ in range(data.draw(st.integers(1, 6), label="jobs")):
        d.submit(data.draw(job_specs(d.new_name(), queues), label="spec"))
    for _ in range(60):
        owed = d.owed()
        if not owed:
            d.send(Tick(d.advance(100.0)))
            if not d.owed():
                break
            continue
        d.send(JobStopped(d.advance(1.0), owed[0]))
    else:
        raise d.fail("jobs were still being stopped and restarted after 60 rounds")
    for name in d.named(R):
        known = d.jobs[name]
        assert known.placement is not None
        assert len(known.placement.workers) <= known.spec.max_workers
    assert math.isfinite(d.now)
