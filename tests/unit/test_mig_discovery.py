"""MIG mode and MIG devices through NVML, against the fake NVML (no GPU on the CI machines)."""

from __future__ import annotations

import pytest

from tests.fakes.fake_nvml import FakeMig, FakeNvml
from toposched.discovery.mig import MigDevice, discover_mig, mig_gpus
from toposched.discovery.nvml import NvmlUnavailable
from toposched.topology.mig import mig_table
from toposched.topology.presets import preset
from toposched.topology.resources import Hardware

H100 = mig_table("H100", 80 * 2**30)
assert H100 is not None


def h100_machine(**options: object) -> FakeNvml:
    fake = FakeNvml.from_topology(preset("hgx-h100"), nvswitch=True, **options)  # type: ignore[arg-type]
    fake.gpus[0].mig = FakeMig.carved(H100, [("3g.40gb", 4), ("1g.10gb", 0), ("2g.20gb", 2)])
    fake.gpus[1].mig = FakeMig.carved(H100, [], gpu=1)
    fake.gpus[2].mig = FakeMig(enabled=False, pending=True)  # on after the next reset
    for gpu in fake.gpus[3:]:
        gpu.mig = FakeMig(enabled=False)
    return fake


@pytest.mark.parametrize("bytes_strings", [False, True])
def test_an_h100_in_mig_mode_is_discovered_with_its_instances(bytes_strings: bool) -> None:
    fake = h100_machine(bytes_strings=bytes_strings)
    states = discover_mig(fake)
    assert len(states) == 8
    first = states[0]
    assert first is not None and first.enabled and first.table is H100
    assert first.devices == (
        MigDevice(fake.gpus[0].mig.instances[1].uuid, "1g.10gb", 19, 0, 1),  # type: ignore[union-attr]
        MigDevice(fake.gpus[0].mig.instances[2].uuid, "2g.20gb", 14, 2, 2),  # type: ignore[union-attr]
        MigDevice(fake.gpus[0].mig.instances[0].uuid, "3g.40gb", 9, 4, 4),  # type: ignore[union-attr]
    )
    assert all(d.uuid.startswith("MIG-") for d in first.devices)
    assert states[1] is not None and states[1].enabled and states[1].devices == ()
    assert states[2] is not None and not states[2].enabled and states[2].pending
    assert mig_gpus(states) == (0, 1)
    assert fake.initialised == 0  # every nvmlInit has its nvmlShutdown
    # What discovery finds is what a node's hardware says of MIG mode.
    assert Hardware("H100", 81559 * 2**20, mig=mig_gpus(states)).mig_mask == 0b11


def test_gpus_without_mig_have_no_state() -> None:
    fake = FakeNvml.from_topology(preset("dgx1-v100"), product="Tesla V100-SXM2-16GB")
    assert discover_mig(fake) == (None,) * 8
    assert mig_gpus(discover_mig(fake)) == ()


def test_no_driver_is_said_as_for_the_topology() -> None:
    with pytest.raises(NvmlUnavailable, match="no NVIDIA driver"):
        discover_mig(h100_machine(driver_loaded=False))
