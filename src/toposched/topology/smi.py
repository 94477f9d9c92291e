"""Read `nvidia-smi topo -m` text into a NodeTopology and write one back in that format."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from toposched.topology.errors import TopologyError
from toposched.topology.links import parse_link
from toposched.topology.node import NodeTopology

CPU_AFFINITY = "CPU Affinity"
NUMA_AFFINITY = "NUMA Affinity"
GPU_NUMA_ID = "GPU NUMA ID"
# The per-GPU columns that follow the link columns. They are the only header names holding a
# space, so the header is split into words and these are joined again: splitting on runs of two
# spaces fails on tab-expanded captures, where a 7-character name such as mlx5_10 is followed by
# a single space.
INFO_COLUMNS = (CPU_AFFINITY, NUMA_AFFINITY, GPU_NUMA_ID)
UNKNOWN = "N/A"

_GPU_NAME = re.compile(r"GPU[0-9]+")
_NUMA_NODE = re.compile(r"[0-9]{1,9}")

LEGEND = """\
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""  # noqa: E501


@dataclass(frozen=True)
class _Header:
    """The header row: `columns` are the names after the corner cell, GPUs first."""

    line: int
    columns: tuple[str, ...]
    gpus: int  # columns[:gpus] are GPU0..GPUn-1
    links: int  # columns[:links] hold link codes (GPUs, then NICs); per-GPU values follow

    @property
    def devices(self) -> tuple[str, ...]:
        return self.columns[self.gpus : self.links]

    def layout(self) -> str:
        """The expected fields of a GPU row, in words, for error messages."""
        parts = [_span(self.columns[: self.gpus])]
        if self.devices:
            parts.append(_span(self.devices))
        return ", ".join(parts + list(self.columns[self.links :]))


def _span(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]}..{names[-1]}"


def _fields(line: str) -> list[str]:
    """A row's fields: tab-separated (where an empty field is a field) or space-aligned."""
    if "\t" in line:
        return [field.strip() for field in line.split("\t")]
    return line.split()


def _without_padding(values: list[str], want: int) -> list[str]:
    """Drop surplus empty fields, rightmost first.

    nvidia-smi follows a wide column (NUMA Affinity) with two tabs, so a real tab-separated row
    has one more field than its header has columns; an empty field within the count is unknown.
    """
    values = list(values)
    for k in range(len(values) - 1, -1, -1):
        if len(values) <= want:
            break
        if not values[k]:
            del values[k]
    return values


def _header_columns(line: str) -> list[str]:
    """The header's column names: its words, with those of each INFO_COLUMNS name joined."""
    words = line.split()
    columns: list[str] = []
    k = 0
    while k < len(words):
        for name in INFO_COLUMNS:
            size = name.count(" ") + 1
            if " ".join(words[k : k + size]) == name:
                columns.append(name)
                k += size
                break
        else:
            columns.append(words[k])
            k += 1
    return columns


def _find_header(lines: Sequence[str], source: str) -> _Header:
    for lineno, line in enumerate(lines, start=1):
        words = line.split()
        # The header and the rows both start with a GPU name; prompt lines before the header
        # start with neither and are skipped. Only rows hold the diagonal's X.
        if not words or not _GPU_NAME.fullmatch(words[0]):
            continue
        if any(word.upper() == "X" for word in words):
            raise TopologyError(
                "a GPU row comes before any header row; expected the header naming the GPU "
                "columns (GPU0 GPU1 ...) above the rows",
                source=source,
                line=lineno,
            )
        return _parse_header(_header_columns(line), source, lineno)
    raise TopologyError(
        "no header row found: expected a line naming the GPU columns (GPU0 GPU1 ...) as "
        "`nvidia-smi topo -m` prints it",
        source=source,
    )


def _parse_header(columns: list[str], source: str, lineno: int) -> _Header:
    gpus = 0
    while gpus < len(columns) and _GPU_NAME.fullmatch(columns[gpus]):
        if columns[gpus] != f"GPU{gpus}":
            raise TopologyError(
                f"header column {gpus + 1} is {columns[gpus]}, expected GPU{gpus}: the GPU "
                "columns must be GPU0, GPU1, ... in order",
                source=source,
                line=lineno,
            )
        gpus += 1
    # Link columns end at the first per-GPU value column; unknown columns after it are ignored.
    links = next((k for k, name in enumerate(columns) if name in INFO_COLUMNS), len(columns))
    for name in columns[gpus:links]:
        if _GPU_NAME.fullmatch(name):
            raise TopologyError(
                f"header names {name} after the non-GPU column {columns[gpus]}; expected all "
                f"GPU columns (GPU0..GPU{gpus - 1}) first",
                source=source,
                line=lineno,
            )
    return _Header(lineno, tuple(columns), gpus, links)


def _link_code(cell: str, where: str, source: str, lineno: int) -> str:
    try:
        return parse_link(cell).code
    except TopologyError as err:
        raise TopologyError(f"{where}: {err.reason}", source=source, line=lineno) from None


def _known(value: str) -> str | None:
    return None if value.upper() in ("", UNKNOWN) else value


@dataclass
class _Rows:
    """The GPU rows read so far."""

    codes: list[list[str]]
    numa: list[int | None]
    cpu_affinity: list[str | None]
    lines: list[int]


def _read_gpu_row(
    header: _Header, rows: _Rows, fields: list[str], source: str, lineno: int
) -> None:
    label, i = fields[0], len(rows.codes)
    names = [f"GPU{k}" for k in range(header.gpus)]
    if i >= header.gpus or label != names[i]:
        if label in names[:i]:
            problem = f"duplicate row for {label} (first at line {rows.lines[names.index(label)]})"
        elif label in names:
            problem = f"row {label} is out of order: expected the row for GPU{i} next"
        else:
            problem = f"row {label} has no column in the header, which names {_span(names)}"
        raise TopologyError(problem, source=source, line=lineno)
    values = _without_padding(fields[1:], len(header.columns))
    if len(values) != len(header.columns):
        amount = "few" if len(values) < len(header.columns) else "many"
        raise TopologyError(
            f"row {label} has too {amount} fields: {len(values)} after the label, expected "
            f"{len(header.columns)}, one per header column ({header.layout()})",
            source=source,
            line=lineno,
        )
    codes: list[str] = []
    links = zip(header.columns[: header.links], values[: header.links], strict=True)
    for j, (column, cell) in enumerate(links):
        where = f"row {label}, column {column}"
        is_self = cell.upper() == "X"
        if j == i and not is_self:
            raise TopologyError(
                f"{where} is {cell!r}, expected X on the diagonal", source=source, line=lineno
            )
        if j != i and is_self:
            raise TopologyError(
                f"{where} is X, but X marks only the diagonal; expected a link code",
                source=source,
                line=lineno,
            )
        if is_self:
            codes.append("X")
            continue
        code = _link_code(cell, where, source, lineno)
        if j < i and rows.codes[j][i] != code:
            raise TopologyError(
                f"link matrix is not symmetric: row {label} gives {code} to {column} but row "
                f"{column} (line {rows.lines[j]}) gives {rows.codes[j][i]} to {label}",
                source=source,
                line=lineno,
            )
        codes.append(code)
    info = dict(zip(header.columns[header.links :], values[header.links :], strict=True))
    numa = _known(info.get(NUMA_AFFINITY, ""))
    if numa is not None and not _NUMA_NODE.fullmatch(numa):
        raise TopologyError(
            f"row {label}: {NUMA_AFFINITY} is {numa!r}, expected a NUMA node number (0, 1, ...) "
            f"or {UNKNOWN}",
            source=source,
            line=lineno,
        )
    rows.codes.append(codes[: header.gpus])
    rows.numa.append(None if numa is None else int(numa))
    rows.cpu_affinity.append(_known(info.get(CPU_AFFINITY, "")))
    rows.lines.append(lineno)


def _check_device_row(header: _Header, fields: list[str], source: str, lineno: int) -> None:
    # NIC rows are not part of the GPU matrix; only check they have the shape of a row.
    values = _without_padding(fields[1:], len(header.columns))
    if not header.links <= len(values) <= len(header.columns):
        raise TopologyError(
            f"row {fields[0]} has {len(values)} fields after the label, expected "
            f"{header.links} link codes ({header.layout()}, the affinity columns optional)",
            source=source,
            line=lineno,
        )


def parse_smi(text: str, *, source: str = "<input>", name: str = "") -> NodeTopology:
    """Parse `nvidia-smi topo -m` output; every error names the line and what is wrong."""
    if not text.strip():
        raise TopologyError(
            "empty input: expected the output of `nvidia-smi topo -m`", source=source
        )
    lines = text.splitlines()
    header = _find_header(lines, source)
    rows = _Rows([], [], [], [])
    for lineno in range(header.line + 1, len(lines) + 1):
        fields = _fields(lines[lineno - 1])
        if not any(fields):
            continue
        if _GPU_NAME.fullmatch(fields[0]):
            _read_gpu_row(header, rows, fields, source, lineno)
        elif fields[0] in header.devices and len(rows.codes) == header.gpus:
            _check_device_row(header, fields, source, lineno)
        else:
            break  # the table ends: a Legend, a prompt, or rows missing (reported below)
    missing = [f"GPU{k}" for k in range(len(rows.codes), header.gpus)]
    if missing:
        # Name every missing row, unless there are so many that a range reads better.
        listed = ", ".join(missing) if len(missing) <= 8 else f"{_span(missing)} ({len(missing)})"
        what = f"rows for {listed} are" if len(missing) > 1 else f"row for {missing[0]} is"
        raise TopologyError(
            f"{what} missing (the capture looks truncated): the header names "
            f"{_span(header.columns[: header.gpus])}",
            source=source,
            line=(rows.lines[-1] if rows.lines else header.line) + 1,
        )
    try:
        return NodeTopology.from_codes(
            rows.codes, numa=rows.numa, cpu_affinity=rows.cpu_affinity, name=name
        )
    except TopologyError as err:
        raise TopologyError(err.reason, source=source, line=header.line) from None


def _cpu_field(i: int, value: str | None) -> str:
    if value is None:
        return UNKNOWN
    if not value or value.upper() == UNKNOWN or any(c.isspace() for c in value):
        raise TopologyError(
            f"GPU{i}'s CPU affinity {value!r} cannot be written as an nvidia-smi field: it must "
            f"be non-empty, without whitespace, and not {UNKNOWN}"
        )
    return value


def _numa_field(i: int, value: int | None) -> str:
    if value is None:
        return UNKNOWN
    if not _NUMA_NODE.fullmatch(str(value)):
        raise TopologyError(f"GPU{i}'s NUMA node {value} cannot be written; expected 0 or more")
    return str(value)


def render_smi(topology: NodeTopology, *, aligned: bool = False) -> str:
    """The topology as `nvidia-smi topo -m` prints it: tab-separated, or spaces if `aligned`.

    The format has no place for PCIe switches (a reader derives them from PIX groups), for the
    bandwidth table or for the name; everything else reads back equal with `parse_smi`.
    """
    n = topology.size
    info: list[tuple[str, list[str]]] = []
    if any(v is not None for v in topology.cpu_affinity):
        info.append((CPU_AFFINITY, [_cpu_field(i, v) for i, v in enumerate(topology.cpu_affinity)]))
    if any(v is not None for v in topology.numa):
        info.append((NUMA_AFFINITY, [_numa_field(i, v) for i, v in enumerate(topology.numa)]))
    lines = ["\t".join(["", *(f"GPU{i}" for i in range(n)), *(title for title, _ in info)])]
    for i, row in enumerate(topology.codes()):
        cells = [" X " if j == i else code for j, code in enumerate(row)]
        lines.append("\t".join([f"GPU{i}", *cells, *(values[i] for _, values in info)]))
    text = "\n".join([*lines, "", LEGEND])
    # Expanding tabs to 8-column stops is how captures become space-aligned when pasted.
    return text.expandtabs(8) if aligned else text
