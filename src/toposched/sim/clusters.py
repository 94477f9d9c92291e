"""Clusters from published machine lists: the openb node list and the PAI 2020 machine spec."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator, Sequence
from functools import cache
from os import PathLike
from pathlib import Path

from toposched.topology.cluster import DEFAULT_NETWORK_GBPS, Cluster, ClusterError, Node
from toposched.topology.node import NodeTopology
from toposched.topology.presets import preset
from toposched.topology.resources import MILLI, Hardware

MIB, GIB = 2**20, 2**30
RACK_NODES = 16  # neither list says how nodes are racked: racks of 16 in file order

# GPU memory of the types these lists name, from NVIDIA's data sheets (V100M16/M32: the 16
# and 32 GB V100; P100 and T4 16 GB; A10 24 GB). G2, G3 (openb) and MISC (PAI 2020) are
# undisclosed, so their GPU memory stays unknown.
GPU_MEMORY = {"V100": 16, "V100M16": 16, "V100M32": 32, "P100": 16, "T4": 16, "A10": 24}

OPENB_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
PAI2020_COLUMNS = ("machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu")


def generic_topology(gpus: int) -> NodeTopology:
    """The wiring assumed for a node of `gpus` GPUs whose wiring is not published: the PCIe
    presets for 4 and 8 (`pcie-4gpu-2socket`, `pcie-8gpu-2socket`), else `pcie-<n>gpu`, every
    GPU on its own root port of one socket (PHB between any two, as `g4dn-12xlarge`)."""
    if gpus == 4:
        return preset("pcie-4gpu-2socket")
    if gpus == 8:
        return preset("pcie-8gpu-2socket")
    return _flat(gpus)


@cache
def _flat(gpus: int) -> NodeTopology:
    # One object per size, so that nodes of one size share their placement tables.
    codes = [["X" if i == j else "PHB" for j in range(gpus)] for i in range(gpus)]
    return NodeTopology.from_codes(
        codes,
        numa=[0] * gpus,
        switch=list(range(gpus)),
        name=f"pcie-{gpus}gpu",
    )


def is_machine_list(spec: str) -> bool:
    """Whether a `--cluster` value names a CSV machine list rather than a cluster file."""
    return spec.lower().endswith(".csv")


def read_machine_list(path: str | PathLike[str]) -> Cluster:
    """An openb node list or a PAI 2020 machine spec, told apart by its header; nodes
    without GPUs are left out (`Cluster.name` says how many)."""
    shown = str(path)
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            rows = _rows(csv.reader(handle), shown)
            header_line, first = next(rows, (1, []))
            header = [cell.strip().lower() for cell in first]
            for columns, read in ((OPENB_COLUMNS, _openb), (PAI2020_COLUMNS, _pai2020)):
                if set(columns) <= set(header):
                    index = {name: header.index(name) for name in columns}
                    return _cluster(shown, read, rows, index, len(header))
    except OSError as err:
        raise ClusterError(f"cannot read the file: {err.strerror or err}", source=shown) from None
    raise ClusterError(
        f"cannot tell the machine list from its header {','.join(header)!r}; expected an "
        f"openb node list ({','.join(OPENB_COLUMNS)}) or a PAI 2020 machine spec "
        f"({','.join(PAI2020_COLUMNS)})",
        source=shown,
        line=header_line,
    )


class _Row:
    """Field access for one row that names the file, line and column in its errors."""

    def __init__(self, row: Sequence[str], index: dict[str, int], source: str, line: int) -> None:
        self.row, self.index, self.source, self.line = row, index, source, line

    def error(self, column: str, message: str) -> ClusterError:
        return ClusterError(f"{message} (column {column})", source=self.source, line=self.line)

    def text(self, column: str, *, empty: bool = False) -> str:
        value = self.row[self.index[column]].strip()
        if not value and not empty:
            raise self.error(column, "empty value")
        return value

    def count(self, column: str) -> int:
        value = self.text(column)
        if not value.isdigit():
            raise self.error(column, f"{value!r} is not a whole number >= 0")
        return int(value)


def _rows(reader: Iterator[list[str]], source: str) -> Iterator[tuple[int, list[str]]]:
    line = 0
    try:
        for row in reader:
            line += 1
            if row and any(cell.strip() for cell in row):
                yield line, row
    except (csv.Error, UnicodeDecodeError) as err:
        raise ClusterError(f"not a CSV machine list: {err}", source=source, line=line + 1) from None


def _cluster(
    source: str,
    read: Callable[[_Row], Node | None],
    rows: Iterator[tuple[int, list[str]]],
    index: dict[str, int],
    width: int,
) -> Cluster:
    nodes: list[Node] = []
    lines: dict[str, int] = {}
    skipped = 0
    for line, row in rows:
        if len(row) != width:
            raise ClusterError(
                f"found {len(row)} fields, the header has {width}", source=source, line=line
            )
        node = read(_Row(row, index, source, line))
        if node is None:
            skipped += 1
            continue
        if node.name in lines:
            raise ClusterError(
                f"node {node.name!r} is already listed on line {lines[node.name]} (column "
                f"{next(iter(index))})",
                source=source,
                line=line,
            )
        lines[node.name] = line
        rack = len(nodes) // RACK_NODES
        nodes.append(_racked(node, rack))
    if not nodes:
        raise ClusterError("the list has no node with GPUs", source=source)
    without = f", {skipped} nodes without GPUs left out" if skipped else ""
    name = f"{Path(source).name} ({len(nodes)} GPU nodes{without})"
    return Cluster(tuple(nodes), DEFAULT_NETWORK_GBPS, name)


def _racked(node: Node, rack: int) -> Node:
    return Node(node.name, node.topology, f"rack-{rack}", hardware=node.hardware)


def _openb(row: _Row) -> Node | None:
    """`sn,cpu_milli,memory_mib,gpu,model`: CPUs in millicores, memory in MiB."""
    name = row.text("sn")
    cpus, memory, gpus = row.count("cpu_milli"), row.count("memory_mib"), row.count("gpu")
    model = row.text("model", empty=gpus == 0)
    if gpus == 0:
        return None
    return Node(name, generic_topology(gpus), hardware=_hardware(model, cpus, memory * MIB))


def _pai2020(row: _Row) -> Node | None:
    """`machine,gpu_type,cap_cpu,cap_mem,cap_gpu`: CPU cores, memory in GB (read as GiB)."""
    name = row.text("machine")
    gpu_type = row.text("gpu_type")
    cpus, memory, gpus = row.count("cap_cpu"), row.count("cap_mem"), row.count("cap_gpu")
    if gpus == 0:
        return None
    hardware = _hardware(gpu_type, cpus * MILLI, memory * GIB)
    return Node(name, generic_topology(gpus), hardware=hardware)


def _hardware(gpu_type: str, cpus: int, memory: int) -> Hardware:
    return Hardware(gpu_type, GPU_MEMORY.get(gpu_type, 0) * GIB, cpus, memory)
