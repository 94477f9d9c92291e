"""Tell the two topology text formats apart and parse either: nvidia-smi capture or YAML."""

from __future__ import annotations

from toposched.topology.node import NodeTopology
from toposched.topology.smi import parse_smi
from toposched.topology.yamlfile import parse_yaml

YAML_SUFFIXES = (".yaml", ".yml")


def parse_topology_text(text: str, *, source: str, name: str = "") -> NodeTopology:
    """Parse either format: nvidia-smi text has a header row naming GPU0, YAML does not."""
    if source.lower().endswith(YAML_SUFFIXES):
        return parse_yaml(text, source=source)
    first = next((line for line in text.splitlines() if line.strip()), "")
    looks_like_smi = "GPU0" in first and ":" not in first
    if looks_like_smi:
        return parse_smi(text, source=source, name=name)
    if any(line.lstrip().startswith(("links:", "preset:")) for line in text.splitlines()):
        return parse_yaml(text, source=source)
    return parse_smi(text, source=source, name=name)
