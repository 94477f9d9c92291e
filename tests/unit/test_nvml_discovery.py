"""NVML discovery against a fake NVML built from presets, and against real pynvml where present."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from tests.fakes.fake_nvml import FakeHandle, FakeLink, FakeNvml, FakePciInfo
from toposched.discovery.nvml import (
    NvmlUnavailable,
    discover_topology,
    format_cpu_list,
    normalise_bus_id,
    nvml_available,
)
from toposched.topology.node import NodeTopology
from toposched.topology.presets import preset

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


def test_nvml_available_with_a_working_fake() -> None:
    fake = FakeNvml.from_topology(preset("pcie-4gpu-2socket"))
    assert nvml_available(fake)
    assert fake.initialised == 0
