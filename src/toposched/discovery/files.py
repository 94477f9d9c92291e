"""Resolve what a user names as a topology: a preset name, or a YAML or nvidia-smi file."""

from __future__ import annotations

from pathlib import Path

from toposched.topology.errors import TopologyError
from toposched.topology.formats import parse_topology_text
from toposched.topology.node import NodeTopology
from toposched.topology.presets import PRESETS, preset


def load_topology(spec: str) -> NodeTopology:
    """A preset name, or a path to a YAML topology or an `nvidia-smi topo -m` capture."""
    path = Path(spec)
    if path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise TopologyError(f"cannot read: {err}", source=spec) from None
        return parse_topology_text(text, source=spec, name=path.stem)
    if spec in PRESETS:
        return preset(spec)
    if path.exists():
        raise TopologyError("not a regular file", source=spec)
    raise TopologyError(
        f"{spec!r} is neither a file nor a preset; known presets: {', '.join(PRESETS)}"
    )
