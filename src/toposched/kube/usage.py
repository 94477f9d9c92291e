"""What the pods on each node request, summed per node, with what of it the core counts itself."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

Amounts = Mapping[str, int]  # resource -> amount (CPUs in millicores, the rest in units)


@dataclass
class Usage:
    """Pods on nodes, each with its requests and whether the core counts its CPUs and memory
    (a worker of a gang the core placed). Per node, the totals are summed when asked for and
    kept until a pod there changes; `dirty` names the nodes whose totals changed."""

    _pods: dict[Hashable, tuple[str, Amounts, bool]] = field(default_factory=dict)
    _on: dict[str, set[Hashable]] = field(default_factory=dict)
    _totals: dict[str, tuple[dict[str, int], dict[str, int]]] = field(default_factory=dict)
    dirty: set[str] = field(default_factory=set)

    def put(self, key: Hashable, node: str | None, requests: Amounts, counted: bool) -> None:
        """Pod `key` is on `node` (None: on none, or gone), asking `requests`."""
        old = self._pods.get(key)
        new = (node, requests, counted) if node else None
        if old == new:
            return
        if old is not None:
            self._on[old[0]].discard(key)
            self._changed(old[0])
            del self._pods[key]
        if new is not None and node:
            self._pods[key] = new
            self._on.setdefault(node, set()).add(key)
            self._changed(node)

    def __contains__(self, key: Hashable) -> bool:
        """Whether pod `key` is counted on a node."""
        return key in self._pods

    def drop(self, tag: str) -> None:
        """Forget every pod whose key is a tuple starting with `tag` (before a relist)."""
        for key in [k for k in self._pods if isinstance(k, tuple) and k[:1] == (tag,)]:
            self.put(key, None, {}, False)

    def totals(self, node: str) -> tuple[Amounts, Amounts]:
        """(what every pod on `node` requests, what of it the core does not count)."""
        kept = self._totals.get(node)
        if kept is None:
            every: dict[str, int] = {}
            uncounted: dict[str, int] = {}
            for key in self._on.get(node, ()):
                _, requests, counted = self._pods[key]
                for resource, amount in requests.items():
                    every[resource] = every.get(resource, 0) + amount
                    if not counted:
                        uncounted[resource] = uncounted.get(resource, 0) + amount
            kept = self._totals[node] = (every, uncounted)
        return kept

    def _changed(self, node: str) -> None:
        self._totals.pop(node, None)
        self.dirty.add(node)
