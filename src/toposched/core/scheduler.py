"""The scheduler state machine: `handle(event) -> [Action]`, pure and deterministic.

Each event first updates the books (a job arrives, GPUs come back, a node is lost), then a
scheduling cycle runs in named phases:

1. mode      - adaptive spread/pack for 1-GPU jobs from the allocated fraction, with hysteresis;
2. heads     - pending jobs in order: jobs within their queue's guarantee first, then priority,
               then jobs not demoted for their attained service, then the queue furthest
               below its share, then submission order;
3. admit     - each in turn is placed whole (gang) or not at all; nothing is held while waiting;
4. make room - for the first blocked job: shrink elastic jobs, only as far as needed; else
               migrate the fewest checkpointable jobs to open a node for it; else preempt
               borrowed, lower-priority or demoted work, choosing victims whose GPUs form the
               best placement for it, checkpointable work first;
5. reserve   - otherwise it gets a reservation on the GPUs that free up first; later jobs may
               backfill only off those GPUs, or if they are expected to end before them;
6. grow      - with nobody waiting, elastic jobs grow into idle GPUs.

A submission that changes nothing for the jobs already waiting (it ranks behind the reserved
job) only tries the new job: the others were already tried against at least as many free GPUs.
Waiting jobs are filed by (queue, shape) (core/pending.py), so a cycle judges a whole list of
alike jobs by its first one.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from toposched.core.actions import Action, StartJob, StopJob, StopKind, Transition
from toposched.core.demotion import Demotions
from toposched.core.events import (
    Event,
    GpuHealth,
    JobCancelled,
    JobFinished,
    JobRestored,
    JobStopped,
    JobSubmitted,
    NodeAdded,
    NodeLabelled,
    NodeRemoved,
    QueueConfigured,
    Tick,
    WorkerFailed,
)
from toposched.core.job import JobSpec, JobState, RestartPolicy
from toposched.core.moves import placement_of, plan_defrag, plan_growth
from toposched.core.pending import Key, PendingJobs, Shape, shape_now
from toposched.core.policy import Order, Placing, SchedulerPolicy, SingleGpu
from toposched.core.reclaim import ShapeChoice, plan_reclaim
from toposched.core.records import JobRecord, QueueRecord
from toposched.core.reservation import Frees, Reservation, reserve
from toposched.core.validate import check as check_books
from toposched.placement.capacity import Capacity
from toposched.placement.gang import (
    GangRequest,
    Placement,
    Shortfall,
    WorkerSlot,
    node_domain,
    place_gang,
)
from toposched.placement.request import Mode
from toposched.placement.tables import from_mask, to_mask
from toposched.topology.cluster import (
    Cluster,
    Node,
    Tier,
    check_labels,
    topology_aware,
)


class SchedulingError(ValueError):
    """An event the core cannot take (unknown job, duplicate name); nothing was changed."""


@dataclass(frozen=True)
class JobView:
    """What `job(name)` tells a driver."""

    name: str
    state: JobState
    placement: Placement | None
    reason: str
    restarts: int
    history: tuple[tuple[float, str], ...]


class Scheduler:
    """One cluster's scheduling state. Drivers feed events and carry out the returned actions."""

    def __init__(
        self,
        cluster: Cluster,
        policy: SchedulerPolicy | None = None,
        queues: dict[str, int] | None = None,
        *,
        validate: bool = False,
        rng: random.Random | None = None,
    ) -> None:
        """`rng` feeds the policies that pick at random (a seeded one keeps runs repeatable)."""
        self.cluster = cluster
        self.rng = rng or random.Random(0)
        self.policy = policy or SchedulerPolicy()
        self.validate = validate
        self.capacity = Capacity(cluster.nodes)
        self.labels: dict[str, dict[str, str]] = {n.name: dict(n.labels) for n in cluster.nodes}
        self.unhealthy: dict[int, int] = {}
        self.owner: dict[tuple[int, int], str] = {}
        # The same books by node, and the jobs holding any GPU: what reclaim and reservations
        # walk, instead of every GPU.
        self.node_jobs: dict[int, dict[str, int]] = {}
        self.job_nodes: dict[str, dict[int, int]] = {}  # the same by job: reclaim walks victims
        self.holders: dict[str, JobRecord] = {}
        # Bumped whenever GPUs are freed, the cluster or a guarantee changes, or a job starts
        # that another could preempt: a reclaim that found no victims is not tried again for
        # the same request until then, or until a running job is demoted.
        self._epoch = 0
        self._no_victims: tuple[tuple[object, ...], float] | None = None  # (asked, until)
        self._highest_priority: dict[str, int] = {}
        demote = self.policy.demote_after_gpu_h
        self.demotions = Demotions(None if demote is None else demote * 3600.0, self.job_nodes)
        self.jobs: dict[str, JobRecord] = {}
        self.queues: dict[str, QueueRecord] = {}
        self.reservation: Reservation | None = None
        for name, guaranteed in (queues or {}).items():
            self._configure_queue(name, guaranteed)
        self._pending = PendingJobs()
        self._finished: deque[str] = deque()
        self.mode = Mode.PACK if self.policy.single_gpu is SingleGpu.PACK else Mode.SPREAD
        self.now = 0.0
        self._seq = 0
        self.notes: deque[tuple[float, str]] = deque(maxlen=100)
        self._room: dict[tuple[int, Tier], tuple[int, int]] = {}
        # Elastic jobs not yet ended, by name: the only ones growth looks at.
        self._elastic: dict[str, JobRecord] = {}
        # What the last cycle that gave up on a shape said, for the jobs it did not reach.
        self._shape_notes: dict[Shape, tuple[int, str]] = {}
        self._cycles = 0
        self._ranks: dict[str, tuple[int, tuple[float, ...]]] = {}
        self._held_waiting: dict[str, int] = {}  # GPUs of partial gangs, by waiting job
        self.lowest_priority: dict[str, int] = {}
        # Bumped whenever a node's jobs, their GPUs there or their states change: what
        # reservations keep per node (core/reservation.py) is good while its stamp is.
        self.node_stamp: dict[int, int] = {}
        self.frees_memo: dict[tuple[int, int], tuple[int, int, int, Frees | None]] = {}
        # Reclaim's answer per node shape (core/reclaim.py), bounded there.
        self.reclaim_memo: dict[tuple[object, ...], ShapeChoice | None] = {}

    # ------------------------------------------------------------------ the entry point

    def handle(self, *events: Event) -> list[Action]:
        out: list[Action] = []
        for event in events:
            out.extend(self._handle_one(event))
        return out

    def _handle_one(self, event: Event) -> list[Action]:
        before = self.now
        self.now = max(self.now, event.time)
        try:
            out = self._apply(event)
        except SchedulingError:
            self.now = before  # every handler refuses before it changes anything
            raise
        if self.validate:
            self.check()
        return out

    def _apply(self, event: Event) -> list[Action]:
        out: list[Action] = []
        only: str | None = None
        if isinstance(event, NodeAdded | NodeRemoved | NodeLabelled | GpuHealth | QueueConfigured):
            self._epoch += 1  # what reclaim found may have changed
        match event:
            case JobSubmitted(spec=spec):
                out += self._submit(spec)
                if self.jobs[spec.name].state is JobState.PENDING and self._behind_reservation(
                    self.jobs[spec.name]
                ):
                    only = spec.name
            case JobRestored(spec=spec, submitted=submitted, placement=placement, restarts=n):
                out += self._restore(spec, submitted, placement, n, event.stopping)
            case JobCancelled(job=name):
                out += self._cancel(self._job(name))
            case JobFinished(job=name, succeeded=ok, reason=why):
                out += self._finished_event(self._job(name), ok, why)
            case WorkerFailed(job=name, worker=worker, reason=why):
                out += self._worker_failed(self._job(name), worker, why)
            case JobStopped(job=name):
                out += self._stopped(self._job(name))
            case NodeAdded(node=node):
                self._add_node(node)
            case NodeRemoved(node=name):
                out += self._remove_node(name)
            case NodeLabelled(node=name, key=key, value=value):
                self._label(name, key, value)
            case GpuHealth(node=name, gpu=gpu, healthy=healthy):
                out += self._gpu_health(name, gpu, healthy)
            case QueueConfigured(queue=name, guaranteed_gpus=gpus):
                self._configure_queue(name, gpus)
            case Tick():
                pass
            case _:
                raise SchedulingError(f"unknown event {event!r}")
        out += self._cycle(only)
        return out

    # ------------------------------------------------------------------ queries

    def job(self, name: str) -> JobView:
        rec = self._job(name)
        return JobView(
            rec.name,
            rec.state,
            rec.placement,
            self._reason(rec),
            rec.restarts,
            tuple(rec.log),
        )

    def explain(self, name: str, when: Callable[[float], str] | None = None) -> str:
        """Why a job waits, or why it runs where it runs, in plain words; `when` shows an event
        time (a driver on a wall clock prints a date, the default `t=<seconds>`)."""
        rec = self._job(name)
        spec = rec.spec
        lines = [
            f"job {rec.name}: {rec.state.value}; queue {spec.queue}, priority {spec.priority}, "
            f"{spec.workers} worker(s) x {spec.gpus_per_worker} GPU(s), "
            f"locality {spec.locality.prefer.value}"
            + (
                f" (then {spec.locality.accept.value} after {spec.locality.relax_after_s:g} s)"
                if spec.locality.accept
                else ""
            )
        ]
        if rec.placement is not None:
            lines.append(f"placement: {rec.placement.describe()}")
        if self.policy.demote_after_gpu_h is not None:
            served = rec.service(self.now)
            demoted = (
                self.waiting_level(rec) == 1 if rec.state is JobState.PENDING else self.demoted(rec)
            )
            lines.append(
                f"service: {served / 3600:.2f} GPU-hours"
                + (" (demoted: ranks after jobs that have had less)" if demoted else "")
            )
        lines.append(f"now: {self._reason(rec)}")
        show = when or (lambda t: f"t={t:g}")
        lines.extend(f"  {show(t)}: {text}" for t, text in rec.log)
        return "\n".join(lines)

    def partial_holds(self) -> dict[str, int]:
        """GPUs bound to waiting jobs, by job (only policies without gang admission bind
        workers before the whole gang fits)."""
        return dict(self._held_waiting)

    def pending(self) -> Iterator[JobRecord]:
        """Pending jobs in the order the next cycle would try them."""
        return self._order(None)

    # ------------------------------------------------------------------ event handlers

    def _job(self, name: str) -> JobRecord:
        rec = self.jobs.get(name)
        if rec is None:
            raise SchedulingError(f"no job named {name!r}")
        return rec

    def _submit(self, spec: JobSpec) -> list[Action]:
        rec = self._register(spec, self.now, 0)
        never = self._never_fits(spec)
        if never:
            rec.state = JobState.REJECTED
            rec.note(self.now, never)
            self._retire(rec)
            return [Transition(rec.name, never, None, JobState.REJECTED)]
        rec.note(self.now, "submitted")
        self._enqueue(rec)
        return [Transition(rec.name, "submitted", None, JobState.PENDING)]

    def _register(self, spec: JobSpec, submitted: float, restarts: int) -> JobRecord:
        if spec.name in self.jobs:
            raise SchedulingError(f"a job named {spec.name!r} already exists")
        self._seq += 1
        rec = JobRecord(spec, self._seq, submitted, waiting_since=submitted, restarts=restarts)
        self.jobs[spec.name] = rec
        if spec.queue not in self.queues:
            self._configure_queue(spec.queue, 0)
        # The lowest priority ever submitted to each queue: no lower one can be running.
        low = self.lowest_priority.get(spec.queue, spec.priority)
        self.lowest_priority[spec.queue] = min(low, spec.priority)
        high = self._highest_priority.get(spec.queue, spec.priority)
        self._highest_priority[spec.queue] = max(high, spec.priority)
        if spec.elastic is not None:
            self._elastic[spec.name] = rec
        return rec

    def _restore(
        self,
        spec: JobSpec,
        submitted: float,
        placement: Placement | None,
        restarts: int,
        stopping: StopKind | None,
    ) -> list[Action]:
        if spec.name in self.jobs:
            raise SchedulingError(f"a job named {spec.name!r} already exists")
        if placement is None and stopping is not None:
            raise SchedulingError(f"job {spec.name!r}: a job being stopped needs its placement")
        if placement is None:
            rec = self._register(spec, submitted, restarts)
            never = self._never_fits(spec)
            if never:
                return self._end(rec, JobState.REJECTED, never)
            rec.note(self.now, "restored: waiting")
            self._enqueue(rec)
            return []
        self._check_restorable(spec, placement)
        rec = self._register(spec, submitted, restarts)
        self._allocate(rec, placement)
        rec.placement = placement
        rec.state = JobState.RUNNING
        rec.started = rec.last_restart = self.now
        self.demotions.started(rec, self.now)
        if stopping is None:
            rec.note(self.now, f"restored: running on {placement.describe()}")
            return []
        # A move or resize restarts on GPUs that only the old core knew: once stopped, such a
        # job waits again as a preempted one does, keeping its place in submission order.
        moving = stopping in (StopKind.MIGRATE, StopKind.RESIZE)
        rec.state = JobState.STOPPING
        self.demotions.stopped(rec)
        rec.stop_kind = StopKind.PREEMPT if moving else stopping
        rec.cancel_requested = stopping is StopKind.CANCEL
        rec.stop_why = f"{stopping.value} under way when the driver restarted"
        rec.note(self.now, f"restored: stopping ({stopping.value}) on {placement.describe()}")
        return []

    def _check_restorable(self, spec: JobSpec, placement: Placement) -> None:
        """Refuse (changing nothing) a running job whose placement this cluster cannot hold."""
        name = spec.name
        if not spec.min_workers <= len(placement.workers) <= spec.max_workers:
            raise SchedulingError(
                f"job {name!r}: {len(placement.workers)} workers placed, the spec allows "
                f"{spec.min_workers}..{spec.max_workers}"
            )
        seen: set[tuple[str, int]] = set()
        for slot in placement.workers:
            if len(slot.gpus) != spec.gpus_per_worker:
                raise SchedulingError(
                    f"job {name!r}: a worker holds {len(slot.gpus)} GPUs, the spec says "
                    f"{spec.gpus_per_worker}"
                )
            i = self.capacity.index.get(slot.node)
            if i is None or not self.capacity.present[i]:
                raise SchedulingError(f"job {name!r}: node {slot.node!r} is not in the cluster")
            for gpu in slot.gpus:
                if not 0 <= gpu < self.capacity.nodes[i].size:
                    raise SchedulingError(f"job {name!r}: node {slot.node!r} has no GPU {gpu}")
                if (slot.node, gpu) in seen or (i, gpu) in self.owner:
                    raise SchedulingError(
                        f"job {name!r}: GPU {gpu} of {slot.node!r} is held by another job"
                    )
                if self.unhealthy.get(i, 0) >> gpu & 1:
                    raise SchedulingError(f"job {name!r}: GPU {gpu} of {slot.node!r} is unhealthy")
                seen.add((slot.node, gpu))

    def never_fits(self, spec: JobSpec) -> str | None:
        """Why `spec` could not run even on the whole empty cluster, or None: drivers refuse such
        a submission up front instead of keeping a job that can never start."""
        return self._never_fits(spec)

    def _never_fits(self, spec: JobSpec) -> str | None:
        """A reason if the job cannot run even on the whole (healthy, empty) cluster."""
        g = spec.gpus_per_worker
        widest = spec.locality.accept or spec.locality.prefer
        largest, best = self._room_when_empty(g, widest.tier)
        if g > largest:
            return f"rejected: a worker needs {g} GPUs; the largest node has {largest}"
        if best < spec.min_workers:
            where = {"node": "one node", "rack": "one rack", "pod": "one pod", "any": "the cluster"}
            return (
                f"rejected: needs {spec.min_workers} workers x {g} GPUs within "
                f"{where[widest.value]}; at most {best} fit there even when it is empty"
            )
        return None

    def _room_when_empty(self, g: int, tier: Tier) -> tuple[int, int]:
        """(largest node, most workers of `g` GPUs one `tier` domain holds) on the empty
        cluster; cached until a node comes or goes."""
        key = (g, tier)
        if key not in self._room:
            nodes = [self.capacity.nodes[i] for i in self.capacity.present_indices()]
            domains: dict[tuple[str, ...], int] = {}
            for node in nodes:
                domain = node_domain(node, tier)
                domains[domain] = domains.get(domain, 0) + node.size // g
            largest = max((n.size for n in nodes), default=0)
            self._room[key] = (largest, max(domains.values(), default=0))
        return self._room[key]

    def _cancel(self, rec: JobRecord) -> list[Action]:
        if rec.state.terminal:
            raise SchedulingError(f"job {rec.name!r} has already ended ({rec.state.value})")
        if rec.state is JobState.PENDING:
            self._dequeue(rec)
            if rec.partial:
                self._release_all(rec)  # workers a non-gang policy bound while it waited
            return self._end(rec, JobState.CANCELLED, "cancelled while pending")
        rec.cancel_requested = True
        if rec.state is JobState.STOPPING:
            rec.note(self.now, "cancel requested while stopping")
            return []
        return self._stop(rec, StopKind.CANCEL, "cancelled")

    def _finished_event(self, rec: JobRecord, ok: bool, why: str) -> list[Action]:
        if rec.state not in (JobState.RUNNING, JobState.STOPPING):
            raise SchedulingError(f"job {rec.name!r} is {rec.state.value}, so it cannot finish")
        if rec.state is JobState.STOPPING and not ok:
            # Workers exiting non-zero while told to stop: the signal did it, not a fault.
            return self._stopped(rec)
        self._release_all(rec)
        if ok:
            return self._end(rec, JobState.SUCCEEDED, why or "all workers exited 0")
        return self._failed(rec, why or "a worker exited non-zero")

    def _worker_failed(self, rec: JobRecord, worker: int, why: str) -> list[Action]:
        if rec.state is not JobState.RUNNING:
            return []
        return self._stop(rec, StopKind.FAILURE, f"worker {worker} failed: {why or 'no reason'}")

    def _stopped(self, rec: JobRecord) -> list[Action]:
        if rec.state is not JobState.STOPPING:
            raise SchedulingError(f"job {rec.name!r} is {rec.state.value}, not stopping")
        kind, rec.stop_kind = rec.stop_kind, None
        if self.reservation is not None:
            self.reservation.awaiting.discard(rec.name)
        if rec.cancel_requested:
            self._release_all(rec)
            return self._end(rec, JobState.CANCELLED, "cancelled")
        if rec.resume is not None and kind in (StopKind.MIGRATE, StopKind.RESIZE):
            return self._resume(rec, kind)
        if kind is StopKind.FAILURE:
            self._release_all(rec)
            return self._failed(rec, rec.stop_why)
        # Preempted: back to the queue, keeping its place in submission order.
        self._release_all(rec)
        rec.state = JobState.PENDING
        rec.waiting_since = self.now
        rec.note(self.now, f"requeued after {kind.value if kind else 'stop'}")
        self._enqueue(rec)
        return [Transition(rec.name, rec.reason, JobState.STOPPING, JobState.PENDING)]

    def _resume(self, rec: JobRecord, kind: StopKind) -> list[Action]:
        """A migrated or resized job restarts on its new GPUs; the ones it left are freed."""
        resume = rec.resume
        assert resume is not None
        keep = set(resume.pairs())
        self._release_pairs(rec, {pair for p in rec.held() for pair in p.pairs()} - keep)
        rec.bank_service(self.now)
        rec.placement, rec.target, rec.resume = resume, None, None
        rec.state = JobState.RUNNING
        self._touch_nodes_of(rec)
        self.demotions.started(rec, self.now)
        rec.note(self.now, f"restarted after {kind.value} on {resume.describe()}")
        return [
            StartJob(rec.name, rec.reason, resume),
            Transition(rec.name, rec.reason, JobState.STOPPING, JobState.RUNNING),
        ]

    def _failed(self, rec: JobRecord, why: str) -> list[Action]:
        spec = rec.spec
        if spec.restart is RestartPolicy.ON_FAILURE and rec.restarts < spec.max_restarts:
            rec.restarts += 1
            old = rec.state
            rec.state = JobState.PENDING
            rec.waiting_since = self.now
            rec.note(self.now, f"requeued (restart {rec.restarts} of {spec.max_restarts}): {why}")
            self._enqueue(rec)
            return [Transition(rec.name, rec.reason, old, JobState.PENDING)]
        return self._end(rec, JobState.FAILED, why)

    def _add_node(self, node: Node) -> None:
        i = self.capacity.index.get(node.name)
        if i is not None and self.capacity.present[i]:
            raise SchedulingError(f"node {node.name!r} is already in the cluster")
        i = self.capacity.add_node(node)
        self._touch(i)
        self._room.clear()
        self.labels[node.name] = dict(node.labels)
        self.unhealthy.pop(i, None)
        held = 0
        for (j, gpu), _ in self.owner.items():
            if j == i:
                held |= 1 << gpu
        if held:
            self.capacity.take(i, held)
        self._note(f"node {node.name} added ({node.size} GPUs)")

    def _remove_node(self, name: str) -> list[Action]:
        i = self._node_index(name)
        out: list[Action] = []
        for job in sorted({j for (n, _), j in self.owner.items() if n == i}):
            out += self._lost(self.jobs[job], name, None, f"node {name} was lost")
        self.capacity.remove_node(i)
        self._touch(i)
        self._room.clear()
        self.unhealthy.pop(i, None)
        if self.reservation is not None and i in self.reservation.gpus:
            self.reservation = None
        self._note(f"node {name} removed")
        return out

    def _lost(self, rec: JobRecord, node: str, gpu: int | None, why: str) -> list[Action]:
        """A job holds GPUs on lost hardware (a node, or one `gpu` of it)."""

        def touches(placement: Placement | None) -> bool:
            return placement is not None and any(
                n == node and (gpu is None or g == gpu) for n, g in placement.pairs()
            )

        if rec.state is JobState.RUNNING and touches(rec.placement):
            return self._stop(rec, StopKind.FAILURE, why)
        if rec.state is JobState.STOPPING and touches(rec.resume):
            # It was moving onto (or growing over) the lost GPUs: give up the move. Once
            # stopped it waits in the queue like a preempted job, keeping its place.
            if rec.target is not None:  # GPUs it was moving or growing onto (none to shrink)
                self._release_pairs(rec, set(rec.target.pairs()))
            rec.target = rec.resume = None
            rec.note(self.now, f"move abandoned: {why}")
        return []

    def _label(self, name: str, key: str, value: str | None) -> None:
        i = self._node_index(name)
        labels = dict(self.labels[name])
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
        try:
            check_labels(name, labels)
        except ValueError as err:
            raise SchedulingError(str(err)) from None
        self.labels[name] = labels
        self.capacity.set_aware(i, topology_aware(labels))

    def _gpu_health(self, name: str, gpu: int, healthy: bool) -> list[Action]:
        i = self._node_index(name)
        size = self.capacity.nodes[i].size
        if not 0 <= gpu < size:
            raise SchedulingError(f"node {name} has GPUs 0..{size - 1}, not {gpu}")
        bit = 1 << gpu
        bad = self.unhealthy.get(i, 0)
        holder = self.owner.get((i, gpu))
        if not healthy:
            if bad & bit:
                return []
            self.unhealthy[i] = bad | bit
            if self.reservation is not None and self.reservation.gpus.get(i, 0) & bit:
                self.reservation = None  # re-planned in this cycle, around the failed GPU
            if holder is None:
                self.capacity.take(i, bit)
                return []
            return self._lost(self.jobs[holder], name, gpu, f"GPU {gpu} of node {name} failed")
        if bad & bit:
            self.unhealthy[i] = bad & ~bit
            if holder is None:
                self.capacity.give(i, bit)
        return []

    def _configure_queue(self, name: str, guaranteed: int) -> None:
        if not name:
            raise SchedulingError("a queue needs a name")
        if isinstance(guaranteed, bool) or not isinstance(guaranteed, int) or guaranteed < 0:
            raise SchedulingError(f"queue {name!r}: guaranteed GPUs must be >= 0, got {guaranteed}")
        queue = self.queues.setdefault(name, QueueRecord(name))
        queue.guaranteed = guaranteed
        queue.version += 1
        if self.reservation is not None and not self.reservation.awaiting:
            self.reservation = None  # new shares may allow a reclaim: plan afresh

    def _node_index(self, name: str) -> int:
        i = self.capacity.index.get(name)
        if i is None or not self.capacity.present[i]:
            raise SchedulingError(f"no node named {name!r} in the cluster")
        return i

    # ------------------------------------------------------------------ state changes

    def _enqueue(self, rec: JobRecord) -> None:
        level, promote_at = self._level(rec)
        self._pending.add(rec, self.now, level, promote_at)

    def _level(self, rec: JobRecord) -> tuple[int, float | None]:
        """A waiting job's level (1: demoted for the service it has had) and when a demoted
        job is promoted back for having waited long (least attained service, as Tiresias).
        A promoted job is forgiven the service it had: it runs as long as a fresh one before
        it can be demoted again, so that it is not preempted as soon as it starts."""
        if not self.demoted(rec):
            return 0, None
        promote = self.policy.promote_after_s
        if promote is None:
            return 1, None
        promote_at = rec.waiting_since + promote
        if self.now >= promote_at:  # the very sum the due heap fired on
            rec.forgiven = rec.service(self.now)
            return 0, None
        return 1, promote_at

    def waiting_level(self, rec: JobRecord) -> int:
        """The level a waiting job is filed at (0 unless demoted and not yet promoted)."""
        return self._pending.level.get(rec.name, 0)

    def demoted(self, rec: JobRecord) -> bool:
        """The job has had at least the policy's demotion threshold of service (since it was
        last promoted)."""
        demote = self.policy.demote_after_gpu_h
        if demote is None:
            return False
        tracked = self.demotions.is_demoted(rec.name, self.now)
        if tracked is not None:
            return tracked
        # Demotions times a running job's demotion; once it stops, its summed service must
        # agree, whatever the rounding of the sum (a job preempted as demoted that came back
        # undemoted would start again at once on the GPUs freed for another).
        return rec.service(self.now) - rec.forgiven >= demote * 3600.0 * (1 - 1e-9)

    def _dequeue(self, rec: JobRecord) -> None:
        gone = self._pending.remove(rec)
        self._ranks.pop(rec.name, None)
        if gone is not None:
            self._shape_notes.pop(gone, None)

    def _refile_due(self) -> None:
        """Jobs whose locality widened or that were promoted since the last cycle move to
        their new place."""
        for name in self._pending.due(self.now):
            rec = self.jobs[name]
            if (
                shape_now(rec, self.now) != self._pending.filed[name][1]
                or self._level(rec)[0] != self._pending.level[name]
            ):
                self._dequeue(rec)
                self._enqueue(rec)

    def _allocate(self, rec: JobRecord, placement: Placement) -> None:
        for node, gpus in placement.gpus_by_node().items():
            i = self.capacity.index[node]
            mask = to_mask(gpus)
            self.capacity.take(i, mask)
            for gpu in gpus:
                self.owner[(i, gpu)] = rec.name
            on_node = self.node_jobs.setdefault(i, {})
            on_node[rec.name] = on_node.get(rec.name, 0) | mask
            self.job_nodes.setdefault(rec.name, {})[i] = on_node[rec.name]
            self._touch(i)
        self.holders[rec.name] = rec
        queue = self.queues[rec.spec.queue]
        queue.used += placement.gpus
        queue.version += 1
        if self._starts_make_victims(rec):
            self._epoch += 1

    def _release_pairs(self, rec: JobRecord, pairs: set[tuple[str, int]]) -> None:
        for node, gpu in pairs:
            i = self.capacity.index[node]
            del self.owner[(i, gpu)]
            on_node = self.node_jobs[i]
            left = on_node[rec.name] & ~(1 << gpu)
            nodes = self.job_nodes[rec.name]
            if left:
                on_node[rec.name] = nodes[i] = left
            else:
                del on_node[rec.name], nodes[i]
                if not nodes:
                    del self.job_nodes[rec.name]
            if self.capacity.present[i] and not self.unhealthy.get(i, 0) >> gpu & 1:
                self.capacity.give(i, 1 << gpu)
            self._touch(i)
        queue = self.queues[rec.spec.queue]
        queue.used -= len(pairs)
        queue.version += 1
        self._epoch += 1

    def _touch(self, i: int) -> None:
        self.node_stamp[i] = self.node_stamp.get(i, 0) + 1

    def _touch_nodes_of(self, rec: JobRecord) -> None:
        """`rec` changed state or start time: its nodes' jobs end at other times."""
        for placement in rec.held():
            for slot in placement.workers:
                self._touch(self.capacity.index[slot.node])

    def _release_all(self, rec: JobRecord) -> None:
        rec.bank_service(self.now)
        if self.reservation is not None:
            self.reservation.awaiting.discard(rec.name)
        self._release_pairs(rec, {pair for p in rec.held() for pair in p.pairs()})
        self.holders.pop(rec.name, None)
        self.demotions.stopped(rec)
        rec.placement = rec.target = rec.resume = None
        rec.partial = []
        self._held_waiting.pop(rec.name, None)

    def _start(
        self, rec: JobRecord, placement: Placement, why: str, allocate: bool = True
    ) -> list[Action]:
        self._dequeue(rec)
        if allocate:
            self._allocate(rec, placement)
        rec.placement = placement
        rec.state = JobState.RUNNING
        rec.started = rec.last_restart = self.now
        self._touch_nodes_of(rec)
        self.demotions.started(rec, self.now)
        rec.note(self.now, f"started on {placement.describe()}: {why}")
        if self.reservation is not None and self.reservation.job == rec.name:
            self.reservation = None
        return [
            StartJob(rec.name, rec.reason, placement),
            Transition(rec.name, rec.reason, JobState.PENDING, JobState.RUNNING),
        ]

    def _stop(self, rec: JobRecord, kind: StopKind, why: str) -> list[Action]:
        checkpoint = rec.spec.checkpoint
        if kind in (StopKind.PREEMPT, StopKind.MIGRATE, StopKind.RESIZE) and checkpoint:
            signal, grace = checkpoint.signal, checkpoint.grace_s
        elif checkpoint is not None:
            signal, grace = checkpoint.signal, max(checkpoint.grace_s, self.policy.stop_grace_s)
        else:
            signal, grace = "SIGTERM", self.policy.stop_grace_s
        rec.state = JobState.STOPPING
        self._touch_nodes_of(rec)
        rec.stop_kind = kind
        rec.stop_why = why
        self.demotions.stopped(rec)
        rec.note(self.now, f"stopping ({kind.value}): {why}")
        return [
            StopJob(rec.name, rec.reason, kind, signal, grace),
            Transition(rec.name, rec.reason, JobState.RUNNING, JobState.STOPPING),
        ]

    def _end(self, rec: JobRecord, state: JobState, why: str) -> list[Action]:
        old = rec.state
        rec.state = state
        rec.note(self.now, why)
        self._retire(rec)
        return [Transition(rec.name, why, old, state)]

    def _retire(self, rec: JobRecord) -> None:
        """Ended jobs stay answerable for a while; the oldest are forgotten (drivers keep them)."""
        self._elastic.pop(rec.name, None)
        self._finished.append(rec.name)
        while len(self._finished) > self.policy.keep_finished:
            self.jobs.pop(self._finished.popleft(), None)

    def _note(self, text: str) -> None:
        self.notes.append((self.now, text))

    # ------------------------------------------------------------------ the cycle

    def _order(
        self, only: str | None, skip: Callable[[Key], bool] | None = None
    ) -> Iterator[JobRecord]:
        """Phase 2 (heads): waiting jobs best first (see PendingJobs.order); `only` alone."""
        if only is not None:
            yield self.jobs[only]
            return
        for name in self._pending.order(self._rank_of, skip or (lambda key: False)):
            yield self.jobs[name]

    def _rank_of(self, name: str) -> tuple[float, ...]:
        """A waiting job's rank, kept until its queue's usage changes."""
        rec = self.jobs[name]
        if self.policy.order is Order.FIFO:
            return (rec.seq,)
        version = self.queues[rec.spec.queue].version
        kept = self._ranks.get(name)
        if kept is not None and kept[0] == version:
            return kept[1]
        rank = self._rank(rec)
        self._ranks[name] = (version, rank)
        return rank

    def _rank(self, rec: JobRecord) -> tuple[float, ...]:
        return self.rank_after(rec, self.waiting_level(rec), {})

    def rank_after(self, rec: JobRecord, level: int, freed: dict[str, int]) -> tuple[float, ...]:
        """`rec`'s rank as a waiting job at `level`, once `freed` GPUs of each queue are
        given back (reclaim checks that its victims would rank after the job it stops them
        for)."""
        if self.policy.order is Order.FIFO:
            return (rec.seq,)
        queue = self.queues[rec.spec.queue]
        used = queue.used - freed.get(queue.name, 0)
        need = rec.spec.min_workers * rec.spec.gpus_per_worker
        inside = 0 if used + need <= queue.guaranteed else 1
        return (inside, -rec.spec.priority, level, queue.share(used), rec.seq)

    def _behind_reservation(self, rec: JobRecord) -> bool:
        res = self.reservation
        if res is None or res.job == rec.name or res.job not in self.jobs:
            return False
        return self._rank(self.jobs[res.job]) < self._rank(rec)

    def _request(self, rec: JobRecord, widest: Tier) -> GangRequest:
        spec = rec.spec
        first_fit = self.policy.placement is not Placing.TOPOLOGY
        return GangRequest(spec.min_workers, spec.gpus_per_worker, widest, self.mode, first_fit)

    def _update_mode(self) -> None:
        """Phase 1: spread 1-GPU jobs while the cluster is quiet, pack them when it is busy."""
        if self.policy.single_gpu is not SingleGpu.ADAPTIVE:
            return
        healthy = self._healthy_gpus()
        load = 1.0 - self.capacity.total_free / healthy if healthy else 1.0
        if self.mode is Mode.SPREAD and load >= self.policy.pack_above:
            self.mode = Mode.PACK
            self._note(f"1-GPU jobs now packed: {load:.0%} of GPUs allocated")
        elif self.mode is Mode.PACK and load <= self.policy.spread_below:
            self.mode = Mode.SPREAD
            self._note(f"1-GPU jobs now spread: {load:.0%} of GPUs allocated")

    def _healthy_gpus(self) -> int:
        # `unhealthy` holds only nodes with a failed GPU, and only present ones.
        bad = sum(mask.bit_count() for mask in self.unhealthy.values())
        return self.capacity.total_gpus - bad

    def _cycle(self, only: str | None) -> list[Action]:
        self._refile_due()
        if not self.policy.gang:
            return self._bind_workers()
        out: list[Action] = []
        self._update_mode()
        res = self.reservation
        if res is not None and (
            res.job not in self.jobs or self.jobs[res.job].state is not JobState.PENDING
        ):
            self.reservation = None
        # Within one cycle nothing frees up, so a request that failed fails again: keyed by
        # gang shape, tier and whether the reservation is off limits, with the note it left.
        failed: dict[tuple[int, int, Tier, bool], tuple[Shortfall, str]] = {}
        # Shapes that cannot start now at all, and shapes that cannot start off the current
        # reservation's GPUs: their lists drop out of the cycle whole (PendingJobs.order), and
        # once every waiting shape is hopeless the cycle ends.
        hopeless: set[Shape] = set()
        off_reserved: set[Shape] = set()
        self._cycles += 1
        first_blocked = only is not None
        # Jobs that rank before the reservation's holder may use its GPUs; those after it may
        # not, unless they are expected to end before the holder can start.
        behind_holder = only is not None
        judged_for = self.reservation

        def skip(key: Key) -> bool:
            nonlocal behind_holder
            res = self.reservation
            holder_here = res is not None and self._pending.filed.get(res.job) == key
            shape = key[1]
            if shape in hopeless:
                behind_holder = behind_holder or holder_here
                return True
            return (
                behind_holder
                and res is judged_for
                and key[1] in off_reserved
                and not holder_here
                and self.policy.default_runtime_s is None
                and not self._pending.declared.get(key)  # none of them ends in time
            )

        for rec in self._order(only, skip):
            if rec.state is not JobState.PENDING:
                continue
            if self.capacity.total_free == 0 and first_blocked:
                break
            rec.tried = self._cycles
            spec = rec.spec
            whole = self._pending.filed[rec.name][1]
            tier = whole[2]
            res = self.reservation
            exclude = None
            if res is not None:
                if res.job == rec.name:
                    behind_holder = True
                elif behind_holder and res.holds_free(self.capacity):
                    runtime = spec.limit_s or self.policy.default_runtime_s or math.inf
                    if math.isinf(runtime) or self.now + runtime > res.until:
                        exclude = res.gpus
            shape = (spec.min_workers, spec.gpus_per_worker, tier, exclude is not None)
            known = failed.get(shape)
            if known is not None:
                rec.note(self.now, known[1])
                continue
            request = self._request(rec, tier)
            result: Placement | Shortfall
            if request.gpus > self.capacity.total_free:
                result = Shortfall(
                    f"needs {request.gpus} GPUs; {self.capacity.total_free} are free"
                )
            else:
                result = place_gang(self.capacity, request, self.cluster.network_gbps, exclude)
            if isinstance(result, Placement):
                why = "best placement now"
                if exclude is not None:
                    why = "backfilled around the reservation for " + (res.job if res else "")
                out += self._start(rec, result, why)
                continue
            head = not first_blocked
            if head:
                first_blocked = True
                out += self._blocked_head(rec, request, result)
                if self.reservation is not None and self.reservation.job == rec.name:
                    # Every job after the head ranks behind it, so none of them may take the
                    # GPUs just reserved (those already free above all, while victims stop).
                    behind_holder = True
                if not self.policy.backfill:
                    break
            # What later jobs of this shape are told (the head's own note says more).
            res = self.reservation
            text = result.reason
            if res is not None:
                text = f"{result.reason}; waiting behind {res.job}"
            failed[shape] = (result, text)
            if not head:
                mine = res is not None and res.job == rec.name
                rec.note(
                    self.now,
                    f"{result.reason}; {res.describe(self.capacity)}" if res and mine else text,
                )
            if exclude is None:
                hopeless.add(whole)
                self._shape_notes[whole] = (self._cycles, text)
                if hopeless.issuperset(self._pending.shapes):
                    break
            else:
                if self.reservation is not judged_for:
                    off_reserved.clear()  # judged against another reservation
                    judged_for = self.reservation
                off_reserved.add(whole)
        if self.policy.elastic and not self._pending:
            out += self._grow()
        return out

    def _grow(self) -> list[Action]:
        """Phase 6: nobody waits, so elastic jobs take idle GPUs (a restart at the new size)."""
        out: list[Action] = []
        for rec in sorted(self._elastic.values(), key=lambda r: r.seq):
            if rec.state is not JobState.RUNNING or rec.spec.elastic is None:
                continue
            if self.now - rec.last_restart < self.policy.grow_after_s:
                continue
            if self.capacity.total_free < rec.spec.gpus_per_worker:
                break
            widest = (rec.spec.locality.accept or rec.spec.locality.prefer).tier
            plan = plan_growth(self.capacity, rec, widest, self.cluster.network_gbps)
            if plan is None:
                continue
            extra, whole = plan
            self._allocate(rec, extra)
            rec.target, rec.resume = extra, whole
            out += self._stop(
                rec, StopKind.RESIZE, f"growing to {len(whole.workers)} workers on idle GPUs"
            )
        return out

    def _blocked_head(self, rec: JobRecord, request: GangRequest, short: Shortfall) -> list[Action]:
        """Phases 4 and 5 for the first job that could not be placed."""
        res = self.reservation
        if res is not None and res.job == rec.name:
            if res.awaiting:
                rec.note(
                    self.now,
                    f"{short.reason}; waiting for {', '.join(sorted(res.awaiting))} to stop",
                )
                return []
            # Running jobs are demoted as they run: one may have become preemptible since.
            out = self._preempt_for(rec, request, short) if self._demotes() else []
            if not out:
                rec.note(self.now, f"{short.reason}; {res.describe(self.capacity)}")
            return out
        out = []
        if self.policy.elastic:
            out += self._shrink_for(rec, request)
            if out:
                return out
        if self.policy.migration:
            out += self._defragment_for(rec, request)
            if out:
                return out
        out += self._preempt_for(rec, request, short)
        if out:
            return out
        if self.policy.reservation:
            self.reservation = reserve(self, rec, request)
        if self.reservation is not None and self.reservation.job == rec.name:
            rec.note(self.now, f"{short.reason}; {self.reservation.describe(self.capacity)}")
        else:
            rec.note(self.now, short.reason)
        return out

    def _guarantees(self) -> bool:
        """Some queue has a guaranteed share (and so may reclaim what others borrow)."""
        return any(q.guaranteed for q in self.queues.values())

    def demotes_alone(self) -> bool:
        """Demotion is the only reason to preempt: no queue has a guarantee, and every job
        ever submitted has one priority."""
        if self.policy.demote_after_gpu_h is None or self._guarantees():
            return False
        lows, highs = self.lowest_priority.values(), self._highest_priority.values()
        return not lows or min(lows) == max(highs)

    def _starts_make_victims(self, rec: JobRecord) -> bool:
        """Whether `rec` taking GPUs may give a waiting job someone to preempt (besides by
        being demoted, which `Demotions` tells): a queue lends beyond a guarantee, or a job
        of its queue outranks it."""
        if self._guarantees():
            return True
        return self._highest_priority.get(rec.spec.queue, rec.spec.priority) > rec.spec.priority

    def _demotes(self) -> bool:
        return self.policy.preemption and self.policy.demote_after_gpu_h is not None

    def _preempt_for(self, rec: JobRecord, request: GangRequest, short: Shortfall) -> list[Action]:
        """Stop the victims whose GPUs form the best placement for `rec`, and reserve those."""
        if not self.policy.preemption:
            return []
        asked = (rec.name, self.waiting_level(rec), request, self._epoch)
        known = self._no_victims
        if known and known[0] == asked and self.now < min(known[1], self.demotions.next_at()):
            return []
        plan = plan_reclaim(self, rec, request)
        if plan is None:
            self._no_victims = (asked, self.demotions.next_at())
            return []
        victims, gpus = plan
        self.reservation = Reservation(rec.name, gpus, self.now, {v.name for v in victims})
        names = ", ".join(v.name for v in victims)
        rec.note(self.now, f"{short.reason}; preempting {names} for it")
        out: list[Action] = []
        for victim in victims:
            out += self._stop(victim, StopKind.PREEMPT, f"preempted for {rec.name}")
        return out

    def _shrink_for(self, rec: JobRecord, request: GangRequest) -> list[Action]:
        """Elastic jobs above their minimum give back workers first (lowest priority first)."""
        candidates = sorted(
            (
                r
                for r in self._elastic.values()
                if r.state is JobState.RUNNING
                and r.spec.elastic is not None
                and r.placement is not None
                and len(r.placement.workers) > r.spec.min_workers
                and r.spec.priority <= rec.spec.priority
            ),
            key=lambda r: (r.spec.priority, -(r.started or 0.0), r.seq),
        )
        network = self.cluster.network_gbps
        chosen: list[tuple[JobRecord, Placement]] = []
        freed: dict[int, int] = {}
        for victim in candidates:
            assert victim.placement is not None
            workers = victim.placement.workers
            # Give back as few workers as will do: the last ones first, down to the minimum.
            for keep in range(len(workers) - 1, victim.spec.min_workers - 1, -1):
                trial = dict(freed)
                for slot in workers[keep:]:
                    i = self.capacity.index[slot.node]
                    trial[i] = trial.get(i, 0) | to_mask(slot.gpus)
                with self.capacity.assuming_free(trial):
                    found = place_gang(self.capacity, request, network)
                resume = placement_of(self.capacity, workers[:keep], network)
                if isinstance(found, Placement):
                    return self._shrink(rec, [*chosen, (victim, resume)], found)
            freed = trial
            chosen.append((victim, resume))
        return []

    def _shrink(
        self, rec: JobRecord, chosen: list[tuple[JobRecord, Placement]], found: Placement
    ) -> list[Action]:
        """Stop the chosen elastic jobs to restart smaller; reserve what they free for `rec`."""
        gpus = {self.capacity.index[n]: to_mask(g) for n, g in found.gpus_by_node().items()}
        names = {v.name for v, _ in chosen}
        self.reservation = Reservation(rec.name, gpus, self.now, names)
        rec.note(self.now, f"shrinking {', '.join(sorted(names))} to make room")
        out: list[Action] = []
        for shrunk, resume in chosen:
            shrunk.resume = resume
            out += self._stop(
                shrunk, StopKind.RESIZE, f"shrinking to {len(resume.workers)} for {rec.name}"
            )
        return out

    def _defragment_for(self, rec: JobRecord, request: GangRequest) -> list[Action]:
        """Migrate the fewest checkpointable jobs so that one node can take the blocked job."""
        cap = self.capacity
        if request.gpus > cap.total_free:
            return []  # asked at every blocked head: the cheap test first
        largest = max((cap.nodes[i].size for i in cap.present_indices()), default=0)
        if request.gpus > largest:
            return []
        movable: dict[int, list[tuple[JobRecord, int]]] = {}
        # Jobs holding GPUs, found through the GPUs, in submission order.
        for r in sorted(self.holders.values(), key=lambda r: r.seq):
            if r.state is not JobState.RUNNING or r.placement is None or not r.spec.checkpointable:
                continue
            by_node = r.placement.gpus_by_node()
            if len(by_node) != 1:
                continue
            ((node, held),) = by_node.items()
            movable.setdefault(cap.index[node], []).append((r, to_mask(held)))
        plan = plan_defrag(cap, request, movable, self.cluster.network_gbps)
        if plan is None:
            return []
        moves, gpus = plan
        out: list[Action] = []
        names = {m.job.name for m in moves}
        self.reservation = Reservation(rec.name, gpus, self.now, names)
        rec.note(self.now, f"migrating {', '.join(sorted(names))} to open a node for it")
        for move in moves:
            self._allocate(move.job, move.to)
            move.job.target = move.job.resume = move.to
            out += self._stop(
                move.job, StopKind.MIGRATE, f"moving to {move.to.describe()} for {rec.name}"
            )
        return out

    # ------------------------------------------------------------------ non-gang binding

    def _bind_workers(self) -> list[Action]:
        """The non-gang cycle: waiting jobs bind one worker each in turn (as kube-scheduler
        takes one pod at a time, the pods of concurrent jobs interleaved), each holding what it
        bound until its last worker is bound. Two jobs holding parts of what each needs wait
        forever."""
        waiting: list[JobRecord] = []
        room: dict[int, list[int]] = {}  # GPUs per worker -> nodes with that many free

        def bind_one(rec: JobRecord) -> bool:
            g = rec.spec.gpus_per_worker
            if len(rec.partial) >= rec.spec.min_workers or self.capacity.total_free < g:
                return False
            slot = self._random_slot(g, room)
            if slot is None:
                return False
            self._allocate(rec, Placement((slot,), None, Tier.NODE))
            rec.partial.append(slot)
            self._held_waiting[rec.name] = len(rec.partial) * g
            return True

        # The first round walks the queue only as far as free GPUs last; later rounds go
        # over the jobs met so far.
        bound = False
        for rec in self._order(None):
            if not self.capacity.total_free:
                break
            waiting.append(rec)
            bound = bind_one(rec) or bound
        while bound and self.capacity.total_free:
            bound = False
            for rec in waiting:
                bound = bind_one(rec) or bound
        out: list[Action] = []
        for rec in waiting:
            needed = rec.spec.min_workers
            if len(rec.partial) == needed:
                placement = placement_of(self.capacity, rec.partial, self.cluster.network_gbps)
                rec.partial = []
                del self._held_waiting[rec.name]
                out += self._start(rec, placement, "every worker bound", allocate=False)
            elif rec.partial:
                rec.note(self.now, f"holding {len(rec.partial)} of {needed} workers; the rest wait")
            else:
                rec.note(self.now, f"no node has {rec.spec.gpus_per_worker} free GPUs")
        return out

    def _random_slot(self, g: int, room: dict[int, list[int]]) -> WorkerSlot | None:
        """`g` random free GPUs of a random node that has them; `room` caches the nodes."""
        cap = self.capacity
        nodes = room.get(g)
        if nodes is None:
            nodes = room[g] = [i for i in cap.present_indices() if cap.free[i].bit_count() >= g]
        while nodes:
            k = self.rng.randrange(len(nodes))
            i = nodes[k]
            if cap.free[i].bit_count() < g:  # filled since the list was made
                nodes[k] = nodes[-1]
                nodes.pop()
                continue
            gpus = self.rng.sample(from_mask(cap.free[i]), g)
            return WorkerSlot(cap.nodes[i].name, tuple(sorted(gpus)))
        return None

    # ------------------------------------------------------------------ explanation

    def _reason(self, rec: JobRecord) -> str:
        """The last recorded reason; a job not yet tried says how many are ahead of it."""
        if rec.state is JobState.PENDING:
            # A cycle that stopped before this job still said why its shape cannot start.
            filed = self._pending.filed.get(rec.name)
            note = self._shape_notes.get(filed[1]) if filed else None
            holder = self.reservation is not None and self.reservation.job == rec.name
            if note is not None and note[0] > rec.tried and not holder:
                return note[1]
        if rec.state is JobState.PENDING and rec.reason == "submitted":
            ahead = 0
            for other in self._order(None):
                if other.name == rec.name:
                    break
                ahead += 1
            return f"queued; {ahead} job(s) ahead of it"
        return rec.reason

    # ------------------------------------------------------------------ validate mode

    def check(self) -> None:
        """Raise InvariantViolation unless the books agree (on after every event in tests)."""
        check_books(self)
