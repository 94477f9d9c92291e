"""The hand-written YAML topology format: read it (with line numbers in errors) and write it."""

from __future__ import annotations

from typing import Any

import yaml

from toposched.topology.errors import TopologyError
from toposched.topology.links import DEFAULT_BANDWIDTH, BandwidthTable
from toposched.topology.node import NodeTopology
from toposched.topology.presets import PRESETS, preset
from toposched.yamlnodes import TooLarge, check_depth, check_expansion

KEYS = ("name", "preset", "links", "numa", "switch", "cpu_affinity", "bandwidth_gbps")


def _line(node: yaml.Node | None) -> int | None:
    return None if node is None else node.start_mark.line + 1


def _per_gpu(
    value: Any, key: str, n: int, kind: type | tuple[type, ...], source: str, line: int | None
) -> list[Any]:
    if not isinstance(value, list) or len(value) != n:
        raise TopologyError(
            f"{key} must be a list of {n} entries (one per GPU)", source=source, line=line
        )
    for i, item in enumerate(value):
        if item is not None and (isinstance(item, bool) or not isinstance(item, kind)):
            raise TopologyError(
                f"{key}[{i}] must be {_kind_name(kind)} or null, got {item!r}",
                source=source,
                line=line,
            )
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def parse_yaml(text: str, *, source: str = "<yaml>") -> NodeTopology:
    """Parse a YAML topology; every error names the file, the line and what is wrong."""
    try:
        check_depth(text)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        if root is not None:
            check_expansion(root)
        data = yaml.safe_load(text)
    except TooLarge as err:
        raise TopologyError(str(err), source=source, line=err.line) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise TopologyError(
            f"not valid YAML: {getattr(err, 'problem', None) or err}",
            source=source,
            line=None if mark is None else mark.line + 1,
        ) from None
    if not isinstance(data, dict) or not isinstance(root, yaml.MappingNode):
        raise TopologyError(
            "a topology file must be a YAML mapping with a 'links' matrix", source=source
        )
    key_nodes = {k.value: (k, v) for k, v in root.value if isinstance(k, yaml.ScalarNode)}

    def line_of(key: str) -> int | None:
        return _line(key_nodes[key][0]) if key in key_nodes else None

    unknown = [k for k in data if k not in KEYS]
    if unknown:
        raise TopologyError(
            f"unknown key {unknown[0]!r}; valid keys: {', '.join(KEYS)}",
            source=source,
            line=line_of(str(unknown[0])),
        )
    if ("links" in data) == ("preset" in data):
        raise TopologyError(
            "give exactly one of 'links' (a matrix) or 'preset' (a preset name)", source=source
        )

    bandwidth = DEFAULT_BANDWIDTH
    if "bandwidth_gbps" in data:
        overrides = data["bandwidth_gbps"]
        if not isinstance(overrides, dict):
            raise TopologyError(
                "bandwidth_gbps must be a mapping such as {NV: 25, PIX: 16}",
                source=source,
                line=line_of("bandwidth_gbps"),
            )
        try:
            bandwidth = BandwidthTable.from_overrides(overrides)
        except TopologyError as err:
            raise TopologyError(err.reason, source=source, line=line_of("bandwidth_gbps")) from None

    name = data.get("name", "")
    if not isinstance(name, str):
        raise TopologyError("name must be a string", source=source, line=line_of("name"))

    if "preset" in data:
        if not isinstance(data["preset"], str) or data["preset"] not in PRESETS:
            raise TopologyError(
                f"unknown preset {data['preset']!r}; known presets: {', '.join(PRESETS)}",
                source=source,
                line=line_of("preset"),
            )
        base = preset(data["preset"])
        codes = base.codes()
        defaults: dict[str, Any] = {
            "numa": list(base.numa),
            "switch": list(base.switch),
            "cpu_affinity": list(base.cpu_affinity),
        }
        name = name or base.name
    else:
        codes = _matrix(data["links"], key_nodes["links"][1], source)
        defaults = {}

    n = len(codes)
    numa = (
        _per_gpu(data["numa"], "numa", n, int, source, line_of("numa"))
        if "numa" in data
        else defaults.get("numa", [])
    )
    switch = (
        _per_gpu(data["switch"], "switch", n, int, source, line_of("switch"))
        if "switch" in data
        else defaults.get("switch", [])
    )
    affinity = (
        [
            None if a is None else str(a)
            for a in _per_gpu(
                data["cpu_affinity"], "cpu_affinity", n, (str, int), source, line_of("cpu_affinity")
            )
        ]
        if "cpu_affinity" in data
        else defaults.get("cpu_affinity", [])
    )
    try:
        return NodeTopology.from_codes(
            codes, numa=numa, switch=switch, cpu_affinity=affinity, bandwidth=bandwidth, name=name
        )
    except TopologyError as err:
        raise TopologyError(
            err.reason, source=source, line=line_of("links") or line_of("preset")
        ) from None


def _matrix(value: Any, node: yaml.Node, source: str) -> list[list[str]]:
    """Rows are lists of codes or whitespace-separated strings; each bad row names its line."""
    if not isinstance(value, list) or not value or not isinstance(node, yaml.SequenceNode):
        raise TopologyError(
            "links must be a non-empty list of rows", source=source, line=_line(node)
        )
    rows: list[list[str]] = []
    for i, (row, row_node) in enumerate(zip(value, node.value, strict=True)):
        if isinstance(row, str):
            cells = row.split()
        elif isinstance(row, list) and all(isinstance(c, str) for c in row):
            cells = list(row)
        else:
            raise TopologyError(
                f"links row {i} must be a list of link codes or a string such as 'X NV1 SYS'",
                source=source,
                line=_line(row_node),
            )
        if len(cells) != len(value):
            raise TopologyError(
                f"links row {i} has {len(cells)} entries; the matrix has {len(value)} rows",
                source=source,
                line=_line(row_node),
            )
        rows.append(cells)
    try:
        NodeTopology.from_codes(rows)
    except TopologyError as err:
        bad_row = _row_named(err.reason)
        line = (
            _line(node.value[bad_row])
            if bad_row is not None and bad_row < len(node.value)
            else _line(node)
        )
        raise TopologyError(err.reason, source=source, line=line) from None
    return rows


def _row_named(reason: str) -> int | None:
    """The first GPU index a NodeTopology error names (its messages read 'GPU<i>...')."""
    start = reason.find("GPU")
    if start < 0:
        return None
    digits = ""
    for ch in reason[start + 3 :]:
        if not ch.isdigit():
            break
        digits += ch
    return int(digits) if digits else None


def dump_yaml(topology: NodeTopology) -> str:
    """The topology in the YAML format, rows aligned for reading."""
    codes = topology.codes()
    width = max(len(c) for row in codes for c in row)
    lines = []
    if topology.name:
        lines.append(f"name: {yaml.safe_dump(topology.name, default_style=None).splitlines()[0]}")
    lines.append("links:")
    lines.extend("  - " + " ".join(c.ljust(width) for c in row).rstrip() for row in codes)
    for key in ("numa", "switch", "cpu_affinity"):
        values = getattr(topology, key)
        if any(v is not None for v in values):
            lines.append(
                f"{key}: "
                + yaml.safe_dump(list(values), default_flow_style=True, width=1 << 20).strip()
            )
    if topology.bandwidth != DEFAULT_BANDWIDTH:
        lines.append(
            "bandwidth_gbps: "
            + yaml.safe_dump(
                topology.bandwidth.as_dict(), default_flow_style=True, sort_keys=False
            ).strip()
        )
    return "\n".join(lines) + "\n"
