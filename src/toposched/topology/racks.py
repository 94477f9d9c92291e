"""Rack presets: several nodes on one NVLink fabric (a GB200 NVL72), and the levels above nodes."""

from __future__ import annotations

from dataclasses import dataclass

from toposched.topology.levels import Level


@dataclass(frozen=True)
class RackPreset:
    """`nodes` nodes of node preset `node`, joined by the NVLink level `clique`."""

    name: str
    node: str
    nodes: int
    clique: Level


# One GB200 NVL72 rack: 18 compute trays of 4 GPUs (72 GPUs) on one NVLink 5 fabric, 1.8 TB/s
# per GPU both ways, 900 GB/s a direction; the NVLink switch adds a hop, about a microsecond
# (https://www.nvidia.com/en-us/data-center/gb200-nvl72/). NVIDIA's DRA driver names the
# fabric's members by the label nvidia.com/gpu.clique, hence the level's name.
GB200_NVL72 = RackPreset("gb200-nvl72", "gb200-tray", 18, Level("clique", 900.0, 1.0, nvlink=True))

RACK_PRESETS: dict[str, RackPreset] = {GB200_NVL72.name: GB200_NVL72}

# Beyond a node or a rack: one 400 Gb/s InfiniBand/Ethernet NIC per GPU (ConnectX-7, on the
# HGX/DGX and GB200 pages) is 50 GB/s a direction per GPU. A rail-optimised leaf/spine fabric is
# non-blocking up to the spine, so leaf and spine give the same bandwidth and differ in hops
# (about 1 us per switch crossed, three switches through a spine against one through a leaf);
# between spine groups (the core) 2:1 oversubscription is assumed, half of it.
NIC_GBPS = 50.0
LEAF = Level("leaf", NIC_GBPS, 1.0)
SPINE = Level("spine", NIC_GBPS, 3.0)
CORE_GBPS = NIC_GBPS / 2
