"""Nodes into the core: which nodes it has, what it was told of each, and the room each has left.

`CoreNodes.sync` compares the cache's node objects (and what pods use of them) with what the
core was told, and yields the core events that bring it up to date, one at a time: the driver
feeds each before the next is worked out, as some depend on what the core then holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace

from toposched.core import (
    Event,
    GpuHealth,
    NodeAdded,
    NodeChanged,
    NodeCordoned,
    NodeRemoved,
)
from toposched.core.views import CoreView
from toposched.kube.annotations import NodeGpus
from toposched.kube.cache import Warn
from toposched.kube.objects import (
    ACCEPT_UNKNOWN,
    COUNTED,
    FREE,
    GPU_RESOURCE,
    Obj,
    ObjectError,
    Pod,
    allocatable,
    node_from,
    node_ready,
)
from toposched.kube.usage import Amounts, Usage
from toposched.perf.typespeeds import TypeSpeeds
from toposched.topology.cluster import Eligibility, Node
from toposched.topology.node import NodeTopology
from toposched.topology.resources import cpus_text, memory_text

UNKNOWN_USE = (
    f"its allocatable GPUs are counted (unknown topology) for jobs annotated {ACCEPT_UNKNOWN}=true"
)


class CoreNodes:
    """The nodes the core has, as it was told of them, kept in step with the cluster's."""

    def __init__(
        self,
        usage: Usage,
        warn: Warn,
        *,
        rack_label: str,
        gpu_names: Iterable[str],
        type_speed: TypeSpeeds,
    ) -> None:
        self.usage = usage
        self.warn = warn
        self.rack_label = rack_label
        self.gpu_names = tuple(gpu_names)
        # The catalog's speed of each GPU type: what the choice among a job's types weighs.
        self.type_speed = type_speed
        # Each topology's catalog GPU type (the slowest of its nodes'), as nodes join: what
        # the step time a gang is spread by (`spread_by_model`) predicts with.
        self.type_of: dict[NodeTopology, str] = {}
        self.known: dict[str, NodeGpus] = {}  # nodes in the core, with what it was told
        self.cordoned: set[str] = set()  # nodes in the core that take no new work
        # What the core was last told of each node, and its base.
        self.told: dict[str, Node] = {}
        self._cores: dict[str, tuple[Node, Node]] = {}  # node: (as parsed, as the core sees it)
        self._parsed: dict[str, tuple[str, tuple[Node, NodeGpus] | None]] = {}
        self._allocatable: dict[str, dict[str, int]] = {}
        self._topologies: dict[NodeTopology, NodeTopology] = {}

    def sync(
        self,
        nodes: Mapping[str, Obj],
        view: CoreView,
        now: float,
        taken: Mapping[str, frozenset[int]] | None = None,
    ) -> Iterator[Event]:
        """Nodes join the core once ready with a usable topology and leave it only when
        deleted. A cordoned, NotReady or stale node keeps its running gangs but takes no new
        work (cordoned in the core); a node rewired while gangs run on it keeps its old
        topology until they end. A node's labels, taints, and what it has left (CPUs and memory
        that pods the core does not count leave, and FREE labels) go to the core as they
        change (NodeChanged)."""
        for name in sorted(set(self.known) - set(nodes)):
            del self.known[name]
            self.cordoned.discard(name)
            self.told.pop(name, None)
            self._cores.pop(name, None)
            yield NodeRemoved(now, name)
        for name, obj in sorted(nodes.items()):
            parsed = self._parse_node(name, obj)
            old = self.known.get(name)
            if old is None:
                if parsed is None or not node_ready(obj):
                    continue
                self.told[name] = self._core_node(name, parsed[0])
                yield NodeAdded(now, self.told[name])
                old = self.known[name] = NodeGpus(parsed[1].topology, frozenset(), False)
            elif parsed is not None and parsed[1].topology != old.topology:
                if any(node == name for node, _ in view.owners()):
                    self.warn(obj, "TopologyChanged", "applied once the gangs on it end")
                    parsed = None
                else:
                    yield NodeRemoved(now, name)
                    self.told[name] = self._core_node(name, parsed[0])
                    yield NodeAdded(now, self.told[name])
                    old = self.known[name] = NodeGpus(parsed[1].topology, frozenset(), False)
            usable = parsed is not None and node_ready(obj)
            if usable == (name in self.cordoned):
                yield NodeCordoned(now, name, not usable)
                (self.cordoned.discard if usable else self.cordoned.add)(name)
            if parsed is None:
                continue
            node, gpus = parsed
            if taken and name in taken:
                # GPUs that ResourceClaims not of our pods hold are out of reach as failed ones
                # are, until those claims let go of them.
                gpus = replace(gpus, unhealthy=gpus.unhealthy | taken[name])
            for gpu in sorted(gpus.unhealthy ^ old.unhealthy):
                yield GpuHealth(now, name, gpu, gpu not in gpus.unhealthy)
            core = self._core_node(name, node)
            if _differs(self.told.get(name), core):
                yield NodeChanged(now, core)
            self.told[name] = core
            self.known[name] = gpus
        self.usage.dirty.clear()

    def _core_node(self, name: str, node: Node) -> Node:
        """`node` as the core is to see it: its CPUs and memory less what the pods it does not
        count request, and for each other resource it has allocatable, a FREE label of what
        all its pods leave. Kept until the node or the pods on it change."""
        kept = self._cores.get(name)
        if kept is not None and kept[0] is node and name not in self.usage.dirty:
            return kept[1]
        every, uncounted = self.usage.totals(name)
        hardware = replace(
            node.hardware,
            cpus=_less(node.hardware.cpus, uncounted.get("cpu", 0)),
            memory=_less(node.hardware.memory, uncounted.get("memory", 0)),
        )
        labels = dict(node.labels)
        for resource, amount in self._allocatable.get(name, {}).items():
            if resource not in COUNTED:
                labels[FREE + resource] = str(max(amount - every.get(resource, 0), 0))
        core = replace(node, labels=labels, hardware=hardware)
        self._cores[name] = (node, core)
        return core

    def _parse_node(self, name: str, obj: Obj) -> tuple[Node, NodeGpus] | None:
        """The node as the core sees it, or None (with a Warning Event): kept per
        resourceVersion, since a large cluster's annotations cost more than the rest. A node
        of unknown topology is used by jobs that accept it, with an Event that says so."""
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        kept = self._parsed.get(name)
        if kept is not None and kept[0] == version and version:
            return kept[1]
        found: tuple[Node, NodeGpus] | None = None
        self._allocatable[name] = allocatable(obj)
        try:
            node, gpus, problem = node_from(obj, self.rack_label, self.gpu_names)
        except ObjectError as err:
            self.warn(obj, "UnknownTopology", f"{err}; not used")
        else:
            # Equal topologies share one object: placement's tables are kept per topology, and
            # a thousand equal copies would each be compared in full at every lookup.
            topology = self._topologies.setdefault(gpus.topology, gpus.topology)
            found = (replace(node, topology=topology), replace(gpus, topology=topology))
            known = self.type_of.get(topology)
            types = [self.type_speed.of_node(found[0]), *([known] if known else [])]
            self.type_of[topology] = self.type_speed.slowest(None, types)
            if problem is not None:
                self.warn(obj, "UnknownTopology", f"{problem}; {UNKNOWN_USE}")
        self._parsed[name] = (version, found)
        return found

    def node(self, name: str) -> Node:
        """Node `name` as parsed; KeyError if the core does not have it with a topology."""
        kept = self._parsed.get(name)
        if name not in self.known or kept is None or kept[1] is None:
            raise KeyError(f"node {name} is not ready or has no usable topology")
        return kept[1][0]

    # ------------------------------------------------------------------ room left

    def short(self, node: str, wanted: Amounts) -> str:
        """What `node` lacks for pods asking `wanted` beside those on it, or ""."""
        have = self._allocatable.get(node, {})
        used = self.usage.totals(node)[0]
        for resource, amount in sorted(wanted.items()):
            if resource in (GPU_RESOURCE, "pods") or (resource in COUNTED and resource not in have):
                continue
            free = have.get(resource, 0) - used.get(resource, 0)
            if amount > free:
                asked, left = _shown(resource, amount), _shown(resource, max(free, 0))
                return f"Insufficient {resource} on {node}: its pods there ask {asked}, {left} free"
        return ""

    def accepts(self, pod: Pod, where: Eligibility, node: str) -> bool:
        """Whether `pod` (alone), which may use the nodes `where` admits, may go on `node`: as
        kube-scheduler filters."""
        core = self.told.get(node)
        return (
            core is not None
            and where.admits(core, core.labels)
            and not self.short(node, pod.requests)
        )


def _shown(resource: str, amount: int) -> str:
    """An amount as Kubernetes writes it: `1500m` CPUs, `30Gi` of bytes, a count."""
    if resource == "cpu":
        return cpus_text(amount)
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        return memory_text(amount)
    return str(amount)


def _less(amount: int | None, used: int) -> int | None:
    """What is left of `amount` (None: not counted) once `used` is taken."""
    return None if amount is None else max(amount - used, 0)


def _differs(told: Node | None, node: Node) -> bool:
    """Whether the core must be told of `node` again (it was told of `told`)."""
    if told is None or told is node:
        return False
    return (told.labels, told.hardware, told.taints) != (
        node.labels,
        node.hardware,
        node.taints,
    )
