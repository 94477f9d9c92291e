"""The `topology` policy on a cluster: node and GPU choice made together (docs/placement.md).

Order of the objective: the job's locality tolerance is a constraint; then fewest nodes; then the
lowest network tier; then the best ring (inside one node: exact, over every node's best GPU set;
across nodes: the slowest of each node's ring and the network tier); then best fit (the fullest
nodes that do the job, so that empty nodes stay empty for large jobs).

Across nodes the ring of w workers on a node is taken as "every count up to w reaches the
threshold" (a prefix), which is exact whenever a node's good rings nest (PCIe trees, NVSwitch,
uniform NVLink) and a safe under-estimate otherwise (the hybrid cube mesh of a DGX-1, where four
GPUs can form an NVLink ring that no three of them do).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property

from toposched.placement.capacity import Capacity, Signature
from toposched.placement.levels import Usable, domain_rank, domains_at, level_index
from toposched.placement.nodesets import (
    Best,
    best_nodes,
    fewest_of,
    least_nodes,
)
from toposched.placement.request import Mode
from toposched.placement.split import in_order, split_workers
from toposched.placement.tables import from_mask, subset_tables, to_mask
from toposched.placement.topology_aware import choose
from toposched.topology.cluster import ANYWHERE, Eligibility, Node, Tier
from toposched.topology.node import NodeTopology
from toposched.topology.resources import ANY_FIT, WorkerFit


@dataclass(frozen=True)
class WorkerSlot:
    """Where one worker runs: a node and its GPU indices there; on a GPU in MIG mode, the
    memory-slice start of its MIG instance (`instance`; None elsewhere)."""

    node: str
    gpus: tuple[int, ...]
    instance: int | None = None


@dataclass(frozen=True)
class Placement:
    """A whole gang: one slot per worker, its ring bandwidth (None for one GPU) and network tier."""

    workers: tuple[WorkerSlot, ...]
    bandwidth_gbps: float | None
    tier: Tier

    def gpus_by_node(self) -> dict[str, tuple[int, ...]]:
        out: dict[str, list[int]] = {}
        for slot in self.workers:
            out.setdefault(slot.node, []).extend(slot.gpus)
        return {node: tuple(sorted(gpus)) for node, gpus in out.items()}

    def pairs(self) -> Iterator[tuple[str, int]]:
        for slot in self.workers:
            for gpu in slot.gpus:
                yield slot.node, gpu

    @cached_property
    def gpus(self) -> int:
        return sum(len(slot.gpus) for slot in self.workers)

    def describe(self) -> str:
        if not self.gpus:  # workers of CPUs and memory alone
            counts: dict[str, int] = {}
            for slot in self.workers:
                counts[slot.node] = counts.get(slot.node, 0) + 1
            return "; ".join(f"{n} ({k} worker(s), no GPU)" for n, k in counts.items())
        by_node = self.gpus_by_node().items()
        nodes = "; ".join(f"{n} GPUs {','.join(map(str, g))}" for n, g in by_node)
        ring = "no ring" if self.bandwidth_gbps is None else f"ring {self.bandwidth_gbps:g} GB/s"
        return f"{nodes} ({ring})"


@dataclass(frozen=True)
class GangRequest:
    """`workers` x `gpus_per_worker`, no wider apart than `widest`, on nodes `where` admits,
    each worker with the CPUs and memory of `fit`, all on one GPU type unless `mixed_types`;
    `mode` for 1-GPU jobs; `model`, the performance catalog's name for what the job trains, for
    placers that predict its speed (placement/by_model.py); `extra_nodes`, how many nodes more
    than the fewest that could ever hold it (`fewest_nodes`) the gang may span (None: any)."""

    workers: int
    gpus_per_worker: int
    widest: Tier = Tier.CLUSTER
    mode: Mode = Mode.PACK
    where: Eligibility = ANYWHERE
    model: str | None = None
    fit: WorkerFit = ANY_FIT
    mixed_types: bool = False
    # A level (Cluster.all_levels) the gang must be whole inside one domain of, or would
    # rather be (`prefer`): the fastest level that holds it is taken, up to that one.
    level: str | None = None
    prefer: str | None = None
    # False: placed as plain GPU counting does, whatever the scheduler's placement policy
    # (Arena's `--gputopology=false`; placement/switch.py).
    topology: bool = True
    extra_nodes: int | None = None

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker


# Which kinds of node a request takes (Capacity.admitting); None: every kind.
Admits = Callable[[int], bool] | None


@dataclass(frozen=True)
class Shortfall:
    """Why a gang cannot be placed now, in plain words."""

    reason: str


def node_gpus(
    topology: NodeTopology, free: int, k: int, aware: bool, mode: Mode, per_worker: int = 0
) -> tuple[int, ...]:
    """The k GPUs a node gives: the exact topology choice (for workers of `per_worker` GPUs
    each where given), or the lowest free indices."""
    if aware:
        return choose(topology, free, k, mode, per_worker=per_worker)
    return from_mask(free)[:k]


def ring_gbps(topology: NodeTopology, gpus: tuple[int, ...]) -> float | None:
    if len(gpus) < 2:
        return None
    tables = subset_tables(topology)
    return tables.gbps(int(tables.ring[to_mask(gpus)]))


def slots_of(
    node: str, gpus: tuple[int, ...], per_worker: int, topology: NodeTopology | None = None
) -> list[WorkerSlot]:
    """One slot per worker: the node's GPUs split among its workers so that their own rings
    are the best they can be (placement/split.py) where `topology` is given (a topology-aware
    choice), else in index order."""
    groups = split_workers(topology, gpus, per_worker) if topology else in_order(gpus, per_worker)
    return [WorkerSlot(node, group) for group in groups]


def _crowding(topology: NodeTopology, free: int, gpu: int) -> tuple[int, int]:
    """Busy GPUs under the same PCIe switch, then in the same socket."""
    busy = [b for b in range(topology.size) if not free >> b & 1]
    return (
        sum(1 for b in busy if topology.switches[b] == topology.switches[gpu]),
        sum(1 for b in busy if topology.sockets[b] == topology.sockets[gpu]),
    )


def _candidates(
    cap: Capacity,
    exclude: Mapping[int, int],
    least: int = 1,
    fit: WorkerFit = ANY_FIT,
    workers: int = 0,
    admits: Admits = None,
) -> Iterator[tuple[int, int]]:
    """(node index, effective free mask) for one representative per signature, and for every
    node with excluded GPUs on its own; only nodes of a kind `admits` takes, with at least
    `least` usable GPUs and CPUs and memory for `workers` workers of `fit`."""
    sized = workers and fit.sized
    for key, members in cap.groups():
        if key[1].bit_count() < least or (admits is not None and not admits(key[3])):
            continue
        if sized and _short(fit.room(key[4], key[5]), workers):
            continue
        lowest = cap.lowest(key)
        if lowest in exclude:
            usable = [i for i in members if i not in exclude]
            if not usable:
                continue
            lowest = min(usable)
        yield lowest, key[1]
    for i, mask in exclude.items():
        free = cap.free[i] & ~mask
        if free.bit_count() < least or not cap.present[i]:
            continue
        if admits is not None and not admits(cap.kinds[i]):
            continue
        if not (sized and _short(cap.room(i, fit), workers)):
            yield i, free


def _short(room: int | None, workers: int) -> bool:
    return room is not None and room < workers


def place_gang(
    cap: Capacity,
    request: GangRequest,
    network: Mapping[Tier, float],
    exclude: Mapping[int, int] | None = None,
) -> Placement | Shortfall:
    """The best placement of `request` on the free GPUs of `cap`, minus `exclude` (node -> mask)."""
    exclude = cap.hidden_by_labels(request.where.selector, exclude)
    admits = cap.admitting(request.where)
    single = _place_on_one_node(cap, request, exclude, admits)
    if single is not None:
        return single
    k = request.gpus
    one_node = request.widest == Tier.NODE or request.workers == 1
    if not one_node:
        leveled = _place_by_level(cap, request, network, exclude, admits)
        if leveled is not None:
            return leveled
    # A gang the split limit keeps to one node fails here, before the search across nodes.
    held_to_one = (
        not one_node and request.extra_nodes is not None and _loosest_limit(cap, request) == 1
    )
    if one_node or held_to_one:
        if exclude or admits:
            found = _candidates(cap, exclude, admits=admits)
            largest = max((free.bit_count() for _, free in found), default=0)
        else:
            largest = max((key[1].bit_count() for key, _ in cap.groups()), default=0)
        one = "one node"
        if held_to_one:
            one = f"one node (the fewest that hold it, plus {request.extra_nodes})"
        short = f"needs {k} GPUs on {one}; the best node has {largest} free"
        if request.fit.sized and largest >= k:
            # GPUs enough somewhere: the CPUs or memory are what is short.
            rooms = (
                cap.room(i, request.fit) for i, _ in _candidates(cap, exclude, k, admits=admits)
            )
            room = max((r for r in rooms if r is not None), default=0)
            short = (
                f"needs {request.workers} worker(s) with {request.fit.describe()} each on one "
                f"node; the nodes with {k} free GPUs have room for {room}"
            )
        return Shortfall(short)
    return _place_on_many_nodes(cap, request, network, exclude, admits)


def _place_on_one_node(
    cap: Capacity, request: GangRequest, exclude: Mapping[int, int], admits: Admits
) -> Placement | None:
    k = request.gpus
    best: tuple[tuple[float, ...], int, tuple[int, ...]] | None = None
    for i, free in _candidates(cap, exclude, k, request.fit, request.workers, admits):
        count = free.bit_count()
        topology = cap.nodes[i].topology
        gpus = node_gpus(topology, free, k, cap.aware[i], request.mode, request.gpus_per_worker)
        if k >= 2:
            ring = ring_gbps(topology, gpus)
            key: tuple[float, ...] = (-(ring or 0.0), count - k, i)
        elif request.mode is Mode.SPREAD:
            # Away from busy GPUs on the same switch, then socket; among equally quiet GPUs,
            # one on a node already in use: opening an empty node fragments it for the gangs
            # that come later (on the first 20,000 Philly jobs, 10% of the average JCT).
            switch, socket = _crowding(topology, free, gpus[0])
            key = (switch, socket, count == topology.size, -count, i)
        else:
            key = (count, i)
        if best is None or key < best[0]:
            best = (key, i, gpus)
    if best is None:
        return None
    _, i, gpus = best
    topology = cap.nodes[i].topology
    aware = topology if cap.aware[i] else None
    slots = slots_of(cap.nodes[i].name, gpus, request.gpus_per_worker, aware)
    return Placement(tuple(slots), ring_gbps(topology, gpus), Tier.NODE)


def node_domain(node: Node, tier: Tier) -> tuple[str, ...]:
    """The network domain a node belongs to at `tier`: itself, its rack, its pod, or the one
    domain of the whole cluster."""
    if tier == Tier.NODE:
        return (node.name,)
    if tier == Tier.RACK:
        return (node.pod, node.rack)
    if tier == Tier.POD:
        return (node.pod,)
    return ()


def _workers_held(free: int, room: int | None, g: int) -> int:
    """Workers of `g` GPUs a node holds: by its `free` GPUs, and by the `room` its CPUs and
    memory leave (None: no limit)."""
    by_gpus = free.bit_count() // g
    return by_gpus if room is None else min(by_gpus, room)


def _group_room(key: Signature, fit: WorkerFit) -> int | None:
    """`Capacity.room` of each node of the group of alike nodes `key`."""
    return fit.room(key[4], key[5]) if fit.sized else None


def _usable_nodes(
    cap: Capacity, request: GangRequest, exclude: Mapping[int, int], admits: Admits
) -> Usable:
    """(node, its free GPUs less those excluded, workers it holds) of each node of a kind
    `admits` takes that holds one: by its free GPUs, and by its CPUs and memory."""
    g, fit = request.gpus_per_worker, request.fit
    usable: Usable = []
    # By groups of alike nodes: on a busy cluster most hold no worker of a large gang.
    for key, members in cap.groups():
        free = key[1]
        if free.bit_count() < g or (admits is not None and not admits(key[3])):
            continue
        holds = _workers_held(free, _group_room(key, fit), g)
        if holds > 0:
            usable.extend((i, free, holds) for i in members if i not in exclude)
    for i, mask in exclude.items():
        free = cap.free[i] & ~mask
        if not cap.present[i] or free.bit_count() < g:
            continue
        if admits is not None and not admits(cap.kinds[i]):
            continue
        holds = _workers_held(free, cap.room(i, fit), g)
        if holds > 0:
            usable.append((i, free, holds))
    usable.sort()
    return usable


def _place_on_many_nodes(
    cap: Capacity,
    request: GangRequest,
    network: Mapping[Tier, float],
    exclude: Mapping[int, int],
    admits: Admits,
) -> Placement | Shortfall:
    g, workers, fit = request.gpus_per_worker, request.workers, request.fit
    where = {Tier.RACK: "one rack", Tier.POD: "one pod", Tier.CLUSTER: "the cluster"}
    # The workers each group of alike nodes holds, with its number of nodes: the whole
    # cluster's room bounds every domain's, counted per group, not per node.
    per_group = [
        (_workers_held(key[1], _group_room(key, fit), g), len(members))
        for key, members in cap.groups()
        if admits is None or admits(key[3])
    ]
    room = sum(holds * count for holds, count in per_group)
    for i, mask in exclude.items():
        if cap.present[i] and (admits is None or admits(cap.kinds[i])):
            here = cap.room(i, fit)
            before = _workers_held(cap.free[i], here, g)
            room -= before - _workers_held(cap.free[i] & ~mask, here, g)
    each = fit.asked()
    if room < workers:
        return Shortfall(
            f"needs {workers} workers x {g} GPUs{each} within {where[request.widest]}; "
            f"at most {room} fit now in the whole cluster"
        )

    extra = request.extra_nodes
    loosest = None if extra is None else _loosest_limit(cap, request)
    # Where none is excluded, only if needed.
    usable = _usable_nodes(cap, request, exclude, admits) if exclude else None
    if loosest is not None and extra is not None:
        # The nodes with the most room, in any domain: if `loosest` of them cannot hold the
        # gang, no domain of any tier can, and the search below is not needed. Asked of
        # every waiting gang at every event on a full cluster, so counted per group of alike
        # nodes where none is excluded.
        rooms = per_group if usable is None else [(holds, 1) for _, _, holds in usable]
        room_on_limit, left = 0, loosest
        for holds, count in sorted(rooms, reverse=True):
            if left == 0 or holds <= 0:
                break
            take = min(count, left)
            room_on_limit += holds * take
            left -= take
        if room_on_limit < workers:
            now = f"the {loosest} with the most room now hold {room_on_limit}"
            return _beyond_limit(request, loosest, now)
    if usable is None:
        usable = _usable_nodes(cap, request, exclude, admits)

    # Phase 1: fewest nodes, then lowest tier, over the domains the job accepts; with a split
    # limit, each tier's own (a wider tier never tightens what a narrower one allowed).
    chosen: tuple[int, Tier] | None = None
    refused: tuple[int, int] | None = None  # (nodes, limit) of the least split refused
    best_hold = 0
    # Per tier, the domains that do it with the fewest nodes they can: the only ones that
    # compete once the tier's fewest is known.
    fewest_at: dict[Tier, tuple[int, list[Usable]]] = {}
    for tier in (Tier.RACK, Tier.POD, Tier.CLUSTER):
        if tier > request.widest:
            break
        limit = None if extra is None else split_limit(cap, request, tier)
        domains: dict[tuple[str, ...], Usable] = {}
        if tier == Tier.CLUSTER:
            domains[()] = usable
        else:
            tier_domains = cap.tier_domains
            for entry in usable:
                key = tier_domains[entry[0]][tier - 1]
                domains.setdefault(key, []).append(entry)
        for members in domains.values():
            capacities = [holds for _, _, holds in members]
            best_hold = max(best_hold, sum(capacities))
            m = fewest_of(capacities, workers)
            if m is None:
                continue
            if limit is not None and m > limit:
                if refused is None or m < refused[0]:
                    refused = (m, limit)
                continue
            if chosen is None or m < chosen[0]:
                chosen = (m, tier)
            fewest = fewest_at.get(tier)
            if fewest is None or m < fewest[0]:
                fewest_at[tier] = (m, [members])
            elif m == fewest[0]:
                fewest[1].append(members)
    if chosen is None and refused is not None:
        m, limit = refused
        return _beyond_limit(request, limit, f"the fewest with room now are {m}")
    if chosen is None:
        return Shortfall(
            f"needs {workers} workers x {g} GPUs{each} within {where[request.widest]}; "
            f"at most {best_hold} fit now"
        )
    m, tier = chosen
    # Every domain of that tier that does it with m nodes competes on ring, then fit (those
    # that need more have no m nodes that hold it; the minimum index in the key decides ties).
    plan = _best_plan(cap, fewest_at[tier][1], workers, g, m)
    return _plan_placement(cap, request, plan, network[tier], tier)


def _place_by_level(
    cap: Capacity,
    request: GangRequest,
    network: Mapping[Tier, float],
    exclude: Mapping[int, int],
    admits: Admits,
) -> Placement | Shortfall | None:
    """A gang whole inside one domain of the fastest level that holds it: up to its required
    level, else up to its preferred one, else across every level a cluster declares (without
    declared levels, across the NVLink ones: racks and pods keep the fewest-nodes rule).
    Levels as fast as that one, up to the same bound, are as good to the gang's bottleneck:
    among their domains the fewest nodes, then the narrower level. None: no such domain (or
    the network beyond is as fast) and nothing required, so the fewest-nodes rule across the
    network decides."""
    levels = cap.levels
    names = ", ".join(level.name for level in levels)
    required = request.level
    upto: int | None = None
    for name in (required, request.prefer):
        if name is not None and upto is None:
            upto = level_index(levels, name)
            if upto is None:
                return Shortfall(f"no level named {name!r} in this cluster; the levels are {names}")
    if upto is None and cap.declared:
        upto = len(levels) - 1
    elif upto is None:
        nvlink = [i for i, level in enumerate(levels) if level.nvlink]
        if not nvlink:
            return None
        upto = nvlink[-1]
    # A level at index i is as wide as tier i + 1 to code that knows racks and pods.
    if request.widest < Tier.CLUSTER:
        upto = min(upto, int(request.widest) - 1)
    g, workers = request.gpus_per_worker, request.workers
    usable = _usable_nodes(cap, request, exclude, admits)
    best_hold = 0
    for first in range(upto + 1):
        fewest = _fewest_per_domain(cap, usable, first, workers)
        if not fewest:
            for members in domains_at(cap, usable, first).values():
                best_hold = max(best_hold, sum(holds for _, _, holds in members))
            continue
        band = first
        while cap.declared and band < upto and levels[band + 1].gbps == levels[first].gbps:
            band += 1
        beyond = band == len(levels) - 1 and network[Tier.CLUSTER] == levels[first].gbps
        if cap.declared and beyond and required is None:
            return None  # nothing faster to keep it inside: the network rule decides
        # The fewest nodes, then the narrower level, then the domain's rank, then its best
        # nodes: each asked only of the domains still level on what comes before.
        at = first
        for wider in range(first + 1, band + 1):
            found = _fewest_per_domain(cap, usable, wider, workers)
            if min(e[0] for e in found) < min(e[0] for e in fewest):
                at, fewest = wider, found
        m = min(entry[0] for entry in fewest)
        ranked = [(domain_rank(cap, at, key), members) for n, key, members in fewest if n == m]
        top = min(rank for rank, _ in ranked)
        plan = _best_plan(cap, [members for rank, members in ranked if rank == top], workers, g, m)
        if len(plan) == 1:
            return _plan_placement(cap, request, plan, None, Tier.NODE)
        tier = Tier(min(at + 1, Tier.CLUSTER))
        return _plan_placement(cap, request, plan, cap.levels[at].gbps, tier)
    if required is None:
        return None
    return Shortfall(
        f"needs {workers} workers x {g} GPUs{request.fit.asked()} within one {required} "
        f"(topology_level); at most {best_hold} fit in one now"
    )


def _fewest_per_domain(
    cap: Capacity, usable: Usable, at: int, workers: int
) -> list[tuple[int, tuple[str, ...], Usable]]:
    """(the fewest nodes, domain, its usable nodes) of each domain of level `at` that holds
    the gang."""
    out = []
    for key, members in domains_at(cap, usable, at).items():
        m = fewest_of([holds for _, _, holds in members], workers)
        if m is not None:
            out.append((m, key, members))
    return out


def _best_plan(
    cap: Capacity, domains: Iterable[Usable], workers: int, g: int, m: int
) -> list[tuple[int, int, int]]:
    """The best m nodes (ring, then fit) of any of `domains`, each of which holds the gang on
    m nodes; the first domain wins a tie."""
    best: Best = None
    for members in domains:
        pick = best_nodes(cap, members, workers, g, m)
        if pick is not None and (best is None or pick[0] < best[0]):
            best = pick
    assert best is not None  # a domain that does it with m nodes has a best m of them
    return best[1]


def _plan_placement(
    cap: Capacity,
    request: GangRequest,
    plan: list[tuple[int, int, int]],
    between: float | None,
    tier: Tier,
) -> Placement:
    """The slots of `plan` (node index, free GPUs, workers there); its ring the slowest of
    `between` (the link joining its nodes, None on one node) and each node's own."""
    g = request.gpus_per_worker
    slots: list[WorkerSlot] = []
    rings: list[float] = [] if between is None else [between]
    for i, free, w in plan:
        node = cap.nodes[i]
        gpus = node_gpus(node.topology, free, w * g, cap.aware[i], request.mode, g)
        slots.extend(slots_of(node.name, gpus, g, node.topology if cap.aware[i] else None))
        ring = ring_gbps(node.topology, gpus)
        if ring is not None:
            rings.append(ring)
    return Placement(tuple(slots), min(rings) if rings else None, tier)


def room_when_empty(cap: Capacity, i: int, request: GangRequest) -> int:
    """How many of the request's workers node `i`'s CPUs and memory hold when none of its
    jobs runs: GPUs that free up on a node that can never hold the workers are no use."""
    hw = cap.nodes[i].hardware
    most = request.fit.room(hw.cpus, hw.memory)
    return request.workers if most is None else most


def _beyond_limit(request: GangRequest, limit: int, now: str) -> Shortfall:
    """The split the gang needs now is wider than `extra_nodes` lets it take."""
    extra = request.extra_nodes
    assert extra is not None
    return Shortfall(
        f"needs {request.workers} workers x {request.gpus_per_worker} GPUs"
        f"{request.fit.asked()} on at most {limit} node(s) (the fewest that hold it, "
        f"{limit - extra}, plus {extra}); {now}"
    )


def split_limit(cap: Capacity, request: GangRequest, tier: Tier) -> int | None:
    """The most nodes the gang may span in one domain of `tier` (`extra_nodes` beyond
    `fewest_nodes` there), kept in `cap` until a node or what it can give changes; None: no
    domain of that tier could ever hold it."""
    assert request.extra_nodes is not None
    shape = (request.workers, request.gpus_per_worker)
    key = (*shape, tier, request.where, request.fit)
    memo = cap.fewest_memo
    if key not in memo:
        # Every tier's at once: one walk of the nodes where three would do the same.
        for each, fewest in _fewest_by_tier(cap, request).items():
            memo[(*shape, each, request.where, request.fit)] = fewest
        if key not in memo:
            memo[key] = fewest_nodes(cap, request, tier)
    fewest = memo[key]
    return None if fewest is None else fewest + request.extra_nodes


def _loosest_limit(cap: Capacity, request: GangRequest) -> int | None:
    """The largest of the split limits of the tiers a gang across nodes may take, up to its
    widest (None: no domain of them could ever hold it)."""
    limits = [
        limit
        for tier in (Tier.RACK, Tier.POD, Tier.CLUSTER)
        if tier <= request.widest and (limit := split_limit(cap, request, tier)) is not None
    ]
    return max(limits, default=None)


def fewest_nodes(cap: Capacity, request: GangRequest, tier: Tier | None = None) -> int | None:
    """The fewest of the nodes it may use, in one domain of `tier` (its widest if not given),
    that could hold the gang with none of their jobs running: their GPUs less those no job can have
    (`Capacity.unusable`), their CPUs and memory (None: none can). A gang split wider than it
    needs runs slower (its workers wait on the network) and has neighbours on every node it
    touches: on the Philly trace, splits beyond the fewest nodes cost a fifth of the average
    JCT (docs/scheduler.md)."""
    widest = request.widest if tier is None else tier
    if widest != Tier.NODE:
        return _fewest_by_tier(cap, request)[widest]
    holds = [n for _, n in _node_holds(cap, request)]
    return 1 if any(n >= request.workers for n in holds) else None


def _node_holds(cap: Capacity, request: GangRequest) -> Iterator[tuple[int, int]]:
    """(node, workers it holds with none of its jobs running) of each node that holds one."""
    g = request.gpus_per_worker
    ruled_out = cap.ruled_out(request.where)
    for i in cap.present_indices():
        if i in ruled_out:
            continue
        n = (cap.nodes[i].size - cap.unusable[i].bit_count()) // g
        if request.fit.sized:
            n = min(n, room_when_empty(cap, i, request))
        if n > 0:
            yield i, n


def _fewest_by_tier(cap: Capacity, request: GangRequest) -> dict[Tier, int | None]:
    """`fewest_nodes` in one domain of a rack, of a pod and of the cluster: racks counted
    from the nodes, pods from their racks."""
    racks: dict[tuple[str, ...], list[int]] = {}
    for i, n in _node_holds(cap, request):
        racks.setdefault(cap.tier_domains[i][0], []).append(n)
    pods: dict[tuple[str, ...], list[int]] = {}
    for (pod, _), holds in racks.items():
        pods.setdefault((pod,), []).extend(holds)
    everything = [n for holds in pods.values() for n in holds]
    return {
        tier: least_nodes(domains, request.workers)
        for tier, domains in (
            (Tier.RACK, list(racks.values())),
            (Tier.POD, list(pods.values())),
            (Tier.CLUSTER, [everything]),
        )
    }
