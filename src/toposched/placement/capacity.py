"""Free GPUs per node, indexed by node signature so that identical nodes are asked only once.

The cluster description is immutable; this is the usage kept apart from it. Nodes keep their
index for life (a removed node stays as an empty slot), so indices can be stored elsewhere.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from toposched.placement.tables import to_mask
from toposched.placement.tally import Domain, DomainTally
from toposched.topology.cluster import (
    DEFAULT_NETWORK_GBPS,
    Eligibility,
    Node,
    NodeSelector,
    Taint,
    legacy_levels,
    topology_aware,
)
from toposched.topology.levels import Level
from toposched.topology.node import NodeTopology
from toposched.topology.resources import WorkerFit, type_key

# What eligibility reads of a node besides its labels: GPU type key, GPU memory, taints.
Kind = tuple[str, int, tuple[Taint, ...]]
# Topology, free GPUs, topology-aware, kind (its number: cheap to hash), free millicores and
# bytes (None: not counted).
Signature = tuple[NodeTopology, int, bool, int, int | None, int | None]


def full_mask(size: int) -> int:
    return (1 << size) - 1


def _merged(out: Mapping[int, int], exclude: Mapping[int, int] | None) -> Mapping[int, int]:
    if not exclude:
        return out
    if not out:
        return exclude
    merged = dict(exclude)
    merged.update(out)
    return merged


def _kind(node: Node) -> Kind:
    hw = node.hardware
    return (type_key(hw.gpu_type), hw.gpu_memory, node.taints)


def _taints_filter(node: Node) -> int:
    return int(any(taint.filters for taint in node.taints))


class Capacity:
    """Bitmask of free GPUs per node, and groups of nodes with the same (topology, free, label,
    kind); the CPUs and memory held on each node (what its `hardware` counts).

    A node's kind (GPU type, GPU memory, taints) is in its group's signature, so that a job's
    GPU types, GPU memory and tolerations rule out whole groups (`admits`); its labels are not
    (every node may have its own), and a selector rules nodes out one by one (`unlabelled`)."""

    def __init__(
        self, nodes: Sequence[Node] = (), levels: tuple[Level, ...] = (), declared: bool = False
    ) -> None:
        # The cluster's levels, narrowest first (Cluster.all_levels): where gangs go whole.
        self.levels = levels or legacy_levels(DEFAULT_NETWORK_GBPS)
        # Whether the cluster declared them (Cluster.levels): racks and pods of older cluster
        # files keep the fewest-nodes rule across the network (gang.py, `_place_by_level`).
        self.declared = declared and bool(levels)
        self.nodes: list[Node] = []
        # Each node's domain at every level, and its (pod, rack) and (pod,): fixed by its wiring.
        self.domains: list[tuple[Domain, ...]] = []
        self.tier_domains: list[tuple[Domain, Domain]] = []
        self.tally = DomainTally(len(self.levels))
        self.free: list[int] = []
        self.aware: list[bool] = []
        self.present: list[bool] = []
        # GPUs per node that no job can have until something changes: failed ones, and all of
        # a cordoned node's (Books keeps both, and mirrors them here). What the others add up to
        # bounds how few nodes a gang may span (gang.py, `fewest_nodes`).
        self.unusable: list[int] = []
        # gang.py's fewest nodes per request, until a node or what it can give changes.
        self.fewest_memo: dict[tuple[object, ...], int | None] = {}
        # gang.py's best nodes of one domain, by the domain's (node, free GPUs, workers it
        # holds) and the gang's shape: most domains are as they were at the last decision.
        self.nodes_memo: dict[tuple[object, ...], object] = {}
        self.labels: list[Mapping[str, str]] = []
        self.index: dict[str, int] = {}
        self.total_free = 0
        self.total_gpus = 0  # of present nodes, busy or not
        self._groups: dict[Signature, set[int]] = {}
        # The lowest member of each group, lazily: stale entries are dropped when met.
        self._lowest: dict[Signature, list[int]] = {}
        # Millicores and bytes held per node (kept while a node is away: its jobs still hold).
        self.used_cpus: list[int] = []
        self.used_memory: list[int] = []
        self.tainted = 0  # present nodes with a taint that keeps work off
        self.gpu_types: Counter[str] = Counter()  # present nodes by GPU type (its key)
        self.type_names: dict[str, str] = {}  # a GPU type's key -> its name as nodes give it
        self.free_by_type: Counter[str] = Counter()  # free GPUs of present nodes, by type key
        self.kinds: list[int] = []  # each node's kind, numbered in `kind_list`
        self.kind_list: list[Kind] = []
        self._kind_number: dict[Kind, int] = {}
        self._kind_node: list[Node] = []  # a node of each kind: what eligibility reads of it
        self._unlabelled: dict[NodeSelector, dict[int, int]] = {}
        self._admits: dict[tuple[Eligibility, int], bool] = {}
        self._explained: dict[Eligibility, tuple[dict[str, int], dict[str, int]]] = {}
        # Per eligibility, every GPU of each present node it rules out (node -> mask).
        self._ruled_out: dict[Eligibility, dict[int, int]] = {}
        for node in nodes:
            self.add_node(node)

    def add_node(self, node: Node) -> int:
        """Add (or bring back) a node with every GPU free; returns its index."""
        i = self.index.get(node.name)
        if i is None:
            i = len(self.nodes)
            self.index[node.name] = i
            self.nodes.append(node)
            self.domains.append(())
            self.tier_domains.append(((), ()))
            self.free.append(0)
            self.aware.append(True)
            self.present.append(False)
            self.unusable.append(0)
            self.labels.append({})
            self.used_cpus.append(0)
            self.used_memory.append(0)
            self.kinds.append(0)
        elif self.present[i]:
            raise ValueError(f"node {node.name!r} is already present")
        self._wire(i, node)
        self.present[i] = True
        self.unusable[i] = 0
        self.kinds[i] = self._number(node)
        self.tainted += _taints_filter(node)
        self._count_type(node, 1)
        self.labels[i] = node.labels
        self.aware[i] = topology_aware(node.labels)
        self.free[i] = full_mask(node.size)
        self._forget()
        self.total_free += node.size
        self.total_gpus += node.size
        self._join(i)
        return i

    def remove_node(self, i: int) -> None:
        self._leave(i)
        self.total_free -= self.free[i].bit_count()
        self.total_gpus -= self.nodes[i].size
        self.free[i] = 0
        self.present[i] = False
        self.tainted -= _taints_filter(self.nodes[i])
        self._count_type(self.nodes[i], -1)
        self._forget()

    def take(self, i: int, mask: int) -> None:
        if self.free[i] & mask != mask:
            raise ValueError(f"node {self.nodes[i].name}: GPUs {mask:#x} are not all free")
        self._leave(i)
        self.free[i] &= ~mask
        self.total_free -= mask.bit_count()
        self._join(i)

    def give(self, i: int, mask: int) -> None:
        if self.free[i] & mask:
            raise ValueError(f"node {self.nodes[i].name}: GPUs {mask:#x} are already free")
        if not self.present[i]:
            return
        self._leave(i)
        self.free[i] |= mask
        self.total_free += mask.bit_count()
        self._join(i)

    def set_labels(self, i: int, labels: Mapping[str, str]) -> None:
        """New labels for node i: they say whether it is topology-aware and which jobs'
        selectors it matches."""
        self._leave(i)
        self.labels[i] = labels
        self.aware[i] = topology_aware(labels)
        self._join(i)
        self._forget()

    def replace_node(self, i: int, node: Node) -> None:
        """Present node i's hardware or taints changed (its wiring did not)."""
        self._leave(i)
        self.tainted += _taints_filter(node) - _taints_filter(self.nodes[i])
        self._count_type(self.nodes[i], -1)
        self._wire(i, node)
        self._count_type(node, 1)
        self.kinds[i] = self._number(node)
        self._join(i)
        self._forget()

    def _wire(self, i: int, node: Node) -> None:
        self.nodes[i] = node
        # A node without a level's value (nodes handed in without their cluster's levels)
        # is in that level's unnamed domain. A domain is keyed by its value and every wider
        # one, so that two leaves may share a name under two spines.
        values = [node.level_values().get(level.name, "") for level in self.levels]
        self.domains[i] = tuple(tuple(values[at:]) for at in range(len(values)))
        self.tier_domains[i] = ((node.pod, node.rack), (node.pod,))

    def _forget(self) -> None:
        """A node came, went or changed: what was worked out per job's eligibility is stale."""
        self._ruled_out.clear()
        self._unlabelled.clear()
        self._admits.clear()
        self._explained.clear()
        self.fewest_memo.clear()
        self.nodes_memo.clear()

    def set_unusable(self, i: int, mask: int) -> None:
        """Node `i`'s GPUs that no job can have for now (failed, or a cordoned node's)."""
        if self.unusable[i] != mask:
            self.unusable[i] = mask
            self.fewest_memo.clear()

    def _count_type(self, node: Node, delta: int) -> None:
        key = type_key(node.hardware.gpu_type)
        self.gpu_types[key] += delta
        self.type_names.setdefault(key, node.hardware.gpu_type or "untyped")
        if not self.gpu_types[key]:
            del self.gpu_types[key]

    def type_name(self, key: str) -> str:
        return self.type_names.get(key, key or "untyped")

    def type_key(self, i: int) -> str:
        """Node i's GPU type, as a key (`type_key`)."""
        return self.kind_list[self.kinds[i]][0]

    def hold(self, i: int, cpus: int, memory: int) -> None:
        """Node i's jobs hold `cpus` millicores and `memory` bytes more (less if negative)."""
        self._leave(i)
        self.used_cpus[i] += cpus
        self.used_memory[i] += memory
        self._join(i)

    def free_cpus(self, i: int) -> int | None:
        total = self.nodes[i].hardware.cpus
        return None if total is None else total - self.used_cpus[i]

    def free_memory(self, i: int) -> int | None:
        total = self.nodes[i].hardware.memory
        return None if total is None else total - self.used_memory[i]

    def room(self, i: int, fit: WorkerFit) -> int | None:
        """How many workers of `fit` node i's free CPUs and memory hold (None: no limit)."""
        if not fit.sized:
            return None
        return fit.room(self.free_cpus(i), self.free_memory(i))

    def limits(self, fit: WorkerFit, per_worker: int) -> dict[int, int]:
        """Present nodes with a free GPU whose CPUs or memory hold fewer workers of `fit` than
        their free GPUs do (node -> workers); empty for a job that asks for neither."""
        if not fit.sized:
            return {}
        out: dict[int, int] = {}
        for i, up in enumerate(self.present):
            if up and self.free[i]:
                most = fit.room(self.free_cpus(i), self.free_memory(i))
                if most is not None and most < self.free[i].bit_count() // per_worker:
                    out[i] = most
        return out

    def ruled_out(self, where: Eligibility) -> Mapping[int, int]:
        """Every GPU of the present nodes `where` does not admit (node -> mask); nothing when
        it asks nothing and no node is tainted. Kept until a node, its labels or taints change."""
        if not where and not self.tainted:
            return {}
        out = self._ruled_out.get(where)
        if out is None:
            unlabelled = self.unlabelled(where.selector)
            out = self._ruled_out[where] = {
                i: full_mask(self.nodes[i].size)
                for i in self.present_indices()
                if i in unlabelled or not self.admits(where, self.kinds[i])
            }
        return out

    def _number(self, node: Node) -> int:
        """The number of `node`'s kind, numbered on first sight."""
        kind = _kind(node)
        number = self._kind_number.get(kind)
        if number is None:
            number = self._kind_number[kind] = len(self.kind_list)
            self.kind_list.append(kind)
            self._kind_node.append(node)
        return number

    def admits(self, where: Eligibility, kind: int) -> bool:
        """Whether `where`'s GPU types, GPU memory and tolerations take nodes of kind number
        `kind` (`Eligibility.admits_kind`, asked once per kind)."""
        key = (where, kind)
        found = self._admits.get(key)
        if found is None:
            found = self._admits[key] = where.admits_kind(self._kind_node[kind])
        return found

    def unlabelled(self, selector: NodeSelector) -> Mapping[int, int]:
        """Every GPU of the present nodes whose labels `selector` does not match (node ->
        mask); nothing for the empty selector."""
        if not selector:
            return {}
        out = self._unlabelled.get(selector)
        if out is None:
            out = self._unlabelled[selector] = {
                i: full_mask(self.nodes[i].size)
                for i in self.present_indices()
                if not selector.matches(self.labels[i])
            }
        return out

    def explained(self, where: Eligibility) -> tuple[dict[str, int], dict[str, int]]:
        """(why nodes are ruled out -> how many, GPU type -> how many of the nodes `where`
        admits): what a waiting job is told, worked out once per node change."""
        found = self._explained.get(where)
        if found is None:
            out = self.ruled_out(where)
            why: dict[str, int] = {}
            kinds: dict[str, int] = {}
            for i in self.present_indices():
                node = self.nodes[i]
                if i in out:
                    reason = where.why_not(node, self.labels[i])
                    why[reason] = why.get(reason, 0) + 1
                else:
                    kind = node.hardware.gpu_type or "untyped"
                    kinds[kind] = kinds.get(kind, 0) + 1
            found = self._explained[where] = (why, kinds)
        return found

    def hidden(self, where: Eligibility, exclude: Mapping[int, int] | None) -> Mapping[int, int]:
        """`exclude` (node -> GPU mask) and the nodes `where` rules out, together."""
        return _merged(self.ruled_out(where), exclude)

    def hidden_by_labels(
        self, selector: NodeSelector, exclude: Mapping[int, int] | None
    ) -> Mapping[int, int]:
        """`exclude` and the nodes `selector` rules out, together (for placers that leave
        GPU types, GPU memory and taints to `admitting`)."""
        return _merged(self.unlabelled(selector), exclude)

    def admitting(self, where: Eligibility) -> Callable[[int], bool] | None:
        """Which kinds of node `where` takes (a test per group); None: every kind."""
        if not where.fit.filters and not where.tolerations and not self.tainted:
            return None
        return lambda kind: self.admits(where, kind)

    def hidden_for(
        self,
        where: Eligibility,
        exclude: Mapping[int, int] | None,
        fit: WorkerFit,
        per_worker: int,
        choose_gpus: Callable[[int, int, int], tuple[int, ...]],
    ) -> Mapping[int, int]:
        """As `hidden`, and on each node whose CPUs or memory hold fewer workers than its GPUs,
        every free GPU but the `choose_gpus(node, free mask, count)` that those workers would
        use: for placers that know GPUs only (the topology placer takes `limits` itself)."""
        out = self.hidden(where, exclude)
        limits = self.limits(fit, per_worker)
        if not limits:
            return out
        merged = dict(out)
        for i, most in limits.items():
            free = self.free[i] & ~merged.get(i, 0)
            if free.bit_count() <= most * per_worker:
                continue  # what `exclude` leaves of its GPUs no more than those workers use
            keep = to_mask(choose_gpus(i, free, most * per_worker)) if most else 0
            merged[i] = merged.get(i, 0) | (free & ~keep)
        return merged

    @contextmanager
    def assuming_free(self, extra: Mapping[int, int]) -> Iterator[Capacity]:
        """Within the block, GPUs in `extra` (node -> mask, now busy) count as free: what-if
        questions for preemption and migration plans, undone on exit."""
        given = {i: mask & ~self.free[i] for i, mask in extra.items() if self.present[i]}
        for i, mask in given.items():
            if mask:
                self.give(i, mask)
        try:
            yield self
        finally:
            for i, mask in given.items():
                if mask:
                    self.take(i, mask)

    def signature(self, i: int) -> Signature:
        return (
            self.nodes[i].topology,
            self.free[i],
            self.aware[i],
            self.kinds[i],
            self.free_cpus(i),
            self.free_memory(i),
        )

    def groups(self) -> Iterator[tuple[Signature, set[int]]]:
        """Present nodes with at least one free GPU, grouped by signature."""
        return iter(self._groups.items())

    def lowest(self, key: Signature) -> int:
        """The lowest node index in group `key` (which must exist)."""
        heap, members = self._lowest[key], self._groups[key]
        while heap[0] not in members:
            heapq.heappop(heap)
        return heap[0]

    def present_indices(self) -> Iterator[int]:
        return (i for i, up in enumerate(self.present) if up)

    def _join(self, i: int) -> None:
        if self.present[i]:
            free = self.free[i].bit_count()
            self.free_by_type[self.type_key(i)] += free
            self.tally.count(self.domains[i], free, free < self.nodes[i].size, 1)
        if self.present[i] and self.free[i]:
            key = self.signature(i)
            members = self._groups.setdefault(key, set())
            if i not in members:
                members.add(i)
                heap = self._lowest.setdefault(key, [])
                heapq.heappush(heap, i)
                if len(heap) > 2 * len(members) + 8:
                    self._lowest[key] = sorted(members)  # shed the stale entries

    def _leave(self, i: int) -> None:
        if self.present[i]:
            free = self.free[i].bit_count()
            self.free_by_type[self.type_key(i)] -= free
            self.tally.count(self.domains[i], free, free < self.nodes[i].size, -1)
        if not (self.present[i] and self.free[i]):
            return
        key = self.signature(i)
        members = self._groups[key]
        members.discard(i)
        if not members:
            del self._groups[key]
            del self._lowest[key]
