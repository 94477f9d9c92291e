"""`toposched topology ...`: parse, show, list and discover node topologies."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import typer
from rich.table import Table

from toposched.cli.output import console, emit_json, fail
from toposched.discovery.files import load_topology
from toposched.placement import ring_bandwidth
from toposched.topology import PRESETS, NodeTopology, TopologyError, preset
from toposched.topology.smi import render_smi
from toposched.topology.yamlfile import dump_yaml

app = typer.Typer(
    no_args_is_help=True, help="Inspect GPU topologies: presets, files, this machine."
)


class Format(StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"
    SMI = "smi"


def topology_json(topology: NodeTopology, *, detail: bool) -> dict[str, Any]:
    """The stable JSON shape of a topology (README documents it)."""
    out: dict[str, Any] = {
        "gpus": topology.size,
        "links": topology.codes(),
        "numa": list(topology.numa),
        "cpu_affinity": list(topology.cpu_affinity),
    }
    if detail:
        out = {"name": topology.name, **out}
        out["bandwidth_gbps"] = [
            [None if i == j else bw for j, bw in enumerate(row)]
            for i, row in enumerate(topology.bandwidth_matrix)
        ]
        out["switch"] = list(topology.switches)
        out["socket"] = list(topology.sockets)
        out["ring_bandwidth_gbps"] = ring_bandwidth(topology, range(topology.size))
    return out


def print_table(topology: NodeTopology) -> None:
    n = topology.size
    title = f"{topology.name or 'topology'}: {n} GPUs"
    table = Table(title=title, title_justify="left")
    table.add_column("")
    for j in range(n):
        table.add_column(f"GPU{j}", justify="center")
    for extra in ("socket", "switch", "CPU affinity"):
        table.add_column(extra)
    bw = topology.bandwidth_matrix
    codes = topology.codes()
    for i in range(n):
        cells = ["X" if i == j else f"{codes[i][j]} {bw[i][j]:g}" for j in range(n)]
        table.add_row(
            f"GPU{i}",
            *cells,
            str(topology.sockets[i]),
            str(topology.switches[i]),
            topology.cpu_affinity[i] or "",
        )
    console.print(table)
    ring = ring_bandwidth(topology, range(n))
    console.print(
        "cells: link kind and GB/s one way; " + (f"whole-node ring {ring:g} GB/s" if ring else "")
    )


def show(topology: NodeTopology, fmt: Format, *, detail: bool = True) -> None:
    if fmt is Format.JSON:
        emit_json(topology_json(topology, detail=detail))
    elif fmt is Format.YAML:
        console.out(dump_yaml(topology), end="")
    elif fmt is Format.SMI:
        console.out(render_smi(topology), end="")
    else:
        print_table(topology)


def _pick_format(json_flag: bool, fmt: Format) -> Format:
    return Format.JSON if json_flag else fmt


@app.command("parse")
def parse_cmd(
    file: str = typer.Argument(..., help="An `nvidia-smi topo -m` capture or a YAML topology."),
    json_out: bool = typer.Option(False, "--json", help="JSON: gpus, links, numa, cpu_affinity."),
    fmt: Format = typer.Option(Format.TABLE, "--format", help="Output format."),
) -> None:
    """Parse a topology file and print what was understood."""
    if file in PRESETS:
        fail(f"{file!r} is a preset name; `topology parse` reads a file (try `topology show`)")
    try:
        topology = load_topology(file)
    except TopologyError as err:
        fail(str(err))
    show(topology, _pick_format(json_out, fmt), detail=False)


@app.command("show")
def show_cmd(
    spec: str = typer.Argument(..., help="A preset name or a topology file."),
    json_out: bool = typer.Option(False, "--json", help="JSON, with bandwidth_gbps and more."),
    fmt: Format = typer.Option(Format.TABLE, "--format", help="Output format."),
) -> None:
    """Show a topology: link kinds and bandwidths between every pair of GPUs."""
    try:
        topology = load_topology(spec)
    except TopologyError as err:
        fail(str(err))
    show(topology, _pick_format(json_out, fmt))


@app.command("presets")
def presets_cmd(
    json_out: bool = typer.Option(False, "--json", help="JSON list."),
) -> None:
    """List the built-in topology presets."""
    rows: list[dict[str, Any]] = []
    for name in PRESETS:
        t = preset(name)
        rows.append(
            {"name": name, "gpus": t.size, "ring_bandwidth_gbps": ring_bandwidth(t, range(t.size))}
        )
    if json_out:
        emit_json(rows)
        return
    table = Table("preset", "GPUs", "whole-node ring GB/s")
    for row in rows:
        table.add_row(row["name"], str(row["gpus"]), f"{row['ring_bandwidth_gbps']:g}")
    console.print(table)


@app.command("discover")
def discover_cmd(
    json_out: bool = typer.Option(False, "--json", help="JSON, as `topology show --json`."),
    fmt: Format = typer.Option(Format.TABLE, "--format", help="Output format."),
) -> None:
    """Read this machine's GPU topology through NVML."""
    from toposched.discovery.nvml import NvmlUnavailable, discover_topology

    try:
        topology = discover_topology()
    except NvmlUnavailable as err:
        fail(str(err))
    show(topology, _pick_format(json_out, fmt))
