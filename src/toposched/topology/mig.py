"""NVIDIA's MIG profiles per GPU model, with the memory-slice starts each profile may take.

Source: NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles"
(https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html) and
"Getting Started with MIG" (the `nvidia-smi mig -lgipp` listing). A100, H100, H200 and B200
all have 8 memory slices and 7 compute slices; their profiles differ only in memory (the
name's `gb`). A GPU instance takes `slices` memory slices from one of its `starts`, and two
instances never share a memory slice (NVML refuses to create one that overlaps:
nvmlDeviceGetGpuInstancePossiblePlacements_v2). `lgipp` lists, on every one of these GPUs:

    1g (1 slice)  {0,1,2,3,4,5,6}:1     2g          {0,2,4}:2     4g  {0}:4
    1g (2 slices) {0,2,4,6}:2           3g          {0,4}:4       7g  {0}:8

and a `+me` profile (a 1g instance with the media engines) at most once per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from toposched.topology.errors import TopologyError

MEMORY_SLICES = 8
COMPUTE_SLICES = 7


@dataclass(frozen=True)
class MigProfile:
    """A GPU instance profile: its name (`3g.40gb`), nvidia-smi's profile ID, its compute
    slices, the memory slices it takes, where it may start, and how many a GPU holds at most
    (the memory slices allow more `+me` instances than the one NVIDIA allows)."""

    name: str
    profile_id: int
    compute: int
    slices: int
    starts: tuple[int, ...]
    most: int = COMPUTE_SLICES

    @property
    def size(self) -> tuple[int, int]:
        """What `largest` ranks profiles by: compute slices, then memory slices."""
        return (self.compute, self.slices)


@dataclass(frozen=True)
class MigTable:
    """One GPU model's profiles, largest first; `memory_gb` is the memory its name gives."""

    model: str
    gpu_type: str  # the short type name nodes give (Hardware.gpu_type)
    memory_gb: int
    profiles: tuple[MigProfile, ...]

    def profile(self, name: str) -> MigProfile | None:
        for p in self.profiles:
            if p.name == name:
                return p
        return None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.profiles)


def _table(model: str, gpu_type: str, memory_gb: int, one: int, two: int, half: int) -> MigTable:
    """The GA100/GH100/GB100 layout with the model's memory per instance: `one` GB for a
    1-slice instance, `two` for 2 slices, `half` for 4."""
    return MigTable(
        model,
        gpu_type,
        memory_gb,
        (
            MigProfile(f"7g.{memory_gb}gb", 0, 7, 8, (0,), 1),
            MigProfile(f"4g.{half}gb", 5, 4, 4, (0,), 1),
            MigProfile(f"3g.{half}gb", 9, 3, 4, (0, 4), 2),
            MigProfile(f"2g.{two}gb", 14, 2, 2, (0, 2, 4), 3),
            MigProfile(f"1g.{two}gb", 15, 1, 2, (0, 2, 4, 6), 4),
            MigProfile(f"1g.{one}gb", 19, 1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
            MigProfile(f"1g.{one}gb+me", 20, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
        ),
    )


MIG_TABLES: tuple[MigTable, ...] = (
    _table("A100-40GB", "A100", 40, 5, 10, 20),
    _table("A100-80GB", "A100", 80, 10, 20, 40),
    _table("H100-80GB", "H100", 80, 10, 20, 40),
    _table("H100-94GB", "H100", 94, 12, 24, 47),  # H100 NVL
    _table("H100-96GB", "H100", 96, 12, 24, 48),  # H100 on GH200
    _table("H200-141GB", "H200", 141, 18, 35, 71),
    _table("B200-180GB", "B200", 180, 23, 45, 90),
)

GIB = 2**30  # the names' GB are nearer GiB: an H100 80GB has 79.6 GiB, an H100 NVL 93.6


def mig_table(gpu_type: str, gpu_memory: int) -> MigTable | None:
    """The table of a GPU of type `gpu_type` (A100, H100, H200, B200, any case) with
    `gpu_memory` bytes: of that type's models, the one whose named memory is nearest (NVML
    reports a little less than the name says: 81,559 MiB for an H100 80GB). None for a type
    without MIG, or a type of several models and unknown memory (0)."""
    models = [t for t in MIG_TABLES if _same_type(t.gpu_type, gpu_type)]
    if len(models) > 1 and not gpu_memory:
        return None
    if not models:
        return None
    return min(models, key=lambda t: abs(t.memory_gb * GIB - gpu_memory))


def table_for(gpu_type: str, gpu_memory: int) -> MigTable:
    """As `mig_table`, raising TopologyError that says which GPUs have MIG tables."""
    table = mig_table(gpu_type, gpu_memory)
    if table is None:
        known = ", ".join(t.model for t in MIG_TABLES)
        need = (
            " and its GPU memory"
            if any(_same_type(t.gpu_type, gpu_type) for t in MIG_TABLES)
            else ""
        )
        raise TopologyError(
            f"GPUs in MIG mode need a GPU type{need} with a MIG table ({known}); "
            f"got {gpu_type or 'no GPU type'}"
        )
    return table


def _same_type(a: str, b: str) -> bool:
    """GPU type names compare without case, as topology.resources.type_key has them (that
    module reads the tables from here, so this one may not import it)."""
    return a.strip().casefold() == b.strip().casefold()
