"""A fake `pynvml` that answers NVML topology and GPU queries from a NodeTopology."""

from __future__ import annotations

import ctypes
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from toposched.topology.links import Path
from toposched.topology.mig import MigTable
from toposched.topology.node import NodeTopology

# Values as in nvml.h / pynvml.
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_IN_USE = 19
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02
H100_MEMORY = 81559 * 2**20  # what NVML reports for an H100 80GB HBM3

_ERROR_TEXT = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_IN_USE: "In use by another client",
    NVML_ERROR_INSUFFICIENT_RESOURCES: "Insufficient Resources",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
}


class FakeNvmlError(Exception):
    """pynvml's NVMLError: an NVML return code in `value`, its text as the message."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _ERROR_TEXT.get(self.value, f"NVML Error with code {self.value}")


@dataclass(frozen=True)
class FakeLink:
    """One NVLink slot of a GPU: the PCI bus id and device type at its far end, and its state."""

    remote_bus_id: str
    remote_type: int = NVML_NVLINK_DEVICE_TYPE_GPU
    up: bool = True


@dataclass(frozen=True)
class FakeMigInstance:
    """One MIG device: its GPU instance's id, profile ID (nvidia-smi's) and placement in
    memory slices, and the MIG device's UUID; `compute`: whether it has its compute instance
    (NVML lists a MIG device only then)."""

    gi_id: int
    profile_id: int
    start: int
    size: int
    uuid: str
    compute: bool = True


@dataclass
class FakeMig:
    """A MIG-capable GPU's mode (current and pending, as nvmlDeviceGetMigMode gives them)
    and its GPU instances; `table` (if given) is what creating an instance is checked against."""

    enabled: bool = True
    pending: bool | None = None  # None: as `enabled`
    instances: list[FakeMigInstance] = field(default_factory=list)
    table: MigTable | None = None

    @property
    def devices(self) -> list[FakeMigInstance]:
        """The MIG devices: the GPU instances with a compute instance, in NVML's order."""
        return [inst for inst in self.instances if inst.compute]

    @classmethod
    def carved(cls, table: MigTable, instances: Sequence[tuple[str, int]], gpu: int = 0) -> FakeMig:
        """A GPU in MIG mode with instances (profile name, start) of `table`, UUIDs made up
        from the GPU's index and the instance's."""
        out = []
        for k, (name, start) in enumerate(instances):
            profile = table.profile(name)
            if profile is None:
                raise ValueError(f"{table.model} has no profile {name!r}")
            uuid = f"MIG-{gpu:08x}-{k:04x}-4000-8000-{start:012x}"
            out.append(FakeMigInstance(k + 1, profile.profile_id, start, profile.slices, uuid))
        return cls(True, None, out, table)


@dataclass
class FakeGpu:
    """One GPU; link slots past the end of `nvlinks` answer NOT_SUPPORTED, as on real GPUs."""

    bus_id: str
    name: str = "NVIDIA H100 80GB HBM3"
    nvlinks: list[FakeLink] = field(default_factory=list)
    numa: int | None = None
    cpus: frozenset[int] = frozenset()
    memory: int | None = H100_MEMORY  # bytes; None: NOT_SUPPORTED, as on some virtual GPUs
    # What a sample of it reads: percent busy, bytes of memory in use, pids of its processes.
    busy: float = 0.0
    memory_used: int = 0
    pids: list[int] = field(default_factory=list)
    mig: FakeMig | None = None  # None: not MIG-capable (nvmlDeviceGetMigMode: NOT_SUPPORTED)
    # Bytes each pid uses, as NVML's per-process reading; pids not here split the rest evenly.
    process_memory: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class FakeUtilization:
    """pynvml's c_nvmlUtilization_t: percents."""

    gpu: int
    memory: int


@dataclass(frozen=True)
class FakeProcess:
    """pynvml's c_nvmlProcessInfo_t (the fields read)."""

    pid: int
    usedGpuMemory: int  # pynvml's field name


@dataclass(frozen=True)
class FakeHandle:
    index: int


@dataclass(frozen=True)
class FakeMigHandle:
    """A MIG device's handle: its GPU and its place among the GPU's MIG devices."""

    gpu: int
    index: int


@dataclass(frozen=True)
class FakeGpuInstance:
    gpu: int
    gi_id: int


@dataclass(frozen=True)
class FakePlacement:
    """pynvml's c_nvmlGpuInstancePlacement_t: memory slices."""

    start: int
    size: int


@dataclass(frozen=True)
class FakeGpuInstanceInfo:
    """pynvml's c_nvmlGpuInstanceInfo_t (the fields read)."""

    id: int
    profileId: int  # pynvml's field name
    placement: FakePlacement


@dataclass(frozen=True)
class FakeComputeInstance:
    gpu: int
    gi_id: int
    ci_id: int


@dataclass(frozen=True)
class FakeIdInfo:
    """What is read of pynvml's compute instance info and profile info structures: the id."""

    id: int


class FakePlacementArg(ctypes.Structure):
    """pynvml's c_nvmlGpuInstancePlacement_t, a ctypes structure as there."""

    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


@dataclass(frozen=True)
class FakePciInfo:
    busId: str | bytes  # pynvml's field name


@dataclass(frozen=True)
class FakeMemory:
    """pynvml's c_nvmlMemory_t: bytes."""

    total: int
    free: int
    used: int


class FakeNvml:
    """A fake of the `pynvml` module (the subset discovery uses: the topology, each GPU's name
    and memory, MIG mode and instances; and creating and destroying MIG instances, which the
    server does for MIG jobs), not real NVML.

    It is used because no NVIDIA GPU or driver is on the CI machines. Build one with
    `from_topology`; `levels[i][j]` is the NVML_TOPOLOGY_* level between GPU i and GPU j.
    Options model the machines and bindings discovery must cope with: no driver
    (`driver_loaded=False`), GPUs that are NUMA nodes (`gpus_are_numa_nodes`, else
    nvmlDeviceGetNumaNodeId says NOT_SUPPORTED as on x86), no memory affinity, strings
    returned as bytes (old pynvml), functions absent from the binding (`missing`), and a
    caller who is not root (`root=False`: creating a MIG instance says NO_PERMISSION).
    """

    NVMLError = FakeNvmlError
    NVML_ERROR_UNINITIALIZED = NVML_ERROR_UNINITIALIZED
    NVML_ERROR_INVALID_ARGUMENT = NVML_ERROR_INVALID_ARGUMENT
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_NOT_FOUND = NVML_ERROR_NOT_FOUND
    NVML_ERROR_NO_PERMISSION = NVML_ERROR_NO_PERMISSION
    NVML_ERROR_IN_USE = NVML_ERROR_IN_USE
    NVML_ERROR_INSUFFICIENT_RESOURCES = NVML_ERROR_INSUFFICIENT_RESOURCES
    # nvml.h's compute instance profiles (by compute slices) and engine profile.
    NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE = 0
    NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE = 1
    NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE = 2
    NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE = 3
    NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE = 4
    NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE = 5
    NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE = 6
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0
    c_nvmlGpuInstancePlacement_t = FakePlacementArg
    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_MAX_MIG_DEVICES = 7  # what nvmlDeviceGetMaxMigDeviceCount says of A100s and H100s
    NVML_ERROR_DRIVER_NOT_LOADED = NVML_ERROR_DRIVER_NOT_LOADED
    NVML_ERROR_LIBRARY_NOT_FOUND = NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_TOPOLOGY_INTERNAL = 0
    NVML_TOPOLOGY_SINGLE = 10
    NVML_TOPOLOGY_MULTIPLE = 20
    NVML_TOPOLOGY_HOSTBRIDGE = 30
    NVML_TOPOLOGY_NODE = 40
    NVML_TOPOLOGY_SYSTEM = 50
    NVML_FEATURE_DISABLED = 0
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 18  # as in NVML 12 (H100); NVML 13 raised it to 36
    NVML_NVLINK_DEVICE_TYPE_GPU = NVML_NVLINK_DEVICE_TYPE_GPU
    NVML_NVLINK_DEVICE_TYPE_IBMNPU = NVML_NVLINK_DEVICE_TYPE_IBMNPU
    NVML_NVLINK_DEVICE_TYPE_SWITCH = NVML_NVLINK_DEVICE_TYPE_SWITCH
    NVML_AFFINITY_SCOPE_NODE = 0

    def __init__(
        self,
        gpus: Sequence[FakeGpu],
        levels: Sequence[Sequence[int]],
        *,
        driver_loaded: bool = True,
        gpus_are_numa_nodes: bool = False,
        memory_affinity: bool = True,
        bytes_strings: bool = False,
        missing: Iterable[str] = (),
        minors: Sequence[int] | None = None,
        root: bool = True,
    ) -> None:
        self.gpus = list(gpus)
        # Each GPU's device minor number (/dev/nvidia<minor>): the index unless given, as on
        # most machines; the driver numbers them in its own order, which can differ.
        self.minors = list(minors) if minors is not None else list(range(len(self.gpus)))
        self.levels = [list(row) for row in levels]
        self.driver_loaded = driver_loaded
        self.gpus_are_numa_nodes = gpus_are_numa_nodes
        self.memory_affinity = memory_affinity
        self.bytes_strings = bytes_strings
        self.missing = frozenset(missing)
        self.root = root  # creating and destroying MIG instances needs root (NO_PERMISSION)
        self.initialised = 0  # NVML counts nvmlInit calls; each needs its nvmlShutdown
        self.shutdowns = 0

    def __getattribute__(self, name: str) -> Any:
        # An older pynvml or driver lacks some functions: discovery must probe, not assume.
        if name.startswith("nvml") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    @classmethod
    def from_topology(
        cls,
        topology: NodeTopology,
        *,
        nvswitch: bool = False,
        switch_links: int | None = None,
        switches: int = 4,
        product: str = "NVIDIA H100 80GB HBM3",
        memory: int | None = H100_MEMORY,
        legacy_remote_ids: bool = False,
        **options: Any,
    ) -> FakeNvml:
        """A machine wired as `topology`: an NV<n> pair is n link slots naming the peer's bus id.

        With `nvswitch`, the NVLink pairs of `topology` are replaced by `switch_links` slots per
        GPU (default: its largest NV<n>, else 18) spread over `switches` NVSwitches, as on
        DGX-2, DGX A100 and HGX H100. `legacy_remote_ids` spells the NVLink remote bus ids
        as "0000:0a:00.0" instead of NVML's "00000000:0A:00.0". Every GPU is a `product`
        with `memory` bytes.
        """
        n = topology.size
        bus = [_gpu_bus_id(i) for i in range(n)]
        remote = [_legacy(b) if legacy_remote_ids else b for b in bus]
        slots: list[list[FakeLink]] = [[] for _ in range(n)]
        if nvswitch:
            widest = max((lk.nvlinks for row in topology.links for lk in row if lk), default=0)
            per_gpu = switch_links or widest or 18
            for i in range(n):
                slots[i] = [
                    FakeLink(_switch_bus_id(s % switches), NVML_NVLINK_DEVICE_TYPE_SWITCH)
                    for s in range(per_gpu)
                ]
        else:
            for i, row in enumerate(topology.links):
                for j, link in enumerate(row):
                    if link is not None and link.is_nvlink:
                        slots[i] += [FakeLink(remote[j])] * link.nvlinks
        for i, gpu_slots in enumerate(slots):
            if len(gpu_slots) > cls.NVML_NVLINK_MAX_LINKS:
                raise ValueError(
                    f"GPU{i} needs {len(gpu_slots)} NVLink slots, more than "
                    f"{cls.NVML_NVLINK_MAX_LINKS}; use nvswitch=True"
                )
        gpus = [
            FakeGpu(
                bus[i],
                product,
                slots[i],
                topology.numa[i],
                _parse_cpus(topology.cpu_affinity[i]),
                memory,
            )
            for i in range(n)
        ]
        levels = [[_level(topology, i, j) for j in range(n)] for i in range(n)]
        return cls(gpus, levels, **options)

    # --- library ---------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if not self.driver_loaded:
            raise FakeNvmlError(NVML_ERROR_DRIVER_NOT_LOADED)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._check()
        self.initialised -= 1
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._check()
        if not 0 <= index < len(self.gpus):
            raise FakeNvmlError(NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(index)

    # --- device ----------------------------------------------------------------------------

    def nvmlDeviceGetMinorNumber(self, handle: FakeHandle) -> int:
        self._gpu(handle)
        return self.minors[handle.index]

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str | bytes:
        return self._str(self._gpu(handle).name)

    def nvmlDeviceGetUUID(self, handle: FakeHandle | FakeMigHandle) -> str | bytes:
        if isinstance(handle, FakeMigHandle):
            return self._str(self._mig_device(handle).uuid)
        return self._str(f"GPU-{self._gpu(handle).bus_id.replace(':', '').replace('.', '')}")

    # --- MIG ---------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:
        mig = self._gpu(handle).mig
        if mig is None:
            raise FakeNvmlError(NVML_ERROR_NOT_SUPPORTED)
        pending = mig.enabled if mig.pending is None else mig.pending
        return [int(mig.enabled), int(pending)]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeHandle) -> int:
        return self.NVML_MAX_MIG_DEVICES if self._gpu(handle).mig is not None else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeHandle, index: int) -> FakeMigHandle:
        mig = self._gpu(handle).mig
        if mig is None or not mig.enabled:
            raise FakeNvmlError(NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= index < len(mig.devices):
            raise FakeNvmlError(NVML_ERROR_NOT_FOUND)  # as NVML says of an empty slot
        return FakeMigHandle(handle.index, index)

    def nvmlDeviceGetGpuInstanceId(self, handle: FakeMigHandle) -> int:
        return self._mig_device(handle).gi_id

    def nvmlDeviceGetGpuInstanceById(self, handle: FakeHandle, gi_id: int) -> FakeGpuInstance:
        mig = self._gpu(handle).mig
        if mig is None or all(inst.gi_id != gi_id for inst in mig.instances):
            raise FakeNvmlError(NVML_ERROR_NOT_FOUND)
        return FakeGpuInstance(handle.index, gi_id)

    def nvmlGpuInstanceGetInfo(self, gi: FakeGpuInstance) -> FakeGpuInstanceInfo:
        mig = self._gpu(FakeHandle(gi.gpu)).mig
        assert mig is not None
        inst = next(i for i in mig.instances if i.gi_id == gi.gi_id)
        return FakeGpuInstanceInfo(
            inst.gi_id, inst.profile_id, FakePlacement(inst.start, inst.size)
        )

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, handle: FakeHandle, profile_id: int, placement: Any
    ) -> FakeGpuInstance:
        # pynvml passes the placement on as given, and NVML reads it through a pointer: a
        # caller must give ctypes.byref of the structure, not the structure.
        found = getattr(placement, "_obj", None)
        if not isinstance(found, FakePlacementArg):
            raise FakeNvmlError(NVML_ERROR_INVALID_ARGUMENT)
        mig = self._gpu(handle).mig
        if mig is None or not mig.enabled:
            raise FakeNvmlError(NVML_ERROR_NOT_SUPPORTED)
        if not self.root:
            raise FakeNvmlError(NVML_ERROR_NO_PERMISSION)
        start, size = int(found.start), int(found.size)
        if mig.table is not None:
            profile = next((p for p in mig.table.profiles if p.profile_id == profile_id), None)
            if profile is None or profile.slices != size or start not in profile.starts:
                raise FakeNvmlError(NVML_ERROR_INVALID_ARGUMENT)
        if any(i.start < start + size and start < i.start + i.size for i in mig.instances):
            raise FakeNvmlError(NVML_ERROR_INSUFFICIENT_RESOURCES)
        gi_id = max((i.gi_id for i in mig.instances), default=0) + 1
        uuid = f"MIG-{handle.index:08x}-{gi_id:04x}-4000-8000-{start:012x}"
        mig.instances.append(FakeMigInstance(gi_id, profile_id, start, size, uuid, False))
        return FakeGpuInstance(handle.index, gi_id)

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gi: FakeGpuInstance, profile: int, engine: int
    ) -> FakeIdInfo:
        self._gpu_instance(gi)
        return FakeIdInfo(profile)

    def nvmlGpuInstanceCreateComputeInstance(
        self, gi: FakeGpuInstance, profile_id: int
    ) -> FakeComputeInstance:
        mig, inst = self._gpu_instance(gi)
        if not self.root:
            raise FakeNvmlError(NVML_ERROR_NO_PERMISSION)
        if inst.compute:
            raise FakeNvmlError(NVML_ERROR_INSUFFICIENT_RESOURCES)  # one per instance here
        mig.instances[mig.instances.index(inst)] = replace(inst, compute=True)
        return FakeComputeInstance(gi.gpu, gi.gi_id, 0)

    def nvmlComputeInstanceGetInfo(self, ci: FakeComputeInstance) -> FakeIdInfo:
        return FakeIdInfo(ci.ci_id)

    def nvmlGpuInstanceGetComputeInstanceById(
        self, gi: FakeGpuInstance, ci_id: int
    ) -> FakeComputeInstance:
        _, inst = self._gpu_instance(gi)
        if not inst.compute or ci_id != 0:
            raise FakeNvmlError(NVML_ERROR_NOT_FOUND)
        return FakeComputeInstance(gi.gpu, gi.gi_id, ci_id)

    def nvmlComputeInstanceDestroy(self, ci: FakeComputeInstance) -> None:
        mig, inst = self._gpu_instance(FakeGpuInstance(ci.gpu, ci.gi_id))
        if not self.root:
            raise FakeNvmlError(NVML_ERROR_NO_PERMISSION)
        if not inst.compute:
            raise FakeNvmlError(NVML_ERROR_NOT_FOUND)
        mig.instances[mig.instances.index(inst)] = replace(inst, compute=False)

    def nvmlGpuInstanceDestroy(self, gi: FakeGpuInstance) -> None:
        mig, inst = self._gpu_instance(gi)
        if not self.root:
            raise FakeNvmlError(NVML_ERROR_NO_PERMISSION)
        if inst.compute:
            raise FakeNvmlError(NVML_ERROR_IN_USE)  # its compute instance goes first
        mig.instances.remove(inst)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> FakeUtilization:
        gpu = self._gpu(handle)
        return FakeUtilization(round(gpu.busy), 0)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[FakeProcess]:
        gpu = self._gpu(handle)
        own = gpu.process_memory
        rest = [pid for pid in gpu.pids if pid not in own]
        share = max(0, gpu.memory_used - sum(own.values())) // max(1, len(rest))
        return [FakeProcess(pid, own.get(pid, share)) for pid in gpu.pids]

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle) -> FakeMemory:
        memory = self._gpu(handle).memory
        if memory is None:
            raise FakeNvmlError(NVML_ERROR_NOT_SUPPORTED)
        used = self._gpu(handle).memory_used
        return FakeMemory(memory, memory - used, used)

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> FakePciInfo:
        return FakePciInfo(self._str(self._gpu(handle).bus_id))

    def nvmlDeviceGetTopologyCommonAncestor(self, h1: FakeHandle, h2: FakeHandle) -> int:
        self._gpu(h1)
        self._gpu(h2)
        return self.levels[h1.index][h2.index]

    def nvmlDeviceGetNvLinkState(self, handle: FakeHandle, link: int) -> int:
        up = self._slot(handle, link).up
        return self.NVML_FEATURE_ENABLED if up else self.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: FakeHandle, link: int) -> FakePciInfo:
        return FakePciInfo(self._str(self._slot(handle, link).remote_bus_id))

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: FakeHandle, link: int) -> int:
        return self._slot(handle, link).remote_type

    def nvmlDeviceGetNumaNodeId(self, handle: FakeHandle) -> int:
        numa = self._gpu(handle).numa
        if not self.gpus_are_numa_nodes or numa is None:
            raise FakeNvmlError(NVML_ERROR_NOT_SUPPORTED)
        return numa

    def nvmlDeviceGetMemoryAffinity(self, handle: FakeHandle, words: int, scope: int) -> list[int]:
        numa = self._gpu(handle).numa
        if not self.memory_affinity or numa is None or scope != self.NVML_AFFINITY_SCOPE_NODE:
            raise FakeNvmlError(NVML_ERROR_NOT_SUPPORTED)
        return _mask_words({numa}, words)

    def nvmlDeviceGetCpuAffinity(self, handle: FakeHandle, words: int) -> list[int]:
        return _mask_words(self._gpu(handle).cpus, words)

    # --- helpers ---------------------------------------------------------------------------

    def _check(self) -> None:
        if self.initialised < 1:
            raise FakeNvmlError(NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: FakeHandle) -> FakeGpu:
        self._check()
        return self.gpus[handle.index]

    def _mig_device(self, handle: FakeMigHandle) -> FakeMigInstance:
        mig = self._gpu(FakeHandle(handle.gpu)).mig
        if mig is None or not 0 <= handle.index < len(mig.devices):
            raise FakeNvmlError(NVML_ERROR_INVALID_ARGUMENT)
        return mig.devices[handle.index]

    def _gpu_instance(self, gi: FakeGpuInstance) -> tuple[FakeMig, FakeMigInstance]:
        mig = self._gpu(FakeHandle(gi.gpu)).mig
        inst = next((i for i in mig.instances if i.gi_id == gi.gi_id), None) if mig else None
        if mig is None or inst is None:
            raise FakeNvmlError(NVML_ERROR_NOT_FOUND)
        return mig, inst

    def _slot(self, handle: FakeHandle, link: int) -> FakeLink:
        slots = self._gpu(handle).nvlinks
        if not 0 <= link < self.NVML_NVLINK_MAX_LINKS:
            raise FakeNvmlError(NVML_ERROR_INVALID_ARGUMENT)
        if link >= len(slots):
            raise FakeNvmlError(NVML_ERROR_NOT_SUPPORTED)
        return slots[link]

    def _str(self, text: str) -> str | bytes:
        return text.encode() if self.bytes_strings else text


def _gpu_bus_id(i: int) -> str:
    return f"00000000:{0x0A + 2 * i:02X}:00.0"  # NVML's spelling: 8-digit domain, upper case


def _switch_bus_id(k: int) -> str:
    return f"00000000:{0xC4 + k:02X}:00.0"


def _legacy(bus_id: str) -> str:
    return bus_id[4:].lower()  # "00000000:0A:00.0" -> "0000:0a:00.0"


def _level(topology: NodeTopology, i: int, j: int) -> int:
    """The NVML_TOPOLOGY_* level of a pair; under an NVLink pair, the PCIe tree of the preset."""
    link = topology.links[i][j]
    if link is None:
        return FakeNvml.NVML_TOPOLOGY_INTERNAL
    path = link.path
    if path is Path.NV:
        if topology.switches[i] == topology.switches[j]:
            path = Path.PIX
        else:
            path = Path.NODE if topology.sockets[i] == topology.sockets[j] else Path.SYS
    return {
        Path.PIX: FakeNvml.NVML_TOPOLOGY_SINGLE,
        Path.PXB: FakeNvml.NVML_TOPOLOGY_MULTIPLE,
        Path.PHB: FakeNvml.NVML_TOPOLOGY_HOSTBRIDGE,
        Path.NODE: FakeNvml.NVML_TOPOLOGY_NODE,
        Path.SYS: FakeNvml.NVML_TOPOLOGY_SYSTEM,
    }[path]


def _parse_cpus(text: str | None) -> frozenset[int]:
    cpus: set[int] = set()
    for part in (text or "").split(","):
        if part:
            first, _, last = part.partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    return frozenset(cpus)


def _mask_words(bits: Iterable[int], words: int) -> list[int]:
    """Bits as 64-bit words, least significant first; NVML too drops bits past `words` words."""
    mask = [0] * words
    for b in bits:
        if b < 64 * words:
            mask[b // 64] |= 1 << (b % 64)
    return mask
