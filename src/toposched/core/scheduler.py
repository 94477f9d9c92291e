"""The scheduler state machine: `handle(event) -> [Action]`, pure and deterministic.

Each event is handled in two steps, as dask's worker state machine does: first the event is
applied to the books (core/lifecycle.py: a job arrives, GPUs come back, a node is lost), then a
scheduling cycle decides what starts and what must stop (core/cycle.py for gang admission, in
numbered phases; core/nongang.py for the baseline that binds one worker at a time). Every
decision is an action tagged with its reason, and every job keeps a log of them.

The parts, each in a room of its own:
- books.py     the state: free and failed GPUs, owners, jobs, queues, the reservation;
- ordering.py  the policy's job order, the waiting lists, each job's level;
- changes.py   a job's state changes (start, stop, requeue, resume, end);
- lifecycle.py what each event means;
- cycle.py     the phases; room.py, reclaim.py and reservation.py plan what the cycle does;
- views.py     what drivers read; validate.py the invariants checked after every event.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Sequence

from toposched.core.actions import Action
from toposched.core.books import Books
from toposched.core.changes import Changes
from toposched.core.cycle import GangCycle
from toposched.core.demotion import Demotions
from toposched.core.errors import BatchRefused, SchedulingError
from toposched.core.events import (
    Event,
    GpuHealth,
    JobCancelled,
    JobFinished,
    JobIdle,
    JobRestored,
    JobStopped,
    JobSubmitted,
    NodeAdded,
    NodeChanged,
    NodeCordoned,
    NodeLabelled,
    NodeRemoved,
    QueueConfigured,
    Tick,
    WorkerFailed,
)
from toposched.core.job import JobSpec, JobState
from toposched.core.lifecycle import Lifecycle
from toposched.core.mig import MigPlacer
from toposched.core.nongang import WorkerBinding
from toposched.core.ordering import Waiting
from toposched.core.policy import SchedulerPolicy, TypeChoice
from toposched.core.reclaim import Reclaim
from toposched.core.records import JobRecord
from toposched.core.reservation import Reserver
from toposched.core.sharing import SharePlacer
from toposched.core.stoprule import StopRule
from toposched.core.typechoice import FastestType, TypeSpeed
from toposched.core.validate import check as check_books
from toposched.core.views import CoreView, JobView
from toposched.placement.by_model import ModelSpread, StepTime
from toposched.placement.policies import GangPlacer, placement_policy
from toposched.placement.request import Mode
from toposched.placement.switch import TopologySwitch
from toposched.placement.typed import OneType, TypeChooser, first_in_node_order
from toposched.topology.cluster import Cluster

__all__ = ["JobView", "Scheduler", "SchedulingError"]

# Events that may change what reclaim finds (a node, a GPU, a guarantee).
RECLAIM_EVENTS = (
    NodeAdded,
    NodeRemoved,
    NodeLabelled,
    NodeChanged,
    NodeCordoned,
    GpuHealth,
    QueueConfigured,
)


class Scheduler:
    """One cluster's scheduling state. Drivers feed events and carry out the returned actions;
    they read the state through `view`."""

    def __init__(
        self,
        cluster: Cluster,
        policy: SchedulerPolicy | None = None,
        queues: dict[str, int] | None = None,
        *,
        validate: bool = False,
        rng: random.Random | None = None,
        step_time: StepTime | None = None,
        type_speed: TypeSpeed | None = None,
    ) -> None:
        """`rng` feeds the policies that pick at random (a seeded one keeps runs repeatable);
        `step_time`, a performance model's prediction, is what `spread_by_model` places by;
        `type_speed`, how fast a model runs on each GPU type, what `type_choice` weighs."""
        self.policy = policy = policy or SchedulerPolicy()
        self.validate = validate
        self.books = books = Books(cluster)
        for name, guaranteed in (queues or {}).items():
            books.configure_queue(name, guaranteed)
        demote = policy.demote_after_gpu_h
        rule = StopRule.of(policy)
        threshold = None if demote is None else demote * 3600.0
        self.demotions = Demotions(threshold, books.job_nodes, rule)
        self.waiting = waiting = Waiting(books, policy, self.demotions)
        self.changes = changes = Changes(books, waiting, self.demotions, policy)
        self.lifecycle = Lifecycle(books, waiting, changes, self.demotions, policy)
        placing = placement_policy(policy.placement)
        self.reclaim: Reclaim | None = None
        self.gang: GangCycle | None = None
        self.binding: WorkerBinding | None = None
        if placing.gang is not None:
            place: GangPlacer = placing.gang
            if policy.spread_by_model is not None and step_time is not None:
                place = ModelSpread(place, step_time, policy.spread_by_model)
            place = TopologySwitch(place)
            choose: TypeChooser = FastestType(waiting, policy, type_speed)
            if policy.type_choice is TypeChoice.BLIND:
                choose = first_in_node_order
            place = OneType(place, choose)
            # Preemption plans the fewest nodes: a spread plan would stop more jobs for it.
            fewest = OneType(placing.gang, choose)
            self.reclaim = Reclaim(books, waiting, self.demotions, policy, fewest, rule)
            reserver = Reserver(books, policy.default_runtime_s, validate)
            shares = SharePlacer(books, policy.share_placement, rng or random.Random(0))
            self.gang = GangCycle(
                books,
                waiting,
                changes,
                policy,
                place,
                self.reclaim,
                reserver,
                shares,
                MigPlacer(books),
            )
        if not policy.gang:
            assert placing.worker is not None  # SchedulerPolicy refuses it otherwise
            self.binding = WorkerBinding(
                books, waiting, changes, placing.worker, rng or random.Random(0)
            )
        self.view = CoreView(books, waiting, policy)

    # ------------------------------------------------------------------ the entry point

    def handle(self, *events: Event) -> list[Action]:
        out: list[Action] = []
        for event in events:
            out.extend(self._handle_one(event))
        return out

    def handle_batch(self, events: Sequence[Event]) -> list[Action]:
        """Every event's change to the books in turn, then one scheduling cycle: for a driver
        that learns of many changes at once (a watch delivers them), deciding once is enough
        and far cheaper than a cycle per event. If an event is refused, the cycle still runs
        for those before it, and BatchRefused carries their actions."""
        out: list[Action] = []
        for event in events:
            try:
                out += self._take(event)
            except SchedulingError as err:
                out += self._cycle(None)
                raise BatchRefused(err, out) from err
        out += self._cycle(None)
        if self.validate:
            self.check()
        return out

    def _handle_one(self, event: Event) -> list[Action]:
        out = self._take(event)
        if not self._waits_for_others(event):
            out += self._cycle(self._only(event))
        if self.validate:
            self.check()
        return out

    def _take(self, event: Event) -> list[Action]:
        """Step 1 for one event, its time included; a refused event changes nothing."""
        books = self.books
        before = books.now
        books.now = max(books.now, event.time)
        try:
            out = self._apply(event)
        except SchedulingError:
            books.now = before  # every handler refuses before it changes anything
            raise
        # Time passed with the event: runs that reached their limits by now stop.
        return out + self.lifecycle.time_limits()

    def _apply(self, event: Event) -> list[Action]:
        """Step 1: what the event means for the books."""
        life = self.lifecycle
        if isinstance(event, RECLAIM_EVENTS):
            self.books.epoch += 1  # what reclaim found may have changed
            self.books.freed += 1
        match event:
            case JobSubmitted(spec=spec, ended=ended):
                return life.submit(spec, dict(ended))
            case JobRestored(spec=spec, submitted=submitted, placement=placement, restarts=n):
                return life.restore(
                    spec,
                    submitted,
                    placement,
                    n,
                    event.stopping,
                    event.service_gpu_s,
                    dict(event.ended),
                    event.started,
                )
            case JobCancelled(job=name):
                return life.cancel(self.books.job(name))
            case JobFinished(job=name, succeeded=ok, reason=why):
                return life.finished(self.books.job(name), ok, why)
            case JobIdle(job=name, why=why):
                return life.idle(self.books.job(name), why)
            case WorkerFailed(job=name, worker=worker, reason=why):
                return life.worker_failed(self.books.job(name), worker, why)
            case JobStopped(job=name):
                return life.stopped(self.books.job(name))
            case NodeAdded(node=node):
                life.add_node(node)
            case NodeRemoved(node=name):
                return life.remove_node(name)
            case NodeLabelled(node=name, key=key, value=value):
                life.label(name, key, value)
            case NodeChanged(node=node):
                self.books.change_node(node)
            case NodeCordoned(node=name, cordoned=on):
                life.cordon(name, on)
            case GpuHealth(node=name, gpu=gpu, healthy=healthy):
                return life.gpu_health(name, gpu, healthy)
            case QueueConfigured(queue=name, guaranteed_gpus=gpus):
                self.books.configure_queue(name, gpus)
            case Tick():
                pass
            case _:
                raise SchedulingError(f"unknown event {event!r}")
        return []

    def _waits_for_others(self, event: Event) -> bool:
        """A submission that waits for jobs it runs after changes nothing a cycle could act
        on: no cycle tries it until they end, and it holds nothing."""
        return isinstance(event, JobSubmitted) and self.books.deps.blocked(event.spec.name)

    def _only(self, event: Event) -> str | None:
        """A submission that ranks behind the reserved job changes nothing for the jobs
        already waiting: the cycle tries the new job alone."""
        if not isinstance(event, JobSubmitted):
            return None
        rec = self.books.jobs.get(event.spec.name)
        if (
            rec is not None
            and rec.state is JobState.PENDING
            and self.waiting.behind_reservation(rec)
        ):
            return rec.name
        return None

    def _cycle(self, only: str | None) -> list[Action]:
        """Step 2: the scheduling cycle."""
        self.waiting.refile_due()
        if self.binding is not None:
            return self.binding.run()
        assert self.gang is not None
        return self.gang.run(only)

    def forget(self, name: str) -> None:
        """Drop ended job `name` (its driver deleted it): its name may be submitted again.
        SchedulingError for a live job; nothing for one not held."""
        self.books.forget(name)

    # ------------------------------------------------------------------ queries

    def next_due(self) -> float | None:
        """The earliest time after now at which a cycle may decide something new with no
        event before it: a waiting gang's locality widens, a demoted job is promoted, the
        blocked job becomes patient or a running job is demoted (so it may be preempted), an
        elastic job may grow, a running job reaches its time limit. A driver that keeps no
        clock of its own (the simulator) sends a Tick then; one that ticks on its own (the
        server, every few seconds) need not ask.
        None: nothing is due."""
        now = self.books.now
        due = self.waiting.lists.next_due()
        best = due if due is not None and due > now else math.inf
        if self.reclaim is not None:
            at = self.reclaim.asks_again_at()
            if now < at < best:
                best = at
        if self.gang is not None:
            at = self.gang.grows_at()
            if now < at < best:
                best = at
        limit = self.next_time_limit()
        if limit is not None and now < limit < best:
            best = limit
        return None if math.isinf(best) else best

    def next_time_limit(self) -> float | None:
        """When the next running job reaches its time limit (a Tick then stops it), or
        None: a driver that ticks on its own clock asks this to tick on time."""
        return self.books.limits.next_at()

    def job(self, name: str) -> JobView:
        return self.view.job(name)

    def explain(self, name: str, when: Callable[[float], str] | None = None) -> str:
        return self.view.explain(name, when)

    def partial_holds(self) -> dict[str, int]:
        return self.view.partial_holds()

    def pending(self) -> Iterator[JobRecord]:
        """Pending jobs in the order the next cycle would try them."""
        return self.view.pending()

    def never_fits(self, spec: JobSpec) -> str | None:
        """Why `spec` could not run even on the whole empty cluster, or None."""
        return self.lifecycle.never_fits(spec)

    def check(self) -> None:
        """Raise InvariantViolation unless the books agree (on after every event in tests)."""
        check_books(self.books, self.waiting, self.demotions, self.policy.gang)

    @property
    def mode(self) -> Mode:
        """How 1-GPU jobs are placed now (adaptive spread/pack)."""
        return self.gang.mode if self.gang is not None else Mode.PACK

    @property
    def now(self) -> float:
        return self.books.now
