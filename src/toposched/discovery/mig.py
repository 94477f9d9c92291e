"""Each GPU's MIG mode and MIG devices (UUID, profile, memory-slice placement) through NVML."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from toposched.discovery.nvml import NvmlUnavailable, _gpu_info, _init, _load, _shutdown
from toposched.topology.mig import MIG_TABLES, MigTable, mig_table
from toposched.topology.resources import gpu_type_from_product

_MIG_TYPES = tuple(dict.fromkeys(t.gpu_type for t in MIG_TABLES))


@dataclass(frozen=True)
class MigDevice:
    """One MIG device: what CUDA_VISIBLE_DEVICES names it by (`MIG-...`), its GPU instance's
    profile (`3g.40gb`; "" where the GPU has no table here) and nvidia-smi's profile ID, and
    where the instance lies (first memory slice, slices)."""

    uuid: str
    profile: str
    profile_id: int
    start: int
    slices: int


@dataclass(frozen=True)
class MigState:
    """One GPU: whether MIG mode is on now, and after the next reset (`pending`); its table
    (None: not MIG-capable, or a model without a table here) and its MIG devices by start."""

    enabled: bool
    pending: bool
    table: MigTable | None
    devices: tuple[MigDevice, ...] = ()


def discover_mig(nvml: ModuleType | object | None = None) -> tuple[MigState | None, ...]:
    """Each GPU's MIG state in NVML index order (None: the GPU has no MIG mode).
    NvmlUnavailable as discovery.nvml's functions."""
    api = _load(nvml)
    _init(api)
    try:
        count = int(api.nvmlDeviceGetCount())
        return tuple(_state(api, api.nvmlDeviceGetHandleByIndex(i)) for i in range(count))
    except api.NVMLError as err:
        raise NvmlUnavailable(f"NVML failed while reading MIG devices ({err})") from err
    finally:
        _shutdown(api)


def mig_gpus(states: tuple[MigState | None, ...]) -> tuple[int, ...]:
    """The GPUs in MIG mode now, as Hardware.mig lists them."""
    return tuple(i for i, state in enumerate(states) if state is not None and state.enabled)


def mig_device_handles(api: Any, handle: Any) -> Iterator[Any]:
    """The MIG devices of GPU `handle` (in MIG mode), in NVML's slot order."""
    for index in range(int(api.nvmlDeviceGetMaxMigDeviceCount(handle))):
        try:
            device = api.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except api.NVMLError as err:
            if err.value == api.NVML_ERROR_NOT_FOUND:
                continue  # a slot with no MIG device
            raise
        yield device


def mig_uuid(api: Any, device: Any) -> str:
    """A MIG device's UUID (`MIG-...`), as the binding gives it, bytes or str."""
    uuid = api.nvmlDeviceGetUUID(device)
    return uuid.decode() if isinstance(uuid, bytes) else str(uuid)


def _state(api: Any, handle: Any) -> MigState | None:
    try:
        current, pending = api.nvmlDeviceGetMigMode(handle)
    except api.NVMLError as err:
        if err.value == api.NVML_ERROR_NOT_SUPPORTED:
            return None  # a GPU before Ampere, or one without MIG
        raise
    info = _gpu_info(api, handle)
    table = mig_table(gpu_type_from_product(info.product, _MIG_TYPES), info.memory)
    enabled = int(current) == api.NVML_DEVICE_MIG_ENABLE
    if not enabled:
        return MigState(False, int(pending) == api.NVML_DEVICE_MIG_ENABLE, table)
    devices = [_device(api, handle, device, table) for device in mig_device_handles(api, handle)]
    devices.sort(key=lambda d: d.start)
    return MigState(True, int(pending) == api.NVML_DEVICE_MIG_ENABLE, table, tuple(devices))


def _device(api: Any, handle: Any, device: Any, table: MigTable | None) -> MigDevice:
    uuid = mig_uuid(api, device)
    gi = api.nvmlDeviceGetGpuInstanceById(handle, api.nvmlDeviceGetGpuInstanceId(device))
    info = api.nvmlGpuInstanceGetInfo(gi)
    profile_id = int(info.profileId)
    start, slices = int(info.placement.start), int(info.placement.size)
    name = ""
    if table is not None:
        name = next(
            (p.name for p in table.profiles if p.profile_id == profile_id and p.slices == slices),
            "",
        )
    return MigDevice(uuid, name, profile_id, start, slices)
