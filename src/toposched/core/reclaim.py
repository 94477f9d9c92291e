"""Reclaim: which running jobs a blocked job may preempt, and which of them to stop.

`Reclaim.plan` answers with the victims and the GPUs they give; the scheduler stops them and
reserves those GPUs. It reads the books and the job order, and changes neither.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from itertools import combinations

from toposched.core.books import Books
from toposched.core.demotion import Demotions
from toposched.core.job import JobState
from toposched.core.ordering import Waiting
from toposched.core.policy import SchedulerPolicy
from toposched.core.records import JobRecord
from toposched.core.stoprule import StopRule
from toposched.placement.gang import GangRequest, Shortfall, node_gpus, ring_gbps
from toposched.placement.policies import GangPlacer
from toposched.placement.request import Mode
from toposched.placement.tables import to_mask
from toposched.topology.cluster import Tier
from toposched.topology.node import NodeTopology

EXHAUSTIVE_VICTIMS = 8
SMALL_VICTIM_SETS = 3
MEMO_LIMIT = 4096  # per-node answers kept (cleared whole when full)
SHARED = "\0shared:"  # a shared GPU as one victim: no job's name holds a NUL


def _victim_sets(n: int) -> Iterator[tuple[int, ...]]:
    """Sets of victims on one node to try (positions in the cheapest-first order of `n`), the
    smaller first: all of them when there are few, else every set of up to three and every
    prefix of that order (so a large node still finds room)."""
    jobs = range(n)
    if n <= EXHAUSTIVE_VICTIMS:
        for size in range(1, n + 1):
            yield from combinations(jobs, size)
        return
    for size in range(1, SMALL_VICTIM_SETS + 1):
        yield from combinations(jobs, size)
    for size in range(SMALL_VICTIM_SETS + 1, n + 1):
        yield tuple(jobs[:size])


Cost = tuple[int, int, int]  # (cannot checkpoint, priority, GPUs held) of one victim
NodeChoice = tuple[tuple[float, ...], tuple[str, ...], int]  # (cost, victims, GPUs chosen)
ShapeChoice = tuple[tuple[float, ...], tuple[int, ...], int]  # the same, victims by position


def _by_priority_then_start(r: JobRecord) -> tuple[float, ...]:
    return (-r.spec.priority, r.started or 0.0, r.seq)


def victim_cost(r: JobRecord) -> Cost:
    return (0 if r.spec.checkpointable else 1, r.spec.priority, r.gpus_held())


def _search_node(
    topology: NodeTopology,
    free: int,
    bad: int,
    victims: tuple[tuple[int, Cost], ...],
    k: int,
    aware: bool,
    mode: Mode,
) -> ShapeChoice | None:
    """`_best_on_node` for one node shape; victims are named by their position."""
    everything = free
    for mask, _ in victims:
        everything |= mask
    everything &= ~bad
    if everything.bit_count() < k:
        return None
    # No set of victims gives a better ring than all of them (rule 1 maximises the ring; a
    # node without topology-aware placement takes the lowest GPUs instead, so no bound).
    # Once a set reaches that ring with checkpointable victims of the lowest priority, no
    # larger set can beat it, and sets come smallest first.
    bound = None
    if aware:
        widest = ring_gbps(topology, node_gpus(topology, everything, k, aware, mode)) or 0.0
        bound = (0, -widest, min(cost[1] for _, cost in victims))
    best: ShapeChoice | None = None
    for subset in _victim_sets(len(victims)):
        if best is not None and len(subset) > len(best[1]) and bound and best[0][:3] <= bound:
            break
        avail = free
        for p in subset:
            avail |= victims[p][0]
        avail &= ~bad
        if avail.bit_count() < k:
            continue
        costs = [victims[p][1] for p in subset]
        gpus = node_gpus(topology, avail, k, aware, mode)
        ring = ring_gbps(topology, gpus) or 0.0
        key = (
            sum(c[0] for c in costs),
            -ring,
            max(c[1] for c in costs),
            len(subset),
            sum(c[2] for c in costs),
        )
        if best is None or key < best[0]:
            best = (key, subset, to_mask(gpus))
    return best


# What a search was asked: (the job, its level, its request, the books' epoch).
Asked = tuple[str, int, GangRequest, int]
VictimsByNode = dict[int, dict[str, tuple[int, Cost]]]  # node -> victim -> (GPUs there, cost)
Plan = tuple[list[JobRecord], dict[int, int]]  # victims, and the GPUs they give (by node)


class Reclaim:
    """Victim search for blocked jobs, with what it remembers between searches: the answer per
    node shape, and the last request that found no victims (not searched again until the books'
    epoch moves or a running job is demoted)."""

    def __init__(
        self,
        books: Books,
        waiting: Waiting,
        demotions: Demotions,
        policy: SchedulerPolicy,
        place: GangPlacer,
        rule: StopRule | None = None,
    ) -> None:
        self.books = books
        self.waiting = waiting
        self.demotions = demotions
        self.policy = policy
        self.place = place
        self.rule = rule or StopRule.of(policy)
        self.memo: dict[tuple[object, ...], ShapeChoice | None] = {}
        # (asked, until, when the stop rule may say yes): the last search that found none.
        self._no_victims: tuple[Asked, float, float] | None = None
        # When the stop rule may first say yes to a victim it refused in the last search.
        self._recheck = math.inf
        # The shared GPUs of the last search that are victims: name -> (GPUs, their sharers).
        self.share_groups: dict[str, tuple[dict[int, int], list[JobRecord]]] = {}

    def plan(self, rec: JobRecord, request: GangRequest) -> Plan | None:
        """The victims to stop for `rec` and the GPUs they give, or None."""
        asked: Asked = (rec.name, self.waiting.waiting_level(rec), request, self.books.epoch)
        known = self._no_victims
        if known and known[0] == asked and self.books.now < min(known[1], self.demotions.next_at()):
            return None
        self._recheck = math.inf
        plan = self.plan_reclaim(rec, request)
        if plan is None:
            until = min(self.demotions.next_at(), self._recheck)
            self._no_victims = (asked, until, self._recheck)
        return plan

    def asks_again_at(self) -> float:
        """When the last search that found no victims may find some with nothing else
        changed, while the job it was for still waits: a running job is demoted, that job
        becomes patient, or a victim the stop rule refused reaches its checkpoint (inf:
        never). Times past are left out: a demotion due already is found at the next search."""
        known = self._no_victims
        if known is None:
            return math.inf
        rec = self.books.jobs.get(known[0][0])
        if rec is None or rec.state is not JobState.PENDING:
            return math.inf
        now = self.books.now
        return min((t for t in (known[2], self.demotions.next_at()) if t > now), default=math.inf)

    def _patient(self, rec: JobRecord) -> bool:
        """Whether `rec` has waited long enough to have a job stopped for it by least attained
        service (else it is asked again when it has)."""
        until = self.rule.patient_until(rec)
        if self.books.now >= until:
            return True
        self._recheck = min(self._recheck, until)
        return False

    def _pays(self, victim: JobRecord, rec: JobRecord) -> bool:
        """The stop rule's test, noting when a refused victim should be asked about again."""
        now = self.books.now
        if self.rule.pays(victim, rec, now):
            return True
        self._recheck = min(self._recheck, self.rule.next_checkpoint(victim, now))
        return False

    def victims_for(self, rec: JobRecord) -> list[JobRecord]:
        """Running jobs `rec` may preempt: work borrowed beyond another queue's guarantee (if
        `rec` is within its own), checkpointable lower-priority work of its own queue, and,
        under least attained service, checkpointable demoted work that would rank after `rec`
        (if `rec` is not demoted itself), of its own queue or borrowed by another. A job that
        cannot checkpoint loses its work when stopped, so it goes only to give back what its
        queue borrowed."""
        spec = rec.spec
        queues = self.books.queues
        within = queues[spec.queue].within_guarantee(spec.min_workers * spec.gpus_per_worker)
        lower = (
            self.policy.preempt_lower_priority
            and self.books.lowest_priority[spec.queue] < spec.priority
        )
        level = self.waiting.waiting_level(rec)
        las = self.policy.demote_after_gpu_h is not None and level == 0 and self._patient(rec)
        if not (within or lower or las):
            return []
        borrowed: dict[str, set[str]] = {}
        out: list[JobRecord] = []
        if within or lower:
            for r in sorted(self.books.holders.values(), key=_by_priority_then_start):
                if r.state is not JobState.RUNNING:
                    continue
                if r.spec.queue == spec.queue:
                    if (
                        lower
                        and r.spec.checkpointable
                        and r.spec.priority < spec.priority
                        and self._behind(r, rec, level)
                    ):
                        out.append(r)
                elif within and r.name in self._beyond(r.spec.queue, borrowed):
                    out.append(r)
        if las:
            chosen = {r.name for r in out}
            for r in sorted(self.demotions.due(self.books.now).values(), key=lambda r: r.seq):
                if r.name in chosen or r.state is not JobState.RUNNING:
                    continue
                if not self._behind(r, rec, level) or not self._pays(r, rec):
                    continue
                q = queues[r.spec.queue]
                if (
                    r.spec.queue == spec.queue
                    or not q.guaranteed
                    or r.name in self._beyond(q.name, borrowed)
                ):
                    out.append(r)
        return out

    def _behind(self, r: JobRecord, rec: JobRecord, level: int) -> bool:
        """Once `r` waits again, it ranks after `rec` (else it would start again at once, and
        be preempted again); `all_behind` judges the chosen victims together."""
        freed = {r.spec.queue: r.gpus_held()}
        mine = self.waiting.rank_after(rec, level, freed)
        return self.waiting.rank_after(r, self.waiting.demoted_level(r), freed) > mine

    def _beyond(self, queue: str, borrowed: dict[str, set[str]]) -> set[str]:
        """Jobs of another queue past its guarantee, counted in (priority, start) order;
        `borrowed` keeps the answers of one search."""
        if queue not in borrowed:
            guaranteed = self.books.queues[queue].guaranteed
            # Running jobs only: a job being stopped gives its GPUs back anyway.
            jobs = sorted(
                (
                    r
                    for r in self.books.holders.values()
                    if r.spec.queue == queue and r.state is JobState.RUNNING
                ),
                key=_by_priority_then_start,
            )
            held, past = 0, set()
            for r in jobs:
                held += r.gpus_held()
                if held > guaranteed:
                    past.add(r.name)
            borrowed[queue] = past
        return borrowed[queue]

    def _best_on_node(
        self, i: int, per: dict[str, tuple[int, Cost]], k: int, mode: Mode
    ) -> NodeChoice | None:
        """The cheapest victims on node `i` whose GPUs, with the free ones, give `k` GPUs, and
        the GPUs chosen: checkpointable work first, then the best ring, then lower priority,
        fewer jobs, fewer GPUs. A blocked job tries again at every event, and a busy cluster has
        many nodes alike, so the answer is kept per node shape: its topology, free and failed
        GPUs, and its victims' GPUs and costs (cheapest first), whichever node and jobs they are."""
        cap = self.books.capacity
        jobs = sorted(per, key=lambda name: (per[name][1], name))
        shape = tuple(per[name] for name in jobs)
        topology, free, bad, aware = (
            cap.nodes[i].topology,
            cap.free[i],
            self.books.unhealthy.get(i, 0),
            cap.aware[i],
        )
        memo_key = (topology, k, mode, aware, free, bad, shape)
        memo = self.memo
        if memo_key in memo:
            found = memo[memo_key]
        else:
            found = _search_node(topology, free, bad, shape, k, aware, mode)
            if len(memo) >= MEMO_LIMIT:
                memo.clear()
            memo[memo_key] = found
        if found is None:
            return None
        key, positions, gpus = found
        return key, tuple(jobs[p] for p in positions), gpus

    def victim_costs(self, rec: JobRecord) -> dict[str, Cost]:
        """The jobs `rec` may preempt (`victims_for`), with their costs."""
        return self._victims(rec)[0]

    def _victims(self, rec: JobRecord) -> tuple[dict[str, Cost], VictimsByNode | None]:
        """`victim_costs`, and the same victims by node when they are kept so. Without guarantees
        and with one priority everywhere, the victims are exactly the demoted running jobs, which
        `Demotions` keeps with their costs and by node: no job is walked (the common case of a
        replay), but those whose stop would not pay (core/stoprule.py) are left out."""
        if self.waiting.demotes_alone():
            if self.waiting.waiting_level(rec) != 0 or not self._patient(rec):
                return {}, None
            costs = self.demotions.victims(self.books.now)
            if self.rule.pay_margin is None:  # no cost test: every kept victim, as kept
                return costs, self.demotions.on_node
            jobs = self.books.jobs
            unpaid = {name for name in costs if not self._pays(jobs[name], rec)}
            if not unpaid:
                return costs, self.demotions.on_node
            # Only the demoted jobs whose stop pays for `rec`, gathered by node again.
            costs = {name: cost for name, cost in costs.items() if name not in unpaid}
            return costs, None
        costs = {v.name: victim_cost(v) for v in self.victims_for(rec)}
        costs.update(self._share_victims(rec))
        return costs, None

    def _share_victims(self, rec: JobRecord) -> dict[str, Cost]:
        """The shared GPUs `rec` may take back, each as one victim (named SHARED, node, GPU):
        every job sharing it is of another queue past its guarantee, and `rec` is within its
        own. Part of a GPU is lent like a whole one and given back the same way, all its
        sharers at once (a GPU is free only once nobody shares it)."""
        self.share_groups = {}
        spec = rec.spec
        queues = self.books.queues
        if not queues[spec.queue].within_guarantee(spec.min_workers * spec.gpus_per_worker):
            return {}
        lent = {
            name
            for name, q in queues.items()
            if name != spec.queue and q.used * 1000 + q.used_milli > q.guaranteed * 1000
        }
        costs: dict[str, Cost] = {}
        jobs = self.books.sharers
        for (i, gpu), on_gpu in self.books.shares.items():
            sharers = [jobs[name] for name in sorted(on_gpu) if name in jobs]
            if len(sharers) != len(on_gpu) or not all(
                r.state is JobState.RUNNING and r.spec.queue in lent for r in sharers
            ):
                continue
            key = f"{SHARED}{i}:{gpu}"
            self.share_groups[key] = ({i: 1 << gpu}, sharers)
            costs[key] = max(victim_cost(r) for r in sharers)
        return costs

    def _held(self, name: str) -> dict[int, int]:
        """The GPUs a victim holds by node: a job's, or a shared GPU's."""
        group = self.share_groups.get(name)
        return group[0] if group is not None else self.books.job_nodes.get(name, {})

    def _records(self, names: Iterable[str]) -> list[JobRecord]:
        """The jobs to stop for the victims `names` (every sharer of a shared GPU)."""
        out: list[JobRecord] = []
        for name in names:
            group = self.share_groups.get(name)
            out.extend(group[1] if group is not None else [self.books.jobs[name]])
        return out

    def plan_reclaim(
        self, rec: JobRecord, request: GangRequest
    ) -> tuple[list[JobRecord], dict[int, int]] | None:
        costs, by_node = self._victims(rec)
        if not costs:
            return None
        if request.gpus == 1:
            plan = self.plan_one_gpu(costs, request)
        else:
            plan = self.plan_on_nodes(costs, request, by_node)
            if plan is None and request.widest != Tier.NODE and request.workers > 1:
                plan = self.plan_reclaim_nodes(request, costs)
        if plan is None or not self.all_behind(rec, plan[0]) or not self.room_after(request, plan):
            return None
        return plan

    def room_after(self, request: GangRequest, plan: Plan) -> bool:
        """Whether each node of `plan` holds the job's workers there by CPUs and memory once
        its victims there give theirs back. The search counts GPUs alone: without this a job
        whose workers' CPUs no node has could stop a job for nothing, then keep its GPUs
        reserved, idle, for ever."""
        fit = request.fit
        if not fit.sized:
            return True
        cap, job_nodes = self.books.capacity, self.books.job_nodes
        victims, gpus = plan
        for i, mask in gpus.items():
            cpus, memory = cap.free_cpus(i), cap.free_memory(i)
            for v in victims:
                workers = job_nodes.get(v.name, {}).get(i, 0).bit_count() // v.spec.gpus_per_worker
                if cpus is not None:
                    cpus += workers * v.spec.cpus
                if memory is not None:
                    memory += workers * v.spec.memory
            most = fit.room(cpus, memory)
            if most is not None and most < mask.bit_count() // request.gpus_per_worker:
                return False
        return True

    def all_behind(self, rec: JobRecord, victims: list[JobRecord]) -> bool:
        """Once all `victims` have stopped, each ranks after `rec`. Each was chosen as if it alone
        stopped; several of one queue may bring it back within its guarantee, and one of them
        would then start again at once on the GPUs freed for `rec` (and be preempted again)."""
        freed: dict[str, int] = {}
        for v in victims:
            freed[v.spec.queue] = freed.get(v.spec.queue, 0) + v.gpus_held()
        mine = self.waiting.rank_after(rec, self.waiting.waiting_level(rec), freed)
        return all(
            self.waiting.rank_after(v, self.waiting.demoted_level(v), freed) > mine for v in victims
        )

    def plan_on_nodes(
        self,
        costs: dict[str, Cost],
        request: GangRequest,
        by_node: VictimsByNode | None = None,
    ) -> Plan | None:
        """The cheapest victims on any one node (see `_best_on_node`); only nodes that hold
        victims are looked at, found through the victims (or `by_node`: the same, gathered)."""
        cap = self.books.capacity
        k = request.gpus
        ruled_out = cap.ruled_out(request.where)
        per_node = by_node
        if per_node is None:
            per_node = {}
            for job, cost in costs.items():
                for i, mask in self._held(job).items():
                    per_node.setdefault(i, {})[job] = (mask, cost)
        best: tuple[tuple[float, ...], tuple[str, ...], dict[int, int]] | None = None
        for i, per in per_node.items():
            if not cap.present[i] or i in self.books.cordoned or i in ruled_out:
                continue
            everything = cap.free[i]
            for mask, _ in per.values():
                everything |= mask
            if (everything & ~self.books.unhealthy.get(i, 0)).bit_count() < k:
                continue
            found = self._best_on_node(i, per, k, request.mode)
            if found is not None and (best is None or (*found[0], i) < best[0]):
                best = ((*found[0], i), found[1], {i: found[2]})
        if best is None:
            return None
        return self._records(best[1]), best[2]

    def plan_one_gpu(self, costs: dict[str, Cost], request: GangRequest) -> Plan | None:
        """`plan_on_nodes` for one GPU, without walking victim sets: one victim always does, and
        no larger set is cheaper, so the answer is the cheapest victim (lowest node, then name,
        among equals), as the general search finds it."""
        cap = self.books.capacity
        ruled_out = cap.ruled_out(request.where)
        best: tuple[tuple[Cost, int, str], int] | None = None
        for job, cost in costs.items():
            for i, mask in self._held(job).items():
                if not cap.present[i] or i in self.books.cordoned or i in ruled_out:
                    continue
                avail = (cap.free[i] | mask) & ~self.books.unhealthy.get(i, 0)
                if avail and (best is None or (cost, i, job) < best[0]):
                    best = ((cost, i, job), avail)
        if best is None:
            return None
        (_, i, job), avail = best
        gpus = node_gpus(cap.nodes[i].topology, avail, 1, cap.aware[i], request.mode)
        return self._records([job]), {i: to_mask(gpus)}

    def plan_reclaim_nodes(
        self, request: GangRequest, costs: dict[str, Cost]
    ) -> tuple[list[JobRecord], dict[int, int]] | None:
        """A multi-node job: place it as if every candidate victim were gone, then preempt the
        victims that hold GPUs of that placement (the placement, not the victims, is optimised)."""
        everything: dict[int, int] = {}
        for job in costs:
            for i, mask in self._held(job).items():
                if i not in self.books.cordoned:
                    everything[i] = everything.get(i, 0) | mask
        with self.books.capacity.assuming_free(everything):
            found = self.place(self.books.capacity, request, self.books.network_gbps)
        if isinstance(found, Shortfall):
            return None
        gpus = {self.books.capacity.index[n]: to_mask(g) for n, g in found.gpus_by_node().items()}
        chosen = self._records(
            name
            for name in costs
            if any(self._held(name).get(i, 0) & mask for i, mask in gpus.items())
        )
        return chosen, gpus
