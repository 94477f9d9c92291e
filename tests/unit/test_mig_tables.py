"""NVIDIA's MIG tables, which table a GPU has, and where placement/mig.py puts instances."""

from __future__ import annotations

from itertools import combinations

import pytest

from toposched.placement.mig import MigChoice, MigGpu, choose, loss, starts, wasted
from toposched.topology.cluster import ClusterError, Node
from toposched.topology.errors import TopologyError
from toposched.topology.mig import COMPUTE_SLICES, MIG_TABLES, mig_table, table_for
from toposched.topology.presets import preset
from toposched.topology.resources import Hardware

MIB = 2**20
A100_40 = mig_table("A100", 40960 * MIB)
H100_80 = mig_table("H100", 81559 * MIB)


@pytest.mark.parametrize(
    ("gpu_type", "mib", "model"),
    [
        ("A100", 40960, "A100-40GB"),  # what NVML reports for each
        ("A100", 81920, "A100-80GB"),
        ("h100", 81559, "H100-80GB"),
        ("H100", 95830, "H100-94GB"),
        ("H100", 97871, "H100-96GB"),
        ("H200", 143771, "H200-141GB"),
        ("H200", 0, "H200-141GB"),  # one model of the type: memory not needed
        ("B200", 183359, "B200-180GB"),
    ],
)
def test_a_gpu_type_and_memory_name_the_table(gpu_type: str, mib: int, model: str) -> None:
    table = mig_table(gpu_type, mib * MIB)
    assert table is not None and table.model == model


def test_h100_tables_have_nvidias_profile_names() -> None:
    assert H100_80 is not None
    assert H100_80.names == (
        "7g.80gb",
        "4g.40gb",
        "3g.40gb",
        "2g.20gb",
        "1g.20gb",
        "1g.10gb",
        "1g.10gb+me",
    )
    assert H100_80.profile("3g.40gb").profile_id == 9  # type: ignore[union-attr]
    assert mig_table("B200", 0).profile("3g.90gb") is not None  # type: ignore[union-attr]


def test_a_type_without_mig_or_an_ambiguous_one_has_no_table() -> None:
    assert mig_table("V100", 16 * 2**30) is None
    assert mig_table("H100", 0) is None  # 80, 94 or 96 GB
    with pytest.raises(TopologyError, match="need a GPU type and its GPU memory with a MIG"):
        table_for("H100", 0)
    with pytest.raises(TopologyError, match=r"A100-40GB.*got V100"):
        table_for("V100", 0)


@pytest.mark.parametrize("table", MIG_TABLES, ids=lambda t: t.model)
def test_no_set_of_disjoint_instances_needs_more_compute_than_the_gpu_has(table) -> None:  # type: ignore[no-untyped-def]
    """The memory-slice starts alone keep every GPU within its 7 compute slices: checked on
    every set of non-overlapping placements the table allows."""
    spans = [(p.compute, ((1 << p.slices) - 1) << s) for p in table.profiles for s in p.starts]
    most = 0
    for k in range(1, 8):
        for group in combinations(spans, k):
            held = 0
            for _, span in group:
                if held & span:
                    break
                held |= span
            else:
                most = max(most, sum(c for c, _ in group))
    assert most == COMPUTE_SLICES


def test_hardware_names_its_gpus_in_mig_mode_and_refuses_what_cannot_be() -> None:
    hw = Hardware("H100", 80 * 2**30, mig=(0, 3))
    assert hw.mig_mask == 0b1001
    assert "GPU 0,3 in MIG mode" in hw.describe()
    with pytest.raises(TopologyError, match="MIG table"):
        Hardware("V100", 16 * 2**30, mig=(0,))
    with pytest.raises(TopologyError, match="in order, each once"):
        Hardware("H100", 80 * 2**30, mig=(3, 0))
    with pytest.raises(ClusterError, match=r"GPU 8 in MIG mode, but the node has GPUs 0\.\.7"):
        Node("n", preset("hgx-h100"), hardware=Hardware("H100", 80 * 2**30, mig=(8,)))


def test_a_small_instance_goes_where_the_large_profiles_stay_placeable() -> None:
    assert A100_40 is not None
    empty = MigGpu(0, 0, A100_40)
    # At slice 6 a 1g.5gb leaves the 4g.20gb (slices 0-3) and a 3g.20gb (0-3) placeable.
    assert choose([empty], "1g.5gb") == MigChoice(0, 0, 6)
    # A 3g.20gb at 4 leaves the 4g.20gb; at 0 it would leave only another 3g.
    assert choose([empty], "3g.20gb") == MigChoice(0, 0, 4)
    # On a GPU already carved rather than on a whole one: the 7g stays on GPU 1.
    carved = MigGpu(0, 0, A100_40, (("3g.20gb", 4),))
    assert choose([carved, MigGpu(0, 1, A100_40)], "1g.5gb") == MigChoice(0, 0, 0)
    assert loss(MigGpu(0, 1, A100_40), "1g.5gb", 6)[0] == 1  # the 7g.40gb is lost


def test_starts_keep_to_the_slices_counts_and_table() -> None:
    assert A100_40 is not None
    gpu = MigGpu(0, 0, A100_40, (("3g.20gb", 0), ("1g.5gb+me", 4)))
    assert starts(gpu, "1g.5gb") == [5, 6]
    assert starts(gpu, "1g.5gb+me") == []  # one per GPU
    assert starts(gpu, "3g.40gb") == []  # an H100's or A100 80GB's profile
    assert choose([gpu], "7g.40gb") is None
    # A 3g at 0 leaves slice 7 usable only by a 2-slice 1g at 6; taken at 6 by a 1g, it is lost.
    assert wasted(A100_40, (("3g.20gb", 0), ("1g.5gb", 6))) == 1
