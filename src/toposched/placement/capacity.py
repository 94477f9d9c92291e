"""Free GPUs per node, indexed by node signature so that identical nodes are asked only once.

The cluster description is immutable; this is the usage kept apart from it. Nodes keep their
index for life (a removed node stays as an empty slot), so indices can be stored elsewhere.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from toposched.topology.cluster import Node, NodeSelector, topology_aware
from toposched.topology.node import NodeTopology

Signature = tuple[NodeTopology, int, bool]


def full_mask(size: int) -> int:
    return (1 << size) - 1


class Capacity:
    """Bitmask of free GPUs per node, and groups of nodes with the same (topology, free, label)."""

    def __init__(self, nodes: Sequence[Node] = ()) -> None:
        self.nodes: list[Node] = []
        self.free: list[int] = []
        self.aware: list[bool] = []
        self.present: list[bool] = []
        self.labels: list[Mapping[str, str]] = []
        self.index: dict[str, int] = {}
        self.total_free = 0
        self.total_gpus = 0  # of present nodes, busy or not
        self._groups: dict[Signature, set[int]] = {}
        # The lowest member of each group, lazily: stale entries are dropped when met.
        self._lowest: dict[Signature, list[int]] = {}
        # Per selector, every GPU of each present node it rules out (node -> mask).
        self._ruled_out: dict[NodeSelector, dict[int, int]] = {}
        for node in nodes:
            self.add_node(node)

    def add_node(self, node: Node) -> int:
        """Add (or bring back) a node with every GPU free; returns its index."""
        i = self.index.get(node.name)
        if i is None:
            i = len(self.nodes)
            self.index[node.name] = i
            self.nodes.append(node)
            self.free.append(0)
            self.aware.append(True)
            self.present.append(False)
            self.labels.append({})
        elif self.present[i]:
            raise ValueError(f"node {node.name!r} is already present")
        self.nodes[i] = node
        self.present[i] = True
        self.labels[i] = node.labels
        self.aware[i] = topology_aware(node.labels)
        self.free[i] = full_mask(node.size)
        self._ruled_out.clear()
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
        self._ruled_out.clear()

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
        self._ruled_out.clear()

    def ruled_out(self, selector: NodeSelector) -> Mapping[int, int]:
        """Every GPU of the present nodes whose labels `selector` does not match (node ->
        mask); nothing for the empty selector. Kept until a node or its labels change."""
        if not selector:
            return {}
        out = self._ruled_out.get(selector)
        if out is None:
            out = self._ruled_out[selector] = {
                i: full_mask(self.nodes[i].size)
                for i in self.present_indices()
                if not selector.matches(self.labels[i])
            }
        return out

    def hidden(
        self, selector: NodeSelector, exclude: Mapping[int, int] | None
    ) -> Mapping[int, int]:
        """`exclude` (node -> GPU mask) and the nodes `selector` rules out, together."""
        out = self.ruled_out(selector)
        if not exclude:
            return out
        if not out:
            return exclude
        merged = dict(exclude)
        merged.update(out)
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
        return (self.nodes[i].topology, self.free[i], self.aware[i])

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
        if not (self.present[i] and self.free[i]):
            return
        key = self.signature(i)
        members = self._groups[key]
        members.discard(i)
        if not members:
            del self._groups[key]
            del self._lowest[key]
