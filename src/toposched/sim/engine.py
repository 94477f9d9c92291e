"""The discrete-event simulator: a virtual clock drives the scheduler core with a trace.

The core sees exactly the events a server would send it (JobSubmitted, JobFinished,
JobStopped, Tick) and the simulator carries out its actions as a cluster would: a started job
progresses at the speed the performance model gives its placement, its GPU type and its
neighbours (its trace duration is its run time at an ideal placement on the fastest GPU type it
accepts), a stopped job pays its checkpoint grace (or,
without a checkpoint, starts over), and a job's speed is recomputed whenever its placement or
the jobs beside it change.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from toposched.common.driver import Driver
from toposched.core import (
    Event,
    JobFinished,
    JobState,
    JobStopped,
    JobSubmitted,
    Placement,
    Scheduler,
    StartJob,
    StopJob,
    StopKind,
    Tick,
    Transition,
    make_scheduler_policy,
)
from toposched.core.stopcost import checkpointed_s, lost_s
from toposched.perf import DEFAULT_BATCH, ModelSpec, PerfModel
from toposched.perf.interference import factor_from_counts, level_masks, neighbour_counts
from toposched.perf.steptime import fastest, mixed_step_time, step_time
from toposched.perf.typespeeds import TypeSpeeds
from toposched.placement.by_model import StepTime
from toposched.placement.capacity import full_mask
from toposched.placement.tables import from_mask, to_mask
from toposched.sim.traces import Trace, TraceJob
from toposched.sim.workload import Workload
from toposched.topology.cluster import Cluster, Node, Tier
from toposched.topology.node import NodeTopology
from toposched.topology.resources import type_key

# Events due at one instant are handled in this order: GPUs free up before new work arrives.
_STOPPED, _FINISH, _SUBMIT, _TICK = range(4)
SPEED_MEMO = 200_000


@dataclass
class SimJob:
    """One trace job as the simulated cluster sees it."""

    trace: TraceJob
    remaining: float  # seconds of work at the ideal speed
    rate: float = 0.0  # fraction of the ideal speed now (0 while not running)
    since: float = 0.0  # when `remaining` was last brought up to date
    token: int = 0  # bumped whenever a scheduled finish becomes stale
    placement: Placement | None = None
    nodes: tuple[str, ...] = ()  # the placement's nodes
    first_start: float | None = None
    finish: float | None = None
    state: JobState | None = None
    run_s: float = 0.0
    speed_s: float = 0.0  # integral of rate over running time
    gpu_s: float = 0.0  # integral of the GPUs held over running time (a resize changes them)
    gpu_speed_s: float = 0.0  # the same, weighted by rate
    alone: float = 0.0  # speed on its placement were it alone on its nodes
    alone_s: float = 0.0  # integral of that over running time
    preemptions: int = 0
    migrations: int = 0
    stops: int = 0  # stops it resumed after (preemptions, migrations, resizes)
    lost_gpu_s: float = 0.0  # GPU-seconds of work lost to stops, restores included
    restore_left: float = 0.0  # seconds of restore still in `remaining`
    partial_gpu_s: float = 0.0
    placements: list[tuple[str, ...]] = field(default_factory=list)  # each start's nodes
    # The busy GPUs of its nodes when `rate` was last worked out (None: not since it last
    # paused): the rate depends on nothing else while its placement holds.
    rated_busy: tuple[int, ...] | None = None


@dataclass
class Sample:
    time: float
    allocated: int
    queued: int
    fragmentation: float


@dataclass
class SimResult:
    """What one policy did with one trace on one cluster."""

    policy: str
    trace: Trace
    cluster: Cluster
    jobs: list[SimJob]
    samples: list[Sample]
    end: float
    wall_s: float
    deadlocked: bool
    guarantees: dict[str, int] = field(default_factory=dict)


Progress = Callable[[int, int], None]


class Simulation(Driver):
    """Replays `trace` on `cluster` under the named scheduler policy."""

    def __init__(
        self,
        trace: Trace,
        cluster: Cluster,
        policy: str,
        *,
        perf: PerfModel | None = None,
        workload: Workload | None = None,
        seed: int = 0,
        network: str | None = None,
        framework: str = "pytorch-horovod",
        gpu_type: str | None = None,
        policy_params: Mapping[str, object] | None = None,
        guarantees: Mapping[str, int] | None = None,
    ) -> None:
        """`network`: a profile of the performance model's catalog; by default the cluster's
        own tier bandwidths, with the `default` profile's efficiency and latency.
        `guarantees`: GPUs guaranteed to each named queue (others get none). `gpu_type`: a
        catalog GPU type every node is taken to have (default: each node's own, TypeSpeeds)."""
        self.trace, self.cluster, self.policy = trace, cluster, policy
        self.guarantees = dict(guarantees or {})
        self.perf = perf or PerfModel()
        if network is None:
            network = f"cluster {cluster.name}".strip()
            own = replace(
                self.perf.catalog.network("default"),
                name=network,
                bandwidth_gbps={t: v for t, v in cluster.network_gbps.items() if t != Tier.NODE},
                source="the cluster description's network_gbps",
            )
            self.perf = PerfModel(self.perf.catalog.with_network(own))
        self.workload = workload or Workload()
        self.network, self.framework = network, framework
        kinds: dict[NodeTopology, int] = {}
        self.topology_id = {n.name: kinds.setdefault(n.topology, len(kinds)) for n in cluster.nodes}
        self._kinds = list(kinds)
        self._levels = [level_masks(topology) for topology in kinds]
        self._framework = self.perf.catalog.framework(framework)
        self._models: dict[str, ModelSpec] = {}
        self._speeds: dict[tuple[object, ...], float] = {}
        # Interference factor by (node kind, our GPUs, the others' GPUs, model).
        self._factors: dict[tuple[int, int, int, str], float] = {}
        self.type_speed = TypeSpeeds(self.perf)
        # Each node's GPU type as the catalog names it (`gpu_type`: every node that one).
        self.node_type = {n.name: gpu_type or self.type_speed.of_node(n) for n in cluster.nodes}
        self.gpu_type = self.node_type[cluster.nodes[0].name]
        # A cluster of one type (the common case) needs no look-up per placement.
        self._one_type = len(set(self.node_type.values())) == 1
        self.node_gpus = max(node.size for node in cluster.nodes)
        # A step time sees topologies, not nodes: each counts at the slowest type it has.
        type_of: dict[NodeTopology, str] = {}
        for n in cluster.nodes:
            known = type_of.get(n.topology)
            pair = [self.node_type[n.name]] + ([] if known is None else [known])
            type_of[n.topology] = self.type_speed.slowest(None, pair)
        self._step_time = mixed_step_time(
            self.perf, self.type_speed, type_of, framework=framework, network=network
        )
        self._type_steps: dict[str, StepTime] = {}
        self._reference: dict[tuple[object, ...], float] = {}
        # The core estimates what a stop costs with the workload's own restart time, unless
        # told otherwise (each job says its checkpoint interval: Workload.spec).
        params = {"restore_s": self.workload.restore_s, **(policy_params or {})}
        scheduler = Scheduler(
            cluster,
            make_scheduler_policy(policy, params),
            self.guarantees,
            rng=random.Random(seed),
            step_time=self._step_time,
            type_speed=self.type_speed,
        )
        super().__init__(scheduler)
        self.jobs = {j.name: SimJob(j, j.duration_s) for j in trace.jobs}
        # Per node: each job's GPUs there (as a mask), and all busy GPUs (a mask).
        self.on_node: dict[str, dict[str, int]] = {n.name: {} for n in cluster.nodes}
        self.busy: dict[str, int] = {n.name: 0 for n in cluster.nodes}
        self._dirty: set[str] = set()  # nodes whose jobs changed at this instant
        self.now = 0.0
        self._heap: list[tuple[float, int, int, str, int]] = []
        self._seq = 0
        self._ticks: set[float] = set()  # times a Tick is queued for (Scheduler.next_due)
        self.samples: list[Sample] = []
        self.allocated = 0
        self.queued = 0
        self.partial: dict[str, int] = {}
        self._ended = 0  # jobs that reached a final state in the events being fed
        # About 2,000 samples over the trace's span, for the plots.
        span = trace.jobs[-1].submit_s if trace.jobs else 0.0
        self.sample_every_s = max(1.0, span / 2000)
        self._next_sample = 0.0

    # ------------------------------------------------------------------ the loop

    def run(self, progress: Progress | None = None, *, until: float | None = None) -> SimResult:
        """Replay the trace to its end, or (`until`) to the last instant not after that time:
        jobs still running or waiting then are left so (a run cut short: its JCT figures
        count only the jobs done by then)."""
        started = time.perf_counter()
        # Submissions join the heap as the clock reaches them: a heap of what is under way,
        # not of the whole trace, is cheaper to keep.
        jobs = self.trace.jobs
        done, total, arrived = 0, len(jobs), 0
        while self._heap or arrived < total:
            t = self._heap[0][0] if self._heap else math.inf
            if arrived < total and jobs[arrived].submit_s <= t:
                t = jobs[arrived].submit_s
            if until is not None and t > until:
                break
            while arrived < total and jobs[arrived].submit_s == t:
                self._push(t, _SUBMIT, jobs[arrived].name)
                arrived += 1
            self._advance(t)
            events: list[Event] = []
            while self._heap and self._heap[0][0] == t:
                _, kind, _, name, token = heapq.heappop(self._heap)
                event = self._event(kind, name, token)
                if event is not None:
                    events.append(event)
            self._ended = 0
            self.feed(*events)
            done += self._ended
            # No time passes within one instant, so the nodes whose jobs changed get new
            # speeds once, after all its events (a finish and the start it makes room for).
            self._respeed(self._dirty)
            self._dirty.clear()
            self._wake_when_due()
            if not self.view.policy.gang:
                self.partial = self.view.partial_holds()
            self._sample()
            if progress is not None:
                progress(done, total)
        deadlocked = any(j.state is JobState.PENDING for j in self.jobs.values()) and bool(
            self.partial
        )
        return SimResult(
            self.policy,
            self.trace,
            self.cluster,
            list(self.jobs.values()),
            self.samples,
            self.now,
            time.perf_counter() - started,
            deadlocked,
            self.guarantees,
        )

    def _wake_when_due(self) -> None:
        """Tick when the core says a cycle may decide something new with nothing else
        happening before (a gang's locality widens, a job becomes patient or is promoted):
        the simulator has no clock of its own to tick by, and without it a job waits for
        the next event, or for ever if there is none."""
        due = self.core.next_due()
        if due is not None and due not in self._ticks:
            self._ticks.add(due)
            self._push(due, _TICK, "")

    def _push(self, at: float, kind: int, name: str, token: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, kind, self._seq, name, token))

    def _event(self, kind: int, name: str, token: int) -> Event | None:
        if kind == _TICK:
            self._ticks.discard(self.now)
            return Tick(self.now)
        job = self.jobs[name]
        if kind == _SUBMIT:
            spec = self.workload.spec(job.trace, self.node_gpus)
            relax = spec.locality.relax_after_s
            if relax is not None and spec.min_workers > 1:  # one worker is one node anyway
                # When its locality widens, whether it still waits or not (next_due says so
                # only while it waits; the replays pinned so far had this tick).
                self._ticks.add(self.now + relax)
                self._push(self.now + relax, _TICK, "")
            return JobSubmitted(self.now, spec)
        if kind == _FINISH:
            if token != job.token:
                return None  # its speed changed since this finish was planned
            self._settle(job)
            return JobFinished(self.now, name, True)
        if kind == _STOPPED:
            if job.state is not JobState.STOPPING:
                # It finished within the same instant it was told to stop (the core took the
                # finish): its processes are gone already, and the report would be stale.
                return None
            return JobStopped(self.now, name)
        raise AssertionError(f"unknown event kind {kind}")

    def _advance(self, t: float) -> None:
        """Move the clock to `t`, charging partial holds for the time that passed."""
        dt = t - self.now
        if dt > 0:
            for name, gpus in self.partial.items():
                self.jobs[name].partial_gpu_s += gpus * dt
        self.now = t

    # ------------------------------------------------------------------ actions

    def on_transition(
        self, t: Transition, start: StartJob | None, stop: StopJob | None, now: float
    ) -> None:
        """Do what the scheduler asked; counts the jobs that reached a final state."""
        job = self.jobs[t.job]
        if start is not None:
            self._start(job, start.placement)
        if stop is not None:
            self._stop(job, stop)
        self.queued += (t.new is JobState.PENDING) - (t.old is JobState.PENDING)
        job.state = t.new
        if t.new is JobState.PENDING and t.old is JobState.STOPPING:
            self._vacate(job)
        if t.new.terminal:
            if job.placement is not None:
                self._vacate(job)
            if t.new is JobState.SUCCEEDED:
                job.finish = self.now
            self._ended += 1

    def _start(self, job: SimJob, placement: Placement) -> None:
        if job.placement is not None:
            self._vacate(job)  # a migration or resize resumes elsewhere
        job.placement = placement
        by_node = placement.gpus_by_node()
        job.nodes = tuple(by_node)
        job.placements.append(job.nodes)
        if job.first_start is None:
            job.first_start = self.now
        job.since = self.now
        for node, gpus in by_node.items():
            mask = to_mask(gpus)
            self.on_node[node][job.trace.name] = mask
            self.busy[node] |= mask
        self.allocated += placement.gpus
        job.alone = self._speed(job, alone=True)
        self._dirty.update(job.nodes)

    def _stop(self, job: SimJob, action: StopJob) -> None:
        """The job stops making progress now; its processes exit after the grace period."""
        self._pause(job)
        if action.kind is StopKind.PREEMPT:
            job.preemptions += 1
        elif action.kind is StopKind.MIGRATE:
            job.migrations += 1
        resumes = action.kind in (StopKind.PREEMPT, StopKind.MIGRATE, StopKind.RESIZE)
        if resumes:
            self._lose(job)
        self._push(self.now + action.grace_s, _STOPPED, job.trace.name)

    def _lose(self, job: SimJob) -> None:
        """A stop it resumes after: the work since its last checkpoint is done again (all of
        it without checkpoints), and its restart costs the workload's restore time."""
        workload = self.workload
        interval = (
            workload.checkpoint_interval_s if workload.checkpoint_grace_s is not None else None
        )
        done = job.trace.duration_s - (job.remaining - job.restore_left)
        lost = lost_s(done, interval)
        gpus = job.placement.gpus if job.placement is not None else job.trace.gpus
        job.stops += 1
        job.lost_gpu_s += (lost + workload.restore_s) * gpus
        job.remaining = job.trace.duration_s - checkpointed_s(done, interval) + workload.restore_s
        job.restore_left = workload.restore_s

    def _vacate(self, job: SimJob) -> None:
        placement = job.placement
        if placement is None:
            return
        self._pause(job)
        job.placement = None
        nodes = set(job.nodes)
        job.nodes = ()
        for node in nodes:
            self.busy[node] &= ~self.on_node[node].pop(job.trace.name, 0)
        self.allocated -= placement.gpus
        self._dirty |= nodes

    # ------------------------------------------------------------------ speed

    def _settle(self, job: SimJob) -> None:
        """Bring the job's remaining work and its speed integrals up to now."""
        dt = self.now - job.since
        if dt > 0 and job.rate > 0:
            gpus = job.placement.gpus if job.placement is not None else 0
            job.remaining = max(0.0, job.remaining - dt * job.rate)
            job.restore_left = max(0.0, job.restore_left - dt * job.rate)  # restored first
            job.run_s += dt
            job.speed_s += dt * job.rate
            job.gpu_s += dt * gpus
            job.gpu_speed_s += dt * job.rate * gpus
            job.alone_s += dt * job.alone
        job.since = self.now

    def _pause(self, job: SimJob) -> None:
        """No more progress from now; a finish planned for the job is void."""
        self._settle(job)
        job.rate = 0.0
        job.rated_busy = None
        job.token += 1

    def _respeed(self, nodes: set[str]) -> None:
        """Jobs on `nodes` (they or their neighbours changed): new speed, new finish time."""
        names = {name for node in nodes for name in self.on_node[node]}
        busy = self.busy
        for name in sorted(names):
            job = self.jobs[name]
            if job.state is JobState.STOPPING or job.placement is None:
                continue
            seen = tuple([busy[node] for node in job.nodes])
            if seen == job.rated_busy:
                continue  # a neighbour left and another came on the very same GPUs
            rate = self._speed(job)
            if rate == job.rate:
                job.rated_busy = seen
                continue
            self._pause(job)
            job.rate = rate
            job.rated_busy = seen
            self._push(self.now + job.remaining / rate, _FINISH, name, job.token)

    def _speed(self, job: SimJob, alone: bool = False) -> float:
        """The job's speed on its placement, with its neighbours (or `alone`), on its nodes'
        GPU type (the slowest, if they differ)."""
        placement = job.placement
        assert placement is not None
        name, model = job.trace.name, job.trace.model
        spec = self._models.get(model)
        if spec is None:
            spec = self._models[model] = self.perf.catalog.model(model)
        owns = []
        slowdown = 1.0
        for node in job.nodes:
            own = self.on_node[node][name]
            kind = self.topology_id[node]
            owns.append((kind, own))
            others = 0 if alone else self.busy[node] & ~own
            if others:
                factor = self._factors.get((kind, own, others, model))
                if factor is None:
                    counts = neighbour_counts(self._levels[kind], own, others)
                    factor = factor_from_counts(counts, self._framework, spec)
                    if len(self._factors) >= SPEED_MEMO:
                        self._factors.clear()
                    self._factors[(kind, own, others, model)] = factor
                slowdown = max(slowdown, factor)
        gpu_type = self._placement_type(model, job.nodes)
        # Neighbours matter only through the interference factor they make, so the speed is
        # kept per factor, not per set of busy GPUs: far fewer keys.
        key = (model, placement.tier, tuple(owns), slowdown, gpu_type, job.trace.gpu_types)
        found = self._speeds.get(key)
        if found is not None:
            return found
        shares = [(self._kinds[kind], from_mask(own)) for kind, own in owns]
        actual = self.perf.estimate(
            model,
            gpu_type,
            shares,
            framework=self.framework,
            network=self.network,
            tier=placement.tier,
            interference=slowdown,
        )
        gpus = sum(len(gpus) for _, gpus in shares)
        best = self._best(model, gpus, shares[0][0], gpu_type, job.trace.gpu_types)
        # The trace's duration is the run time at an ideal placement: nothing runs faster.
        speed = min(1.0, actual.throughput / best)
        if len(self._speeds) >= SPEED_MEMO:
            self._speeds.clear()  # bounded, though the keys are few
        self._speeds[key] = speed
        return speed

    def _placement_type(self, model: str, nodes: tuple[str, ...]) -> str:
        if self._one_type:
            return self.gpu_type
        first = self.node_type[nodes[0]]
        if all(self.node_type[n] == first for n in nodes):
            return first
        return self.type_speed.slowest(model, (self.node_type[n] for n in nodes))

    def _best(
        self,
        model: str,
        gpus: int,
        topology: NodeTopology,
        gpu_type: str,
        accepted: tuple[str, ...],
    ) -> float:
        """Throughput at the ideal placement: on the fastest GPU type the job accepts, the
        fewest whole nodes (`PerfModel.ideal`; of the placement's own topology for its own
        type, of the largest node for others), or where the model predicts spreading over
        more nodes of this cluster faster, that."""
        key = (model, gpus, topology, gpu_type, accepted)
        found = self._reference.get(key)
        if found is None:
            found = 0.0
            for other, nodes in self._nodes_by_type(accepted).items():
                shape = topology if other == gpu_type else max(nodes, key=lambda n: n.size).topology
                found = max(found, self._best_on(model, gpus, other, shape, nodes))
            self._reference[key] = found
        return found

    def _nodes_by_type(self, accepted: tuple[str, ...]) -> dict[str, list[Node]]:
        """The nodes a job that accepts `accepted` (node GPU types; empty: any) may use, by
        their catalog type; every node if none are left."""
        wanted = {type_key(t) for t in accepted}
        nodes = [
            n for n in self.cluster.nodes if not wanted or type_key(n.hardware.gpu_type) in wanted
        ]
        by_type: dict[str, list[Node]] = {}
        for n in nodes or self.cluster.nodes:
            by_type.setdefault(self.node_type[n.name], []).append(n)
        return by_type

    def _best_on(
        self, model: str, gpus: int, gpu_type: str, topology: NodeTopology, nodes: list[Node]
    ) -> float:
        ideal = self.perf.ideal(
            model,
            gpu_type,
            gpus,
            topology,
            framework=self.framework,
            network=self.network,
        ).throughput
        predict = self._type_steps.get(gpu_type)
        if predict is None:
            predict = self._type_steps[gpu_type] = step_time(
                self.perf, gpu_type, framework=self.framework, network=self.network
            )
        step = fastest(predict, model, nodes, gpus)
        spread = 0.0 if step is None else gpus * DEFAULT_BATCH / step
        return max(ideal, spread)

    # ------------------------------------------------------------------ samples

    def _sample(self) -> None:
        if self.now < self._next_sample:
            return
        self._next_sample = self.now + self.sample_every_s
        # Fragmentation: the share of free GPUs on nodes that are partly busy.
        stranded = total = 0
        for _, size, free in self.view.free():
            total += free.bit_count()
            if free and free != full_mask(size):
                stranded += free.bit_count()
        self.samples.append(
            Sample(
                self.now,
                self.allocated,
                self.queued,
                stranded / total if total else 0.0,
            )
        )
