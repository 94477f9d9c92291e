"""Named network levels of a cluster (clique, leaf, spine, ...), narrowest first."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
# Names a level may not take: the job's locality words for the node and the whole cluster.
RESERVED = ("node", "any", "cluster")


class LevelError(ValueError):
    """A level that cannot be used: a bad name or bandwidth, a name repeated, a value missing."""


@dataclass(frozen=True)
class Level:
    """GPUs whose lowest shared level is this one talk at `gbps` (GB/s per GPU, one direction)
    with `latency_us` per message; `nvlink`: the level is one NVLink fabric spanning nodes (a
    GB200 NVL72 rack), a scale-up domain rather than a network switch."""

    name: str
    gbps: float
    latency_us: float = 0.0
    nvlink: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise LevelError(
                f"level name {self.name!r}: lowercase letters, digits, '-' or '_', "
                "starting with a letter"
            )
        if self.name in RESERVED:
            raise LevelError(f"level name {self.name!r} is reserved ({', '.join(RESERVED)})")
        for what, value in (("gbps", self.gbps), ("latency_us", self.latency_us)):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise LevelError(f"level {self.name!r}: {what} must be a number, got {value!r}")
        if not (math.isfinite(self.gbps) and self.gbps > 0):
            raise LevelError(f"level {self.name!r}: gbps must be positive, got {self.gbps!r}")
        if not (math.isfinite(self.latency_us) and self.latency_us >= 0):
            raise LevelError(
                f"level {self.name!r}: latency_us must be >= 0, got {self.latency_us!r}"
            )
        object.__setattr__(self, "gbps", float(self.gbps))
        object.__setattr__(self, "latency_us", float(self.latency_us))


def check_levels(levels: Sequence[Level]) -> None:
    """Names unique; NVLink levels below every network level (a switch joins fabrics, never
    the other way round)."""
    seen: set[str] = set()
    network_seen = False
    for level in levels:
        if level.name in seen:
            raise LevelError(f"level {level.name!r} is named twice")
        seen.add(level.name)
        if level.nvlink and network_seen:
            raise LevelError(
                f"NVLink level {level.name!r} comes after a network level; "
                "NVLink levels are the narrowest"
            )
        network_seen = network_seen or not level.nvlink


def check_values(node: str, levels: Sequence[Level], values: Mapping[str, str]) -> None:
    """A node names a domain (a non-empty string) at every level, and no level the cluster lacks."""
    names = {level.name for level in levels}
    for key, value in values.items():
        if key not in names:
            known = ", ".join(names) or "none"
            raise LevelError(f"node {node!r}: unknown level {key!r}; the levels are {known}")
        if not isinstance(value, str) or not value:
            raise LevelError(f"node {node!r}: level {key!r} needs a non-empty name, got {value!r}")
    for level in levels:
        if level.name not in values:
            raise LevelError(f"node {node!r}: no value for level {level.name!r}")
