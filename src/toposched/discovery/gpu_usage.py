"""How busy each GPU is, through NVML: utilization, memory in use, and the processes on it."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from toposched.discovery.nvml import NvmlUnavailable, _load


@dataclass(frozen=True)
class GpuUsage:
    """One GPU at one sample: percent of the last sample period a kernel ran (NVML's
    utilization.gpu), bytes of memory in use and in all, the pids of processes on it, and the
    bytes each compute process uses where NVML says (pid, bytes)."""

    index: int
    busy_pct: float
    memory_used: int
    memory_total: int
    pids: tuple[int, ...]
    process_memory: tuple[tuple[int, int], ...] = ()


class NvmlUsage:
    """Samples every GPU; keeps one NVML session open between samples (nvmlInit is slow)."""

    def __init__(self, nvml: ModuleType | object | None = None) -> None:
        self.api: Any = _load(nvml)
        self._open = False

    def sample(self) -> tuple[GpuUsage, ...]:
        """Every GPU now, in index order; NvmlUnavailable if NVML fails (the session is closed
        and opened again on the next sample)."""
        api = self.api
        try:
            if not self._open:
                api.nvmlInit()
                self._open = True
            count = int(api.nvmlDeviceGetCount())
            return tuple(self._gpu(i, api.nvmlDeviceGetHandleByIndex(i)) for i in range(count))
        except api.NVMLError as err:
            self.close()
            raise NvmlUnavailable(f"NVML failed while sampling GPU utilization: {err}") from err

    def _gpu(self, index: int, handle: Any) -> GpuUsage:
        api = self.api
        busy = float(api.nvmlDeviceGetUtilizationRates(handle).gpu)
        memory = api.nvmlDeviceGetMemoryInfo(handle)
        pids: list[int] = []
        used: dict[int, int] = {}
        # Compute (CUDA) and graphics processes; a binding or GPU without one of the calls
        # reports what the other finds.
        for name in (
            "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetGraphicsRunningProcesses",
        ):
            call = getattr(api, name, None)
            if call is None:
                continue
            with contextlib.suppress(api.NVMLError):
                for process in call(handle):
                    pids.append(int(process.pid))
                    # None where NVML cannot say (a process of another container under
                    # some drivers, or Windows WDDM): unknown, not zero.
                    if getattr(process, "usedGpuMemory", None) is not None:
                        used[int(process.pid)] = used.get(int(process.pid), 0) + int(
                            process.usedGpuMemory
                        )
        return GpuUsage(
            index,
            busy,
            int(memory.used),
            int(memory.total),
            tuple(sorted(set(pids))),
            tuple(sorted(used.items())),
        )

    def close(self) -> None:
        if self._open:
            self._open = False
            with contextlib.suppress(self.api.NVMLError):
                self.api.nvmlShutdown()


def open_usage(nvml: ModuleType | object | None = None) -> NvmlUsage | None:
    """An NvmlUsage if NVML answers a first sample here, else None (no driver, no GPU, no
    pynvml): the caller falls back to its stand-in."""
    try:
        usage = NvmlUsage(nvml)
        usage.sample()
    except NvmlUnavailable:
        return None
    return usage
