"""Discovery of the running machine's GPU topology through NVML (the `pynvml` module)."""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from toposched.topology.cpulist import cpu_list
from toposched.topology.links import Link, Path
from toposched.topology.node import NodeTopology

_INSTEAD = "name a preset or a topology file instead (see `toposched topology presets`)"
# domain:bus:device.function; NVML gives an 8-digit domain in busId, 4 digits in legacy ids.
_BUS_ID_RE = re.compile(r"(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])")
# NVML fills as many 64-bit mask words as it is given; ask for room for 1024 CPUs at least
# because os.cpu_count() can be below the highest CPU id (offline CPUs).
_MIN_CPU_WORDS = 16


class NvmlUnavailable(RuntimeError):
    """NVML cannot describe this machine: no `pynvml` module, no NVIDIA driver, or no GPU."""


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as NVML or nvidia-smi names it: "Tesla V100-SXM2-16GB", and its memory in bytes
    (0: unknown)."""

    product: str
    memory: int


def discover_topology(nvml: ModuleType | object | None = None, *, name: str = "") -> NodeTopology:
    """The topology of this machine's GPUs, in NVML index order, as `nvidia-smi topo -m` shows it.

    `nvml` is the `pynvml` module unless given (tests pass a fake). The name defaults to the
    GPU count and GPU0's product name, e.g. "8x NVIDIA H100 80GB HBM3".
    Raises NvmlUnavailable when NVML cannot be used or sees no GPU.
    """
    api = _load(nvml)
    _init(api)
    try:
        return _read(api, name)
    except api.NVMLError as err:
        raise NvmlUnavailable(
            f"NVML failed while reading the GPU topology ({err}); {_INSTEAD}"
        ) from err
    finally:
        _shutdown(api)


def discover_gpus(nvml: ModuleType | object | None = None) -> tuple[GpuInfo, ...]:
    """Each GPU's product name and memory, in NVML index order; NvmlUnavailable as
    `discover_topology`. A GPU whose memory NVML does not report has 0 (unknown)."""
    api = _load(nvml)
    _init(api)
    try:
        count = int(api.nvmlDeviceGetCount())
        if count < 1:
            raise NvmlUnavailable(f"NVML found no NVIDIA GPU on this machine; {_INSTEAD}")
        return tuple(_gpu_info(api, api.nvmlDeviceGetHandleByIndex(i)) for i in range(count))
    except api.NVMLError as err:
        raise NvmlUnavailable(f"NVML failed while reading the GPUs ({err}); {_INSTEAD}") from err
    finally:
        _shutdown(api)


def discover_minors(nvml: ModuleType | object | None = None) -> tuple[int, ...]:
    """Each GPU's device minor number, in NVML index order: its device file is
    /dev/nvidia<minor>, numbered by the driver in an order of its own that need not be the
    index order. NvmlUnavailable as `discover_topology`."""
    api = _load(nvml)
    _init(api)
    try:
        count = int(api.nvmlDeviceGetCount())
        handles = (api.nvmlDeviceGetHandleByIndex(i) for i in range(count))
        return tuple(int(api.nvmlDeviceGetMinorNumber(h)) for h in handles)
    except api.NVMLError as err:
        raise NvmlUnavailable(f"NVML failed while reading the GPUs ({err}); {_INSTEAD}") from err
    finally:
        _shutdown(api)


def _gpu_info(api: Any, handle: Any) -> GpuInfo:
    product = api.nvmlDeviceGetName(handle)
    product = product.decode() if isinstance(product, bytes) else str(product)
    try:
        memory = int(api.nvmlDeviceGetMemoryInfo(handle).total)
    except api.NVMLError as err:
        # NOT_SUPPORTED on some virtual GPUs: the type is still worth knowing
        if err.value != api.NVML_ERROR_NOT_SUPPORTED:
            raise
        memory = 0
    return GpuInfo(product.strip(), memory)


def nvml_available(nvml: ModuleType | object | None = None) -> bool:
    """Whether NVML can be loaded and started here and sees at least one GPU."""
    try:
        api = _load(nvml)
        _init(api)
    except NvmlUnavailable:
        return False
    try:
        return int(api.nvmlDeviceGetCount()) > 0
    except api.NVMLError:
        return False
    finally:
        _shutdown(api)


def normalise_bus_id(bus_id: bytes | str) -> str:
    """A PCI bus id in one spelling: `00000000:0a:00.0` for b"0000:0A:00.0" and the like."""
    text = bus_id.decode("ascii", "replace") if isinstance(bus_id, bytes) else bus_id
    text = text.strip("\x00 \t\n").lower()
    m = _BUS_ID_RE.fullmatch(text)
    if m is None:
        return text
    domain, bus, device, function = m.groups()
    return f"{int(domain or '0', 16):08x}:{int(bus, 16):02x}:{int(device, 16):02x}.{function}"


def format_cpu_list(mask_words: Iterable[int]) -> str | None:
    """nvidia-smi's CPU list, "0-47,96-143", from a mask: 64-bit words, least significant first."""
    return cpu_list(_bits(mask_words)) or None


def _load(nvml: ModuleType | object | None) -> Any:
    if nvml is not None:
        return nvml
    try:
        return importlib.import_module("pynvml")
    except ImportError as err:
        raise NvmlUnavailable(
            "NVML is not available: the pynvml module is not installed "
            f"(pip install 'toposched[nvml]'); {_INSTEAD}"
        ) from err


def _init(api: Any) -> None:
    try:
        api.nvmlInit()
    except api.NVMLError as err:
        no_driver = err.value in (
            api.NVML_ERROR_LIBRARY_NOT_FOUND,
            api.NVML_ERROR_DRIVER_NOT_LOADED,
        )
        reason = "no NVIDIA driver" if no_driver else "nvmlInit failed"
        raise NvmlUnavailable(
            f"NVML is not available on this machine ({reason}: {err}); {_INSTEAD}"
        ) from err


def _shutdown(api: Any) -> None:
    # A failed shutdown must not hide the topology or the error being returned.
    with contextlib.suppress(api.NVMLError):
        api.nvmlShutdown()


def _read(api: Any, name: str) -> NodeTopology:
    count = int(api.nvmlDeviceGetCount())
    if count < 1:
        raise NvmlUnavailable(f"NVML found no NVIDIA GPU on this machine; {_INSTEAD}")
    handles = [api.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    index_of = {
        normalise_bus_id(api.nvmlDeviceGetPciInfo(h).busId): i for i, h in enumerate(handles)
    }
    nvlinks = [_nvlinks(api, h, index_of) for h in handles]
    paths = _pcie_paths(api)
    one_switch = (api.NVML_TOPOLOGY_INTERNAL, api.NVML_TOPOLOGY_SINGLE)

    links: list[list[Link | None]] = [[None] * count for _ in range(count)]
    same_switch = [[i == j for j in range(count)] for i in range(count)]
    for i in range(count):
        for j in range(i + 1, count):
            level = int(api.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j]))
            same_switch[i][j] = same_switch[j][i] = level in one_switch
            n = _nvlink_count(nvlinks, i, j)
            # NVLink, when present, carries the traffic whatever the PCIe path; an unknown
            # (newer) PCIe level is taken as the slowest so that placement never overrates it.
            link = Link(Path.NV, n) if n else Link(paths.get(level, Path.SYS))
            links[i][j] = links[j][i] = link

    words = max(_MIN_CPU_WORDS, math.ceil((os.cpu_count() or 1) / 64))
    cpus = [_cpu_affinity(api, h, words) for h in handles]
    numa = [_numa_node(api, h, words) for h in handles]
    if None in numa:
        numa = _numa_from_cpus(cpus)
    if not name:
        product = api.nvmlDeviceGetName(handles[0])
        product = product.decode() if isinstance(product, bytes) else str(product)
        name = f"{count}x {product}"
    return NodeTopology(
        links=tuple(tuple(row) for row in links),
        numa=tuple(numa),
        switch=tuple(_first_member_labels(same_switch)),
        cpu_affinity=tuple(cpu_list(c) or None for c in cpus),
        name=name,
    )


def _pcie_paths(api: Any) -> dict[int, Path]:
    return {
        api.NVML_TOPOLOGY_INTERNAL: Path.PIX,  # two GPUs on one board, behind its own switch
        api.NVML_TOPOLOGY_SINGLE: Path.PIX,
        api.NVML_TOPOLOGY_MULTIPLE: Path.PXB,
        api.NVML_TOPOLOGY_HOSTBRIDGE: Path.PHB,
        api.NVML_TOPOLOGY_NODE: Path.NODE,
        api.NVML_TOPOLOGY_SYSTEM: Path.SYS,
    }


def _nvlinks(api: Any, handle: Any, index_of: dict[str, int]) -> tuple[Counter[int], int]:
    """Active NVLinks of one GPU: the count to each peer GPU index, and the count to NVSwitches."""
    peers: Counter[int] = Counter()
    to_switch = 0
    # pynvml's unversioned function already calls the C _v2 symbol; some bindings name it _v2.
    remote_pci = getattr(api, "nvmlDeviceGetNvLinkRemotePciInfo_v2", None)
    remote_pci = remote_pci or api.nvmlDeviceGetNvLinkRemotePciInfo
    remote_type = getattr(api, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
    for link in range(api.NVML_NVLINK_MAX_LINKS):
        try:
            if api.nvmlDeviceGetNvLinkState(handle, link) != api.NVML_FEATURE_ENABLED:
                continue
            peer = index_of.get(normalise_bus_id(remote_pci(handle, link).busId))
        except api.NVMLError:
            continue  # NOT_SUPPORTED: a PCIe card, or a link number past this GPU's last link
        kind = None
        if remote_type is not None:
            with contextlib.suppress(api.NVMLError):
                kind = int(remote_type(handle, link))
        if kind == api.NVML_NVLINK_DEVICE_TYPE_SWITCH or (kind is None and peer is None):
            to_switch += 1
        elif peer is not None and kind in (None, api.NVML_NVLINK_DEVICE_TYPE_GPU):
            peers[peer] += 1
        # Anything else (an IBM NPU: NVLink to a POWER CPU) joins no two GPUs.
    return peers, to_switch


def _nvlink_count(nvlinks: Sequence[tuple[Counter[int], int]], i: int, j: int) -> int:
    (peers_i, switch_i), (peers_j, switch_j) = nvlinks[i], nvlinks[j]
    # A link counts only when both ends report it up. Through NVSwitches every GPU reaches every
    # other, limited by the GPU with fewer switch links; that is the NV<n> nvidia-smi prints.
    return min(peers_i[j], peers_j[i]) + min(switch_i, switch_j)


def _cpu_affinity(api: Any, handle: Any, words: int) -> tuple[int, ...]:
    try:
        return _bits(api.nvmlDeviceGetCpuAffinity(handle, words))
    except api.NVMLError:
        return ()


def _numa_node(api: Any, handle: Any, words: int) -> int | None:
    # Answered only where the GPU is itself a NUMA node (Grace Hopper, ...); NOT_SUPPORTED on
    # x86 hosts, and missing from drivers and bindings older than the function.
    get_id = getattr(api, "nvmlDeviceGetNumaNodeId", None)
    if get_id is not None:
        with contextlib.suppress(api.NVMLError):
            node = int(get_id(handle))
            if node >= 0:
                return node
    # Elsewhere: the NUMA node whose memory is nearest to the GPU.
    get_memory = getattr(api, "nvmlDeviceGetMemoryAffinity", None)
    if get_memory is not None:
        with contextlib.suppress(api.NVMLError):
            nodes = _bits(get_memory(handle, words, api.NVML_AFFINITY_SCOPE_NODE))
            if len(nodes) == 1:
                return nodes[0]
    return None


def _numa_from_cpus(cpus: Sequence[tuple[int, ...]]) -> list[int | None]:
    """NUMA labels from CPU affinity: one per distinct CPU set, numbered by its lowest CPU."""
    groups = sorted({c for c in cpus if c})
    return [groups.index(c) if c else None for c in cpus]


def _first_member_labels(joined: Sequence[Sequence[bool]]) -> list[int]:
    """Label each GPU with the group of the first GPU it is joined to (an equivalence relation)."""
    labels: list[int] = []
    for i, row in enumerate(joined):
        first = next(j for j in range(i + 1) if row[j])
        labels.append(labels[first] if first < i else len(set(labels)))
    return labels


def _bits(mask_words: Iterable[int]) -> tuple[int, ...]:
    """The set bits of a mask given as 64-bit words, least significant word first."""
    return tuple(
        64 * w + b for w, word in enumerate(mask_words) for b in range(64) if int(word) >> b & 1
    )
