"""GPU health through NVML: critical XID events, and GPUs that NVML can no longer reach.

The health of each GPU is read every poll (`NvmlHealth.check`): a GPU is unhealthy while NVML
answers an error about it (GPU_IS_LOST, RESET_REQUIRED ...) and healthy again once it answers,
and unhealthy for good once it reported a critical XID (as NVIDIA's device plugin does: the GPU
needs a reset, and the agent restarted after it, to be trusted again). XIDs that an application
causes on its own (13, 31, 43, 45, 68, 109: illegal address, page fault, a killed context) are
not the GPU's fault and are ignored. When NVML itself fails, `check` raises NvmlUnavailable:
the publisher then marks the node's topology stale.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from toposched.discovery.nvml import NvmlUnavailable

log = logging.getLogger(__name__)

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
# nvml.h values, for bindings that lack the names.
_XID_CRITICAL_ERROR = 0x8
_ERROR_NOT_SUPPORTED = 3
_ERROR_TIMEOUT = 10


class NvmlHealth:
    """Polls NVML for failed GPUs; keeps its own NVML session (and XID event set) between polls."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.xid_failed: set[int] = set()
        self._events: Any = None
        self._open = False

    def check(self) -> frozenset[int]:
        """The indices of the GPUs that are unhealthy now; NvmlUnavailable if NVML failed."""
        api = self.nvml
        try:
            if not self._open:
                self._start()
            count = int(api.nvmlDeviceGetCount())
            self._drain_xids()
            lost = {i for i in range(count) if not self._answers(i)}
        except api.NVMLError as err:
            self.close()
            raise NvmlUnavailable(f"NVML failed while checking GPU health: {err}") from err
        return frozenset(lost | {i for i in self.xid_failed if i < count})

    def close(self) -> None:
        api = self.nvml
        if self._events is not None:
            with contextlib.suppress(api.NVMLError, AttributeError):
                api.nvmlEventSetFree(self._events)
            self._events = None
        if self._open:
            self._open = False
            with contextlib.suppress(api.NVMLError):
                api.nvmlShutdown()

    def _start(self) -> None:
        api = self.nvml
        api.nvmlInit()
        self._open = True
        if not hasattr(api, "nvmlEventSetCreate"):
            log.warning("this NVML binding has no event sets: XID errors are not watched")
            return
        self._events = api.nvmlEventSetCreate()
        xid = getattr(api, "nvmlEventTypeXidCriticalError", _XID_CRITICAL_ERROR)
        for i in range(int(api.nvmlDeviceGetCount())):
            try:
                api.nvmlDeviceRegisterEvents(api.nvmlDeviceGetHandleByIndex(i), xid, self._events)
            except api.NVMLError as err:
                # Some GPUs (and vGPUs) cannot report events; their other failures still show.
                log.warning("GPU%d: XID events cannot be watched (%s)", i, err)

    def _drain_xids(self) -> None:
        api = self.nvml
        if self._events is None:
            return
        timeout = getattr(api, "NVML_ERROR_TIMEOUT", _ERROR_TIMEOUT)
        while True:
            try:
                event = api.nvmlEventSetWait_v2(self._events, 0)
            except api.NVMLError as err:
                if err.value == timeout:
                    return
                raise
            xid = int(event.eventData)
            if xid in APPLICATION_XIDS:
                continue
            gpu = int(api.nvmlDeviceGetIndex(event.device))
            if gpu not in self.xid_failed:
                log.warning("GPU%d reported critical XID %d: marked unhealthy", gpu, xid)
            self.xid_failed.add(gpu)

    def _answers(self, gpu: int) -> bool:
        api = self.nvml
        not_supported = getattr(api, "NVML_ERROR_NOT_SUPPORTED", _ERROR_NOT_SUPPORTED)
        try:
            api.nvmlDeviceGetPciInfo(api.nvmlDeviceGetHandleByIndex(gpu))
        except api.NVMLError as err:
            return bool(err.value == not_supported)
        return True
