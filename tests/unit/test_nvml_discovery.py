"""NVML discovery against a fake NVML built from presets, and against real pynvml where present;
the server node's hardware through the fake NVML and recorded nvidia-smi output."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.fake_nvml import FakeHandle, FakeLink, FakeMig, FakeNvml, FakePciInfo
from toposched.discovery.host import (
    QUERY_GPUS,
    HostResources,
    Smi,
    SmiUnavailable,
    gpu_hardware,
    host_resources,
    mem_total,
    parse_gpu_query,
)
from toposched.discovery.nvml import (
    GpuInfo,
    NvmlUnavailable,
    discover_gpus,
    discover_topology,
    format_cpu_list,
    normalise_bus_id,
    nvml_available,
)
from toposched.server.localnode import local_node
from toposched.topology.mig import table_for
from toposched.topology.node import NodeTopology
from toposched.topology.presets import preset
from toposched.topology.resources import Hardware

DIRECT_NVLINK_PRESETS = [
    "dgx1-v100",
    "pcie-8gpu-2socket",
    "pcie-4gpu-2socket",
    "pcie-16gpu-nvbridge",
]
NVSWITCH_PRESETS = ["dgx2-v100", "dgx-a100", "hgx-h100"]


def discover(fake: FakeNvml) -> NodeTopology:
    """Discover through the fake and check that NVML was shut down as often as it was started."""
    topology = discover_topology(fake)
    assert fake.initialised == 0
    return topology


def words_of(cpus: list[int], n: int) -> list[int]:
    mask = sum(1 << c for c in cpus)
    return [mask >> (64 * k) & (1 << 64) - 1 for k in range(n)]


def off_diagonal(topology: NodeTopology) -> set[str]:
    codes = topology.codes()
    return {codes[i][j] for i in range(topology.size) for j in range(topology.size) if i != j}


@pytest.mark.parametrize("name", DIRECT_NVLINK_PRESETS)
def test_presets_round_trip_through_the_fake(name: str) -> None:
    expected = preset(name)
    found = discover(FakeNvml.from_topology(expected))
    assert found.codes() == expected.codes()
    assert found.numa == expected.numa
    assert found.cpu_affinity == expected.cpu_affinity
    assert found.switch == expected.switch
    assert found == expected


@pytest.mark.parametrize("name", NVSWITCH_PRESETS)
def test_nvswitch_presets_round_trip(name: str) -> None:
    expected = preset(name)
    assert discover(FakeNvml.from_topology(expected, nvswitch=True)) == expected


def test_nvswitch_gives_nv18_all_to_all() -> None:
    fake = FakeNvml.from_topology(preset("pcie-8gpu-2socket"), nvswitch=True, switch_links=18)
    found = discover(fake)
    assert found.size == 8
    assert off_diagonal(found) == {"NV18"}


def test_nvswitch_without_remote_device_type_counts_non_gpu_remotes_as_switches() -> None:
    fake = FakeNvml.from_topology(
        preset("hgx-h100"), nvswitch=True, missing={"nvmlDeviceGetNvLinkRemoteDeviceType"}
    )
    assert off_diagonal(discover(fake)) == {"NV18"}


def test_nvswitch_pair_is_limited_by_the_gpu_with_fewer_switch_links() -> None:
    fake = FakeNvml.from_topology(preset("hgx-h100"), nvswitch=True)
    del fake.gpus[0].nvlinks[12:]
    found = discover(fake)
    assert {found.codes()[0][j] for j in range(1, 8)} == {"NV12"}
    assert found.codes()[1][2] == "NV18"


def test_nvlink_wins_over_the_pcie_path() -> None:
    # In dgx1-v100 GPU0 and GPU4 share no PCIe switch nor socket (SYS) yet have two NVLinks.
    fake = FakeNvml.from_topology(preset("dgx1-v100"))
    assert fake.levels[0][4] == FakeNvml.NVML_TOPOLOGY_SYSTEM
    assert discover(fake).codes()[0][4] == "NV2"


def test_a_link_down_at_either_end_does_not_count() -> None:
    fake = FakeNvml.from_topology(preset("dgx1-v100"))
    slots = fake.gpus[0].nvlinks
    k = next(k for k, s in enumerate(slots) if s.remote_bus_id == fake.gpus[3].bus_id)
    slots[k] = FakeLink(slots[k].remote_bus_id, up=False)
    codes = discover(fake).codes()
    assert codes[0][3] == codes[3][0] == "NV1"
    assert codes[0][4] == "NV2"


def test_nvlink_to_a_cpu_joins_no_gpus() -> None:
    # POWER9 hosts: some GPU links end at the CPU (an IBM NPU), which is neither GPU nor switch.
    fake = FakeNvml.from_topology(preset("pcie-4gpu-2socket"))
    for gpu in fake.gpus:
        gpu.nvlinks = [FakeLink("00000000:04:00.0", FakeNvml.NVML_NVLINK_DEVICE_TYPE_IBMNPU)] * 3
    assert discover(fake) == preset("pcie-4gpu-2socket")


def test_remote_pci_info_v2_is_preferred_when_the_binding_has_it() -> None:
    class V2Binding(FakeNvml):
        def nvmlDeviceGetNvLinkRemotePciInfo_v2(self, handle: FakeHandle, link: int) -> FakePciInfo:
            return super().nvmlDeviceGetNvLinkRemotePciInfo(handle, link)

    expected = preset("dgx1-v100")
    fake = V2Binding.from_topology(expected, missing={"nvmlDeviceGetNvLinkRemotePciInfo"})
    assert discover(fake) == expected


@pytest.mark.parametrize(
    "spelling",
    [
        "00000000:0A:00.0",
        "0000:0a:00.0",
        b"00000000:0A:00.0",
        b"0000:0A:00.0\x00",
        " 00000000:0a:00.0 ",
        "0a:00.0",
    ],
)
def test_bus_id_spellings_normalise_to_one(spelling: str | bytes) -> None:
    assert normalise_bus_id(spelling) == "00000000:0a:00.0"


def test_bus_ids_on_other_domains_and_functions_stay_distinct() -> None:
    assert normalise_bus_id("0001:0a:00.0") == "00000001:0a:00.0"
    assert normalise_bus_id("0000:0a:00.1") != normalise_bus_id("0000:0a:00.0")
    assert normalise_bus_id("not a bus id") == "not a bus id"


def test_discovery_matches_legacy_and_bytes_bus_ids() -> None:
    expected = preset("dgx1-v100")
    fake = FakeNvml.from_topology(expected, legacy_remote_ids=True, bytes_strings=True)
    found = discover(fake)
    assert found == expected
    assert found.name == "8x NVIDIA H100 80GB HBM3"


def test_numa_from_memory_affinity_keeps_real_node_ids() -> None:
    # x86 hosts: nvmlDeviceGetNumaNodeId answers NOT_SUPPORTED; memory affinity gives the node.
    assert discover(FakeNvml.from_topology(preset("dgx-a100"), nvswitch=True)).numa == (
        3, 3, 1, 1, 7, 7, 5, 5,
    )  # fmt: skip


def test_numa_from_numa_node_id_where_gpus_are_numa_nodes() -> None:
    fake = FakeNvml.from_topology(
        preset("dgx-a100"), nvswitch=True, gpus_are_numa_nodes=True, memory_affinity=False
    )
    assert discover(fake).numa == (3, 3, 1, 1, 7, 7, 5, 5)


@pytest.mark.parametrize(
    "options",
    [
        {"memory_affinity": False},
        {"missing": {"nvmlDeviceGetNumaNodeId", "nvmlDeviceGetMemoryAffinity"}},
    ],
)
def test_numa_falls_back_to_cpu_affinity_groups(options: dict[str, Any]) -> None:
    # Groups numbered by lowest CPU: 16-31 (GPU2,3), 48-63 (GPU0,1), 80-95 (GPU6,7), 112-127.
    found = discover(FakeNvml.from_topology(preset("dgx-a100"), nvswitch=True, **options))
    assert found.numa == (1, 1, 0, 0, 3, 3, 2, 2)
    assert found.cpu_affinity == preset("dgx-a100").cpu_affinity


def test_unknown_cpu_affinity_and_numa_give_none() -> None:
    fake = FakeNvml.from_topology(preset("pcie-4gpu-2socket"), memory_affinity=False)
    for gpu in fake.gpus:
        gpu.cpus = frozenset()
    found = discover(fake)
    assert found.numa == (None,) * 4
    assert found.cpu_affinity == (None,) * 4


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (words_of([*range(48), *range(96, 144)], 3), "0-47,96-143"),
        ([0b1101000], "3,5-6"),
        ([1 << 63, 1], "63-64"),
        ([0, 0], None),
    ],
)
def test_cpu_list_as_nvidia_smi_prints_it(words: list[int], expected: str | None) -> None:
    assert format_cpu_list(words) == expected


def test_name_defaults_to_count_and_product_unless_given() -> None:
    topology = NodeTopology.from_codes([["X"]])
    fake = FakeNvml.from_topology(topology, product="NVIDIA A100-SXM4-80GB")
    assert discover(fake).name == "1x NVIDIA A100-SXM4-80GB"
    assert discover(fake).size == 1
    assert discover_topology(fake, name="lab-node-3").name == "lab-node-3"


def test_no_driver_gives_a_clear_error() -> None:
    fake = FakeNvml.from_topology(preset("dgx1-v100"), driver_loaded=False)
    with pytest.raises(NvmlUnavailable) as info:
        discover_topology(fake)
    message = str(info.value)
    assert "NVML is not available on this machine" in message
    assert "no NVIDIA driver: Driver Not Loaded" in message
    assert "a preset or a topology file instead" in message
    assert fake.shutdowns == 0  # nothing to shut down after a failed nvmlInit
    assert not nvml_available(fake)


def test_zero_gpus_gives_a_clear_error_and_shuts_nvml_down() -> None:
    fake = FakeNvml([], [])
    with pytest.raises(NvmlUnavailable, match="no NVIDIA GPU"):
        discover_topology(fake)
    assert fake.initialised == 0
    assert fake.shutdowns == 1
    assert not nvml_available(fake)


def test_an_nvml_error_midway_is_reported_and_nvml_shut_down() -> None:
    class LostGpu(FakeNvml):
        def nvmlDeviceGetTopologyCommonAncestor(self, h1: FakeHandle, h2: FakeHandle) -> int:
            raise self.NVMLError(15)  # NVML_ERROR_GPU_IS_LOST

    fake = LostGpu.from_topology(preset("pcie-4gpu-2socket"))
    with pytest.raises(NvmlUnavailable, match="NVML failed while reading the GPU topology"):
        discover_topology(fake)
    assert fake.initialised == 0


def test_missing_pynvml_module_gives_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    with pytest.raises(NvmlUnavailable, match="pynvml module is not installed"):
        discover_topology()
    assert not nvml_available()


def test_real_pynvml_raises_nvml_unavailable_or_discovers() -> None:
    pytest.importorskip("pynvml")
    try:
        topology = discover_topology()
    except NvmlUnavailable as err:
        assert "a preset or a topology file instead" in str(err)
        assert not nvml_available()
    else:  # a machine with an NVIDIA driver and GPU
        assert topology.size >= 1
        assert nvml_available()
        gpus = discover_gpus()
        assert len(gpus) == topology.size
        assert all(gpu.product and gpu.memory > 0 for gpu in gpus)


def test_nvml_available_with_a_working_fake() -> None:
    fake = FakeNvml.from_topology(preset("pcie-4gpu-2socket"))
    assert nvml_available(fake)
    assert fake.initialised == 0


# --- the node's hardware: GPU type and memory, CPUs and memory ---------------------------

GIB = 2**30
MIB = 2**20
# `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader` as it prints it (a DGX-1's
# first lines; a GPU whose memory a virtual GPU does not report shows [N/A])
SMI_V100 = "Tesla V100-SXM2-16GB, 16160 MiB\nTesla V100-SXM2-16GB, 16160 MiB\n"
SMI_TOPOLOGY = Path(__file__).parent.parent / "fixtures/topologies/hgx-h100-8gpu-nv18.txt"
HOST = HostResources(cpus=2000, memory=8 * GIB)


def smi_answers(query: str | None, topology: str | None = None) -> Smi:
    """A stand-in for nvidia-smi: its output for the GPU query and `topo -m`, or not there."""

    def run(args: Sequence[str]) -> str:
        text = query if tuple(args) == QUERY_GPUS else topology
        if text is None:
            raise SmiUnavailable("nvidia-smi is not installed (not on the PATH)")
        return text

    return run


def test_gpus_are_named_and_sized_through_nvml() -> None:
    fake = FakeNvml.from_topology(
        preset("dgx1-v100"), product="Tesla V100-SXM2-16GB", memory=16160 * MIB, bytes_strings=True
    )
    gpus = discover_gpus(fake)
    assert gpus == (GpuInfo("Tesla V100-SXM2-16GB", 16160 * MIB),) * 8
    assert fake.initialised == 0


def test_gpu_memory_nvml_does_not_report_is_unknown() -> None:
    fake = FakeNvml.from_topology(preset("pcie-4gpu-2socket"), memory=None)
    assert {gpu.memory for gpu in discover_gpus(fake)} == {0}


def test_gpus_without_a_driver_raise_nvml_unavailable() -> None:
    fake = FakeNvml.from_topology(preset("pcie-4gpu-2socket"), driver_loaded=False)
    with pytest.raises(NvmlUnavailable, match="no NVIDIA driver"):
        discover_gpus(fake)
    with pytest.raises(NvmlUnavailable, match="no NVIDIA GPU"):
        discover_gpus(FakeNvml([], []))


def test_the_nvidia_smi_gpu_query_is_read() -> None:
    text = SMI_V100 + "NVIDIA A100-SXM4-40GB, 40960 MiB\nGRID A100-4C, [N/A]\n\n"
    assert parse_gpu_query(text) == (
        GpuInfo("Tesla V100-SXM2-16GB", 16160 * MIB),
        GpuInfo("Tesla V100-SXM2-16GB", 16160 * MIB),
        GpuInfo("NVIDIA A100-SXM4-40GB", 40 * GIB),
        GpuInfo("GRID A100-4C", 0),
    )
    assert parse_gpu_query("NVIDIA H100 80GB HBM3, 81559") == (  # --format=csv,nounits
        GpuInfo("NVIDIA H100 80GB HBM3", 81559 * MIB),
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no GPU listed"),
        ("Tesla T4\n", "line 1: expected 'NAME, MEMORY MiB', got 'Tesla T4'"),
        ("Tesla T4, 15360 MiB\nTesla T4, lots\n", "line 2: memory 'lots' is not a number"),
        ("Tesla T4, 15 GB\n", "memory '15 GB' is not a number of MiB"),
    ],
)
def test_a_gpu_query_that_cannot_be_read_says_where(text: str, message: str) -> None:
    with pytest.raises(SmiUnavailable, match=message):
        parse_gpu_query(text)


def test_gpu_hardware_takes_the_short_type_and_the_least_memory_of_that_type() -> None:
    known = ["V100", "A100", "H100", "T4"]
    gpus = [
        GpuInfo("NVIDIA A100-SXM4-80GB", 80 * GIB),
        GpuInfo("NVIDIA A100-SXM4-40GB", 40 * GIB),
        GpuInfo("Tesla T4", 15 * GIB),
    ]
    assert gpu_hardware(gpus, known) == Hardware("A100", 40 * GIB)
    assert gpu_hardware([GpuInfo("NVIDIA L40S", 46068 * MIB)], known) == Hardware(
        "NVIDIA L40S", 46068 * MIB
    )
    assert gpu_hardware([], known) == Hardware()


def test_host_cpus_are_this_process_affinity_and_memory_mem_total(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16318460 kB\nMemFree:         1000 kB\n")
    host = host_resources(meminfo)
    assert host == HostResources(len(os.sched_getaffinity(0)) * 1000, 16318460 * 1024)
    assert host_resources(tmp_path / "missing").memory is None
    assert mem_total("MemFree: 3 kB\n") is None
    assert host_resources().memory is not None  # this machine's /proc/meminfo


def test_the_server_node_through_nvml_carries_its_hardware() -> None:
    fake = FakeNvml.from_topology(preset("hgx-h100"), nvswitch=True)
    local = local_node(None, "gpu-1", nvml=fake, smi=smi_answers(None), host=HOST)
    assert local.source == "nvml"
    assert local.node.topology.size == 8
    assert local.node.hardware == Hardware("H100", 81559 * MIB, 2000, 8 * GIB)


def test_the_server_node_through_nvml_has_its_gpus_in_mig_mode() -> None:
    h100 = table_for("H100", 81559 * MIB)
    fake = FakeNvml.from_topology(preset("hgx-h100"), nvswitch=True)
    fake.gpus[1].mig = FakeMig.carved(h100, [("3g.40gb", 4)], gpu=1)
    fake.gpus[3].mig = FakeMig.carved(h100, [], gpu=3)
    fake.gpus[5].mig = FakeMig(enabled=False, pending=True)  # only after the next reset
    local = local_node(None, "gpu-1", nvml=fake, smi=smi_answers(None), host=HOST)
    assert local.node.hardware == Hardware("H100", 81559 * MIB, 2000, 8 * GIB, mig=(1, 3))
    assert fake.initialised == 0


def test_gpus_nvml_fails_to_size_are_read_from_nvidia_smi() -> None:
    class FailingNvml(FakeNvml):
        def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle) -> Any:
            raise self.NVMLError(15)  # NVML_ERROR_GPU_IS_LOST

    fake = FailingNvml.from_topology(preset("dgx1-v100"), product="Tesla V100-SXM2-16GB")
    local = local_node(None, "v", nvml=fake, smi=smi_answers(SMI_V100), host=HOST)
    assert local.source == "nvml"
    assert local.node.hardware == Hardware("V100", 16160 * MIB, 2000, 8 * GIB)
    unknown = local_node(None, "v", nvml=fake, smi=smi_answers(None), host=HOST)
    assert unknown.node.hardware == Hardware("", 0, 2000, 8 * GIB)


def test_without_nvml_the_server_node_comes_from_nvidia_smi() -> None:
    fake = FakeNvml.from_topology(preset("dgx1-v100"), driver_loaded=False)
    smi = smi_answers("NVIDIA H100 80GB HBM3, 81559 MiB\n" * 8, SMI_TOPOLOGY.read_text())
    local = local_node(None, "h", nvml=fake, smi=smi, host=HOST)
    assert local.source == "nvidia-smi"
    assert local.node.topology.size == 8
    assert local.node.topology.cpu_affinity[0] is not None
    assert local.node.hardware == Hardware("H100", 81559 * MIB, 2000, 8 * GIB)


def test_with_neither_the_server_emulates_a_dgx1_with_its_gpus_and_this_hosts_cpus() -> None:
    fake = FakeNvml.from_topology(preset("dgx1-v100"), driver_loaded=False)
    broken = smi_answers(None, "not a topology")
    local = local_node(None, "vm", nvml=fake, smi=broken, host=HOST)
    assert local.source.startswith("emulated (dgx1-v100; NVML is not available")
    assert local.node.hardware == Hardware("V100", 16 * GIB, 2000, 8 * GIB)


def test_an_emulated_preset_has_its_gpus_and_this_hosts_cpus_and_memory() -> None:
    local = local_node("g4dn-12xlarge", "vm", host=HOST)
    assert local.source == "emulated (g4dn-12xlarge)"
    assert local.node.hardware == Hardware("T4", 16 * GIB, 2000, 8 * GIB)
    real = local_node("dgx-a100", "vm").node.hardware
    assert real.cpus == len(os.sched_getaffinity(0)) * 1000
    assert (real.gpu_type, real.gpu_memory) == ("A100", 40 * GIB)


def test_an_emulated_topology_file_has_gpus_of_unknown_type(tmp_path: Path) -> None:
    path = tmp_path / "node.txt"
    path.write_text(SMI_TOPOLOGY.read_text())
    local = local_node(str(path), "vm", host=HOST)
    assert local.node.hardware == Hardware("", 0, 2000, 8 * GIB)
