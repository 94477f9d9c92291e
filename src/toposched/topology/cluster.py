"""The cluster: nodes with their topology and labels, grouped in network levels, and the network."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import IntEnum
from functools import cached_property
from types import MappingProxyType

from toposched.topology.levels import Level, LevelError, check_levels, check_values
from toposched.topology.node import NodeTopology
from toposched.topology.resources import UNKNOWN_HARDWARE, Hardware, WorkerFit

SCHEDULE_LABEL = "toposched.io/gpu-schedule"
SCHEDULE_VALUES = ("topology", "default")


class Tier(IntEnum):
    """The lowest network level that joins a set of nodes (NODE: they are one node)."""

    NODE = 0
    RACK = 1
    POD = 2
    CLUSTER = 3


LEGACY_LEVEL_NAMES = ("rack", "pod")

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
    hardware: Hardware = UNKNOWN_HARDWARE  # GPU type and memory, CPUs and memory
    taints: tuple[Taint, ...] = ()
    # Its domain at each of the cluster's declared levels (empty: the cluster has `rack` and
    # `pod` alone, read from the fields above).
    levels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if not self.name:
            raise ClusterError("a node needs a name")
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))
        object.__setattr__(self, "levels", MappingProxyType(dict(self.levels)))
        check_labels(self.name, self.labels)
        if self.hardware.mig and self.hardware.mig[-1] >= self.size:
            raise ClusterError(
                f"node {self.name!r}: GPU {self.hardware.mig[-1]} in MIG mode, but the node "
                f"has GPUs 0..{self.size - 1}"
            )

    def level_values(self) -> Mapping[str, str]:
        """Its domain per level: the declared ones, else its rack and pod."""
        return self.levels or {"rack": self.rack, "pod": self.pod}

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


SELECTOR_OPS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


@dataclass(frozen=True)
class Requirement:
    """One term of a required node affinity, as Kubernetes writes it: `key` `op` `values`."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.op not in SELECTOR_OPS:
            raise ClusterError(
                f"node affinity {self.key!r}: operator {self.op!r} is not one of "
                f"{', '.join(SELECTOR_OPS)}"
            )
        if self.op in ("Exists", "DoesNotExist") and self.values:
            raise ClusterError(f"node affinity {self.key!r}: {self.op} takes no values")
        if self.op in ("In", "NotIn") and not self.values:
            raise ClusterError(f"node affinity {self.key!r}: {self.op} needs values")
        if self.op in ("Gt", "Lt") and (len(self.values) != 1 or not _integer(self.values[0])):
            raise ClusterError(f"node affinity {self.key!r}: {self.op} needs one integer value")

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.op == "In":
            return value in self.values
        if self.op == "NotIn":
            return value not in self.values
        if self.op == "Exists":
            return value is not None
        if self.op == "DoesNotExist":
            return value is None
        if value is None or not _integer(value):
            return False
        limit = int(self.values[0])
        return int(value) > limit if self.op == "Gt" else int(value) < limit

    def describe(self) -> str:
        if self.op in ("Exists", "DoesNotExist"):
            return f"{self.key} {self.op}"
        return f"{self.key} {self.op} {','.join(self.values)}"


def _integer(text: str) -> bool:
    return text.lstrip("-").isdigit()


@dataclass(frozen=True)
class NodeSelector:
    """Node labels a job requires, every one of them (as Kubernetes' `nodeSelector`), and the
    terms of a required node affinity (`any_of`: a node must meet every requirement of one of
    them; none: no affinity); the empty selector takes every node."""

    match: tuple[tuple[str, str], ...] = ()
    any_of: tuple[tuple[Requirement, ...], ...] = ()

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def _hash(self) -> int:
        return hash((self.match, self.any_of))

    @classmethod
    def of(cls, labels: Mapping[str, str] | None) -> NodeSelector:
        """A selector from a mapping; ClusterError names a key or value that is not a string."""
        labels = labels or {}
        for key, value in labels.items():
            if not isinstance(key, str) or not isinstance(value, str) or not key:
                raise ClusterError(f"selector: labels map names to strings, got {key!r}: {value!r}")
        return cls(tuple(sorted(labels.items())))

    def matches(self, labels: Mapping[str, str]) -> bool:
        if not all(labels.get(key) == value for key, value in self.match):
            return False
        return not self.any_of or any(
            all(req.matches(labels) for req in term) for term in self.any_of
        )

    def __bool__(self) -> bool:
        return bool(self.match) or bool(self.any_of)

    def describe(self) -> str:
        parts = [f"{key}={value}" for key, value in self.match]
        if self.any_of:
            terms = [" and ".join(req.describe() for req in term) for term in self.any_of]
            parts.append("affinity " + " or ".join(f"({t})" for t in terms))
        return ",".join(parts)


TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True)
class Taint:
    """A node repels jobs that do not tolerate it: NoSchedule and NoExecute keep new work off;
    PreferNoSchedule is a preference and does not filter."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __post_init__(self) -> None:
        if not self.key or self.effect not in TAINT_EFFECTS:
            raise ClusterError(
                f"taint {self.key!r}: needs a key and an effect among {', '.join(TAINT_EFFECTS)}"
            )

    @property
    def filters(self) -> bool:
        return self.effect != "PreferNoSchedule"

    def describe(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


@dataclass(frozen=True)
class Toleration:
    """Kubernetes' toleration: `Exists` matches any value (and with no key, every taint);
    an empty effect matches every effect."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def __post_init__(self) -> None:
        if self.operator not in ("Equal", "Exists"):
            raise ClusterError(f"toleration {self.key!r}: operator must be Equal or Exists")
        if self.effect and self.effect not in TAINT_EFFECTS:
            raise ClusterError(f"toleration {self.key!r}: unknown effect {self.effect!r}")
        if not self.key and self.operator != "Exists":
            raise ClusterError("a toleration without a key needs operator Exists")

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return True
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


def untolerated(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> Taint | None:
    """The first taint that keeps a job with `tolerations` off a node, or None."""
    for taint in taints:
        if taint.filters and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


EVERY_NODE = NodeSelector()


@dataclass(frozen=True)
class Eligibility:
    """Which nodes a job may use at all: labels (`selector`), GPU types (`gpu_types`, compared
    without case; empty: any), at least `gpu_memory` bytes per GPU, and the taints its
    `tolerations` let it past. What the nodes have free is another matter (WorkerFit.room)."""

    selector: NodeSelector = EVERY_NODE
    gpu_types: tuple[str, ...] = ()
    gpu_memory: int = 0
    tolerations: tuple[Toleration, ...] = ()

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def _hash(self) -> int:
        # Kept: an eligibility keys the placers' caches, looked up on every placement.
        return hash((self.selector, self.gpu_types, self.gpu_memory, self.tolerations))

    @cached_property
    def fit(self) -> WorkerFit:
        return WorkerFit(self.gpu_types, self.gpu_memory)

    def __bool__(self) -> bool:
        """Whether it asks anything of a node (an untainted node admits the empty one)."""
        return bool(self.selector) or self.fit.filters

    def admits(self, node: Node, labels: Mapping[str, str]) -> bool:
        return self.selector.matches(labels) and self.admits_kind(node)

    def admits_kind(self, node: Node) -> bool:
        """Whatever its labels: GPU type and memory accepted, every taint tolerated."""
        return (
            self.fit.eligible(node.hardware) and untolerated(node.taints, self.tolerations) is None
        )

    def why_not(self, node: Node, labels: Mapping[str, str]) -> str:
        """What rules `node` out, as a phrase about its kind of node."""
        if not self.fit.eligible(node.hardware):
            return self.fit.why_not(node.hardware)
        taint = untolerated(node.taints, self.tolerations)
        if taint is not None:
            return f"node(s) tainted {taint.describe()} not tolerated"
        return self.why_not_labels()

    def why_not_labels(self) -> str:
        return f"node(s) without {self.selector.describe()} excluded by the selector"


ANYWHERE = Eligibility()


def topology_aware(labels: Mapping[str, str]) -> bool:
    """Whether a node with these labels takes part in topology-aware placement (the default)."""
    return labels.get(SCHEDULE_LABEL, "topology") == "topology"


@dataclass(frozen=True)
class Cluster:
    """Immutable description; what is in use is kept apart, by whoever schedules on it.

    `levels` (narrowest first) are the network levels a cluster declares; each node then names
    its domain at every one of them, and `network_gbps` gives the bandwidth beyond the widest
    (CLUSTER). Without them the levels are `rack` and `pod`, at the bandwidths of
    `network_gbps`. Code that knows only racks and pods (the performance model's tiers, a job's
    `locality`) reads the two narrowest declared levels as rack and pod.
    """

    nodes: tuple[Node, ...]
    network_gbps: Mapping[Tier, float] = field(default_factory=lambda: DEFAULT_NETWORK_GBPS)
    name: str = ""
    levels: tuple[Level, ...] = ()

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for node in self.nodes:
            if node.name in seen:
                raise ClusterError(f"two nodes are named {node.name!r}")
            seen.add(node.name)
        if self.levels:
            self._declare_levels()
        missing = [t.name.lower() for t in (Tier.RACK, Tier.POD, Tier.CLUSTER)]
        missing = [m for m in missing if Tier[m.upper()] not in self.network_gbps]
        if missing:
            raise ClusterError(f"network bandwidth missing for tier(s): {', '.join(missing)}")
        bad = {t: v for t, v in self.network_gbps.items() if not v > 0}
        if bad:
            raise ClusterError(f"network bandwidths must be positive, got {bad}")
        object.__setattr__(self, "network_gbps", MappingProxyType(dict(self.network_gbps)))

    def _declare_levels(self) -> None:
        """Check the levels and every node's values; the two narrowest become rack and pod."""
        levels = tuple(self.levels)
        try:
            check_levels(levels)
            for node in self.nodes:
                check_values(node.name, levels, node.levels)
        except LevelError as err:
            raise ClusterError(str(err)) from None
        if Tier.CLUSTER not in self.network_gbps:
            raise ClusterError("network bandwidth missing for tier(s): cluster")
        widest = self.network_gbps[Tier.CLUSTER]
        network = {
            Tier.RACK: levels[0].gbps,
            Tier.POD: levels[1].gbps if len(levels) > 1 else widest,
            Tier.CLUSTER: widest,
        }
        nodes = tuple(
            replace(
                node,
                rack=node.levels[levels[0].name],
                pod=node.levels[levels[1].name] if len(levels) > 1 else "pod-0",
            )
            for node in self.nodes
        )
        object.__setattr__(self, "levels", levels)
        object.__setattr__(self, "network_gbps", network)
        object.__setattr__(self, "nodes", nodes)

    @property
    def all_levels(self) -> tuple[Level, ...]:
        """The declared levels, or `rack` and `pod` at the bandwidths of `network_gbps`."""
        if self.levels:
            return self.levels
        return legacy_levels(self.network_gbps)

    @property
    def beyond_gbps(self) -> float:
        """Between GPUs that share no level."""
        return self.network_gbps[Tier.CLUSTER]

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


def legacy_levels(network: Mapping[Tier, float]) -> tuple[Level, ...]:
    """`rack` and `pod` as levels, at the bandwidths of a cluster without declared levels."""
    return (Level("rack", network[Tier.RACK]), Level("pod", network[Tier.POD]))


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
