"""A MIG job's instance through NVML (executors/miginstances.py), against the fake NVML: the
one listed at its placement is handed over, else one is created and destroyed at the end."""

from __future__ import annotations

import pytest

from tests.fakes.fake_nvml import FakeMig, FakeNvml
from toposched.discovery.mig import discover_mig
from toposched.executors.miginstances import MigInstanceError, MigInstances
from toposched.topology.mig import table_for
from toposched.topology.presets import preset

H100 = table_for("H100", 80 * 2**30)


def machine(**options: object) -> FakeNvml:
    fake = FakeNvml.from_topology(preset("hgx-h100"), nvswitch=True, **options)  # type: ignore[arg-type]
    fake.gpus[0].mig = FakeMig.carved(H100, [("3g.40gb", 4)])
    fake.gpus[1].mig = FakeMig.carved(H100, [], gpu=1)
    fake.gpus[2].mig = FakeMig(enabled=False, table=H100)
    return fake


def listed(fake: FakeNvml, gpu: int) -> list[tuple[str, int, str]]:
    state = discover_mig(fake)[gpu]
    assert state is not None
    return [(d.profile, d.start, d.uuid) for d in state.devices]


def test_the_instance_nvml_lists_at_the_placement_is_handed_over_and_kept() -> None:
    fake = machine()
    before = listed(fake, 0)
    mig = MigInstances(fake)
    uuid = mig.acquire("a", 1, 0, 4, "3g.40gb")
    assert uuid == fake.gpus[0].mig.instances[0].uuid  # type: ignore[union-attr]
    assert mig.release("a", 1) is None
    assert listed(fake, 0) == before  # not toposched's: it stays
    assert fake.initialised == 0


def test_where_none_is_listed_one_is_created_there_and_destroyed_at_the_end() -> None:
    fake = machine()
    mig = MigInstances(fake)
    uuid = mig.acquire("a", 1, 1, 0, "3g.40gb")
    assert listed(fake, 1) == [("3g.40gb", 0, uuid)]
    assert uuid.startswith("MIG-")
    other = mig.acquire("b", 1, 1, 4, "3g.40gb")
    assert other != uuid
    assert [start for _, start, _ in listed(fake, 1)] == [0, 4]
    assert mig.release("a", 1) is None
    assert listed(fake, 1) == [("3g.40gb", 4, other)]
    assert mig.release("b", 1) is None
    assert fake.gpus[1].mig.instances == []  # type: ignore[union-attr]
    assert mig.release("b", 1) is None  # once only
    assert fake.initialised == 0


def test_a_different_profile_at_the_start_is_not_taken_for_it() -> None:
    fake = machine()
    mig = MigInstances(fake)
    # GPU 0's memory slices 4-7 hold a 3g.40gb: a 1g.10gb at 4 overlaps it, and NVML says so.
    with pytest.raises(MigInstanceError, match=r"could not create the GPU instance .*GPU 0"):
        mig.acquire("a", 1, 0, 4, "1g.10gb")
    assert len(listed(fake, 0)) == 1


def test_without_root_creation_fails_saying_so_and_leaves_nothing() -> None:
    fake = machine(root=False)
    with pytest.raises(MigInstanceError, match="needs root"):
        MigInstances(fake).acquire("a", 1, 1, 0, "3g.40gb")
    assert fake.gpus[1].mig.instances == []  # type: ignore[union-attr]


def test_a_gpu_not_in_mig_mode_is_refused_by_name() -> None:
    fake = machine()
    with pytest.raises(MigInstanceError, match="GPU 2 is not in MIG mode"):
        MigInstances(fake).acquire("a", 1, 2, 0, "3g.40gb")
    with pytest.raises(MigInstanceError, match="GPU 3 is not in MIG mode"):
        MigInstances(fake).acquire("a", 1, 3, 0, "3g.40gb")


def test_a_half_made_instance_is_undone() -> None:
    class NoComputeInstance(FakeNvml):
        def nvmlGpuInstanceCreateComputeInstance(self, gi: object, profile_id: int) -> object:
            raise self.NVMLError(23)  # NVML_ERROR_INSUFFICIENT_RESOURCES

    fake = NoComputeInstance.from_topology(preset("hgx-h100"), nvswitch=True)
    fake.gpus[1].mig = FakeMig.carved(H100, [], gpu=1)
    with pytest.raises(MigInstanceError, match="could not create its compute instance"):
        MigInstances(fake).acquire("a", 1, 1, 0, "3g.40gb")
    assert fake.gpus[1].mig.instances == []
    assert fake.initialised == 0


def test_a_failed_destroy_is_said_and_the_instance_stays() -> None:
    fake = machine()
    mig = MigInstances(fake)
    mig.acquire("a", 1, 1, 0, "3g.40gb")
    fake.root = False
    why = mig.release("a", 1)
    assert why is not None and "could not destroy GPU 1's MIG instance" in why
    assert len(listed(fake, 1)) == 1
