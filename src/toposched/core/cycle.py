"""The gang scheduling cycle, in numbered phases; one runs after every event.

1. mode      - adaptive spread/pack for 1-GPU jobs from the allocated fraction, with hysteresis;
2. heads     - waiting jobs in the policy's order (core/ordering.py), list by list;
3. admit     - each in turn is placed whole (gang) or not at all; nothing is held while waiting;
4. make room - for the first blocked job: shrink elastic jobs, only as far as needed; else
               migrate the fewest checkpointable jobs to open a node for it; else preempt
               borrowed, lower-priority or demoted work, choosing victims whose GPUs form the
               best placement for it, checkpointable work first (core/room.py plans, the cycle
               carries the plan out);
5. reserve   - otherwise it gets a reservation on the GPUs that free up first; later jobs may
               backfill only off those GPUs, or if they are expected to end before them;
6. grow      - with nobody waiting, elastic jobs grow into idle GPUs.

A submission that changes nothing for the jobs already waiting (it ranks behind the reserved
job) only tries the new job: the others were already tried against at least as many free GPUs.
Waiting jobs are filed by (queue, shape), so a cycle judges a whole list of alike jobs by its
first one: within one cycle nothing frees up, so a shape that failed fails again.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from toposched.core.actions import Action, StopKind
from toposched.core.books import Books
from toposched.core.changes import Changes
from toposched.core.job import JobSpec, JobState, Needs
from toposched.core.mig import MigPlacer
from toposched.core.moves import plan_growth
from toposched.core.ordering import Cut, Key, Shape, Waiting
from toposched.core.policy import SchedulerPolicy, SingleGpu
from toposched.core.reclaim import Reclaim
from toposched.core.records import JobRecord, Reservation, Said
from toposched.core.requests import gang_request
from toposched.core.reservation import Reserver, describe
from toposched.core.room import RoomPlan, plan_defragment, plan_preempt, plan_shrink
from toposched.core.sharing import SharePlacer
from toposched.placement.cpu_only import place_cpu_only
from toposched.placement.gang import GangRequest, Placement, Shortfall
from toposched.placement.policies import GangPlacer
from toposched.placement.request import Mode
from toposched.topology.cluster import Eligibility, Tier

# (workers, GPUs each, tier, nodes, off the reservation)
Failed = tuple[int, int, Tier, Needs | None, bool]


class GangCycle:
    """Phases 1-6 for policies with gang admission; what lasts between cycles (the mode, the
    cycle count) is kept here, what lasts one cycle in a `Turn`."""

    def __init__(
        self,
        books: Books,
        waiting: Waiting,
        changes: Changes,
        policy: SchedulerPolicy,
        place: GangPlacer,
        reclaim: Reclaim,
        reserver: Reserver,
        shares: SharePlacer,
        instances: MigPlacer,
    ) -> None:
        self.books = books
        self.waiting = waiting
        self.changes = changes
        self.policy = policy
        self.place = place
        self.reclaim = reclaim
        self.reserver = reserver
        self.shares = shares
        self.instances = instances
        self.mode = Mode.PACK if policy.single_gpu is SingleGpu.PACK else Mode.SPREAD
        self.cycles = 0
        # Requests no migration plan opened a node for, as of `books.freed`: nothing but GPUs
        # freed or the cluster changed can make one (a start takes free GPUs or puts a job
        # where it blocks), so a blocked head asks again only then. On a large full cluster
        # the plan walks every node: asked at every event, it was the cost.
        self.no_room: tuple[int, set[GangRequest]] = (-1, set())

    def run(self, only: str | None) -> list[Action]:
        books = self.books
        self.update_mode()  # 1
        res = books.reservation
        if res is not None and (
            res.job not in books.jobs or books.jobs[res.job].state is not JobState.PENDING
        ):
            books.reservation = None
        self.cycles += 1
        turn = Turn(self, only)
        out: list[Action] = []
        cut: Cut | None = None
        for rec in self.waiting.in_order(only, turn.skip):  # 2
            if rec.state is not JobState.PENDING:
                continue
            if books.capacity.total_free == 0 and turn.first_blocked:
                lists = self.waiting.lists
                if not (lists.cpu_only or lists.shared):
                    cut = Cut(self.cycles, None)
                    break
                # Jobs without GPUs, or with part of one, behind it may still start.
                if rec.spec.gpus_per_worker and not rec.spec.part_of_gpu:
                    turn.no_gpu_free(rec)
                    continue
            actions, more = turn.admit(rec)  # 3, and 4-5 for the first blocked job
            out += actions
            if not more:
                if not self.policy.backfill:
                    cut = Cut(self.cycles, rec.name)
                break
        if only is None:
            # The jobs this cycle did not reach are told why (views.CoreView.reason).
            self.waiting.cut = cut
        if self.policy.elastic and not self.waiting:
            out += self.grow()  # 6
        return out

    def update_mode(self) -> None:
        """Phase 1: spread 1-GPU jobs while the cluster is quiet, pack them when it is busy."""
        if self.policy.single_gpu is not SingleGpu.ADAPTIVE:
            return
        healthy = self.books.healthy_gpus()
        load = 1.0 - self.books.capacity.total_free / healthy if healthy else 1.0
        if self.mode is Mode.SPREAD and load >= self.policy.pack_above:
            self.mode = Mode.PACK
            self.books.note(f"1-GPU jobs now packed: {load:.0%} of GPUs allocated")
        elif self.mode is Mode.PACK and load <= self.policy.spread_below:
            self.mode = Mode.SPREAD
            self.books.note(f"1-GPU jobs now spread: {load:.0%} of GPUs allocated")

    def request(self, rec: JobRecord, widest: Tier) -> GangRequest:
        spec = rec.spec
        return gang_request(
            spec, spec.min_workers, widest, mode=self.mode, extra_nodes=self.policy.extra_nodes
        )

    def chosen_by(self, spec: JobSpec) -> str:
        """How a start's placement was chosen, said as it is: only the topology policy's
        exact choice is called the best."""
        if not spec.topology:
            return "topology off for this job: the lowest free GPU indices, first fit"
        if self.policy.placement != "topology":
            return f"placed by the {self.policy.placement} policy (it ignores the topology)"
        return "best placement now"

    def on_selected(self, short: Shortfall, where: Eligibility) -> Shortfall:
        """A shortfall that says which nodes the job may use (`where`), and what rules the
        others out."""
        cap = self.books.capacity
        if not cap.ruled_out(where):
            return short
        why, kinds = cap.explained(where)
        selector = where.selector
        matching = sum(kinds.values())
        if list(why) == [where.why_not_labels()]:
            labels = selector.describe()
            if not matching:
                return Shortfall(f"no node has the labels {labels} (the job's selector)")
            return Shortfall(f"{short.reason} (on the {matching} node(s) labelled {labels})")
        ruled = "; ".join(f"{n} {reason}" for reason, n in sorted(why.items()))
        if not matching:
            return Shortfall(f"no node it may use: {ruled}")
        usable = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
        return Shortfall(f"{short.reason} (on the node(s) it may use: {usable}; {ruled})")

    # ------------------------------------------------------------------ phases 4 and 5

    def blocked_head(self, rec: JobRecord, request: GangRequest, short: Shortfall) -> list[Action]:
        """Phases 4 and 5 for the first job that could not be placed."""
        books, now = self.books, self.books.now
        res = books.reservation
        if res is not None and res.job == rec.name:
            if res.awaiting:
                waits = ", ".join(sorted(res.awaiting))
                rec.note(now, f"{short.reason}; waiting for {waits} to stop")
                return []
            # Running jobs are demoted as they run: one may have become preemptible since.
            out = self.preempt(rec, request, short) if self._demotes() else []
            if not out:
                rec.note(now, f"{short.reason}; {self.describe(res)}")
            return out
        if self.policy.elastic:
            out = self.carry_out(rec, plan_shrink(books, rec, request, self.place))
            if out:
                return out
        if self.policy.migration and not self._known_no_room(request):
            plan = plan_defragment(books, rec, request, self.place, self.reclaim.rule)
            if plan is None:
                self.no_room[1].add(request)
            out = self.carry_out(rec, plan)
            if out:
                return out
        out = self.preempt(rec, request, short)
        if out:
            return out
        if self.policy.reservation:
            books.reservation = self.reserver.reserve(rec, request)
        res = books.reservation
        if res is not None and res.job == rec.name:
            rec.note(now, f"{short.reason}; {self.describe(res)}")
        else:
            rec.note(now, short.reason)
        return out

    def _known_no_room(self, request: GangRequest) -> bool:
        freed, requests = self.no_room
        if freed != self.books.freed:
            self.no_room = (self.books.freed, set())
            return False
        return request in requests

    def describe(self, res: Reservation) -> str:
        return describe(self.books, res, self.policy.default_runtime_s)

    def _demotes(self) -> bool:
        return self.policy.preemption and self.policy.demote_after_gpu_h is not None

    def preempt(self, rec: JobRecord, request: GangRequest, short: Shortfall) -> list[Action]:
        if not self.policy.preemption:
            return []
        return self.carry_out(rec, plan_preempt(self.reclaim, rec, request, short))

    def carry_out(self, rec: JobRecord, plan: RoomPlan | None) -> list[Action]:
        """Reserve the plan's GPUs for `rec` and stop the jobs it names."""
        if plan is None:
            return []
        books = self.books
        awaiting = {stop.job.name for stop in plan.stops}
        books.reservation = Reservation(rec.name, plan.gpus, books.now, awaiting)
        rec.note(books.now, plan.note)
        out: list[Action] = []
        for stop in plan.stops:
            if stop.target is not None:
                books.allocate(stop.job, stop.target)
                stop.job.target = stop.target
            if stop.resume is not None:
                stop.job.resume = stop.resume
            out += self.changes.stop(stop.job, stop.kind, stop.why)
        return out

    # ------------------------------------------------------------------ phase 6

    def grows_at(self) -> float:
        """When the next running elastic job below its maximum may grow, if nobody waits
        then (inf: none)."""
        if not self.policy.elastic or self.waiting:
            return math.inf
        now, after = self.books.now, self.policy.grow_after_s
        times = (
            r.last_restart + after
            for r in self.books.elastic.values()
            if r.state is JobState.RUNNING
            and r.placement is not None
            and len(r.placement.workers) < r.spec.max_workers
        )
        return min((t for t in times if t > now), default=math.inf)

    def grow(self) -> list[Action]:
        """Phase 6: nobody waits, so elastic jobs take idle GPUs (a restart at the new size)."""
        books = self.books
        out: list[Action] = []
        for rec in sorted(books.elastic.values(), key=lambda r: r.seq):
            if rec.state is not JobState.RUNNING or rec.spec.elastic is None:
                continue
            if books.now - rec.last_restart < self.policy.grow_after_s:
                continue
            if books.capacity.total_free < rec.spec.gpus_per_worker:
                break
            widest = (rec.spec.locality.accept or rec.spec.locality.prefer).tier
            plan = plan_growth(books.capacity, rec, widest, books.network_gbps, self.place)
            if plan is None:
                continue
            extra, whole = plan
            books.allocate(rec, extra)
            rec.target, rec.resume = extra, whole
            why = f"growing to {len(whole.workers)} workers on idle GPUs"
            out += self.changes.stop(rec, StopKind.RESIZE, why)
        return out


class Turn:
    """What one cycle learns as it goes: which shapes failed (and the note they left), which
    lists are hopeless now or off the reservation, and whether a job is blocked yet."""

    def __init__(self, cycle: GangCycle, only: str | None) -> None:
        self.cycle = cycle
        # What each failed shape's note states that jobs started later change (the free GPU
        # count, the reservation's holder): views.CoreView says it as it is when read.
        self.said: dict[Failed, Said] = {}
        self.books = cycle.books
        self.waiting = cycle.waiting
        self.failed: dict[Failed, str] = {}
        # Shapes that cannot start now at all, and shapes that cannot start off the current
        # reservation's GPUs: their lists drop out of the cycle whole (PendingJobs.order), and
        # once every waiting shape is hopeless the cycle ends.
        self.hopeless: set[Shape] = set()
        self.off_reserved: set[Shape] = set()
        self.first_blocked = only is not None
        # Jobs that rank before the reservation's holder may use its GPUs; those after it may
        # not, unless they are expected to end before the holder can start.
        self.behind_holder = only is not None
        self.judged_for = self.books.reservation

    def skip(self, key: Key) -> bool:
        """Phase 2: whether a whole list drops out of this cycle when its turn comes."""
        shape = key[1]
        res = self.books.reservation
        if shape in self.hopeless:  # most lists, once a cycle is under way
            if not self.behind_holder and res is not None:
                self.behind_holder = self.waiting.lists.filed.get(res.job) == key
            return True
        lists = self.waiting.lists
        holder_here = res is not None and lists.filed.get(res.job) == key
        return (
            self.behind_holder
            and res is self.judged_for
            and shape in self.off_reserved
            and not holder_here
            and self.cycle.policy.default_runtime_s is None
            and not lists.declared.get(key)  # none of them ends in time
        )

    def exclusion(self, rec: JobRecord) -> dict[int, int] | None:
        """The reserved GPUs, if `rec` may not use them: it ranks after their holder and is
        not expected to end before the holder can start."""
        res = self.books.reservation
        if res is None:
            return None
        if res.job == rec.name:
            self.behind_holder = True
            return None
        if not self.behind_holder or not res.holds_free(self.books.capacity):
            return None
        runtime = rec.spec.limit_s or self.cycle.policy.default_runtime_s or math.inf
        if math.isinf(runtime) or self.books.now + runtime > res.until:
            return res.gpus
        return None

    def admit(self, rec: JobRecord) -> tuple[list[Action], bool]:
        """Phase 3 for one job: start it, or note why not (and make room, phases 4 and 5, if
        it is the first blocked job). Returns its actions, and whether the cycle goes on."""
        books, cycle = self.books, self.cycle
        rec.tried = cycle.cycles
        whole = self.waiting.shape_of(rec)
        if rec.spec.cpu_only:
            return self.admit_cpu_only(rec, whole)
        if rec.spec.shared:
            return self.admit_shared(rec, whole)
        if rec.spec.mig:
            return self.admit_mig(rec, whole)
        exclude = self.exclusion(rec)
        failed: Failed = (*whole, exclude is not None)
        known = self.failed.get(failed)
        if known is not None:
            rec.note(books.now, known)
            rec.said = self.said.get(failed)
            return [], True
        result: Placement | Shortfall
        free = books.capacity.total_free
        gpus = whole[0] * whole[1]  # the request's: its minimum workers, their GPUs each
        request = None  # built only where it is needed: most jobs looked at fail on the count
        if gpus > free:
            result = Shortfall(f"needs {gpus} GPUs; {free} are free")
            self.said[failed] = Said(free=free)
        else:
            request = cycle.request(rec, whole[2])
            result = cycle.place(books.capacity, request, books.network_gbps, exclude)
        if isinstance(result, Shortfall):
            result = cycle.on_selected(result, rec.spec.where)
        if isinstance(result, Placement):
            why = cycle.chosen_by(rec.spec)
            if exclude is not None and books.reservation is not None:
                why = f"backfilled around the reservation for {books.reservation.job}"
            return cycle.changes.start(rec, result, why), True
        if request is None and not self.first_blocked:  # the head makes room with it
            request = cycle.request(rec, whole[2])
        outcome = self.blocked(rec, request, result, failed, exclude is not None)
        said = self.said.get(failed)
        res = books.reservation
        if res is not None and res.job == rec.name and "; reserved " in rec.reason:
            said = replace(said or Said(), behind=None, reserved=True)
        rec.said = said
        return outcome

    def admit_cpu_only(self, rec: JobRecord, whole: Shape) -> tuple[list[Action], bool]:
        """Phase 3 for a job without GPUs: placed by CPUs and memory alone. The reservation
        does not keep it off the reserved GPUs' nodes: it takes no GPU."""
        books = self.books
        return self.admit_alone(
            rec,
            whole,
            lambda: place_cpu_only(
                books.capacity, self.cycle.request(rec, whole[2]), books.cordoned
            ),
            lambda _: "placed by its CPUs and memory",
        )

    def admit_shared(self, rec: JobRecord, whole: Shape) -> tuple[list[Action], bool]:
        """Phase 3 for a job that asks part of one GPU: placed by the share policy (the
        reservation's GPUs are not free, so it never takes them)."""
        cycle = self.cycle
        share_policy = cycle.policy.share_placement
        return self.admit_alone(
            rec,
            whole,
            lambda: cycle.shares.place(rec.spec),
            lambda _: f"a share of a GPU, placed by the {share_policy} share policy",
        )

    def admit_mig(self, rec: JobRecord, whole: Shape) -> tuple[list[Action], bool]:
        """Phase 3 for a job that asks a MIG instance: placed on a GPU in MIG mode (such
        GPUs are never free, nor reserved)."""

        def why(placed: Placement) -> str:
            slot = placed.workers[0]
            return (
                f"a MIG {rec.spec.mig} instance at memory slice {slot.instance} of GPU "
                f"{slot.gpus[0]}, where the largest profiles stay placeable"
            )

        return self.admit_alone(rec, whole, lambda: self.cycle.instances.place(rec.spec), why)

    def admit_alone(
        self,
        rec: JobRecord,
        whole: Shape,
        place: Callable[[], Placement | Shortfall],
        why: Callable[[Placement], str],
    ) -> tuple[list[Action], bool]:
        """Phase 3 for a job that takes no whole GPU (none, a share, a MIG instance): `place`d,
        started saying `why`, or noted why not. It neither makes room nor reserves, nor blocks
        the jobs after it; once every shape is hopeless, the lists all drop out."""
        books, cycle = self.books, self.cycle
        failed: Failed = (*whole, False)
        known = self.failed.get(failed)
        if known is not None:
            rec.note(books.now, known)
            rec.said = None
            return [], True
        result = place()
        if isinstance(result, Shortfall) and not rec.spec.cpu_only:
            result = cycle.on_selected(result, rec.spec.where)
        if isinstance(result, Placement):
            return cycle.changes.start(rec, result, why(result)), True
        rec.note(books.now, result.reason)
        rec.said = None
        self.hopeless_shape(failed, result.reason, None)
        return [], True

    def no_gpu_free(self, rec: JobRecord) -> None:
        """No GPU is free and a job already blocked: one that needs GPUs cannot start, nor
        can its shape (as a cycle that stops there says), while jobs without GPUs may."""
        rec.tried = self.cycle.cycles
        res = self.books.reservation
        said = Said(behind=res.job) if res is not None else None
        text = "no GPU is free" + (f"; waiting behind {res.job}" if res is not None else "")
        rec.note(self.books.now, text)
        rec.said = said
        self.hopeless_shape((*self.waiting.shape_of(rec), False), text, said)

    def hopeless_shape(self, failed: Failed, text: str, said: Said | None) -> None:
        """`failed`'s shape cannot start in this cycle: its list drops out, with `text` for
        the jobs of it not reached."""
        whole = failed[:-1]
        self.failed[failed] = text
        if said is not None:
            self.said[failed] = said
        self.hopeless.add(whole)
        self.waiting.shape_notes[whole] = (self.cycle.cycles, text, said)

    def blocked(
        self,
        rec: JobRecord,
        request: GangRequest | None,
        short: Shortfall,
        failed: Failed,
        off: bool,
    ) -> tuple[list[Action], bool]:
        """`rec` cannot start now: the first such job makes room or reserves (with `request`,
        given for it); every one leaves a note for its shape, and the shape's list drops out
        of the cycle."""
        books, now = self.books, self.books.now
        out: list[Action] = []
        head = not self.first_blocked
        if head:
            assert request is not None
            self.first_blocked = True
            out = self.cycle.blocked_head(rec, request, short)
            if books.reservation is not None and books.reservation.job == rec.name:
                # Every job after the head ranks behind it, so none of them may take the
                # GPUs just reserved (those already free above all, while victims stop).
                self.behind_holder = True
            if not self.cycle.policy.backfill:
                return out, False
        res = books.reservation
        if res is not None and books.jobs[res.job].state is not JobState.PENDING:
            res = None  # its holder started in this cycle: nobody waits behind it any more
        if res is None:
            text = short.reason
        elif off:  # its free GPUs were counted without those reserved for a job ahead
            text = f"{short.reason} outside the GPUs reserved for {res.job}; waiting behind it"
        else:
            text = f"{short.reason}; waiting behind {res.job}"
        self.failed[failed] = text
        if res is not None:  # the shape's note, for the jobs after this one, names it
            self.said[failed] = replace(self.said.get(failed, Said()), behind=res.job)
        if not head:
            mine = res is not None and res.job == rec.name
            rec.note(now, f"{short.reason}; {self.cycle.describe(res)}" if res and mine else text)
        whole = failed[:-1]
        if not off:
            self.hopeless.add(whole)
            self.waiting.shape_notes[whole] = (self.cycle.cycles, text, self.said.get(failed))
            return out, not self.hopeless.issuperset(self.waiting.lists.shapes)
        if books.reservation is not self.judged_for:
            self.off_reserved.clear()  # judged against another reservation
            self.judged_for = books.reservation
        self.off_reserved.add(whole)
        return out, True
