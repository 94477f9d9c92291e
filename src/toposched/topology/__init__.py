"""GPU topology of a node: link kinds, bandwidths, presets, and the nvidia-smi and YAML formats.

The names below are imported from their modules on first access: the CLI's `submit` and
`top node` need toposched.topology.resources alone (quantities), not the presets' tables.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toposched.topology.errors import TopologyError
    from toposched.topology.links import (
        DEFAULT_BANDWIDTH,
        BandwidthTable,
        Link,
        Path,
        parse_link,
    )
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

_HOME = {
    "TopologyError": "toposched.topology.errors",
    "DEFAULT_BANDWIDTH": "toposched.topology.links",
    "BandwidthTable": "toposched.topology.links",
    "Link": "toposched.topology.links",
    "Path": "toposched.topology.links",
    "parse_link": "toposched.topology.links",
    "NodeTopology": "toposched.topology.node",
    "PRESETS": "toposched.topology.presets",
    "preset": "toposched.topology.presets",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
