"""The job life cycle and the cluster's changes: what each event means for the books.

Each handler checks the event first and refuses it (SchedulingError) before it changes anything;
the scheduling cycle that follows every event decides what starts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from toposched.core.actions import Action, StopKind, Transition
from toposched.core.books import MIB, Books
from toposched.core.changes import Changes
from toposched.core.demotion import Demotions
from toposched.core.dependencies import failed_why, resolve
from toposched.core.errors import SchedulingError
from toposched.core.job import JobSpec, JobState, RestartPolicy
from toposched.core.ordering import Waiting
from toposched.core.policy import SchedulerPolicy
from toposched.core.records import JobRecord
from toposched.placement.gang import Placement, node_domain
from toposched.placement.mig import starts as mig_starts
from toposched.topology.cluster import Node, Tier, check_labels
from toposched.topology.resources import type_key


class Lifecycle:
    """The event handlers; they change jobs only through `Changes` and the books."""

    def __init__(
        self,
        books: Books,
        waiting: Waiting,
        changes: Changes,
        demotions: Demotions,
        policy: SchedulerPolicy,
    ) -> None:
        self.books = books
        self.waiting = waiting
        self.changes = changes
        self.demotions = demotions
        self.policy = policy
        # (largest node, most workers one domain holds) on the empty cluster, per (GPUs per
        # worker, tier): kept until a node comes or goes.
        self._room: dict[tuple[int, Tier, bool], tuple[int, int]] = {}

    def submit(self, spec: JobSpec, ended: Mapping[str, JobState]) -> list[Action]:
        unmet, failed = resolve(spec, self._state_of, ended, unknown_met=False)
        rec = self.books.register(spec, self.books.now, 0)
        never = self.never_fits(spec)
        if never:
            rec.state = JobState.REJECTED
            rec.note(self.books.now, never)
            self.books.retire(rec, self.policy.keep_finished)
            return [Transition(rec.name, never, None, JobState.REJECTED)]
        if failed is not None:
            # Accepted, and ended at once: a job it had to run after has failed already.
            rec.note(self.books.now, "submitted")
            out: list[Action] = [Transition(rec.name, "submitted", None, JobState.PENDING)]
            return out + self.changes.end(rec, JobState.DEPENDENCY_FAILED, failed_why(*failed))
        if unmet:
            self.books.deps.hold(rec.name, unmet)
            why = f"submitted; {self.books.deps.waits(rec.name)}"
            rec.note(self.books.now, why)
            return [Transition(rec.name, why, None, JobState.PENDING)]
        rec.note(self.books.now, "submitted")
        self.waiting.enqueue(rec)
        return [Transition(rec.name, "submitted", None, JobState.PENDING)]

    def _state_of(self, name: str) -> JobState | None:
        rec = self.books.jobs.get(name)
        return None if rec is None else rec.state

    def restore(
        self,
        spec: JobSpec,
        submitted: float,
        placement: Placement | None,
        restarts: int,
        stopping: StopKind | None,
        service_gpu_s: float = 0.0,
        ended: Mapping[str, JobState] | None = None,
        started: float | None = None,
    ) -> list[Action]:
        if spec.name in self.books.jobs:
            raise SchedulingError(f"a job named {spec.name!r} already exists")
        if placement is None and stopping is not None:
            raise SchedulingError(f"job {spec.name!r}: a job being stopped needs its placement")
        if not 0.0 <= service_gpu_s < math.inf:
            raise SchedulingError(
                f"job {spec.name!r}: service must be a finite number >= 0, got {service_gpu_s}"
            )
        if started is not None and not -math.inf < started <= self.books.now:
            raise SchedulingError(
                f"job {spec.name!r}: started must be a time no later than now, got {started}"
            )
        if placement is None:
            unmet, failed = resolve(spec, self._state_of, ended or {}, unknown_met=True)
            rec = self.books.register(spec, submitted, restarts)
            rec.banked_service = service_gpu_s
            never = self.never_fits(spec)
            if never:
                return self.changes.end(rec, JobState.REJECTED, never)
            if failed is not None:
                return self.changes.end(rec, JobState.DEPENDENCY_FAILED, failed_why(*failed))
            if unmet:
                self.books.deps.hold(rec.name, unmet)
                rec.note(self.books.now, f"restored: {self.books.deps.waits(rec.name)}")
                return []
            rec.note(self.books.now, "restored: waiting")
            self.waiting.enqueue(rec)
            return []
        self._check_restorable(spec, placement)
        rec = self.books.register(spec, submitted, restarts)
        # Its service so far is banked; the current run counts on from now (before the
        # demotion clock starts, which reads it).
        rec.banked_service = service_gpu_s
        self.books.allocate(rec, placement)
        rec.placement = placement
        rec.state = JobState.RUNNING
        rec.started = self.books.now if started is None else started
        rec.last_restart = self.books.now  # service before now is banked above
        self.books.limits.started(rec)
        self.demotions.started(rec, self.books.now)
        if stopping is None:
            rec.note(self.books.now, f"restored: running on {placement.describe()}")
            return []
        # A move or resize restarts on GPUs that only the old core knew: once stopped, such a
        # job waits again as a preempted one does, keeping its place in submission order.
        moving = stopping in (StopKind.MIGRATE, StopKind.RESIZE)
        rec.state = JobState.STOPPING
        self.demotions.stopped(rec)
        rec.stop_kind = StopKind.PREEMPT if moving else stopping
        rec.cancel_requested = stopping is StopKind.CANCEL
        rec.stop_why = f"{stopping.value} under way when the driver restarted"
        rec.note(self.books.now, f"restored: stopping ({stopping.value}) on {placement.describe()}")
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
            i = self.books.capacity.index.get(slot.node)
            if i is None or not self.books.capacity.present[i]:
                raise SchedulingError(f"job {name!r}: node {slot.node!r} is not in the cluster")
            for gpu in slot.gpus:
                if not 0 <= gpu < self.books.capacity.nodes[i].size:
                    raise SchedulingError(f"job {name!r}: node {slot.node!r} has no GPU {gpu}")
                self._check_mig_restorable(spec, i, gpu, slot.instance)
                if (slot.node, gpu) in seen or (i, gpu) in self.books.owner:
                    raise SchedulingError(
                        f"job {name!r}: GPU {gpu} of {slot.node!r} is held by another job"
                    )
                self._check_share_restorable(spec, i, gpu)
                if self.books.unhealthy.get(i, 0) >> gpu & 1:
                    raise SchedulingError(f"job {name!r}: GPU {gpu} of {slot.node!r} is unhealthy")
                seen.add((slot.node, gpu))

    def _check_mig_restorable(self, spec: JobSpec, i: int, gpu: int, start: int | None) -> None:
        """A MIG instance goes back only onto a GPU in MIG mode, where its profile may start
        and nothing else holds its slices; nothing else goes onto a GPU in MIG mode."""
        node = self.books.capacity.nodes[i]
        in_mig = gpu in node.hardware.mig
        if not spec.mig:
            if in_mig:
                raise SchedulingError(
                    f"job {spec.name!r}: GPU {gpu} of {node.name!r} is in MIG mode; only a "
                    "job that asks a MIG profile (mig) can hold part of it"
                )
            return
        if not in_mig:
            raise SchedulingError(
                f"job {spec.name!r}: mig {spec.mig}: GPU {gpu} of {node.name!r} is not in MIG mode"
            )
        here = self.books.mig_gpu(i, gpu)
        if start is None or here is None or start not in mig_starts(here, spec.mig):
            raise SchedulingError(
                f"job {spec.name!r}: mig {spec.mig}: no room for its instance at memory slice "
                f"{start} of GPU {gpu} of {node.name!r}"
            )

    def _check_share_restorable(self, spec: JobSpec, i: int, gpu: int) -> None:
        """A share goes back only where the GPU's shares leave it room; whole GPUs never
        onto a GPU that jobs share."""
        on_gpu = self.books.shares.get((i, gpu), {})
        node = self.books.capacity.nodes[i]
        if not spec.shared:
            if on_gpu:
                raise SchedulingError(
                    f"job {spec.name!r}: GPU {gpu} of {node.name!r} is shared by "
                    f"{', '.join(sorted(on_gpu))}; a job of whole GPUs cannot hold it"
                )
            return
        milli = sum(m for m, _ in on_gpu.values()) + spec.gpu_milli
        mib = sum(x for _, x in on_gpu.values()) + spec.gpu_share_mib
        if milli > 1000 or (mib * MIB > node.hardware.gpu_memory and spec.gpu_share_mib):
            raise SchedulingError(
                f"job {spec.name!r}: GPU {gpu} of {node.name!r} has no room for its share "
                f"beside {', '.join(sorted(on_gpu)) or 'nobody'}"
            )

    def never_fits(self, spec: JobSpec) -> str | None:
        """Why `spec` could not run even on the whole (healthy, empty) cluster, or None:
        drivers refuse such a submission up front instead of keeping a job that can never
        start."""
        g = spec.gpus_per_worker
        if spec.mig:
            return self._mig_never_fits(spec)
        if spec.shared and not self.policy.gang:
            return (
                "rejected: a share of a GPU needs gang admission; this policy binds workers "
                "to whole GPUs one at a time"
            )
        if spec.cpu_only:
            if not self.policy.gang:
                return (
                    "rejected: a job without GPUs needs gang admission; this policy binds "
                    "workers to GPUs one at a time"
                )
            return None  # CPUs and memory do not count here: a node that has them may come
        widest = spec.locality.accept or spec.locality.prefer
        # A gang runs on one GPU type unless it accepts mixed ones: count each type alone.
        one_type = not spec.mixed_types and len(self.books.capacity.gpu_types) > 1
        largest, best = self._room_when_empty(g, widest.tier, one_type)
        if g > largest:
            return f"rejected: a worker needs {g} GPUs; the largest node has {largest}"
        if best < spec.min_workers:
            where = {"node": "one node", "rack": "one rack", "pod": "one pod", "any": "the cluster"}
            kind = " of one GPU type (mixed_types is off)" if one_type else ""
            return (
                f"rejected: needs {spec.min_workers} workers x {g} GPUs{kind} within "
                f"{where[widest.value]}; at most {best} fit there even when it is empty"
            )
        return None

    def _mig_never_fits(self, spec: JobSpec) -> str | None:
        """Why no GPU of the cluster could ever take `spec`'s MIG instance, or None."""
        if not self.policy.gang:
            return (
                "rejected: a MIG instance (mig) needs gang admission; this policy binds workers "
                "to whole GPUs one at a time"
            )
        cap = self.books.capacity
        offered: dict[str, None] = {}
        for i in cap.present_indices():
            table = self.books.mig_table(i)
            if table is None or not spec.where.admits(cap.nodes[i], cap.labels[i]):
                continue
            if table.profile(spec.mig) is not None:
                return None
            offered.update(dict.fromkeys(table.names))
        if not offered:
            return f"rejected: mig {spec.mig}: no GPU it may use is in MIG mode"
        return (
            f"rejected: mig {spec.mig}: no GPU it may use in MIG mode has that profile; "
            f"mig may be {', '.join(offered)}"
        )

    def _room_when_empty(self, g: int, tier: Tier, one_type: bool) -> tuple[int, int]:
        """(largest node, most workers of `g` GPUs one `tier` domain holds, of one GPU type
        if `one_type`) on the empty cluster; cached until a node comes or goes."""
        key = (g, tier, one_type)
        if key not in self._room:
            nodes = [self.books.capacity.nodes[i] for i in self.books.capacity.present_indices()]
            domains: dict[tuple[str, ...], int] = {}
            for node in nodes:
                domain = node_domain(node, tier)
                if one_type:
                    domain = (type_key(node.hardware.gpu_type), *domain)
                # GPUs in MIG mode are never given whole.
                domains[domain] = domains.get(domain, 0) + (node.size - len(node.hardware.mig)) // g
            largest = max((n.size - len(n.hardware.mig) for n in nodes), default=0)
            self._room[key] = (largest, max(domains.values(), default=0))
        return self._room[key]

    def cancel(self, rec: JobRecord) -> list[Action]:
        if rec.state.terminal:
            raise SchedulingError(f"job {rec.name!r} has already ended ({rec.state.value})")
        if rec.state is JobState.PENDING:
            if not self.books.deps.blocked(rec.name):  # one that waits for another is unfiled
                self.waiting.dequeue(rec)
            if rec.partial:
                self.changes.release_all(rec)  # workers a non-gang policy bound while it waited
            return self.changes.end(rec, JobState.CANCELLED, "cancelled while pending")
        rec.cancel_requested = True
        if rec.state is JobState.STOPPING:
            rec.note(self.books.now, "cancel requested while stopping")
            return []
        return self.changes.stop(rec, StopKind.CANCEL, "cancelled")

    def finished(self, rec: JobRecord, ok: bool, why: str) -> list[Action]:
        if rec.state not in (JobState.RUNNING, JobState.STOPPING):
            raise SchedulingError(f"job {rec.name!r} is {rec.state.value}, so it cannot finish")
        if rec.state is JobState.STOPPING and (not ok or rec.stop_kind is StopKind.TIME_LIMIT):
            # Workers exiting non-zero while told to stop: the signal did it, not a fault. At
            # its time limit a clean exit on the signal is still the limit's end (Slurm's too).
            return self.stopped(rec)
        self.changes.release_all(rec)
        if ok:
            return self.changes.end(rec, JobState.SUCCEEDED, why or "all workers exited 0")
        return self._failed(rec, why or "a worker exited non-zero")

    def worker_failed(self, rec: JobRecord, worker: int, why: str) -> list[Action]:
        if rec.state is not JobState.RUNNING:
            return []
        return self.changes.stop(
            rec, StopKind.FAILURE, f"worker {worker} failed: {why or 'no reason'}"
        )

    def idle(self, rec: JobRecord, why: str) -> list[Action]:
        """Stop a job whose GPUs sat idle; a job not running (stopped or ended meanwhile) is
        left alone: the driver's samples lag the core."""
        if rec.state is not JobState.RUNNING:
            return []
        return self.changes.stop(rec, StopKind.IDLE, why)

    def time_limits(self) -> list[Action]:
        """Stop each running job whose run has reached its time limit by now: its checkpoint
        signal (or SIGTERM) and its grace first, as any stop, then it ends timed-out."""
        out: list[Action] = []
        now = self.books.now
        for rec in self.books.limits.due(now):
            assert rec.started is not None and rec.spec.limit_s is not None
            why = (
                f"reached its time limit of {_clock(rec.spec.limit_s)} (ran "
                f"{_clock(now - rec.started)})"
            )
            out += self.changes.stop(rec, StopKind.TIME_LIMIT, why)
        return out

    def stopped(self, rec: JobRecord) -> list[Action]:
        if rec.state is not JobState.STOPPING:
            raise SchedulingError(f"job {rec.name!r} is {rec.state.value}, not stopping")
        kind, rec.stop_kind = rec.stop_kind, None
        if self.books.reservation is not None:
            self.books.reservation.awaiting.discard(rec.name)
        if rec.cancel_requested:
            self.changes.release_all(rec)
            return self.changes.end(rec, JobState.CANCELLED, "cancelled")
        if rec.resume is not None and kind in (StopKind.MIGRATE, StopKind.RESIZE):
            return self.changes.resume(rec, kind)
        if kind is StopKind.FAILURE:
            self.changes.release_all(rec)
            return self._failed(rec, rec.stop_why)
        if kind is StopKind.TIME_LIMIT:
            self.changes.release_all(rec)
            return self.changes.end(rec, JobState.TIMED_OUT, f"timed-out: {rec.stop_why}")
        if kind is StopKind.IDLE and not rec.spec.checkpointable:
            # Restarted from scratch it would only sit idle again, having lost its work.
            self.changes.release_all(rec)
            return self.changes.end(rec, JobState.IDLE_STOPPED, f"idle-stopped: {rec.stop_why}")
        # Preempted: back to the queue, keeping its place in submission order.
        self.changes.release_all(rec)
        return self.changes.requeue(rec, f"requeued after {kind.value if kind else 'stop'}")

    def _failed(self, rec: JobRecord, why: str) -> list[Action]:
        spec = rec.spec
        if spec.restart is RestartPolicy.ON_FAILURE and rec.restarts < spec.max_restarts:
            rec.restarts += 1
            return self.changes.requeue(
                rec, f"requeued (restart {rec.restarts} of {spec.max_restarts}): {why}"
            )
        return self.changes.end(rec, JobState.FAILED, why)

    def add_node(self, node: Node) -> None:
        self.books.add_node(node)
        self._room.clear()
        self.books.note(f"node {node.name} added ({node.size} GPUs)")

    def remove_node(self, name: str) -> list[Action]:
        i = self.books.node_index(name)
        out: list[Action] = []
        for job in self.books.holders_on(i):
            out += self._lost(self.books.jobs[job], name, None, f"node {name} was lost")
        self.books.remove_node(i)
        self._room.clear()
        self.books.note(f"node {name} removed")
        return out

    def _lost(self, rec: JobRecord, node: str, gpu: int | None, why: str) -> list[Action]:
        """A job holds GPUs on lost hardware (a node, or one `gpu` of it)."""

        def touches(placement: Placement | None) -> bool:
            if placement is None:
                return False
            if gpu is None:  # the whole node: its workers without GPUs too
                return any(slot.node == node for slot in placement.workers)
            return any(n == node and g == gpu for n, g in placement.pairs())

        if rec.state is JobState.RUNNING and touches(rec.placement):
            return self.changes.stop(rec, StopKind.FAILURE, why)
        if rec.state is JobState.STOPPING and touches(rec.resume):
            # It was moving onto (or growing over) the lost GPUs: give up the move. Once
            # stopped it waits in the queue like a preempted job, keeping its place.
            if rec.target is not None:  # GPUs it was moving or growing onto (none to shrink)
                self.books.release_pairs(rec, set(rec.target.pairs()))
            rec.target = rec.resume = None
            rec.note(self.books.now, f"move abandoned: {why}")
        return []

    def cordon(self, name: str, on: bool) -> None:
        i = self.books.node_index(name)
        if on != (i in self.books.cordoned):
            self.books.cordon(i, on)
            self.books.note(f"node {name} {'cordoned' if on else 'takes work again'}")

    def label(self, name: str, key: str, value: str | None) -> None:
        i = self.books.node_index(name)
        labels = dict(self.books.labels[name])
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
        try:
            check_labels(name, labels)
        except ValueError as err:
            raise SchedulingError(str(err)) from None
        self.books.labels[name] = labels
        self.books.capacity.set_labels(i, labels)
        self.books.changed.add(i)

    def gpu_health(self, name: str, gpu: int, healthy: bool) -> list[Action]:
        i = self.books.node_index(name)
        size = self.books.capacity.nodes[i].size
        if not 0 <= gpu < size:
            raise SchedulingError(f"node {name} has GPUs 0..{size - 1}, not {gpu}")
        bit = 1 << gpu
        bad = self.books.unhealthy.get(i, 0)
        holder = self.books.owner.get((i, gpu))
        sharers = self.books.sharers_of(i, gpu)
        mig = self.books.capacity.nodes[i].hardware.mig_mask
        if not healthy:
            if bad & bit:
                return []
            self.books.set_unhealthy(i, bad | bit)
            if self.books.reservation is not None and self.books.reservation.gpus.get(i, 0) & bit:
                self.books.reservation = None  # re-planned in this cycle, around the failed GPU
            if sharers:
                out: list[Action] = []
                for job in sharers:
                    out += self._lost(
                        self.books.jobs[job], name, gpu, f"GPU {gpu} of node {name} failed"
                    )
                return out
            if holder is None:
                # A cordoned node has no free GPU, nor is a GPU in MIG mode ever free.
                if i not in self.books.cordoned and not mig & bit:
                    self.books.capacity.take(i, bit)
                return []
            return self._lost(
                self.books.jobs[holder], name, gpu, f"GPU {gpu} of node {name} failed"
            )
        if bad & bit:
            self.books.set_unhealthy(i, bad & ~bit)
            if holder is None and not sharers and i not in self.books.cordoned and not mig & bit:
                self.books.capacity.give(i, bit)
        return []


def _clock(seconds: float) -> str:
    """Seconds as Slurm writes a time: [D-]HH:MM:SS (whole seconds, rounded down)."""
    days, rest = divmod(int(seconds), 86_400)
    hours, rest = divmod(rest, 3_600)
    text = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text
