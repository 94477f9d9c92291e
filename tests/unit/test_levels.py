"""Network levels of any depth: presets, shorthands and cluster files that declare levels."""

from __future__ import annotations

from collections import Counter

import pytest

from toposched.topology.cluster import Cluster, ClusterError, Node, Tier
from toposched.topology.clusterfile import dump_cluster_yaml, parse_cluster_yaml, parse_shorthand
from toposched.topology.levels import Level
from toposched.topology.presets import preset

LEVELED = """\
name: nvl
levels:
  - {name: clique, gbps: 900, latency_us: 1, nvlink: true}
  - {name: leaf, gbps: 50}
network_gbps: {cluster: 25}
groups:
  - {count: 36, topology: gb200-tray, per_domain: {clique: 18}}
nodes:
  - {name: solo, topology: hgx-h100, levels: {clique: c-solo, leaf: leaf-1}}
"""


def test_sixteen_nvl72_racks_are_288_trays_of_4_gpus_in_16_cliques() -> None:
    cluster = parse_shorthand("16*gb200-nvl72")
    assert (len(cluster.nodes), cluster.gpus) == (288, 1152)
    assert [level.name for level in cluster.levels] == ["clique"]
    assert cluster.levels[0].nvlink and cluster.levels[0].gbps == 900.0
    assert set(Counter(n.levels["clique"] for n in cluster.nodes).values()) == {18}
    assert len({n.levels["clique"] for n in cluster.nodes}) == 16
    assert cluster.beyond_gbps == 50.0
    # Code that knows racks reads the clique as the rack.
    assert cluster.nodes[18].rack == "clique-1" and cluster.network_gbps[Tier.RACK] == 900.0


def test_hgx_nodes_under_leaves_and_spines() -> None:
    cluster = parse_shorthand("64*hgx-h200/leaf=8/spine=32")
    leaves = Counter(n.levels["leaf"] for n in cluster.nodes)
    spines = Counter(n.levels["spine"] for n in cluster.nodes)
    assert (len(leaves), set(leaves.values()), len(spines)) == (8, {8}, 2)
    assert cluster.nodes[0].hardware.gpu_type == "H200"
    readable = parse_shorthand("64 x hgx-h200 in leaves of 8 under spines of 32")
    assert readable.nodes == cluster.nodes


def test_b200_presets_have_nvlink5_links() -> None:
    b200, tray, h100 = preset("dgx-b200"), preset("gb200-tray"), preset("hgx-h100")
    assert b200.bandwidth.of(b200.links[0][1]) == 900.0  # type: ignore[arg-type]
    assert tray.size == 4 and h100.bandwidth.of(h100.links[0][1]) == 450.0  # type: ignore[arg-type]


def test_old_shorthands_keep_racks_and_pods() -> None:
    cluster = parse_shorthand("8*dgx1-v100/4+4*pcie-8gpu-2socket")
    assert cluster.levels == ()
    assert [n.rack for n in cluster.nodes] == ["rack-0"] * 4 + ["rack-1"] * 4 + ["rack-2"] * 4
    assert [level.name for level in cluster.all_levels] == ["rack", "pod"]


@pytest.mark.parametrize(
    "spec",
    [
        "16*gb200-nvl72/4",
        "4*gb200-nvl72+2*hgx-h100",
        "4*hgx-h100/leaf=0",
        "8*hgx-h100/leaf=4/spine=6",
    ],
)
def test_bad_leveled_shorthands_say_why(spec: str) -> None:
    with pytest.raises(ClusterError, match="cluster shorthand"):
        parse_shorthand(spec)


def test_a_file_declares_levels_and_loads_back_from_its_dump() -> None:
    cluster = parse_cluster_yaml(LEVELED, source="nvl.yaml")
    assert [n.levels["clique"] for n in cluster.nodes[16:20]] == ["clique-0"] * 2 + ["clique-1"] * 2
    assert cluster.nodes[-1].levels == {"clique": "c-solo", "leaf": "leaf-1"}
    assert cluster.network_gbps[Tier.CLUSTER] == 25.0
    assert parse_cluster_yaml(dump_cluster_yaml(cluster)) == cluster


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ("levels: [{name: a, gbps: -1}]\nnodes: []\n", "f.yaml:1", "gbps must be positive"),
        ("levels: [{name: a, gbps: fast}]\n", "f.yaml:1", "gbps must be a number"),
        (
            "levels: [{name: a, gbps: 1}]\nnodes:\n"
            "  - {name: x, topology: hgx-h100, levels: {b: c}}\n",
            "f.yaml:3",
            "unknown level 'b'",
        ),
        (
            "levels: [{name: a, gbps: 1}, {name: b, gbps: 1}]\n"
            "nodes:\n  - {name: x, topology: hgx-h100, levels: {a: c}}\n",
            "f.yaml:3",
            "no value for level 'b'",
        ),
        (
            "levels: [{name: a, gbps: 1}]\nnodes:\n  - {name: x, topology: hgx-h100, rack: r}\n",
            "f.yaml:3",
            "declares levels",
        ),
        (
            "levels: [{name: a, gbps: 1}]\ngroups:\n"
            "  - {count: 2, topology: hgx-h100, per_domain: {z: 1}}\n",
            "f.yaml:3",
            "unknown level 'z'",
        ),
        ("levels: [{name: a, gbps: 1}]\nnetwork_gbps: {rack: 3}\n", "f.yaml:2", "unknown tier"),
        (
            "levels: [{name: a, gbps: 1}, {name: b, gbps: 9, nvlink: true}]\n"
            "nodes:\n  - {name: x, topology: hgx-h100, levels: {a: c, b: d}}\n",
            "f.yaml",
            "comes after a network level",
        ),
    ],
)
def test_bad_levels_name_the_file_line_and_key(text: str, where: str, what: str) -> None:
    with pytest.raises(ClusterError, match=what) as err:
        parse_cluster_yaml(text, source="f.yaml")
    assert str(err.value).startswith(where)


def test_a_cluster_refuses_a_node_without_a_levels_value() -> None:
    node = Node("n", preset("hgx-h100"), levels={"leaf": "l0"})
    with pytest.raises(ClusterError, match="no value for level 'spine'"):
        Cluster((node,), levels=(Level("leaf", 50.0), Level("spine", 50.0)))
