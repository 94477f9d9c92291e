"""The YAML topology format: presets round-trip, and every bad file names its line."""

from __future__ import annotations

import pytest

from toposched.topology import PRESETS, TopologyError, preset
from toposched.topology.links import BandwidthTable
from toposched.topology.yamlfile import dump_yaml, parse_yaml


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_round_trip_through_yaml(name: str) -> None:
    topology = preset(name)
    again = parse_yaml(dump_yaml(topology), source=f"{name}.yaml")
    assert again == topology
    assert again.name == topology.name


def test_hand_written_file_with_string_rows_and_overrides() -> None:
    text = """\
name: two-pairs
links:
  - X   NV4 SYS SYS
  - NV4 X   SYS SYS
  - [SYS, SYS, X, NV4]
  - [SYS, SYS, NV4, X]
numa: [0, 0, 1, null]
cpu_affinity: ["0-15", "0-15", "16-31", null]
bandwidth_gbps: {NV: 20, sys: 5}
"""
    topology = parse_yaml(text)
    assert topology.name == "two-pairs"
    assert topology.codes()[0] == ["X", "NV4", "SYS", "SYS"]
    assert topology.numa == (0, 0, 1, None)
    assert topology.cpu_affinity == ("0-15", "0-15", "16-31", None)
    assert topology.bandwidth == BandwidthTable(nvlink_per_link=20.0, sys=5.0)
    assert topology.bandwidth_matrix[0][1] == 80.0
    assert topology.bandwidth_matrix[0][2] == 5.0


def test_preset_base_with_bandwidth_override() -> None:
    topology = parse_yaml("preset: dgx1-v100\nbandwidth_gbps: {NV: 20}\n")
    assert topology.links == preset("dgx1-v100").links
    assert topology.numa == preset("dgx1-v100").numa
    assert topology.bandwidth_matrix[0][3] == 40.0
    assert topology.name == "dgx1-v100"


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("links:\n  - X NV1\n  - NV2 X\n", 2, "not symmetric: GPU0->GPU1 is NV1"),
        ("links:\n  - X NV1\n  - NV1\n", 3, "links row 1 has 1 entries"),
        ("links:\n  - X NV1\n  - NV1 XX\n", 3, "unknown link code 'XX'"),
        ("links:\n  - X NV1\n  - NV1 X\nnuma: [0]\n", 4, "numa must be a list of 2 entries"),
        ("links:\n  - X NV1\n  - NV1 X\nnuma: [0, zero]\n", 4, "numa[1] must be int or null"),
        ("foo: 1\nlinks: []\n", 1, "unknown key 'foo'"),
        ("links: [ [X\n", 2, "not valid YAML"),
        ("preset: nope\n", 1, "unknown preset 'nope'; known presets: dgx1-v100"),
        ("preset: dgx1-v100\nbandwidth_gbps: {NV: -1}\n", 2, "must be a positive number"),
        ("preset: dgx1-v100\nbandwidth_gbps: {QPI: 9}\n", 2, "unknown bandwidth key 'QPI'"),
        ("links:\n  - [X, 3]\n  - NV1 X\n", 2, "must be a list of link codes or a string"),
        ("name: a\n", None, "give exactly one of 'links'"),
        ("- X\n", None, "must be a YAML mapping"),
    ],
)
def test_bad_files_name_the_line_and_the_problem(text: str, line: int | None, message: str) -> None:
    with pytest.raises(TopologyError) as caught:
        parse_yaml(text, source="box.yaml")
    assert message in str(caught.value)
    assert caught.value.line == line
    assert caught.value.source == "box.yaml"
    assert str(caught.value).startswith("box.yaml")


def test_huge_nvlink_count_in_yaml_is_a_topology_error() -> None:
    text = "links:\n  - X    NV" + "4" * 5000 + "\n  - NV4  X\n"
    with pytest.raises(TopologyError, match="unknown link code"):
        parse_yaml(text)
