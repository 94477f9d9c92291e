"""The cluster: nodes with their topology and labels, grouped in racks and pods, and the network."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from types import MappingProxyType

from toposched.topology.node import NodeTopology

SCHEDULE_LABEL = "toposched.io/gpu-schedule"
SCHEDULE_VALUES = ("topology", "default")


class Tier(IntEnum):
    """The lowest network level that joins a set of nodes (NODE: they are one node)."""

    NODE = 0
    RACK = 1
    POD = 2
    CLUSTER = 3


# One direction, GB/s: 100 Gb/s inside a rack (one InfiniBand EDR leaf), then halved per tier for
# the oversubscribed uplinks that production clusters have. Cluster files override them.
DEFAULT_NETWORK_GBPS: Mapping[Tier, float] = MappingProxyType(
    {Tier.RACK: 12.5, Tier.POD: 6.25, Tier.CLUSTER: 3.125}
)


class ClusterError(ValueError):
    """A cluster description that cannot be used (duplicate names, bad labels, no nodes).

    As with TopologyError, `source` names the file or shorthand and `line` the 1-based line,
    when known; `reason` is the message without them.
    """

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None):
        self.reason = message
        self.source = source
        self.line = line
        where = [str(part) for part in (source, line) if part is not None]
        prefix = ("line " if source is None else "") + ":".join(where)
        super().__init__(f"{prefix}: {message}" if where else message)


@dataclass(frozen=True)
class Node:
    """One server. Identical servers share one `topology` object (and so one set of tables)."""

    name: str
    topology: NodeTopology
    rack: str = "rack-0"
    pod: str = "pod-0"
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if not self.name:
            raise ClusterError("a node needs a name")
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))
        check_labels(self.name, self.labels)

    @property
    def size(self) -> int:
        return self.topology.size


def check_labels(node: str, labels: Mapping[str, str]) -> None:
    """Labels are strings; the scheduling label takes one of its documented values."""
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str) or not key:
            raise ClusterError(
                f"node {node!r}: labels map names to strings, got {key!r}: {value!r}"
            )
    schedule = labels.get(SCHEDULE_LABEL)
    if schedule is not None and schedule not in SCHEDULE_VALUES:
        raise ClusterError(
            f"node {node!r}: label {SCHEDULE_LABEL} must be one of "
            f"{', '.join(SCHEDULE_VALUES)}, got {schedule!r}"
        )


@dataclass(frozen=True)
class NodeSelector:
    """Node labels a job requires, every one of them (as Kubernetes' `nodeSelector`); the
    empty selector takes every node."""

    match: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, labels: Mapping[str, str] | None) -> NodeSelector:
        """A selector from a mapping; ClusterError names a key or value that is not a string."""
        labels = labels or {}
        for key, value in labels.items():
            if not isinstance(key, str) or not isinstance(value, str) or not key:
                raise ClusterError(f"selector: labels map names to strings, got {key!r}: {value!r}")
        return cls(tuple(sorted(labels.items())))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.match)

    def __bool__(self) -> bool:
        return bool(self.match)

    def describe(self) -> str:
        return ",".join(f"{key}={value}" for key, value in self.match)


EVERY_NODE = NodeSelector()


def topology_aware(labels: Mapping[str, str]) -> bool:
    """Whether a node with these labels takes part in topology-aware placement (the default)."""
    return labels.get(SCHEDULE_LABEL, "topology") == "topology"


@dataclass(frozen=True)
class Cluster:
    """Immutable description; what is in use is kept apart, by whoever schedules on it."""

    nodes: tuple[Node, ...]
    network_gbps: Mapping[Tier, float] = field(default_factory=lambda: DEFAULT_NETWORK_GBPS)
    name: str = ""

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for node in self.nodes:
            if node.name in seen:
                raise ClusterError(f"two nodes are named {node.name!r}")
            seen.add(node.name)
        missing = [t.name.lower() for t in (Tier.RACK, Tier.POD, Tier.CLUSTER)]
        missing = [m for m in missing if Tier[m.upper()] not in self.network_gbps]
        if missing:
            raise ClusterError(f"network bandwidth missing for tier(s): {', '.join(missing)}")
        bad = {t: v for t, v in self.network_gbps.items() if not v > 0}
        if bad:
            raise ClusterError(f"network bandwidths must be positive, got {bad}")
        object.__setattr__(self, "network_gbps", MappingProxyType(dict(self.network_gbps)))

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise ClusterError(f"no node named {name!r}")

    @property
    def gpus(self) -> int:
        return sum(node.size for node in self.nodes)

    def tier_gbps(self, tier: Tier) -> float | None:
        """Bandwidth between nodes joined at `tier`; None inside one node."""
        return None if tier == Tier.NODE else self.network_gbps[tier]


def tier_of(nodes: Iterable[Node]) -> Tier:
    """The network tier a job spread over `nodes` communicates through."""
    members = list(nodes)
    if len({n.name for n in members}) <= 1:
        return Tier.NODE
    if len({(n.pod, n.rack) for n in members}) == 1:
        return Tier.RACK
    if len({n.pod for n in members}) == 1:
        return Tier.POD
    return Tier.CLUSTER
