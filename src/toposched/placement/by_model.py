"""Multi-node gangs placed where a performance model predicts the shortest step (docs/placement.md).

The fewest-nodes rule assumes that packing a job is never slower. On some clusters it is: with
a per-flow cap on the network (AWS g4dn, `aws-50g`), `22` is slower than `1111`. `ModelSpread`
wraps a gang placer: for a job that names its model and may span nodes it tries every shape
(how many GPUs on which kind of node), predicts each one's step time with `StepTime`, and takes
the fastest, or the fewest nodes within `tolerance` of it; everything else goes to the placer
it wraps, as does a search that would try more than `max_shapes` shapes.

Nodes are interchangeable when, for every GPU count, the GPUs the node would give have the
same topology, ring bandwidth and most GPUs under one PCIe switch: that is all of a node's
share the performance model reads (docs/perfmodel.md, "The formula").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import islice

from toposched.placement.capacity import Capacity
from toposched.placement.gang import (
    GangRequest,
    Placement,
    Shortfall,
    WorkerSlot,
    node_domain,
    node_gpus,
    ring_gbps,
    slots_of,
)
from toposched.placement.request import Mode
from toposched.topology.cluster import Node, Tier
from toposched.topology.node import NodeTopology

Share = tuple[NodeTopology, tuple[int, ...]]
StepTime = Callable[[str, Sequence[Share], Tier], float | None]
"""Predicted seconds per step of model `name` on the shares (one per node) joined at the tier;
None when the model is unknown, and the job is then placed by the wrapped placer."""

GangPlacerFn = Callable[
    [Capacity, GangRequest, Mapping[Tier, float], Mapping[int, int] | None],
    Placement | Shortfall,
]

MAX_SHAPES = 4_000
# Relative slack under which two predicted step times count as equal (float noise only).
EPSILON = 1e-9


@dataclass(frozen=True)
class _Kind:
    """Nodes of one domain that are interchangeable for the model, and what each gives."""

    key: tuple[object, ...]  # the topology, and what the model reads of each offer
    members: tuple[tuple[int, int], ...]  # (node index, usable free mask), lowest index first
    offers: Mapping[int, tuple[int, ...]]  # GPU count -> GPUs of the first member
    looks: Mapping[int, tuple[float | None, int]]  # GPU count -> what the model reads of it
    topology: NodeTopology


Shape = tuple[tuple[int, int], ...]  # (kind, GPUs) per node, each kind's largest first
# The fastest time, and the chosen shape with the index of its domain; None: too many shapes.
Found = tuple[float, int, Shape] | None


@dataclass
class ModelSpread:
    """A gang placer: `base` for what the model cannot judge, the fastest predicted shape else."""

    base: GangPlacerFn
    step_time: StepTime
    tolerance: float = 0.0
    max_shapes: int = MAX_SHAPES
    memo_limit: int = 50_000
    searches: int = field(default=0, init=False)
    overflows: int = field(default=0, init=False)
    # Answers per (request, kinds of nodes per domain): the same cluster state recurs often,
    # above all while reclaim asks what-if questions.
    _memo: dict[tuple[object, ...], Found] = field(default_factory=dict, init=False, repr=False)
    _times: dict[tuple[object, ...], float | None] = field(
        default_factory=dict, init=False, repr=False
    )
    _looks_ids: dict[tuple[object, ...], int] = field(default_factory=dict, init=False, repr=False)

    def __call__(
        self,
        cap: Capacity,
        request: GangRequest,
        network: Mapping[Tier, float],
        exclude: Mapping[int, int] | None = None,
    ) -> Placement | Shortfall:
        found = self.base(cap, request, network, exclude)
        model = request.model
        if (
            isinstance(found, Shortfall)
            or model is None
            or request.workers == 1
            or request.widest == Tier.NODE
        ):
            return found
        now = self.step_time(model, _shares(cap, found), found.tier)
        if now is None:
            return found  # a model the performance catalog does not know
        self.searches += 1
        domains = _domains(cap, request, exclude)
        key = (
            request.workers,
            request.gpus_per_worker,
            model,
            tuple((tier, tuple((k.key, len(k.members)) for k in kinds)) for tier, kinds in domains),
        )
        if key in self._memo:
            best = self._memo[key]
        else:
            best = self._search(domains, request.workers, request.gpus_per_worker, model)
            if len(self._memo) >= self.memo_limit:
                self._memo.clear()
            self._memo[key] = best
        if best is None:
            self.overflows += 1
            return found
        fastest, where, shape = best
        if now <= fastest * (1.0 + self.tolerance) * (1.0 + EPSILON):
            return found  # today's rule is (within tolerance of) the fastest: keep it
        kinds = domains[where][1]
        plan: list[tuple[int, int, int]] = []
        used: dict[int, int] = {}
        for k, c in shape:
            n = used.get(k, 0)
            used[k] = n + 1
            i, free = kinds[k].members[n]
            plan.append((i, free, c))
        return _placement(cap, request, network, plan)

    def _ids(self, kinds: list[_Kind]) -> list[dict[int, int]]:
        """A number, per kind and GPU count, for what the model reads of that share: the
        topology, and the ring and switch crowding of its GPUs."""
        ids = self._looks_ids
        return [
            {
                c: ids.setdefault((c, look, kind.topology), len(ids))
                for c, look in kind.looks.items()
            }
            for kind in kinds
        ]

    def _search(
        self, domains: list[tuple[Tier, list[_Kind]]], workers: int, g: int, model: str
    ) -> Found:
        """The fastest time, and the shape with the fewest nodes within tolerance of it."""
        # Counted before any is judged, so that a search too large costs little.
        tables: list[tuple[int, tuple[Shape, ...]]] = []
        total = 0
        seen: set[tuple[object, ...]] = set()
        for where, (tier, kinds) in enumerate(domains):
            alike = (tier, tuple((k.key, len(k.members)) for k in kinds))
            if alike in seen:
                continue  # a domain like one before it (racks of empty nodes): the same answers
            seen.add(alike)
            table = _shapes(kinds, workers, g, self.max_shapes)
            if table is None:
                return None
            total += len(table)
            if total > self.max_shapes:
                return None
            tables.append((where, table))
        if len(self._times) >= self.memo_limit:
            # Both at once, between searches: the times are kept by the numbers of `_ids`.
            # (Within a search the times may pass the limit by that search's shapes.)
            self._times.clear()
            self._looks_ids.clear()
        # Each shape's predicted step, remembered by what the model reads of each node's share
        # (per kind and GPU count, a number from `_ids`), so that alike nodes elsewhere (other
        # GPU indices) ask the model once.
        times = self._times
        judged: list[tuple[float, int, Shape]] = []  # (time, domain, shape), in search order
        for where, table in tables:
            tier, kinds = domains[where]
            ids = self._ids(kinds)
            for shape in table:
                at = tier if len(shape) > 1 else Tier.NODE
                key = (model, at, tuple(sorted([ids[k][c] for k, c in shape])))
                if key in times:
                    time = times[key]
                else:
                    shares = [(kinds[k].topology, kinds[k].offers[c]) for k, c in shape]
                    time = times[key] = self.step_time(model, shares, at)
                if time is not None:
                    judged.append((time, where, shape))
        if not judged:
            return None
        fastest = min(j[0] for j in judged)
        limit = fastest * (1.0 + self.tolerance) * (1.0 + EPSILON)
        # Fewest nodes, then the lowest tier, the fastest, the fullest nodes (best fit); the
        # first such in search order.
        best: tuple[tuple[int, Tier, float, int], int, Shape] | None = None
        for time, where, shape in judged:
            if time > limit or (best is not None and len(shape) > best[0][0]):
                continue
            tier, kinds = domains[where]
            spare = sum(kinds[k].members[0][1].bit_count() - c for k, c in shape)
            rank = (len(shape), tier, time, spare)
            if best is None or rank < best[0]:
                best = (rank, where, shape)
        assert best is not None  # the fastest is within the limit
        return fastest, best[1], best[2]


def _chooser(cap: Capacity, request: GangRequest) -> Callable[[int, int, int], tuple[int, ...]]:
    """The GPUs a node whose CPUs or memory hold fewer workers would give: its best ones."""
    return lambda i, free, n: node_gpus(cap.nodes[i].topology, free, n, cap.aware[i], request.mode)


def _domains(
    cap: Capacity, request: GangRequest, exclude: Mapping[int, int] | None
) -> list[tuple[Tier, list[_Kind]]]:
    """The kinds of usable nodes in every domain the job accepts, tier by tier."""
    g = request.gpus_per_worker
    hidden = cap.hidden_for(request.where, exclude, request.fit, g, _chooser(cap, request))
    usable = [
        (i, free)
        for i, free in ((i, cap.free[i] & ~hidden.get(i, 0)) for i in cap.present_indices())
        if free.bit_count() >= g
    ]
    out: list[tuple[Tier, list[_Kind]]] = []
    for tier in (Tier.RACK, Tier.POD, Tier.CLUSTER):
        if tier > request.widest:
            break
        domains: dict[tuple[str, ...], list[tuple[int, int]]] = {}
        for i, free in usable:
            domains.setdefault(node_domain(cap.nodes[i], tier), []).append((i, free))
        out.extend((tier, _kinds(cap, domains[key], g, request.mode)) for key in sorted(domains))
    return out


def _kinds(cap: Capacity, members: list[tuple[int, int]], g: int, mode: Mode) -> list[_Kind]:
    kinds: dict[tuple[object, ...], _Kind] = {}
    for i, free in sorted(members):
        topology = cap.nodes[i].topology
        mine = {
            c: node_gpus(topology, free, c, cap.aware[i], mode)
            for c in range(g, free.bit_count() + 1, g)
        }
        looks = {c: _looks(topology, gpus) for c, gpus in mine.items()}
        key = (topology, tuple(looks.items()))
        kind = kinds.get(key)
        if kind is None:
            kinds[key] = _Kind(key, ((i, free),), mine, looks, topology)
        else:
            kinds[key] = _Kind(key, (*kind.members, (i, free)), kind.offers, looks, topology)
    return list(kinds.values())


@lru_cache(maxsize=65_536)
def _looks(topology: NodeTopology, gpus: tuple[int, ...]) -> tuple[float | None, int]:
    """What the performance model reads of a node's share: its ring and switch crowding."""
    switches = topology.switches
    crowd = max(sum(1 for g in gpus if switches[g] == switches[s]) for s in gpus)
    return ring_gbps(topology, gpus), crowd


def _shapes(kinds: list[_Kind], workers: int, g: int, limit: int) -> tuple[Shape, ...] | None:
    """Every multiset of (kind, GPUs on one node) that holds `workers` workers: per kind a
    non-increasing list of worker counts, no longer than the kind has nodes. None: more than
    `limit` of them."""
    slots = tuple((max(kind.offers) // g, len(kind.members)) for kind in kinds)
    return _shape_table(slots, workers, limit, g)


@lru_cache(maxsize=1024)
def _shape_table(
    slots: tuple[tuple[int, int], ...], workers: int, limit: int, g: int
) -> tuple[Shape, ...] | None:
    """`_shapes` for kinds that hold (most workers, nodes) each: what the shapes are depends
    on nothing else, and the same few recur. In order: kind by kind, each kind's list of
    counts from none up, then from the most workers on its first node down. A table of more
    than `limit` is not kept (the search gives up on it anyway)."""
    total_after = [0] * (len(slots) + 1)
    for k in range(len(slots) - 1, -1, -1):
        total_after[k] = total_after[k + 1] + slots[k][0] * slots[k][1]
    # The shapes of kinds k.. holding `left` workers, memoised: many ways of filling the kinds
    # before k leave the same `left`. Each list stops past `limit`: only its first `limit` + 1
    # can be among the first `limit` + 1 shapes of the whole.
    rests: dict[tuple[int, int], list[Shape]] = {}

    def rest_of(k: int, left: int) -> list[Shape]:
        if left == 0:
            return [()]
        if k == len(slots) or total_after[k] < left:
            return []
        known = rests.get((k, left))
        if known is not None:
            return known
        most, nodes = slots[k]
        found: list[Shape] = []
        # Only counts that leave the kinds after k no more than they hold: every one of them
        # leads to a shape, which is why the first `limit` + 1 of them are enough.
        for counts in islice(_partitions(left - total_after[k + 1], left, most, nodes), limit + 1):
            head = tuple((k, w * g) for w in counts)
            for rest in rest_of(k + 1, left - sum(counts)):
                found.append(head + rest)
                if len(found) > limit:
                    break
            if len(found) > limit:
                break
        rests[(k, left)] = found
        return found

    found = rest_of(0, workers)
    return tuple(found) if len(found) <= limit else None


def _partitions(least: int, left: int, most: int, nodes: int) -> Iterator[tuple[int, ...]]:
    """Non-increasing worker counts of at most `most` each on at most `nodes` nodes, summing to
    at least `least` and at most `left`: the empty one first, then by the first count from the
    most down. Every branch it enters yields (a first count too small to reach `least` on
    the nodes left ends the loop), so taking the first few costs little."""
    if least <= 0:
        yield ()
    if nodes == 0:
        return
    for w in range(min(most, left), 0, -1):
        if w * nodes < least:
            return
        for rest in _partitions(least - w, left - w, w, nodes - 1):
            yield (w, *rest)


def _shares(cap: Capacity, placement: Placement) -> list[Share]:
    return [
        (cap.nodes[cap.index[node]].topology, gpus)
        for node, gpus in placement.gpus_by_node().items()
    ]


def _placement(
    cap: Capacity,
    request: GangRequest,
    network: Mapping[Tier, float],
    plan: list[tuple[int, int, int]],
) -> Placement:
    slots: list[WorkerSlot] = []
    rings: list[float] = []
    nodes = []
    for i, free, c in sorted(plan):
        node = cap.nodes[i]
        nodes.append(node)
        gpus = node_gpus(
            node.topology, free, c, cap.aware[i], request.mode, request.gpus_per_worker
        )
        aware = node.topology if cap.aware[i] else None
        slots.extend(slots_of(node.name, gpus, request.gpus_per_worker, aware))
        ring = ring_gbps(node.topology, gpus)
        if ring is not None:
            rings.append(ring)
    tier = _tier_of(nodes)
    if tier is not Tier.NODE:
        rings.append(network[tier])
    return Placement(tuple(slots), min(rings) if rings else None, tier)


def _tier_of(nodes: Sequence[Node]) -> Tier:
    """The lowest tier that joins `nodes`."""
    for tier in (Tier.NODE, Tier.RACK, Tier.POD):
        if len({node_domain(n, tier) for n in nodes}) == 1:
            return tier
    return Tier.CLUSTER
