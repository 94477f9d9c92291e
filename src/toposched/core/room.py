"""Making room for the first blocked job: shrink elastic jobs, migrate checkpointable ones, or
preempt. Each planner only reads the books and returns a plan; the cycle carries it out."""

from __future__ import annotations

from dataclasses import dataclass

from toposched.core.actions import StopKind
from toposched.core.books import Books
from toposched.core.job import JobState
from toposched.core.moves import placement_of, plan_defrag
from toposched.core.reclaim import Reclaim
from toposched.core.records import JobRecord
from toposched.core.stoprule import StopRule
from toposched.placement.gang import GangRequest, Placement, Shortfall
from toposched.placement.policies import GangPlacer
from toposched.placement.tables import to_mask


@dataclass(frozen=True)
class Stop:
    """Stop `job` for `kind`; it first takes `target` (GPUs to move or grow onto), and restarts
    on `resume` once stopped (None: it waits again)."""

    job: JobRecord
    kind: StopKind
    why: str
    target: Placement | None = None
    resume: Placement | None = None


@dataclass(frozen=True)
class RoomPlan:
    """Stop these jobs, and keep `gpus` (node index -> mask) for the blocked job meanwhile."""

    gpus: dict[int, int]
    stops: tuple[Stop, ...]
    note: str


def plan_shrink(
    books: Books, rec: JobRecord, request: GangRequest, place: GangPlacer
) -> RoomPlan | None:
    """Elastic jobs above their minimum give back workers (lowest priority first, then the
    latest started), each only as many as needed, the last workers first."""
    candidates = sorted(
        (
            r
            for r in books.elastic.values()
            if r.state is JobState.RUNNING
            and r.spec.elastic is not None
            and r.placement is not None
            and len(r.placement.workers) > r.spec.min_workers
            and r.spec.priority <= rec.spec.priority
            and not any(books.capacity.index[w.node] in books.cordoned for w in r.placement.workers)
        ),
        key=lambda r: (r.spec.priority, -(r.started or 0.0), r.seq),
    )
    cap, network = books.capacity, books.network_gbps
    chosen: list[tuple[JobRecord, Placement]] = []
    freed: dict[int, int] = {}
    for victim in candidates:
        assert victim.placement is not None
        workers = victim.placement.workers
        for keep in range(len(workers) - 1, victim.spec.min_workers - 1, -1):
            trial = dict(freed)
            for slot in workers[keep:]:
                i = cap.index[slot.node]
                trial[i] = trial.get(i, 0) | to_mask(slot.gpus)
            with cap.assuming_free(trial):
                found = place(cap, request, network)
            resume = placement_of(cap, workers[:keep], network)
            if isinstance(found, Placement):
                return _shrink_plan(books, rec, [*chosen, (victim, resume)], found)
        freed = trial
        chosen.append((victim, resume))
    return None


def _shrink_plan(
    books: Books, rec: JobRecord, chosen: list[tuple[JobRecord, Placement]], found: Placement
) -> RoomPlan:
    gpus = {books.capacity.index[n]: to_mask(g) for n, g in found.gpus_by_node().items()}
    names = sorted(v.name for v, _ in chosen)
    stops = tuple(
        Stop(
            shrunk,
            StopKind.RESIZE,
            f"shrinking to {len(resume.workers)} for {rec.name}",
            resume=resume,
        )
        for shrunk, resume in chosen
    )
    return RoomPlan(gpus, stops, f"shrinking {', '.join(names)} to make room")


def plan_defragment(
    books: Books, rec: JobRecord, request: GangRequest, place: GangPlacer, rule: StopRule
) -> RoomPlan | None:
    """Migrate the fewest checkpointable jobs so that one node can take the blocked job (not
    those the stop rule protects)."""
    cap = books.capacity
    if request.gpus > cap.total_free:
        return None  # asked at every blocked head: the cheap test first
    largest = max((cap.nodes[i].size for i in cap.present_indices()), default=0)
    if request.gpus > largest:
        return None
    movable: dict[int, list[tuple[JobRecord, int]]] = {}
    # Jobs holding GPUs, found through the GPUs, in submission order.
    for r in sorted(books.holders.values(), key=lambda r: r.seq):
        if r.state is not JobState.RUNNING or r.placement is None or not r.spec.checkpointable:
            continue
        if rule.protected(r, books.now):
            continue
        by_node = r.placement.gpus_by_node()
        if len(by_node) != 1:
            continue
        ((node, held),) = by_node.items()
        if cap.index[node] not in books.cordoned:  # moving off it would open nothing
            movable.setdefault(cap.index[node], []).append((r, to_mask(held)))
    plan = plan_defrag(cap, request, movable, books.network_gbps, place)
    if plan is None:
        return None
    moves, gpus = plan
    names = sorted(m.job.name for m in moves)
    stops = tuple(
        Stop(
            move.job,
            StopKind.MIGRATE,
            f"moving to {move.to.describe()} for {rec.name}",
            target=move.to,
            resume=move.to,
        )
        for move in moves
    )
    return RoomPlan(gpus, stops, f"migrating {', '.join(names)} to open a node for it")


def plan_preempt(
    reclaim: Reclaim, rec: JobRecord, request: GangRequest, short: Shortfall
) -> RoomPlan | None:
    """Stop the victims whose GPUs form the best placement for `rec` (core/reclaim.py)."""
    plan = reclaim.plan(rec, request)
    if plan is None:
        return None
    victims, gpus = plan
    names = ", ".join(v.name for v in victims)
    stops = tuple(Stop(v, StopKind.PREEMPT, f"preempted for {rec.name}") for v in victims)
    return RoomPlan(gpus, stops, f"{short.reason}; preempting {names} for it")
