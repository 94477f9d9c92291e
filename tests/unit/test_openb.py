"""The openb pod list's GPU types, CPUs and memory, and the openb and PAI 2020 machine lists."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from toposched.sim.clusters import RACK_NODES, generic_topology, read_machine_list
from toposched.sim.traces import TraceError, read_trace
from toposched.sim.workload import DEFAULT_WORKLOAD
from toposched.topology.cluster import ClusterError
from toposched.topology.presets import preset
from toposched.topology.resources import Hardware

ROOT = Path(__file__).resolve().parents[2]
OPENB = ROOT / "tests" / "fixtures" / "traces" / "openb"
NODE_LIST = ROOT / "data" / "clusters" / "openb" / "openb_node_list_gpu_node.csv"
PAI_2020 = ROOT / "data" / "clusters" / "pai-2020" / "pai_machine_spec.csv"
MIB, GIB = 2**20, 2**30

# (name, gpus, cpus per GPU in millicores, memory per GPU in bytes, GPU types), from the rows.
GPUSPEC = [
    ("openb-pod-0000", 1, 12_000, 16_384 * MIB, ()),
    ("openb-pod-0001", 1, 6_000, 12_288 * MIB, ()),
    ("openb-pod-0002", 1, 12_000, 24_576 * MIB, ()),
    ("openb-pod-0003", 1, 6_000, 12_288 * MIB, ()),
    ("openb-pod-0004", 1, 12_000, 16_384 * MIB, ()),
    ("openb-pod-0006", 1, 4_000, 16_384 * MIB, ()),
    ("openb-pod-0009", 1, 12_000, 16_384 * MIB, ("V100M16", "V100M32")),
    ("openb-pod-0012", 1, 8_000, 32_768 * MIB, ("T4",)),
    ("openb-pod-0017", 8, 11_000, 40_960 * MIB, ("G2",)),  # 88000 m, 327680 MiB over 8
    ("openb-pod-0021", 1, 8_000, 30_517 * MIB, ("G2", "P100", "T4", "V100M16", "V100M32")),
    ("openb-pod-0022", 1, 4_000, 15_258 * MIB, ("T4",)),
    ("openb-pod-0598", 1, 4_000, 31_250 * MIB, ("V100M16", "V100M32")),  # V100M32 twice
    ("openb-pod-2182", 4, 8_050, 33_024 * MIB, ("V100M16", "V100M32")),  # 32200 m over 4
]


def test_pod_types_cpus_and_memory_per_gpu() -> None:
    trace = read_trace(OPENB / "gpuspec.csv")
    got = [(j.name, j.gpus, j.cpus, j.memory, j.gpu_types) for j in trace.jobs]
    assert got == GPUSPEC
    assert trace.skip_reasons == {"no-gpu": 1}
    # pods 0001, 0003 (460), 0021 (440) and 0022 (220) ask part of a GPU, and keep it
    shares = {j.name: j.gpu_milli for j in trace.jobs if j.gpu_milli}
    assert shares == {
        "openb-pod-0001": 460,
        "openb-pod-0003": 460,
        "openb-pod-0021": 440,
        "openb-pod-0022": 220,
    }
    assert trace.notes == {}


def test_pods_become_specs_with_their_types_and_resources() -> None:
    job = read_trace(OPENB / "gpuspec.csv").jobs[-1]
    spec = DEFAULT_WORKLOAD.spec(job, 8)
    assert (spec.workers, spec.gpus_per_worker) == (4, 1)
    assert (spec.cpus, spec.memory, spec.gpu_types) == (8_050, 33_024 * MIB, job.gpu_types)
    assert not spec.mixed_types


def test_a_share_of_a_gpu_becomes_a_spec_that_asks_it() -> None:
    job = next(j for j in read_trace(OPENB / "gpuspec.csv").jobs if j.name == "openb-pod-0022")
    spec = DEFAULT_WORKLOAD.spec(job, 8)
    assert (spec.workers, spec.gpus_per_worker, spec.gpu_milli, spec.shared) == (1, 1, 220, True)


def test_bad_pod_rows_stop_the_read_or_are_skipped_and_counted() -> None:
    path = OPENB / "gpuspec_bad.csv"
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    assert (caught.value.line, caught.value.column) == (2, "cpu_milli")
    trace = read_trace(path, skip_bad=True)
    assert [j.name for j in trace.jobs] == ["openb-pod-0022"]
    assert trace.skip_reasons == {"bad-value": 2, "missing-value": 1}


def test_each_bad_pod_row_alone(tmp_path: Path) -> None:
    lines = (OPENB / "gpuspec_bad.csv").read_text().splitlines()
    expected = {
        2: ("'12k' is not a whole number", "cpu_milli"),
        3: ("empty value", "memory_mib"),
        4: (
            "'G2||T4|V100M16|V100M32' has an empty GPU type; expected types joined by |",
            "gpu_spec",
        ),
    }
    for line, (message, column) in expected.items():
        path = tmp_path / f"bad-{line}.csv"
        path.write_text("\n".join([lines[0]] + [""] * (line - 2) + [lines[line - 1]]) + "\n")
        with pytest.raises(TraceError) as caught:
            read_trace(path)
        assert str(caught.value) == f"{path}:{line}: {message} (column {column})"


# ---------------------------------------------------------------- machine lists


def test_openb_node_list() -> None:
    cluster = read_machine_list(OPENB / "nodes.csv")
    assert cluster.name == "nodes.csv (15 GPU nodes)"
    first = cluster.nodes[0]
    assert (first.name, first.rack) == ("openb-node-0000", "rack-0")
    assert first.hardware == Hardware("P100", 16 * GIB, 64_000, 262_144 * MIB)
    by_name = {n.name: n for n in cluster.nodes}
    assert by_name["openb-node-0022"].hardware == Hardware("G3", 0, 128_000, 786_432 * MIB)
    assert by_name["openb-node-0023"].hardware.gpu_memory == 32 * GIB  # V100M32
    assert by_name["openb-node-1032"].hardware.gpu_memory == 24 * GIB  # A10
    sizes = {n.name: (n.size, n.topology.name) for n in cluster.nodes}
    assert sizes["openb-node-0143"] == (1, "pcie-1gpu")
    assert sizes["openb-node-0000"] == (2, "pcie-2gpu")
    assert sizes["openb-node-0025"] == (4, "pcie-4gpu-2socket")
    assert sizes["openb-node-0022"] == (8, "pcie-8gpu-2socket")
    assert by_name["openb-node-0000"].topology is by_name["openb-node-0051"].topology


def test_node_list_leaves_cpu_only_nodes_out() -> None:
    cluster = read_machine_list(OPENB / "nodes_all_head.csv")
    assert [n.name for n in cluster.nodes] == ["openb-node-0123", "openb-node-0234"]
    assert cluster.name == "nodes_all_head.csv (2 GPU nodes, 2 nodes without GPUs left out)"


def test_the_whole_openb_node_list() -> None:
    cluster = read_machine_list(NODE_LIST)
    assert (len(cluster.nodes), cluster.gpus) == (1213, 6212)
    types = Counter(n.hardware.gpu_type for n in cluster.nodes for _ in range(n.size))
    assert types["G2"] == 549 * 8
    assert len({n.rack for n in cluster.nodes}) == -(-1213 // RACK_NODES)


def test_the_pai_2020_machine_spec() -> None:
    cluster = read_machine_list(PAI_2020)
    assert (len(cluster.nodes), cluster.gpus) == (1814, 6742)
    kinds = Counter((n.hardware.gpu_type, n.size) for n in cluster.nodes)
    assert kinds == {
        ("P100", 2): 798,
        ("T4", 2): 497,
        ("MISC", 8): 280,
        ("V100M32", 8): 135,
        ("V100", 8): 104,
    }
    assert cluster.nodes[0].hardware == Hardware("T4", 16 * GIB, 96_000, 512 * GIB)
    assert cluster.name.endswith("(1814 GPU nodes, 83 nodes without GPUs left out)")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (3, "'two' is not a whole number >= 0 (column gpu)"),
        (4, "empty value (column cpu_milli)"),
        (5, "node 'openb-node-0000' is already listed on line 2 (column sn)"),
        (6, "found 6 fields, the header has 5"),
        (7, "empty value (column model)"),
    ],
)
def test_bad_node_rows_name_file_line_and_column(tmp_path: Path, line: int, message: str) -> None:
    lines = (OPENB / "nodes_bad.csv").read_text().splitlines()
    path = tmp_path / "nodes.csv"
    path.write_text("\n".join(lines[:2] + [""] * (line - 3) + [lines[line - 1]]) + "\n")
    with pytest.raises(ClusterError) as caught:
        read_machine_list(path)
    assert str(caught.value) == f"{path}:{line}: {message}"


def test_bad_pai_rows_and_headers(tmp_path: Path) -> None:
    path = tmp_path / "pai.csv"
    path.write_text("machine,gpu_type,cap_cpu,cap_mem,cap_gpu\nm1,T4,96,512GB,2\n")
    with pytest.raises(ClusterError, match=re.escape(f"{path}:2: '512GB' is not a whole number")):
        read_machine_list(path)
    path.write_text("7399a758eb02bae1a3621236,CPU,96,512,0\n")
    with pytest.raises(ClusterError, match=re.escape(f"{path}:1: cannot tell the machine list")):
        read_machine_list(path)
    path.write_text("machine,gpu_type,cap_cpu,cap_mem,cap_gpu\nm1,CPU,96,512,0\n")
    with pytest.raises(ClusterError, match="the list has no node with GPUs"):
        read_machine_list(path)
    with pytest.raises(ClusterError, match="cannot read the file"):
        read_machine_list(tmp_path / "missing.csv")


def test_generic_topologies() -> None:
    assert generic_topology(8) is preset("pcie-8gpu-2socket")
    assert generic_topology(4) is preset("pcie-4gpu-2socket")
    two = generic_topology(2)
    assert (two.size, two.name) == (2, "pcie-2gpu")
    assert two is generic_topology(2)  # one object per size: shared placement tables
