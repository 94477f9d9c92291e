"""The cluster description: one-line shorthands and the YAML cluster file (no I/O here)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import PurePath
from typing import Any

import yaml

from toposched.topology.cluster import (
    DEFAULT_NETWORK_GBPS,
    Cluster,
    ClusterError,
    Node,
    Tier,
    check_labels,
)
from toposched.topology.errors import TopologyError
from toposched.topology.levels import Level, LevelError, check_values
from toposched.topology.node import NodeTopology
from toposched.topology.presets import PRESETS, preset, preset_hardware
from toposched.topology.racks import CORE_GBPS, LEAF, NIC_GBPS, RACK_PRESETS, SPINE
from toposched.topology.resources import (
    UNKNOWN_HARDWARE,
    Hardware,
    QuantityError,
    cpus_text,
    memory_text,
    parse_cpus,
    parse_memory,
)
from toposched.topology.yamlfile import _line
from toposched.yamlnodes import TooLarge, check_depth, check_expansion

# Turns a `topology:` value that is not a preset (a file path) into a topology; the loader in
# toposched.discovery.files reads files relative to the cluster file and caches them by path.
Resolver = Callable[[str], NodeTopology]

KEYS = ("name", "network_gbps", "groups", "nodes", "levels")
LEVEL_KEYS = ("name", "gbps", "latency_us", "nvlink")
HARDWARE_KEYS = ("gpu_type", "gpu_memory", "cpus", "memory", "mig")
GROUP_KEYS = (
    "count",
    "topology",
    "racks_of",
    "racks_per_pod",
    "name_prefix",
    "labels",
    *HARDWARE_KEYS,
    "per_domain",
)
NODE_KEYS = ("name", "topology", "rack", "pod", "labels", *HARDWARE_KEYS, "levels")
TIERS = ("rack", "pod", "cluster")

SHORTHAND_FORMS = (
    "N*PRESET[/R], N*PRESET/leaf=L[/spine=S], N*RACK_PRESET, or "
    "'N x PRESET [in racks of R | in leaves of L]', groups joined by +"
)
_COMPACT = re.compile(
    r"(\d+)\s*\*\s*([^\s/]+)(?:\s*/\s*(\d+))?"
    r"(?:\s*/\s*leaf\s*=\s*(\d+)(?:\s*/\s*spine\s*=\s*(\d+))?)?"
)
_READABLE = re.compile(
    r"(\d+)\s+x\s+(\S+)(?:\s+in\s+racks\s+of\s+(\d+))?"
    r"(?:\s+in\s+leaves\s+of\s+(\d+)(?:\s+under\s+spines\s+of\s+(\d+))?)?"
)


def looks_like_shorthand(spec: str) -> bool:
    """Whether a `--cluster` value is a shorthand rather than a file path."""
    return "*" in spec or " x " in spec


class _Builder:
    """Collects nodes, numbering racks and pods across the whole cluster and names per prefix."""

    def __init__(self, source: str | None) -> None:
        self.source = source
        self.nodes: list[Node] = []
        self.names: set[str] = set()
        self.next_index: dict[str, int] = {}
        self.racks = 0
        self.pods = 0
        self.domains: dict[str, int] = {}  # domains numbered so far, per level name

    def add(self, node: Node, line: int | None) -> None:
        if node.name in self.names:
            raise ClusterError(f"two nodes are named {node.name!r}", source=self.source, line=line)
        self.names.add(node.name)
        self.nodes.append(node)

    def group(
        self,
        count: int,
        topology: NodeTopology,
        prefix: str,
        *,
        racks_of: int | None = None,
        racks_per_pod: int | None = None,
        labels: Mapping[str, str] | None = None,
        hardware: Hardware = UNKNOWN_HARDWARE,
        line: int | None = None,
    ) -> None:
        """`count` nodes `<prefix>-<i>`; a group starts a new rack, and a new pod if it has pods."""
        first = self.next_index.get(prefix, 0)
        self.next_index[prefix] = first + count
        per_rack = racks_of or count
        for i in range(count):
            rack = i // per_rack
            pod = 0 if racks_per_pod is None else self.pods + rack // racks_per_pod
            node = Node(
                f"{prefix}-{first + i}",
                topology,
                rack=f"rack-{self.racks + rack}",
                pod=f"pod-{pod}",
                labels=labels or {},
                hardware=hardware,
            )
            self.add(node, line)
        racks = -(-count // per_rack)
        self.racks += racks
        # Groups without racks_per_pod share pod-0; a group with pods starts after those in use.
        if racks_per_pod is None:
            self.pods = max(self.pods, 1)
        else:
            self.pods += -(-racks // racks_per_pod)

    def leveled(
        self,
        count: int,
        topology: NodeTopology,
        prefix: str,
        per_domain: Mapping[str, int],
        levels: tuple[Level, ...],
        *,
        labels: Mapping[str, str] | None = None,
        hardware: Hardware = UNKNOWN_HARDWARE,
        line: int | None = None,
    ) -> None:
        """`count` nodes `<prefix>-<i>`, `per_domain[level]` nodes in each domain of a level
        (the whole group where not given); a group starts new domains at every level."""
        first = self.next_index.get(prefix, 0)
        self.next_index[prefix] = first + count
        start = {level.name: self.domains.get(level.name, 0) for level in levels}
        for i in range(count):
            values = {
                level.name: f"{level.name}-{start[level.name] + i // per_domain.get(level.name, count)}"  # noqa: E501
                for level in levels
            }
            node = Node(
                f"{prefix}-{first + i}",
                topology,
                labels=labels or {},
                hardware=hardware,
                levels=values,
            )
            self.add(node, line)
        for level in levels:
            self.domains[level.name] = start[level.name] + -(
                -count // per_domain.get(level.name, count)
            )

    def cluster(
        self, name: str, network: Mapping[Tier, float], levels: tuple[Level, ...] = ()
    ) -> Cluster:
        if not self.nodes:
            raise ClusterError(
                "a cluster needs at least one node (give groups or nodes)", source=self.source
            )
        try:
            return Cluster(tuple(self.nodes), network_gbps=network, name=name, levels=levels)
        except ClusterError as err:
            raise ClusterError(err.reason, source=self.source) from None


def parse_shorthand(spec: str) -> Cluster:
    """`8*dgx1-v100/4+4*pcie-8gpu-2socket`, `64 x dgx1-v100 in racks of 8 + 2 x hgx-h100`,
    `16*gb200-nvl72` (racks of 18 trays on one NVLink fabric) or `2048*hgx-h100/leaf=32`
    (nodes under leaf switches of 32, the group under one spine). A shorthand with levels
    (a rack preset or leaves) has the same levels in every group."""
    builder = _Builder(None)
    kinds: set[tuple[Level, ...]] = set()
    for group in spec.split("+"):
        match = _COMPACT.fullmatch(group.strip()) or _READABLE.fullmatch(group.strip())
        if match is None:
            raise ClusterError(
                f"cluster shorthand {spec!r}: cannot read {group.strip()!r}; "
                f"expected {SHORTHAND_FORMS}, e.g. 64*dgx1-v100/8"
            )
        count, name = int(match[1]), match[2]
        per_rack, leaf, spine = (None if m is None else int(m) for m in match.groups()[2:])
        if count < 1 or any(n is not None and n < 1 for n in (per_rack, leaf, spine)):
            raise ClusterError(
                f"cluster shorthand {spec!r}: node counts and rack, leaf and spine sizes "
                "must be positive integers"
            )
        if per_rack is not None and leaf is not None:
            raise ClusterError(
                f"cluster shorthand {spec!r}: {group.strip()!r} gives both racks and leaves"
            )
        if name in RACK_PRESETS:
            if per_rack is not None or leaf is not None:
                raise ClusterError(
                    f"cluster shorthand {spec!r}: {name} is a rack preset; "
                    f"write N*{name} for N racks"
                )
            rack = RACK_PRESETS[name]
            levels: tuple[Level, ...] = (rack.clique,)
            builder.leveled(
                count * rack.nodes,
                preset(rack.node),
                name,
                {rack.clique.name: rack.nodes},
                levels,
                hardware=preset_hardware(rack.node),
            )
            kinds.add(levels)
            continue
        if name not in PRESETS:
            raise ClusterError(
                f"cluster shorthand {spec!r}: unknown preset {name!r}; known presets: "
                f"{', '.join([*PRESETS, *RACK_PRESETS])}"
            )
        if leaf is not None:
            levels = (LEAF, SPINE)
            sizes = {LEAF.name: leaf} | ({} if spine is None else {SPINE.name: spine})
            if spine is not None and spine % leaf:
                raise ClusterError(
                    f"cluster shorthand {spec!r}: a spine of {spine} nodes is not a whole "
                    f"number of leaves of {leaf}"
                )
            builder.leveled(
                count, preset(name), name, sizes, levels, hardware=preset_hardware(name)
            )
            kinds.add(levels)
            continue
        builder.group(count, preset(name), name, racks_of=per_rack, hardware=preset_hardware(name))
        kinds.add(())
    if len(kinds) > 1:
        raise ClusterError(
            f"cluster shorthand {spec!r}: its groups have different levels (racks, NVLink "
            "racks, leaves); write a cluster file to join them"
        )
    (levels,) = kinds
    if not levels:
        return builder.cluster(spec.strip(), DEFAULT_NETWORK_GBPS)
    beyond = NIC_GBPS if levels[0].nvlink else CORE_GBPS
    return builder.cluster(spec.strip(), {Tier.CLUSTER: beyond}, levels)


class _Map:
    """A YAML mapping and the line of each key, so that errors point at the entry to fix."""

    def __init__(
        self,
        data: Any,
        node: yaml.Node | None,
        what: str,
        keys: tuple[str, ...],
        source: str,
        *,
        noun: str = "key",
    ) -> None:
        self.source = source
        self.line = _line(node)
        if not isinstance(data, dict):
            raise self.error(f"{what} must be a mapping with keys: {', '.join(keys)}")
        self.data: dict[Any, Any] = data
        self.key_nodes = (
            {k.value: k for k, _ in node.value if isinstance(k, yaml.ScalarNode)}
            if isinstance(node, yaml.MappingNode)
            else {}
        )
        self.value_nodes = (
            {k.value: v for k, v in node.value if isinstance(k, yaml.ScalarNode)}
            if isinstance(node, yaml.MappingNode)
            else {}
        )
        unknown = [k for k in data if k not in keys]
        if unknown:
            raise self.error(
                f"unknown {noun} {unknown[0]!r} in {what}; valid {noun}s: {', '.join(keys)}",
                str(unknown[0]),
            )

    def line_of(self, key: str) -> int | None:
        return _line(self.key_nodes.get(key)) or self.line

    def error(self, message: str, key: str | None = None) -> ClusterError:
        line = self.line if key is None else self.line_of(key)
        return ClusterError(message, source=self.source, line=line)

    def require(self, key: str, what: str) -> Any:
        if key not in self.data:
            raise self.error(f"{what} needs {key!r}")
        return self.data[key]

    def text(self, key: str, default: str) -> str:
        value = self.data.get(key, default)
        if not isinstance(value, str) or not value:
            raise self.error(f"{key} must be a non-empty string, got {value!r}", key)
        return value

    def positive(self, key: str) -> int | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.error(f"{key} must be a positive integer, got {value!r}", key)
        return value

    def labels(self, owner: str) -> dict[str, str]:
        value = self.data.get("labels", {})
        if not isinstance(value, dict):
            raise self.error("labels must be a mapping such as {team: vision}", "labels")
        try:
            check_labels(owner, value)
        except ClusterError as err:
            raise self.error(err.reason, "labels") from None
        return value

    def topology(self, what: str, resolve: Resolver | None) -> tuple[str, NodeTopology]:
        spec = self.require("topology", what)
        if not isinstance(spec, str) or not spec:
            raise self.error("topology must be a preset name or a topology file path", "topology")
        if spec in PRESETS:
            return spec, preset(spec)
        if resolve is None:
            raise self.error(
                f"unknown preset {spec!r}; known presets: {', '.join(PRESETS)}", "topology"
            )
        try:
            return spec, resolve(spec)
        except TopologyError as err:
            raise self.error(f"topology {spec!r}: {err}", "topology") from None

    def hardware(self, base: Hardware, size: int) -> Hardware:
        """`base` (the preset's hardware, or unknown) with the keys given here in its place;
        null makes a value unknown (GPU type and memory) or not counted (CPUs and memory), or
        puts no GPU of the node's `size` in MIG mode."""
        gpu_memory = self._quantity("gpu_memory", parse_memory, base.gpu_memory)
        try:
            return Hardware(
                self._gpu_type(base.gpu_type),
                0 if gpu_memory is None else gpu_memory,
                self._quantity("cpus", parse_cpus, base.cpus),
                self._quantity("memory", parse_memory, base.memory),
                self._mig(base.mig, size),
            )
        except TopologyError as err:
            raise self.error(str(err), "mig" if "mig" in self.data else None) from None

    def _mig(self, default: tuple[int, ...], size: int) -> tuple[int, ...]:
        """The GPUs in MIG mode: a list of indices, `all`, or null (none)."""
        if "mig" not in self.data:
            return default
        value = self.data["mig"]
        if value is None:
            return ()
        if value == "all":
            return tuple(range(size))
        if not isinstance(value, list) or not all(
            isinstance(g, int) and not isinstance(g, bool) and 0 <= g < size for g in value
        ):
            raise self.error(
                f"mig {value!r}: expected the GPUs in MIG mode, a list of GPUs 0..{size - 1} "
                "such as [0, 1], or all",
                "mig",
            )
        return tuple(sorted(set(value)))

    def _gpu_type(self, default: str) -> str:
        if "gpu_type" not in self.data:
            return default
        value = self.data["gpu_type"]
        if value is None:
            return ""
        if not isinstance(value, str) or not value.strip():
            raise self.error(
                f"gpu_type {value!r}: expected a GPU type name such as V100 or T4", "gpu_type"
            )
        return value.strip()

    def _quantity(
        self, key: str, read: Callable[[object, str], int], default: int | None
    ) -> int | None:
        if key not in self.data:
            return default
        value = self.data[key]
        if value is None:
            return None
        try:
            return read(value, key)
        except QuantityError as err:
            raise self.error(str(err), key) from None

    def refuse(self, keys: tuple[str, ...], why: str) -> None:
        for key in keys:
            if key in self.data:
                raise self.error(f"{key}: {why}", key)

    def per_domain(self, levels: tuple[Level, ...]) -> dict[str, int]:
        """Nodes per domain of each level named (a level left out: the whole group)."""
        value = self.data.get("per_domain", {})
        names = [level.name for level in levels]
        if not isinstance(value, dict):
            raise self.error("per_domain must map level names to node counts", "per_domain")
        for key, count in value.items():
            if key not in names:
                raise self.error(
                    f"per_domain: unknown level {key!r}; the levels are {', '.join(names)}",
                    "per_domain",
                )
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise self.error(
                    f"per_domain: {key} must be a positive integer, got {count!r}", "per_domain"
                )
        return dict(value)

    def level_values(self, node: str, levels: tuple[Level, ...]) -> dict[str, str]:
        """The node's domain at every level."""
        value = self.require("levels", f"node {node!r} (the file declares levels)")
        if not isinstance(value, dict):
            raise self.error("levels must map level names to domain names", "levels")
        try:
            check_values(node, levels, value)
        except LevelError as err:
            raise self.error(str(err), "levels") from None
        return value

    def items(self, key: str) -> list[tuple[Any, yaml.Node | None]]:
        """A list entry's items with their YAML nodes (None where the structure differs)."""
        value = self.data.get(key, [])
        if not isinstance(value, list):
            raise self.error(f"{key} must be a list", key)
        node = self.value_nodes.get(key)
        nodes = node.value if isinstance(node, yaml.SequenceNode) else []
        if len(nodes) != len(value):
            nodes = [node] * len(value)
        return list(zip(value, nodes, strict=True))


def _compose(text: str, source: str) -> tuple[Any, yaml.Node | None]:
    """The data and the node tree it was built from, so that both have the same shape."""
    loader: yaml.SafeLoader | None = None
    try:
        check_depth(text)
        loader = yaml.SafeLoader(text)  # which refuses a control character already
        root = loader.get_single_node()
        if root is not None:
            check_expansion(root)
        return (None if root is None else loader.construct_document(root)), root
    except TooLarge as err:
        raise ClusterError(str(err), source=source, line=err.line) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise ClusterError(
            f"not valid YAML: {getattr(err, 'problem', None) or err}",
            source=source,
            line=None if mark is None else mark.line + 1,
        ) from None
    finally:
        if loader is not None:
            loader.dispose()


def parse_cluster_yaml(
    text: str, *, source: str = "<cluster>", resolve: Resolver | None = None
) -> Cluster:
    """Parse a YAML cluster file; every error names the file, the line and what is wrong.

    `topology:` values that are not presets go to `resolve` (without one they are errors).
    """
    data, root = _compose(text, source)
    top = _Map({} if data is None else data, root, "a cluster file", KEYS, source)
    name = top.data.get("name", "")
    if not isinstance(name, str):
        raise top.error("name must be a string", "name")

    levels = _levels(top, source)
    network = dict(DEFAULT_NETWORK_GBPS)
    if "network_gbps" in top.data:
        gbps = _Map(
            top.data["network_gbps"],
            top.value_nodes.get("network_gbps"),
            "network_gbps",
            ("cluster",) if levels else TIERS,
            source,
            noun="tier",
        )
        for tier, value in gbps.data.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise gbps.error(f"{tier} bandwidth must be a positive number, got {value!r}", tier)
            network[Tier[tier.upper()]] = float(value)

    builder = _Builder(source)
    for i, (item, node) in enumerate(top.items("groups")):
        group = _Map(item, node, f"groups[{i}]", GROUP_KEYS, source)
        count = group.positive("count")
        if count is None:
            raise group.error(f"groups[{i}] needs 'count', a positive integer")
        spec, topology = group.topology(f"groups[{i}]", resolve)
        prefix = group.text("name_prefix", spec if spec in PRESETS else PurePath(spec).stem)
        labels = group.labels(f"{prefix}-*")
        hardware = group.hardware(_base_hardware(spec), topology.size)
        if levels:
            group.refuse(("racks_of", "racks_per_pod"), "this file declares levels; use per_domain")
            sizes = group.per_domain(levels)
            builder.leveled(
                count,
                topology,
                prefix,
                sizes,
                levels,
                labels=labels,
                hardware=hardware,
                line=group.line_of("count"),
            )
            continue
        group.refuse(("per_domain",), "per_domain needs the file's levels")
        builder.group(
            count,
            topology,
            prefix,
            racks_of=group.positive("racks_of"),
            racks_per_pod=group.positive("racks_per_pod"),
            labels=labels,
            hardware=hardware,
            line=group.line_of("count"),
        )
    for i, (item, node) in enumerate(top.items("nodes")):
        entry = _Map(item, node, f"nodes[{i}]", NODE_KEYS, source)
        entry.require("name", f"nodes[{i}]")
        node_name = entry.text("name", "")
        spec, topology = entry.topology(f"nodes[{i}]", resolve)
        labels = entry.labels(node_name)
        hardware = entry.hardware(_base_hardware(spec), topology.size)
        line = entry.line_of("name")
        if levels:
            entry.refuse(("rack", "pod"), "this file declares levels; give the node's levels")
            values = entry.level_values(node_name, levels)
            builder.add(
                Node(node_name, topology, labels=labels, hardware=hardware, levels=values), line
            )
            continue
        entry.refuse(("levels",), "a node's levels need the file's levels")
        rack, pod = entry.text("rack", "rack-0"), entry.text("pod", "pod-0")
        builder.add(Node(node_name, topology, rack, pod, labels, hardware), line)
    return builder.cluster(name, network, levels)


def _levels(top: _Map, source: str) -> tuple[Level, ...]:
    """The file's `levels`, narrowest first (none: racks and pods)."""
    found: list[Level] = []
    for i, (item, node) in enumerate(top.items("levels")):
        entry = _Map(item, node, f"levels[{i}]", LEVEL_KEYS, source)
        name = entry.require("name", f"levels[{i}]")
        gbps = entry.require("gbps", f"levels[{i}]")
        nvlink = entry.data.get("nvlink", False)
        if not isinstance(nvlink, bool):
            raise entry.error(f"nvlink must be true or false, got {nvlink!r}", "nvlink")
        try:
            found.append(Level(name, gbps, entry.data.get("latency_us", 0.0), nvlink))
        except LevelError as err:
            raise entry.error(f"levels[{i}]: {err}", "gbps") from None
    if "levels" in top.data and not found:
        raise top.error("levels must list at least one level", "levels")
    return tuple(found)


def _base_hardware(spec: str) -> Hardware:
    """A preset's own hardware; a topology file says nothing of it."""
    return preset_hardware(spec) if spec in PRESETS else UNKNOWN_HARDWARE


def hardware_entries(hardware: Hardware, base: Hardware) -> dict[str, object]:
    """The cluster-file keys that turn `base` into `hardware`: those that differ, as written."""
    entries: dict[str, object] = {}
    if hardware.gpu_type != base.gpu_type:
        entries["gpu_type"] = hardware.gpu_type or None
    if hardware.gpu_memory != base.gpu_memory:
        entries["gpu_memory"] = memory_text(hardware.gpu_memory) if hardware.gpu_memory else None
    if hardware.cpus != base.cpus:
        entries["cpus"] = None if hardware.cpus is None else _cpus_value(hardware.cpus)
    if hardware.memory != base.memory:
        entries["memory"] = None if hardware.memory is None else memory_text(hardware.memory)
    if hardware.mig != base.mig:
        entries["mig"] = list(hardware.mig) or None
    return entries


def _cpus_value(milli: int) -> int | str:
    """Whole CPUs as a YAML number (`64`), others as text (`2.5`, `500m`)."""
    text = cpus_text(milli)
    return int(text) if text.isdigit() else text


def dump_cluster_yaml(cluster: Cluster) -> str:
    """The cluster as explicit nodes, each topology by its preset name, so it loads back equal.

    A node whose topology is not an unchanged preset (a topology file, changed bandwidths) has
    no name that would load it back: that is a ClusterError, not a file that reloads wrong.
    """
    for n in cluster.nodes:
        name = n.topology.name
        if name not in PRESETS or preset(name) != n.topology:
            raise ClusterError(
                f"node {n.name}: topology {name or '(unnamed)'!r} is not a preset, so it cannot be "
                "written by name; write the cluster with explicit topology files instead"
            )
    data: dict[str, Any] = {}
    if cluster.name:
        data["name"] = cluster.name
    if cluster.levels:
        data["levels"] = [
            {"name": lv.name, "gbps": lv.gbps, "latency_us": lv.latency_us, "nvlink": lv.nvlink}
            for lv in cluster.levels
        ]
        data["network_gbps"] = {"cluster": cluster.beyond_gbps}
    else:
        data["network_gbps"] = {
            t.name.lower(): cluster.network_gbps[t] for t in (Tier.RACK, Tier.POD, Tier.CLUSTER)
        }

    def where(n: Node) -> dict[str, object]:
        if cluster.levels:
            return {"levels": dict(n.levels)}
        return {"rack": n.rack, "pod": n.pod}

    data["nodes"] = [
        {"name": n.name, "topology": n.topology.name}
        | where(n)
        | ({"labels": dict(n.labels)} if n.labels else {})
        | hardware_entries(n.hardware, preset_hardware(n.topology.name))
        for n in cluster.nodes
    ]
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=1 << 20)
