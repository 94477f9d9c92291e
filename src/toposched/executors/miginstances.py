"""A MIG job's instance through NVML: the one at its placement, or one created and destroyed."""

from __future__ import annotations

import threading
from ctypes import byref
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from toposched.discovery.mig import discover_mig, mig_device_handles, mig_uuid
from toposched.discovery.nvml import NvmlUnavailable, _init, _load, _shutdown


class MigInstanceError(RuntimeError):
    """No MIG instance could be found or made for a job; the message says why."""


@dataclass(frozen=True)
class Created:
    """An instance toposched created for a run (GPU, GPU and compute instance ids): what it
    destroys when the run ends."""

    gpu: int
    gi_id: int
    ci_id: int


class MigInstances:
    """Hands each MIG run the UUID of its instance (GPU, first memory slice, profile) and
    destroys at its end the instances it created. `nvml`: the pynvml module unless given."""

    def __init__(self, nvml: ModuleType | object | None = None) -> None:
        self.nvml = nvml
        self.created: dict[tuple[str, int], Created] = {}
        self._lock = threading.Lock()

    def acquire(self, job: str, attempt: int, gpu: int, start: int, profile: str) -> str:
        """The MIG-UUID of the `profile` instance at memory slice `start` of GPU `gpu`: the one
        NVML lists there, else one created now (kept to be destroyed by `release`)."""
        with self._lock:
            try:
                states = discover_mig(self.nvml)
            except NvmlUnavailable as err:
                raise MigInstanceError(f"cannot read GPU {gpu}'s MIG instances: {err}") from None
            state = states[gpu] if 0 <= gpu < len(states) else None
            if state is None or not state.enabled or state.table is None:
                raise MigInstanceError(f"GPU {gpu} is not in MIG mode (nvidia-smi -i {gpu} -mig 1)")
            for device in state.devices:
                if device.start == start and device.profile == profile:
                    return device.uuid
            wanted = state.table.profile(profile)
            if wanted is None:
                raise MigInstanceError(f"GPU {gpu} ({state.table.model}) has no profile {profile}")
            uuid, made = self._create(gpu, start, wanted.profile_id, wanted.slices, wanted.compute)
            self.created[(job, attempt)] = made
            return uuid

    def release(self, job: str, attempt: int) -> str | None:
        """Destroy the instance created for this run, if any; why it could not be, if not."""
        with self._lock:
            made = self.created.pop((job, attempt), None)
            if made is None:
                return None
            api = _load(self.nvml)
            try:
                _init(api)
            except NvmlUnavailable as err:
                return str(err)
            try:
                handle = api.nvmlDeviceGetHandleByIndex(made.gpu)
                gi = api.nvmlDeviceGetGpuInstanceById(handle, made.gi_id)
                api.nvmlComputeInstanceDestroy(
                    api.nvmlGpuInstanceGetComputeInstanceById(gi, made.ci_id)
                )
                api.nvmlGpuInstanceDestroy(gi)
            except api.NVMLError as err:
                return f"could not destroy GPU {made.gpu}'s MIG instance {made.gi_id}: {err}"
            finally:
                _shutdown(api)
            return None

    def _create(
        self, gpu: int, start: int, profile_id: int, slices: int, compute: int
    ) -> tuple[str, Created]:
        """A GPU instance of `profile_id` placed at `start`, then its one compute instance
        using all its compute slices; its MIG device's UUID."""
        api = _load(self.nvml)
        _init(api)
        gi: Any = None
        ci: Any = None
        try:
            handle = api.nvmlDeviceGetHandleByIndex(gpu)
            placement = api.c_nvmlGpuInstancePlacement_t()
            placement.start, placement.size = start, slices
            step = "create the GPU instance"
            # pynvml hands the placement on as given, and NVML takes a pointer to it.
            gi = api.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile_id, byref(placement))
            step = "create its compute instance"
            ci_profile = getattr(api, f"NVML_COMPUTE_INSTANCE_PROFILE_{compute}_SLICE")
            info = api.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, ci_profile, api.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
            )
            ci = api.nvmlGpuInstanceCreateComputeInstance(gi, info.id)
            gi_id = int(api.nvmlGpuInstanceGetInfo(gi).id)
            ci_id = int(api.nvmlComputeInstanceGetInfo(ci).id)
            step = "find its MIG device"
            uuid = _device_uuid(api, handle, gi_id)
        except api.NVMLError as err:
            _destroy_quietly(api, gi, ci)
            raise MigInstanceError(
                f"could not {step} (profile ID {profile_id} at memory slice {start}) on GPU "
                f"{gpu}: {err}{_hint(api, err.value)}"
            ) from None
        finally:
            _shutdown(api)
        return uuid, Created(gpu, gi_id, ci_id)


def _hint(api: Any, code: int) -> str:
    """What NVML's refusal most likely means: creating instances needs root and MIG mode."""
    if code == getattr(api, "NVML_ERROR_NO_PERMISSION", None):
        return " (creating MIG instances needs root)"
    if code == api.NVML_ERROR_NOT_SUPPORTED:
        return " (is MIG mode enabled on it?)"
    return ""


def _device_uuid(api: Any, handle: Any, gi_id: int) -> str:
    for device in mig_device_handles(api, handle):
        if int(api.nvmlDeviceGetGpuInstanceId(device)) == gi_id:
            return mig_uuid(api, device)
    raise api.NVMLError(api.NVML_ERROR_NOT_FOUND)


def _destroy_quietly(api: Any, gi: Any, ci: Any) -> None:
    """Undo a half-made instance (its compute instance, then it); what cannot be is left."""
    for destroy, made in ((api.nvmlComputeInstanceDestroy, ci), (api.nvmlGpuInstanceDestroy, gi)):
        if made is not None:
            try:
                destroy(made)
            except api.NVMLError:
                return
