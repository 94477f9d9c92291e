"""nvidia-smi captures: real ones parse exactly; truncated and malformed ones name their line."""

from __future__ import annotations

from pathlib import Path

import pytest

from toposched.topology import PRESETS, NodeTopology, TopologyError, preset
from toposched.topology.smi import parse_smi, render_smi

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "topologies"
COMPLETE = sorted(p.name for p in FIXTURES.glob("*.txt") if not p.name.endswith(".partial.txt"))
PARTIAL = sorted(p.name for p in FIXTURES.glob("*.partial.txt"))


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def parse_fixture(name: str) -> NodeTopology:
    return parse_smi(fixture(name), source=name, name=name)


def parse_error(text: str) -> TopologyError:
    with pytest.raises(TopologyError) as info:
        parse_smi(text, source="cap.txt")
    return info.value


# --- the real captures -----------------------------------------------------------------------


def test_fixtures_are_all_there_with_their_sources() -> None:
    assert COMPLETE == [
        "dgx1-v100.SYNTHESIZED.txt",
        "hgx-h100-8gpu-nv18.txt",
        "pcie-2gpu-phb-tabs.txt",
        "pcie-4gpu-2socket-rtx6000ada.txt",
    ]
    assert len(PARTIAL) == 5
    sources = fixture("SOURCES.md")
    for name in COMPLETE + PARTIAL:
        assert f"- File: `{name}`" in sources


def test_hgx_h100_capture() -> None:
    topology = parse_fixture("hgx-h100-8gpu-nv18.txt")
    assert topology.links == preset("hgx-h100").links
    assert topology.numa == (0, 0, 0, 0, 1, 1, 1, 1)
    assert topology.cpu_affinity == ("0-47,96-143",) * 4 + ("48-95,144-191",) * 4
    assert topology.name == "hgx-h100-8gpu-nv18.txt"


def test_pcie_4gpu_capture_ignores_nic_rows_and_legends() -> None:
    topology = parse_fixture("pcie-4gpu-2socket-rtx6000ada.txt")
    expected = preset("pcie-4gpu-2socket")
    assert topology.links == expected.links
    assert topology.numa == (0, 0, 1, 1)
    assert topology.cpu_affinity == expected.cpu_affinity
    assert topology.switches == expected.switches  # derived: no PIX between GPUs
    assert topology.switch == (None,) * 4


def test_tab_separated_capture_with_an_empty_padding_field() -> None:
    topology = parse_fixture("pcie-2gpu-phb-tabs.txt")
    assert topology.codes() == [["X", "PHB"], ["PHB", "X"]]
    assert topology.numa == (0, 0)
    assert topology.cpu_affinity == ("0-63", "0-63")


def test_synthesized_dgx1_matches_the_preset() -> None:
    topology = parse_fixture("dgx1-v100.SYNTHESIZED.txt")
    assert topology.links == preset("dgx1-v100").links
    assert topology.numa == (None,) * 8
    assert topology.cpu_affinity == (None,) * 8


@pytest.mark.parametrize("name", COMPLETE)
def test_complete_fixtures_read_back_from_their_rendering(name: str) -> None:
    topology = parse_fixture(name)
    assert parse_smi(render_smi(topology)) == topology
    assert parse_smi(render_smi(topology, aligned=True)) == topology
    assert parse_smi(fixture(name).expandtabs(8)) == topology


# The rows each truncated capture lacks, and the line after its last row.
TRUNCATED = {
    "a800-8gpu-nv8.partial.txt": (["GPU7"], 9),
    "dgx-a100.partial.txt": (["GPU4", "GPU5", "GPU6", "GPU7"], 6),
    "dgx2-v100.partial.txt": ([f"GPU{k}" for k in range(4, 16)], 6),
    "h100-8gpu-18nic.partial.txt": (["GPU4", "GPU5", "GPU6", "GPU7"], 6),
    "pcie-8gpu-2socket-mlx4.partial.txt": (["GPU5", "GPU6", "GPU7"], 7),
}


def test_every_partial_fixture_is_in_the_table() -> None:
    assert sorted(TRUNCATED) == PARTIAL


@pytest.mark.parametrize("name", PARTIAL)
def test_partial_fixtures_name_the_missing_rows(name: str) -> None:
    missing, line = TRUNCATED[name]
    with pytest.raises(TopologyError) as info:
        parse_fixture(name)
    err = info.value
    assert err.source == name
    assert err.line == line
    assert "missing (the capture looks truncated)" in err.reason
    if len(missing) <= 8:
        assert f"for {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing" in str(
            err
        )
    else:
        assert f"rows for {missing[0]}..{missing[-1]} ({len(missing)}) are missing" in str(err)
    assert str(err).startswith(f"{name}:{line}: ")


def test_partial_rows_that_are_there_agree_with_the_preset() -> None:
    # The 2017 8-GPU box is the paper's server: its surviving rows match pcie-8gpu-2socket.
    text = fixture("pcie-8gpu-2socket-mlx4.partial.txt")
    codes = [line.split()[1:9] for line in text.splitlines()[1:]]
    assert codes == [row for row in preset("pcie-8gpu-2socket").codes()[:5]]


# --- what the parser accepts -------------------------------------------------------------------

SMALL = (
    "\tGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\tNUMA Affinity\n"
    "GPU0\t X \tNV4\tSYS\tPIX\t0-15\t0\n"
    "GPU1\tNV4\t X \tSYS\tPIX\t0-15\t0\n"
    "GPU2\tSYS\tSYS\t X \tSYS\t16-31\t1\n"
    "NIC0\tPIX\tPIX\tSYS\t X \n"
    "\n"
    "Legend:\n"
    "\n"
    "  X    = Self\n"
    "\n"
    "NIC Legend:\n"
    "\n"
    "  NIC0: mlx5_0\n"
)
SMALL_CODES = [["X", "NV4", "SYS"], ["NV4", "X", "SYS"], ["SYS", "SYS", "X"]]


def test_small_capture() -> None:
    topology = parse_smi(SMALL, name="small")
    assert topology.codes() == SMALL_CODES
    assert topology.numa == (0, 0, 1)
    assert topology.cpu_affinity == ("0-15", "0-15", "16-31")
    assert topology.name == "small"


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(SMALL.expandtabs(8), id="space-aligned"),
        pytest.param(SMALL.expandtabs(4), id="narrow-tab-stops"),
        pytest.param("$ nvidia-smi topo -m\n" + SMALL, id="prompt-line"),
        pytest.param("user@gpu0:~$ nvidia-smi topo -m\n```\n" + SMALL + "```\n$\n", id="fences"),
        pytest.param(SMALL.lstrip(), id="stripped-header"),
        pytest.param(SMALL.replace("\n", "\r\n"), id="crlf"),
        pytest.param(SMALL.split("\n\n")[0] + "\n", id="no-legend"),
        pytest.param(SMALL.split("\nNIC0")[0], id="no-nic-rows-no-final-newline"),
        pytest.param(SMALL.replace("\nGPU1", "\n\nGPU1"), id="blank-line-between-rows"),
        pytest.param(SMALL.replace("\t0\n", "\t0\t\t\n"), id="trailing-tabs"),
        pytest.param(SMALL.replace("NV4", "nv4"), id="lower-case-code"),
        pytest.param(
            SMALL.replace("NIC0\tPIX\tPIX\tSYS\t X ", "NIC0\tPIX\tPIX\tSYS\t X \t0-15\t0"),
            id="nic-row-with-affinity",
        ),
        pytest.param(SMALL + "$ echo done\ndone\n", id="text-after-legend"),
    ],
)
def test_accepted_variants(variant: str) -> None:
    topology = parse_smi(variant)
    assert topology.codes() == SMALL_CODES
    assert topology.numa == (0, 0, 1)
    assert topology.cpu_affinity == ("0-15", "0-15", "16-31")


def test_unknown_values_and_columns() -> None:
    text = (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tPIX\tN/A\t\t\tN/A\n"
        "GPU1\tPIX\t X \t0-7\tN/A\t\t3\n"
    )
    topology = parse_smi(text)
    assert topology.codes() == [["X", "PIX"], ["PIX", "X"]]
    assert topology.numa == (None, None)
    assert topology.cpu_affinity == (None, "0-7")
    # The GPU NUMA ID column (Grace Hopper's GPU memory node) is read past, not kept.


def test_empty_field_within_the_column_count_is_unknown() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPHB\t\t0\nGPU1\tPHB\t X \t0-7\t\n"
    topology = parse_smi(text)
    assert topology.numa == (0, None)
    assert topology.cpu_affinity == (None, "0-7")


def test_old_format_without_numa_column() -> None:
    text = (
        "        GPU0    GPU1    mlx4_0  CPU Affinity\n"
        "GPU0     X      PIX     PHB     0-9\n"
        "GPU1    PIX      X      PHB     0-9\n"
        "mlx4_0  PHB     PHB      X \n"
    )
    topology = parse_smi(text)
    assert topology.codes() == [["X", "PIX"], ["PIX", "X"]]
    assert topology.numa == (None, None)
    assert topology.cpu_affinity == ("0-9", "0-9")


def test_seven_character_nic_names_glued_by_tab_expansion() -> None:
    # Tab-expanded, a 7-character name such as mlx5_10 is followed by a single space.
    header = "\tGPU0\tGPU1\tmlx5_10\tmlx5_11\tCPU Affinity\tNUMA Affinity"
    rows = ["GPU0\t X \tNV2\tPIX\tSYS\t0-15\t0", "GPU1\tNV2\t X \tSYS\tPIX\t16-31\t1"]
    text = "\n".join([header, *rows]).expandtabs(8)
    assert "mlx5_10 mlx5_11" in text
    topology = parse_smi(text)
    assert topology.codes() == [["X", "NV2"], ["NV2", "X"]]
    assert topology.numa == (0, 1)


def test_single_gpu() -> None:
    topology = parse_smi("\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-31\t0\n")
    assert topology.size == 1
    assert topology.numa == (0,)


# --- what the parser rejects -------------------------------------------------------------------


def _small(old: str, new: str) -> str:
    assert old in SMALL
    return SMALL.replace(old, new, 1)


def _lines(*keep: int) -> str:
    lines = SMALL.splitlines()
    return "\n".join(lines[k] for k in keep) + "\n"


def _wide(n: int) -> str:
    header = "\t" + "\t".join(f"GPU{i}" for i in range(n))
    rows = [f"GPU{i}\t" + "\t".join(" X " if i == j else "SYS" for j in range(n)) for i in range(n)]
    return "\n".join([header, *rows]) + "\n"


MALFORMED = [
    pytest.param("", None, ["empty input"], id="empty"),
    pytest.param(" \n\t\n", None, ["empty input"], id="blank"),
    pytest.param("hello\nworld\n", None, ["no header row found", "GPU0 GPU1"], id="no-header"),
    pytest.param(_lines(1, 2, 3), 1, ["GPU row comes before any header row"], id="rows-first"),
    pytest.param(_lines(0, 1, 2), 4, ["row for GPU2 is missing", "truncated"], id="truncated"),
    pytest.param(_lines(0), 2, ["rows for GPU0, GPU1, GPU2 are missing"], id="header-only"),
    pytest.param(
        _lines(0, 1, 5, 6, 7, 8), 3, ["rows for GPU1, GPU2 are missing"], id="truncated-legend"
    ),
    pytest.param(_lines(0, 1, 2, 4), 4, ["row for GPU2 is missing"], id="nic-row-too-early"),
    pytest.param(
        _small("\t0-15\t0\nGPU2", "\t0-15\nGPU2"),
        3,
        ["row GPU1 has too few fields: 5 after the label, expected 6", "GPU0..GPU2, NIC0"],
        id="too-few",
    ),
    pytest.param(
        _small("SYS\tPIX\t0-15\t0\nGPU2", "SYS\tPIX\tPIX\t0-15\t0\nGPU2"),
        3,
        ["row GPU1 has too many fields: 7 after the label, expected 6"],
        id="too-many",
    ),
    pytest.param(
        _small("GPU1\tNV4", "GPU1\tNVX"),
        3,
        ["row GPU1, column GPU0: unknown link code 'NVX'", "NV<n>"],
        id="unknown-code",
    ),
    pytest.param(
        _small("GPU2\tSYS\tSYS\t X \tSYS", "GPU2\tSYS\tSYS\t X \tQPI"),
        4,
        ["row GPU2, column NIC0: unknown link code 'QPI'"],
        id="unknown-code-nic-column",
    ),
    pytest.param(_small("GPU1\tNV4", "GPU1\tNV0"), 3, ["column GPU0", "no NVLinks"], id="nv0"),
    pytest.param(
        _small("GPU1\tNV4", "GPU1\t"), 3, ["column GPU0", "unknown link code ''"], id="empty-code"
    ),
    pytest.param(
        _lines(0, 1, 3, 2), 3, ["row GPU2 is out of order: expected the row for GPU1"], id="order"
    ),
    pytest.param(
        _small("GPU2\tSYS\tSYS\t X ", "GPU1\tSYS\tSYS\t X "),
        4,
        ["duplicate row for GPU1 (first at line 3)"],
        id="duplicate",
    ),
    pytest.param(
        _small("\nNIC0\t", "\nGPU3\tSYS\tSYS\tSYS\tSYS\t0\t0\nNIC0\t"),
        5,
        ["row GPU3 has no column in the header, which names GPU0..GPU2"],
        id="row-not-in-header",
    ),
    pytest.param(
        _small("GPU1\tNV4\t X ", "GPU1\tNV4\tNV4"),
        3,
        ["row GPU1, column GPU1 is 'NV4', expected X on the diagonal"],
        id="diagonal-not-x",
    ),
    pytest.param(
        _small("GPU2\tSYS", "GPU2\t X "),
        4,
        ["row GPU2, column GPU0 is X, but X marks only the diagonal"],
        id="x-off-diagonal",
    ),
    pytest.param(
        _small("GPU0\t X \tNV4\tSYS\tPIX", "GPU0\t X \tNV4\tSYS\t X "),
        2,
        ["row GPU0, column NIC0 is X"],
        id="x-in-nic-column",
    ),
    pytest.param(
        _small("GPU2\tSYS\tSYS", "GPU2\tSYS\tPHB"),
        4,
        ["not symmetric", "row GPU2 gives PHB to GPU1 but row GPU1 (line 3) gives SYS to GPU2"],
        id="asymmetric",
    ),
    pytest.param(
        _small("\tGPU0\tGPU1\tGPU2", "\tGPU0\tGPU2\tGPU1"),
        1,
        ["header column 2 is GPU2, expected GPU1", "in order"],
        id="header-order",
    ),
    pytest.param(
        _small("\tGPU0\tGPU1\tGPU2", "\tGPU1\tGPU2\tGPU3"),
        1,
        ["header column 1 is GPU1, expected GPU0"],
        id="header-not-from-0",
    ),
    pytest.param(
        _small("\tGPU0\tGPU1\tGPU2\tNIC0", "\tGPU0\tGPU1\tNIC0\tGPU2"),
        1,
        ["header names GPU2 after the non-GPU column NIC0"],
        id="header-gpu-after-nic",
    ),
    pytest.param(
        _small("0-15\t0\nGPU1", "0-15\tzero\nGPU1"),
        2,
        ["row GPU0: NUMA Affinity is 'zero', expected a NUMA node number"],
        id="numa-word",
    ),
    pytest.param(_small("16-31\t1", "16-31\t-1"), 4, ["NUMA Affinity is '-1'"], id="numa-negative"),
    pytest.param(
        _small("NIC0\tPIX\tPIX\tSYS\t X ", "NIC0\tPIX\tPIX"),
        5,
        ["row NIC0 has 2 fields after the label, expected 4 link codes"],
        id="nic-row-short",
    ),
    pytest.param(_wide(65), 1, ["at most 64 GPUs"], id="too-many-gpus"),
]


@pytest.mark.parametrize(("text", "line", "fragments"), MALFORMED)
def test_malformed_captures(text: str, line: int | None, fragments: list[str]) -> None:
    err = parse_error(text)
    assert err.source == "cap.txt"
    assert err.line == line
    for fragment in fragments:
        assert fragment in err.reason
    prefix = "cap.txt: " if line is None else f"cap.txt:{line}: "
    assert str(err) == prefix + err.reason


def test_thousand_digit_nvlink_count_is_a_topology_error() -> None:
    err = parse_error(_small("GPU1\tNV4", "GPU1\tNV" + "4" * 5000))
    assert err.line == 3
    assert "column GPU0" in err.reason


# --- rendering ---------------------------------------------------------------------------------


def test_render_exact_text_with_unknown_values() -> None:
    topology = NodeTopology.from_codes(
        [["X", "NV2"], ["NV2", "X"]], numa=[1, None], cpu_affinity=["8-15", None]
    )
    text = render_smi(topology)
    head = text.split("\n\n")[0]
    assert head == (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tNV2\t8-15\t1\n"
        "GPU1\tNV2\t X \tN/A\tN/A"
    )
    assert "\nLegend:\n" in text and text.endswith("NVLinks\n")
    assert parse_smi(text) == topology


def test_render_omits_unknown_columns() -> None:
    topology = NodeTopology.from_codes([["X", "SYS"], ["SYS", "X"]])
    head = render_smi(topology).split("\n\n")[0]
    assert head == "\tGPU0\tGPU1\nGPU0\t X \tSYS\nGPU1\tSYS\t X "
    aligned = render_smi(topology, aligned=True).split("\n\n")[0]
    assert aligned == "        GPU0    GPU1\nGPU0     X      SYS\nGPU1    SYS      X "


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_read_back_without_their_switches(name: str) -> None:
    topology = preset(name)
    for aligned in (False, True):
        again = parse_smi(render_smi(topology, aligned=aligned), name=name)
        assert again.links == topology.links
        assert again.numa == topology.numa
        assert again.cpu_affinity == topology.cpu_affinity
        assert again.switch == (None,) * topology.size


@pytest.mark.parametrize("affinity", ["", "N/A", "0-3 8-11", " 0-3"])
def test_render_refuses_an_affinity_it_cannot_write(affinity: str) -> None:
    topology = NodeTopology.from_codes([["X"]], cpu_affinity=[affinity])
    with pytest.raises(TopologyError, match="cannot be written"):
        render_smi(topology)


def test_render_refuses_a_negative_numa_node() -> None:
    with pytest.raises(TopologyError, match="cannot be written"):
        render_smi(NodeTopology.from_codes([["X"]], numa=[-1]))
