"""GPU topology of a node: link kinds, bandwidths, presets, and the nvidia-smi and YAML formats."""

from toposched.topology.errors import TopologyError
from toposched.topology.links import DEFAULT_BANDWIDTH, BandwidthTable, Link, Path, parse_link
from toposched.topology.node import NodeTopology
from toposched.topology.presets import PRESETS, preset

__all__ = [
    "DEFAULT_BANDWIDTH",
    "PRESETS",
    "BandwidthTable",
    "Link",
    "NodeTopology",
    "Path",
    "TopologyError",
    "parse_link",
    "preset",
]
