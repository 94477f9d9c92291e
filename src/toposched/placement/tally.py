"""Free GPUs and nodes in use per domain of every level, kept as GPUs are taken and given."""

from __future__ import annotations

from collections.abc import Sequence

Domain = tuple[str, ...]


class DomainTally:
    """Per level (an index, narrowest first), per domain: its free GPUs and how many of its
    nodes are not wholly free; what ranks a level's domains for a gang (placement/levels.py)
    without a walk of every node at every decision."""

    def __init__(self, levels: int) -> None:
        self.free: list[dict[Domain, int]] = [{} for _ in range(levels)]
        self.in_use: list[dict[Domain, int]] = [{} for _ in range(levels)]

    def count(self, domains: Sequence[Domain], free: int, in_use: bool, sign: int) -> None:
        """A node in `domains` (one per level) with `free` GPUs joins (sign 1) or leaves (-1)."""
        for at, key in enumerate(domains):
            self.free[at][key] = self.free[at].get(key, 0) + sign * free
            if in_use:
                self.in_use[at][key] = self.in_use[at].get(key, 0) + sign
