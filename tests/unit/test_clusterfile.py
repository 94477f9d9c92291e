"""Cluster shorthands and YAML cluster files: layouts, shared topologies, errors with lines."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from toposched.discovery.files import load_cluster
from toposched.topology import PRESETS, preset
from toposched.topology.cluster import (
    DEFAULT_NETWORK_GBPS,
    Cluster,
    ClusterError,
    Node,
    Tier,
    tier_of,
    topology_aware,
)
from toposched.topology.clusterfile import (
    dump_cluster_yaml,
    looks_like_shorthand,
    parse_cluster_yaml,
    parse_shorthand,
)
from toposched.topology.links import BandwidthTable
from toposched.topology.presets import preset_hardware
from toposched.topology.resources import Hardware

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"


def layout(cluster: Cluster) -> list[tuple[str, str, str, str]]:
    return [(n.name, n.topology.name, n.rack, n.pod) for n in cluster.nodes]


# ---------------------------------------------------------------- shorthands


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("1*hgx-h100", [("hgx-h100-0", "hgx-h100", "rack-0", "pod-0")]),
        (
            "3*dgx1-v100",
            [(f"dgx1-v100-{i}", "dgx1-v100", "rack-0", "pod-0") for i in range(3)],
        ),
        (
            "5*dgx1-v100/2",
            [(f"dgx1-v100-{i}", "dgx1-v100", f"rack-{i // 2}", "pod-0") for i in range(5)],
        ),
        (
            " 2 * dgx-a100 / 1 ",
            [
                ("dgx-a100-0", "dgx-a100", "rack-0", "pod-0"),
                ("dgx-a100-1", "dgx-a100", "rack-1", "pod-0"),
            ],
        ),
        (
            "2*dgx1-v100/1+2*pcie-8gpu-2socket",
            [
                ("dgx1-v100-0", "dgx1-v100", "rack-0", "pod-0"),
                ("dgx1-v100-1", "dgx1-v100", "rack-1", "pod-0"),
                ("pcie-8gpu-2socket-0", "pcie-8gpu-2socket", "rack-2", "pod-0"),
                ("pcie-8gpu-2socket-1", "pcie-8gpu-2socket", "rack-2", "pod-0"),
            ],
        ),
        (
            # the same preset twice: numbering continues so names stay unique
            "2*dgx1-v100 + 1*dgx1-v100",
            [
                ("dgx1-v100-0", "dgx1-v100", "rack-0", "pod-0"),
                ("dgx1-v100-1", "dgx1-v100", "rack-0", "pod-0"),
                ("dgx1-v100-2", "dgx1-v100", "rack-1", "pod-0"),
            ],
        ),
        (
            "2 x hgx-h100",
            [
                ("hgx-h100-0", "hgx-h100", "rack-0", "pod-0"),
                ("hgx-h100-1", "hgx-h100", "rack-0", "pod-0"),
            ],
        ),
        (
            "3 x dgx1-v100 in racks of 2",
            [
                ("dgx1-v100-0", "dgx1-v100", "rack-0", "pod-0"),
                ("dgx1-v100-1", "dgx1-v100", "rack-0", "pod-0"),
                ("dgx1-v100-2", "dgx1-v100", "rack-1", "pod-0"),
            ],
        ),
        (
            "1 x dgx1-v100 in racks of 4 + 1 x pcie-4gpu-2socket",
            [
                ("dgx1-v100-0", "dgx1-v100", "rack-0", "pod-0"),
                ("pcie-4gpu-2socket-0", "pcie-4gpu-2socket", "rack-1", "pod-0"),
            ],
        ),
        (
            "1*dgx1-v100 + 1 x hgx-h100",
            [
                ("dgx1-v100-0", "dgx1-v100", "rack-0", "pod-0"),
                ("hgx-h100-0", "hgx-h100", "rack-1", "pod-0"),
            ],
        ),
    ],
)
def test_shorthands(spec: str, expected: list[tuple[str, str, str, str]]) -> None:
    assert looks_like_shorthand(spec)
    cluster = parse_shorthand(spec)
    assert layout(cluster) == expected
    assert cluster.network_gbps == DEFAULT_NETWORK_GBPS
    assert load_cluster(spec) == cluster


def test_shorthand_size_and_tiers() -> None:
    cluster = load_cluster("64*dgx1-v100/8")
    assert len(cluster.nodes) == 64
    assert cluster.gpus == 512
    assert len({n.rack for n in cluster.nodes}) == 8
    assert all(n.topology is preset("dgx1-v100") for n in cluster.nodes)
    assert tier_of(cluster.nodes[:8]) == Tier.RACK
    assert tier_of(cluster.nodes[7:9]) == Tier.POD
    assert tier_of(cluster.nodes[:1]) == Tier.NODE


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("3*nope", "unknown preset 'nope'; known presets: dgx1-v100"),
        ("0*dgx1-v100", "must be positive integers"),
        ("2*dgx1-v100/0", "must be positive integers"),
        ("two*dgx1-v100", "cannot read 'two*dgx1-v100'; expected N*PRESET[/R]"),
        ("2*dgx1-v100+", "cannot read ''; expected N*PRESET[/R]"),
        (
            "2*dgx1-v100/4/2",
            "expected N*PRESET[/R], N*PRESET/leaf=L[/spine=S], N*RACK_PRESET, or "
            "'N x PRESET [in racks of R | in leaves of L]'",
        ),
        ("2 x dgx1-v100 in racks of", "expected N*PRESET[/R]"),
        ("2 x nope in racks of 2", "unknown preset 'nope'"),
    ],
)
def test_bad_shorthands_say_what_is_expected(spec: str, message: str) -> None:
    with pytest.raises(ClusterError) as caught:
        parse_shorthand(spec)
    assert message in str(caught.value)
    assert repr(spec) in str(caught.value)


# ---------------------------------------------------------------- YAML files


FULL = """\
name: lab
network_gbps: {rack: 25, cluster: 2.5}
groups:
  - count: 3
    topology: dgx1-v100
    racks_of: 2
    racks_per_pod: 1
    name_prefix: dgx
    labels: {team: vision}
  - count: 2
    topology: topos/pairs.yaml
  - count: 1
    topology: topos/pairs.yaml
    name_prefix: pairs
nodes:
  - name: box-1
    topology: pcie-8gpu-2socket
    rack: r1
    pod: p0
    labels: {toposched.io/gpu-schedule: default}
  - name: box-2
    topology: ./topos/../topos/pairs.yaml
"""

PAIRS = """\
name: two-pairs
links:
  - X   NV4 SYS SYS
  - NV4 X   SYS SYS
  - SYS SYS X   NV4
  - SYS SYS NV4 X
"""


def write_cluster(tmp_path: Path, text: str) -> Path:
    (tmp_path / "topos").mkdir(exist_ok=True)
    (tmp_path / "topos" / "pairs.yaml").write_text(PAIRS)
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return path


def test_yaml_file_with_groups_nodes_and_a_topology_file(tmp_path: Path) -> None:
    cluster = load_cluster(str(write_cluster(tmp_path, FULL)))
    assert cluster.name == "lab"
    assert cluster.network_gbps == {Tier.RACK: 25.0, Tier.POD: 6.25, Tier.CLUSTER: 2.5}
    assert layout(cluster) == [
        ("dgx-0", "dgx1-v100", "rack-0", "pod-0"),
        ("dgx-1", "dgx1-v100", "rack-0", "pod-0"),
        ("dgx-2", "dgx1-v100", "rack-1", "pod-1"),
        ("pairs-0", "two-pairs", "rack-2", "pod-0"),
        ("pairs-1", "two-pairs", "rack-2", "pod-0"),
        ("pairs-2", "two-pairs", "rack-3", "pod-0"),
        ("box-1", "pcie-8gpu-2socket", "r1", "p0"),
        ("box-2", "two-pairs", "rack-0", "pod-0"),
    ]
    assert dict(cluster.node("dgx-2").labels) == {"team": "vision"}
    assert not topology_aware(cluster.node("box-1").labels)
    assert topology_aware(cluster.node("pairs-0").labels)
    # one object per preset, and per topology file however its path is spelled
    assert cluster.node("dgx-0").topology is cluster.node("dgx-2").topology is preset("dgx1-v100")
    pairs = cluster.node("pairs-0").topology
    assert cluster.node("pairs-2").topology is pairs
    assert cluster.node("box-2").topology is pairs
    assert pairs.size == 4
    # tiers follow racks and pods
    assert tier_of([cluster.node("dgx-0"), cluster.node("dgx-1")]) == Tier.RACK
    assert tier_of([cluster.node("dgx-1"), cluster.node("dgx-2")]) == Tier.CLUSTER
    assert tier_of([cluster.node("pairs-0"), cluster.node("pairs-2")]) == Tier.POD
    assert tier_of([cluster.node("dgx-0"), cluster.node("box-2")]) == Tier.RACK
    assert cluster.tier_gbps(Tier.RACK) == 25.0


def test_relative_cluster_path_and_base_dir(tmp_path: Path) -> None:
    write_cluster(tmp_path, FULL)
    cluster = load_cluster("cluster.yaml", base_dir=tmp_path)
    assert len(cluster.nodes) == 8


def test_nvidia_smi_topology_file(tmp_path: Path) -> None:
    (tmp_path / "box.txt").write_text(
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tPHB\t0-7\t0\n"
        "GPU1\tPHB\t X \t0-7\t0\n"
    )
    (tmp_path / "c.yaml").write_text("groups:\n  - count: 2\n    topology: box.txt\n")
    cluster = load_cluster(str(tmp_path / "c.yaml"))
    assert [n.name for n in cluster.nodes] == ["box-0", "box-1"]
    assert cluster.nodes[0].topology.size == 2


def test_topology_files_need_a_resolver() -> None:
    with pytest.raises(ClusterError, match=r"unknown preset 'box\.yaml'; known presets: dgx1-v100"):
        parse_cluster_yaml("nodes:\n  - {name: a, topology: box.yaml}\n")


@pytest.mark.parametrize("name", ["lab.yaml", "philly-like.yaml", "mixed-v100-p100-t4.yaml"])
def test_examples_load(name: str) -> None:
    cluster = load_cluster(str(EXAMPLES / name))
    assert cluster.nodes


def test_example_layouts() -> None:
    lab = load_cluster(str(EXAMPLES / "lab.yaml"))
    assert layout(lab) == [
        ("dgx-0", "dgx1-v100", "rack-0", "pod-0"),
        ("dgx-1", "dgx1-v100", "rack-0", "pod-0"),
        ("box-1", "pcie-8gpu-2socket", "rack-1", "pod-0"),
    ]
    assert [topology_aware(n.labels) for n in lab.nodes] == [True, True, False]
    philly = load_cluster(str(EXAMPLES / "philly-like.yaml"))
    assert philly.gpus == 512
    assert len({n.rack for n in philly.nodes}) == 8
    assert {n.pod for n in philly.nodes} == {"pod-0", "pod-1"}
    assert all(n.pod == "pod-0" for n in philly.nodes[:32])


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("foo: 1\nnodes: []\n", 1, "unknown key 'foo' in a cluster file; valid keys: name,"),
        ("- 1\n", 1, "a cluster file must be a mapping"),
        ("", None, "a cluster needs at least one node"),
        ("name: x\ngroups: []\n", None, "a cluster needs at least one node"),
        ("groups: [\n", 2, "not valid YAML"),
        ("name: [1]\ngroups: []\n", 1, "name must be a string"),
        (
            "network_gbps: {rack: 10, node: 40}\n",
            1,
            "unknown tier 'node' in network_gbps; valid tiers: rack, pod, cluster",
        ),
        ("network_gbps:\n  rack: 10\n  pod: 0\n", 3, "pod bandwidth must be a positive number"),
        ("network_gbps:\n  cluster: -1\n", 2, "cluster bandwidth must be a positive number"),
        ("network_gbps:\n  rack: fast\n", 2, "rack bandwidth must be a positive number"),
        ("network_gbps: 10\n", 1, "network_gbps must be a mapping with keys: rack, pod, cluster"),
        ("groups: {count: 1}\n", 1, "groups must be a list"),
        ("groups:\n  - 3\n", 2, "groups[0] must be a mapping"),
        (
            "groups:\n  - count: 2\n    topology: dgx1-v100\n    racks: 4\n",
            4,
            "unknown key 'racks' in groups[0]; valid keys: count, topology, racks_of,",
        ),
        ("groups:\n  - topology: dgx1-v100\n", 2, "groups[0] needs 'count'"),
        ("groups:\n  - count: 0\n    topology: dgx1-v100\n", 2, "count must be a positive integer"),
        ("groups:\n  - count: -3\n    topology: dgx1-v100\n", 2, "count must be a positive"),
        ("groups:\n  - count: 2.5\n    topology: dgx1-v100\n", 2, "count must be a positive"),
        ("groups:\n  - count: true\n    topology: dgx1-v100\n", 2, "count must be a positive"),
        ("groups:\n  - count: '4'\n    topology: dgx1-v100\n", 2, "count must be a positive"),
        (
            "groups:\n  - count: 2\n    topology: dgx1-v100\n    racks_of: 0\n",
            4,
            "racks_of must be a positive integer",
        ),
        (
            "groups:\n  - count: 2\n    topology: dgx1-v100\n    racks_per_pod: x\n",
            4,
            "racks_per_pod must be a positive integer",
        ),
        ("groups:\n  - count: 2\n", 2, "groups[0] needs 'topology'"),
        (
            "groups:\n  - count: 2\n    topology: dgx9\n",
            3,
            "unknown preset 'dgx9'; known presets: dgx1-v100, dgx2-v100",
        ),
        ("groups:\n  - count: 2\n    topology: 7\n", 3, "topology must be a preset name"),
        (
            "groups:\n  - count: 2\n    topology: dgx1-v100\n    name_prefix: ''\n",
            4,
            "name_prefix must be a non-empty string",
        ),
        (
            "groups:\n  - count: 2\n    topology: dgx1-v100\n    labels: [a]\n",
            4,
            "labels must be a mapping",
        ),
        (
            "groups:\n  - count: 2\n    topology: dgx1-v100\n    labels: {team: 3}\n",
            4,
            "labels map names to strings",
        ),
        (
            "groups:\n  - count: 2\n    topology: dgx1-v100\n"
            "    labels: {toposched.io/gpu-schedule: fast}\n",
            4,
            "label toposched.io/gpu-schedule must be one of topology, default, got 'fast'",
        ),
        (
            "nodes:\n  - name: a\n    topology: dgx1-v100\n"
            "    labels:\n      toposched.io/gpu-schedule: 'yes'\n",
            4,
            "must be one of topology, default",
        ),
        ("nodes:\n  - topology: dgx1-v100\n", 2, "nodes[0] needs 'name'"),
        ("nodes:\n  - name: ''\n    topology: dgx1-v100\n", 2, "name must be a non-empty string"),
        ("nodes:\n  - name: a\n", 2, "nodes[0] needs 'topology'"),
        (
            "nodes:\n  - name: a\n    topology: dgx1-v100\n    rack: 3\n",
            4,
            "rack must be a non-empty string, got 3",
        ),
        (
            "nodes:\n  - name: a\n    topology: dgx1-v100\n    zone: z\n",
            4,
            "unknown key 'zone' in nodes[0]; valid keys: name, topology, rack, pod, labels",
        ),
        (
            "nodes:\n  - name: a\n    topology: dgx1-v100\n  - name: a\n    topology: dgx1-v100\n",
            4,
            "two nodes are named 'a'",
        ),
        (
            "groups:\n  - count: 2\n    topology: dgx1-v100\n"
            "nodes:\n  - name: dgx1-v100-1\n    topology: dgx1-v100\n",
            5,
            "two nodes are named 'dgx1-v100-1'",
        ),
    ],
)
def test_bad_files_name_the_line_and_the_problem(text: str, line: int | None, message: str) -> None:
    with pytest.raises(ClusterError) as caught:
        parse_cluster_yaml(text, source="c.yaml")
    assert message in str(caught.value)
    assert caught.value.source == "c.yaml"
    assert caught.value.line == line
    where = "c.yaml" if line is None else f"c.yaml:{line}: "
    assert str(caught.value).startswith(where)


def test_group_numbering_continues_per_prefix() -> None:
    text = "groups:\n  - count: 2\n    topology: dgx1-v100\n    name_prefix: n\n"
    text += "  - count: 1\n    topology: hgx-h100\n    name_prefix: n\n"
    cluster = parse_cluster_yaml(text)
    assert layout(cluster) == [
        ("n-0", "dgx1-v100", "rack-0", "pod-0"),
        ("n-1", "dgx1-v100", "rack-0", "pod-0"),
        ("n-2", "hgx-h100", "rack-1", "pod-0"),
    ]


def test_duplicate_of_a_generated_name_points_at_the_explicit_node() -> None:
    text = "nodes:\n  - name: x-0\n    topology: dgx1-v100\ngroups:\n  - count: 2\n"
    text += "    topology: dgx1-v100\n    name_prefix: x\n"
    with pytest.raises(ClusterError, match=r"c.yaml:2: two nodes are named 'x-0'"):
        parse_cluster_yaml(text, source="c.yaml")


def test_bad_topology_file_includes_its_own_error(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("links:\n  - X NV1\n  - NV2 X\n")
    (tmp_path / "c.yaml").write_text("nodes:\n  - name: a\n    topology: bad.yaml\n")
    with pytest.raises(ClusterError) as caught:
        load_cluster(str(tmp_path / "c.yaml"))
    text = str(caught.value)
    assert caught.value.line == 3
    assert text.startswith(f"{tmp_path / 'c.yaml'}:3: topology 'bad.yaml': ")
    assert f"{tmp_path / 'bad.yaml'}:2: " in text
    assert "not symmetric" in text


def test_missing_topology_file(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("groups:\n  - count: 1\n    topology: gone.yaml\n")
    with pytest.raises(ClusterError) as caught:
        load_cluster(str(tmp_path / "c.yaml"))
    assert caught.value.line == 3
    assert "no preset or file named 'gone.yaml'" in str(caught.value)
    assert "known presets: dgx1-v100" in str(caught.value)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nowhere.yaml", "no such cluster file (a shorthand looks like 64*dgx1-v100/8)"),
        ("dgx1-v100", "no such cluster file (a shorthand looks like 1*dgx1-v100)"),
        (".", "not a regular file"),
    ],
)
def test_missing_cluster_file(tmp_path: Path, spec: str, message: str) -> None:
    assert not looks_like_shorthand(spec)
    with pytest.raises(ClusterError, match=re.escape(message)) as caught:
        load_cluster(spec, base_dir=tmp_path)
    assert caught.value.source == str(tmp_path / spec)


# ---------------------------------------------------------------- round trip


@pytest.mark.parametrize(
    "cluster",
    [
        parse_shorthand("8*dgx1-v100/4+4*pcie-8gpu-2socket"),
        parse_shorthand(" + ".join(f"1 x {name}" for name in PRESETS)),
        Cluster(
            (
                Node("a", preset("hgx-h100"), rack="r", pod="p", labels={"team": "nlp"}),
                Node("b", preset("dgx-a100"), labels={"toposched.io/gpu-schedule": "default"}),
            ),
            network_gbps={Tier.RACK: 50.0, Tier.POD: 25.0, Tier.CLUSTER: 12.5},
        ),
    ],
)
def test_round_trip(cluster: Cluster) -> None:
    text = dump_cluster_yaml(cluster)
    again = parse_cluster_yaml(text, source="dumped.yaml")
    assert again == cluster
    assert layout(again) == layout(cluster)
    assert all(a.topology is b.topology for a, b in zip(again.nodes, cluster.nodes, strict=True))


def test_round_trip_of_examples(tmp_path: Path) -> None:
    for name in ("lab.yaml", "philly-like.yaml"):
        cluster = load_cluster(str(EXAMPLES / name))
        (tmp_path / name).write_text(dump_cluster_yaml(cluster))
        assert load_cluster(name, base_dir=tmp_path) == cluster


def test_dump_refuses_topologies_that_would_not_load_back() -> None:
    renamed = Cluster((Node("a", preset("pcie-4gpu-2socket").renamed("two-pairs")),))
    with pytest.raises(ClusterError, match="node a: topology 'two-pairs' is not a preset"):
        dump_cluster_yaml(renamed)
    faster = replace(preset("dgx1-v100"), bandwidth=BandwidthTable(nvlink_per_link=40.0))
    with pytest.raises(ClusterError, match="'dgx1-v100' is not a preset"):
        dump_cluster_yaml(Cluster((Node("b", faster),)))


# ---------------------------------------------------------------- hardware

GIB = 2**30


def test_shorthand_nodes_have_their_presets_hardware() -> None:
    cluster = parse_shorthand("2*dgx1-v100+1*g4dn-12xlarge")
    assert [n.hardware for n in cluster.nodes] == [preset_hardware("dgx1-v100")] * 2 + [
        preset_hardware("g4dn-12xlarge")
    ]
    assert cluster.nodes[0].hardware == Hardware("V100", 16 * GIB, 80_000, 512 * GIB)


def test_groups_and_nodes_override_the_presets_hardware(tmp_path: Path) -> None:
    (tmp_path / "box.yaml").write_text(PAIRS)
    text = """\
groups:
  - count: 2
    topology: dgx1-v100
    gpu_memory: 32Gi
    cpus: 96
    memory: 768Gi
nodes:
  - name: t4
    topology: g4dn-12xlarge
    cpus: 47.5
  - name: box
    topology: box.yaml
    gpu_type: P100
    gpu_memory: 17179869184
    cpus: 500m
    memory: 64G
  - name: bare
    topology: dgx1-v100
    gpu_type: null
    cpus: null
"""
    (tmp_path / "c.yaml").write_text(text)
    nodes = {n.name: n.hardware for n in load_cluster(str(tmp_path / "c.yaml")).nodes}
    assert nodes["dgx1-v100-0"] == Hardware("V100", 32 * GIB, 96_000, 768 * GIB)
    assert nodes["dgx1-v100-1"] == nodes["dgx1-v100-0"]
    assert nodes["t4"] == Hardware("T4", 16 * GIB, 47_500, 192 * GIB)
    assert nodes["box"] == Hardware("P100", 16 * GIB, 500, 64 * 10**9)
    assert nodes["bare"] == Hardware("", 16 * GIB, None, 512 * GIB)


@pytest.mark.parametrize(
    ("entry", "line", "message"),
    [
        ("    gpu_memory: 32GB", 4, "gpu_memory '32GB': unknown unit 'GB'; for GB write Gi or G"),
        ("    memory: lots", 4, "memory 'lots': expected bytes, or a Kubernetes quantity"),
        ("    cpus: 4x", 4, "cpus '4x': unknown unit 'x'; expected a count of CPUs"),
        ("    cpus: -2", 4, "cpus -2: must not be negative"),
        ("    gpu_type: ''", 4, "gpu_type '': expected a GPU type name such as V100 or T4"),
        ("    gpu_type: 100", 4, "gpu_type 100: expected a GPU type name"),
        ("    gpus: 8", 4, "unknown key 'gpus' in nodes[0]; valid keys: name, topology, rack"),
    ],
)
def test_bad_hardware_names_the_file_line_and_key(entry: str, line: int, message: str) -> None:
    text = f"nodes:\n  - name: a\n    topology: dgx1-v100\n{entry}\n"
    with pytest.raises(ClusterError, match=f"^hw.yaml:{line}: " + re.escape(message)):
        parse_cluster_yaml(text, source="hw.yaml")


def test_bad_hardware_in_a_group_names_its_line() -> None:
    text = "groups:\n  - count: 2\n    topology: dgx1-v100\n\n    memory: 1.5GiB\n"
    with pytest.raises(ClusterError, match=r"^hw.yaml:5: memory '1.5GiB': unknown unit 'GiB'"):
        parse_cluster_yaml(text, source="hw.yaml")


def test_dump_writes_hardware_only_where_it_differs_from_the_preset() -> None:
    v100 = preset_hardware("dgx1-v100")
    cluster = Cluster(
        (
            Node("same", preset("dgx1-v100"), hardware=v100),
            Node("big", preset("dgx1-v100"), hardware=replace(v100, gpu_memory=32 * GIB)),
            Node("odd", preset("g4dn-12xlarge"), hardware=Hardware("T4", 16 * GIB, 2_500, None)),
        )
    )
    text = dump_cluster_yaml(cluster)
    nodes = yaml.safe_load(text)["nodes"]
    assert [set(n) - {"name", "topology", "rack", "pod"} for n in nodes] == [
        set(),
        {"gpu_memory"},
        {"cpus", "memory"},
    ]
    assert nodes[1]["gpu_memory"] == "32Gi"
    assert (nodes[2]["cpus"], nodes[2]["memory"]) == ("2.5", None)
    assert parse_cluster_yaml(text) == cluster


def test_the_mixed_example_has_512_gpus_of_three_types() -> None:
    cluster = load_cluster(str(EXAMPLES / "mixed-v100-p100-t4.yaml"))
    gpus: dict[str, int] = {}
    for n in cluster.nodes:
        gpus[n.hardware.gpu_type] = gpus.get(n.hardware.gpu_type, 0) + n.size
    assert gpus == {"V100": 256, "P100": 128, "T4": 128}
    assert cluster.node("p100-0").hardware == Hardware("P100", 16 * GIB, 40_000, 256 * GIB)
    assert len({n.rack for n in cluster.nodes}) == 10


def test_gpus_in_mig_mode_are_named_by_index_or_all_and_dumped_back() -> None:
    text = """\
groups:
  - count: 2
    topology: hgx-h100
    mig: all
nodes:
  - name: half
    topology: dgx-a100
    mig: [5, 4, 4]
"""
    cluster = parse_cluster_yaml(text, source="mig.yaml")
    nodes = {n.name: n.hardware for n in cluster.nodes}
    assert nodes["hgx-h100-0"].mig == tuple(range(8))
    assert nodes["half"].mig == (4, 5)
    assert "mig: [4, 5]" in dump_cluster_yaml(cluster)
    again = parse_cluster_yaml(dump_cluster_yaml(cluster), source="again.yaml")
    assert [n.hardware for n in again.nodes] == [n.hardware for n in cluster.nodes]


@pytest.mark.parametrize(
    ("topology", "entry", "message"),
    [
        ("hgx-h100", "mig: [8]", "mig [8]: expected the GPUs in MIG mode, a list of GPUs 0..7"),
        ("hgx-h100", "mig: some", "mig 'some': expected the GPUs in MIG mode"),
        ("dgx1-v100", "mig: [0]", "GPUs in MIG mode need a GPU type with a MIG table"),
    ],
)
def test_bad_mig_names_the_file_line_and_what_is_allowed(
    topology: str, entry: str, message: str
) -> None:
    text = f"nodes:\n  - name: a\n    topology: {topology}\n    {entry}\n"
    with pytest.raises(ClusterError, match="^mig.yaml:4: " + re.escape(message)):
        parse_cluster_yaml(text, source="mig.yaml")
