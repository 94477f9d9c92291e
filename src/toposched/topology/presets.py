"""Named node topologies of common GPU servers, built in code so that the core stays free of I/O."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from toposched.topology.errors import TopologyError
from toposched.topology.links import BandwidthTable
from toposched.topology.node import NodeTopology
from toposched.topology.resources import Hardware

# DGX-1 with V100 (hybrid cube-mesh): every GPU has six NVLinks. GPU0-GPU3 and GPU0-GPU4 are
# bonded pairs (NV2), GPU0-GPU1 and GPU0-GPU2 single links, GPU0-GPU5/6/7 only PCIe across the
# sockets. Matches the adjacency in NVIDIA's go-gpuallocator test fixture (see
# tests/fixtures/topologies/SOURCES.md); no verbatim capture of a DGX-1 V100 was found.
_DGX1_V100 = (
    "X   NV1 NV1 NV2 NV2 SYS SYS SYS",
    "NV1 X   NV2 NV1 SYS NV2 SYS SYS",
    "NV1 NV2 X   NV2 SYS SYS NV1 SYS",
    "NV2 NV1 NV2 X   SYS SYS SYS NV1",
    "NV2 SYS SYS SYS X   NV1 NV1 NV2",
    "SYS NV2 SYS SYS NV1 X   NV2 NV1",
    "SYS SYS NV1 SYS NV1 NV2 X   NV2",
    "SYS SYS SYS NV1 NV2 NV1 NV2 X  ",
)


def _all_to_all(n: int, code: str) -> list[list[str]]:
    return [["X" if i == j else code for j in range(n)] for i in range(n)]


def _tree(
    n: int, *, switch_of: Callable[[int], int], socket_of: Callable[[int], int], same_socket: str
) -> list[list[str]]:
    """A PCIe tree: PIX under one switch, `same_socket` between switches of a socket, SYS across."""

    def code(i: int, j: int) -> str:
        if i == j:
            return "X"
        if switch_of(i) == switch_of(j):
            return "PIX"
        if socket_of(i) == socket_of(j):
            return same_socket
        return "SYS"

    return [[code(i, j) for j in range(n)] for i in range(n)]


def dgx1_v100() -> NodeTopology:
    return NodeTopology.from_codes(
        [row.split() for row in _DGX1_V100],
        numa=[i // 4 for i in range(8)],
        switch=[i // 2 for i in range(8)],
        cpu_affinity=["0-19,40-59"] * 4 + ["20-39,60-79"] * 4,
        name="dgx1-v100",
    )


def dgx2_v100() -> NodeTopology:
    # 16 V100 on NVSwitch: every pair is NV6. Two GPUs share each PCIe switch (and NIC).
    return NodeTopology.from_codes(
        _all_to_all(16, "NV6"),
        numa=[i // 8 for i in range(16)],
        switch=[i // 2 for i in range(16)],
        cpu_affinity=["0-23,48-71"] * 8 + ["24-47,72-95"] * 8,
        name="dgx2-v100",
    )


def dgx_a100() -> NodeTopology:
    # NUMA nodes and CPU lists of GPU0-3 as in the DGX A100 capture; GPU4-7 follow the same layout.
    return NodeTopology.from_codes(
        _all_to_all(8, "NV12"),
        numa=[3, 3, 1, 1, 7, 7, 5, 5],
        switch=[i // 2 for i in range(8)],
        cpu_affinity=["48-63,176-191"] * 2
        + ["16-31,144-159"] * 2
        + ["112-127,240-255"] * 2
        + ["80-95,208-223"] * 2,
        name="dgx-a100",
    )


def hgx_h100() -> NodeTopology:
    return NodeTopology.from_codes(
        _all_to_all(8, "NV18"),
        numa=[i // 4 for i in range(8)],
        switch=list(range(8)),
        cpu_affinity=["0-47,96-143"] * 4 + ["48-95,144-191"] * 4,
        name="hgx-h100",
    )


def hgx_h200() -> NodeTopology:
    # Wired as the HGX H100 (NVLink 4 through four NVSwitch chips: 18 links of 25 GB/s a
    # direction per GPU, 900 GB/s both ways; https://www.nvidia.com/en-us/data-center/h200/),
    # one ConnectX-7 400 Gb/s NIC per GPU (8 per node), a PCIe switch each.
    return NodeTopology.from_codes(
        _all_to_all(8, "NV18"),
        numa=[i // 4 for i in range(8)],
        switch=list(range(8)),
        cpu_affinity=["0-47,96-143"] * 4 + ["48-95,144-191"] * 4,
        name="hgx-h200",
    )


# NVLink 5 links carry 50 GB/s a direction each, twice NVLink 4's: 18 of them are 1.8 TB/s
# both ways per GPU (https://www.nvidia.com/en-us/data-center/nvlink/).
NVLINK5 = BandwidthTable(nvlink_per_link=50.0)


def dgx_b200() -> NodeTopology:
    # DGX B200: 8 B200 on two NVSwitch chips, 18 NVLink 5 links per GPU (1.8 TB/s per GPU, 14.4
    # TB/s aggregate), 8 single-port ConnectX-7 400 Gb/s NICs for the compute fabric, two
    # 56-core Xeon 8570 (https://www.nvidia.com/en-us/data-center/dgx-b200/).
    return NodeTopology.from_codes(
        _all_to_all(8, "NV18"),
        numa=[i // 4 for i in range(8)],
        switch=list(range(8)),
        cpu_affinity=["0-55,112-167"] * 4 + ["56-111,168-223"] * 4,
        bandwidth=NVLINK5,
        name="dgx-b200",
    )


def gb200_tray() -> NodeTopology:
    # One compute tray of a GB200 NVL72: two Grace CPUs, each with two B200 GPUs, every GPU with
    # 18 NVLink 5 links into the rack's NVLink switch trays (so every pair of the 72 GPUs talks
    # at 1.8 TB/s both ways), a ConnectX-7/8 400 Gb/s NIC per GPU
    # (https://www.nvidia.com/en-us/data-center/gb200-nvl72/).
    return NodeTopology.from_codes(
        _all_to_all(4, "NV18"),
        numa=[0, 0, 1, 1],
        switch=[0, 1, 2, 3],
        cpu_affinity=["0-71"] * 2 + ["72-143"] * 2,
        bandwidth=NVLINK5,
        name="gb200-tray",
    )


def pcie_8gpu_2socket() -> NodeTopology:
    # The paper's server: two CPUs, each with two PCIe switches hosting two GPUs.
    return NodeTopology.from_codes(
        _tree(8, switch_of=lambda i: i // 2, socket_of=lambda i: i // 4, same_socket="PHB"),
        numa=[i // 4 for i in range(8)],
        switch=[i // 2 for i in range(8)],
        cpu_affinity=["0-9,20-29"] * 4 + ["10-19,30-39"] * 4,
        name="pcie-8gpu-2socket",
    )


def pcie_4gpu_2socket() -> NodeTopology:
    # As the 4x RTX 6000 Ada capture: two GPUs per socket, each under its own root port (NODE).
    return NodeTopology.from_codes(
        _tree(4, switch_of=lambda i: i, socket_of=lambda i: i // 2, same_socket="NODE"),
        numa=[0, 0, 1, 1],
        switch=[0, 1, 2, 3],
        cpu_affinity=["0-31"] * 2 + ["32-63"] * 2,
        name="pcie-4gpu-2socket",
    )


def pcie_16gpu_nvbridge() -> NodeTopology:
    # A 16-GPU PCIe box with mixed links: GPUs 2i and 2i+1 joined by an NVLink bridge (NV4),
    # four GPUs per PCIe switch, two switches per socket, two sockets.
    tree = _tree(16, switch_of=lambda i: i // 4, socket_of=lambda i: i // 8, same_socket="NODE")
    for i in range(0, 16, 2):
        tree[i][i + 1] = tree[i + 1][i] = "NV4"
    return NodeTopology.from_codes(
        tree,
        numa=[i // 8 for i in range(16)],
        switch=[i // 4 for i in range(16)],
        cpu_affinity=["0-31"] * 8 + ["32-63"] * 8,
        name="pcie-16gpu-nvbridge",
    )


def g4dn_12xlarge() -> NodeTopology:
    # AWS g4dn.12xlarge: 4x T4 (PCIe, no NVLink) on one socket, each on its own root port, so
    # every pair goes through the host bridge (PHB); 48 vCPUs; one 50 Gb/s NIC (`aws-50g`).
    return NodeTopology.from_codes(
        _all_to_all(4, "PHB"),
        numa=[0, 0, 0, 0],
        switch=[0, 1, 2, 3],
        cpu_affinity=["0-47"] * 4,
        name="g4dn-12xlarge",
    )


PRESETS: dict[str, Callable[[], NodeTopology]] = {
    "dgx1-v100": dgx1_v100,
    "dgx2-v100": dgx2_v100,
    "dgx-a100": dgx_a100,
    "hgx-h100": hgx_h100,
    "hgx-h200": hgx_h200,
    "dgx-b200": dgx_b200,
    "gb200-tray": gb200_tray,
    "pcie-8gpu-2socket": pcie_8gpu_2socket,
    "pcie-4gpu-2socket": pcie_4gpu_2socket,
    "pcie-16gpu-nvbridge": pcie_16gpu_nvbridge,
    "g4dn-12xlarge": g4dn_12xlarge,
}


GIB = 2**30

# What each preset server has besides its wiring, from the vendors' data sheets: GPU type and
# memory per GPU, logical CPUs (what its `cpu_affinity` lists count) and system memory. A preset
# of no one product leaves what is not known unknown (docs/cluster.md).
PRESET_HARDWARE: dict[str, Hardware] = {
    "dgx1-v100": Hardware("V100", 16 * GIB, 80_000, 512 * GIB),
    "dgx2-v100": Hardware("V100", 32 * GIB, 96_000, 1536 * GIB),
    "dgx-a100": Hardware("A100", 40 * GIB, 256_000, 1024 * GIB),
    "hgx-h100": Hardware("H100", 80 * GIB, 192_000, 2048 * GIB),
    # 141 GB of HBM3e per GPU (the H200 page above); host as the HGX H100 preset's.
    "hgx-h200": Hardware("H200", 141 * 10**9, 192_000, 2048 * GIB),
    # 1,440 GB of GPU memory over 8 GPUs, 112 cores (224 threads), 2 TB (the DGX B200 page).
    "dgx-b200": Hardware("B200", 180 * 10**9, 224_000, 2048 * GIB),
    # 13.4 TB HBM3e over 72 GPUs (186 GB each), 2 Grace CPUs of 72 Arm cores and 480 GB LPDDR5X
    # each per tray (the GB200 NVL72 page above).
    "gb200-tray": Hardware("B200", 186 * 10**9, 144_000, 960 * 10**9),
    "pcie-8gpu-2socket": Hardware(cpus=40_000),
    "pcie-4gpu-2socket": Hardware("RTX6000Ada", 48 * GIB, 64_000),
    "pcie-16gpu-nvbridge": Hardware(cpus=64_000),
    "g4dn-12xlarge": Hardware("T4", 16 * GIB, 48_000, 192 * GIB),
}


def preset_hardware(name: str) -> Hardware:
    """The hardware of preset `name` (what is unknown left so); unknown names list the presets."""
    preset(name)
    return PRESET_HARDWARE[name]


@cache
def preset(name: str) -> NodeTopology:
    """The preset called `name`, one shared object per name; unknown names list the valid ones."""
    build = PRESETS.get(name)
    if build is None:
        raise TopologyError(
            f"unknown topology preset {name!r}; known presets: {', '.join(PRESETS)}"
        )
    return build()
