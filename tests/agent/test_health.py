"""NvmlHealth on its own: GPUs that cannot report events, bindings without event sets, and an
NVML that fails and comes back (the XIDs seen before are kept)."""

from __future__ import annotations

import pytest

from tests.agent.conftest import DGX1
from tests.agent.fakes import HealthNvml
from tests.fakes.fake_nvml import NVML_ERROR_NOT_SUPPORTED, FakeHandle, FakeNvmlError
from toposched.agent.health import NvmlHealth
from toposched.discovery.nvml import NvmlUnavailable


class NoEventsOnGpu0(HealthNvml):
    def nvmlDeviceRegisterEvents(self, handle: FakeHandle, types: int, events: object) -> None:
        if handle.index == 0:
            raise FakeNvmlError(NVML_ERROR_NOT_SUPPORTED)
        super().nvmlDeviceRegisterEvents(handle, types, events)


def test_a_gpu_that_cannot_report_events_is_still_checked() -> None:
    nvml = NoEventsOnGpu0.from_topology(DGX1)
    health = NvmlHealth(nvml)
    assert health.check() == frozenset()
    assert nvml.registered == set(range(1, 8))
    nvml.lost.add(0)
    assert health.check() == {0}


def test_a_binding_without_event_sets_checks_reachability_alone() -> None:
    nvml = HealthNvml.from_topology(DGX1, missing={"nvmlEventSetCreate"})
    health = NvmlHealth(nvml)
    assert health.check() == frozenset()
    nvml.lost.add(7)
    assert health.check() == {7}


def test_nvml_failing_raises_and_the_xids_seen_are_kept_when_it_answers_again() -> None:
    nvml = HealthNvml.from_topology(DGX1)
    health = NvmlHealth(nvml)
    health.check()
    nvml.xid(2, 94)  # a contained ECC error: the GPU needs a reset
    assert health.check() == {2}
    nvml.failing = True
    with pytest.raises(NvmlUnavailable, match="NVML failed"):
        health.check()
    assert nvml.initialised == 0  # the failed session was closed; the next check opens one
    nvml.failing = False
    assert health.check() == {2}
    assert nvml.initialised == 1
    health.close()
    assert nvml.initialised == 0
