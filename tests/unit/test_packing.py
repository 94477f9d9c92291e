"""sim/packing.py's inputs: pod lists read or refused, the tuning's copies, a replayed order."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from toposched.sim.clusters import read_machine_list
from toposched.sim.packing import MIB, Pod, pack, read_pods, tuned
from toposched.topology.resources import type_key

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "openb"
PODS = FIXTURES / "gpuspec.csv"
NODES = FIXTURES / "nodes.csv"
HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


def test_a_pod_list_is_read_by_name_with_shares_types_and_cpu_only_pods(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(HEADER + "b,4000,1024,1,250,V100M16|T4\nc,2000,512,0,0,\na,8000,2048,2,1000,\n")
    assert read_pods(path) == [
        Pod("a", 8000, 2048 * MIB, 2, 1000, frozenset()),
        Pod("b", 4000, 1024 * MIB, 1, 250, frozenset({type_key("V100M16"), type_key("T4")})),
        Pod("c", 2000, 512 * MIB, 0, 0, frozenset()),
    ]


@pytest.mark.parametrize(
    ("row", "says"),
    [
        ("x,4000,1024,2,500,", "num_gpu 2 with gpu_milli 500"),
        ("x,4000,1024,1,1500,", "num_gpu 1 with gpu_milli 1500"),
        ("x,four,1024,1,500,", "not an openb pod row"),
    ],
)
def test_a_bad_row_is_refused_naming_its_file_and_line(tmp_path: Path, row: str, says: str) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(HEADER + "a,1000,1024,1,1000,\n" + row + "\n")
    with pytest.raises(ValueError, match=f"pods.csv:3: {says}"):
        read_pods(path)


def test_the_tuning_appends_copies_up_to_the_target_and_names_them_after_their_pod() -> None:
    pods = [Pod(f"p{i}", 1000, MIB, 1, 500, frozenset()) for i in range(4)]  # 2,000 asked
    out = tuned(pods, total_milli=4000, rng=random.Random(1), tune=1.3)  # target 5,200
    assert out[:4] == pods
    copies = out[4:]
    assert len(copies) == 6  # 2,000 + 6 x 500 = 5,000; one more would pass 5,200
    assert [c.name.rsplit("-tuned-", 1)[1] for c in copies] == [str(i) for i in range(6)]
    assert all(c.name.split("-tuned-")[0] in {p.name for p in pods} for c in copies)


def test_the_tuning_drops_pods_at_random_where_the_list_asks_more() -> None:
    pods = [Pod(f"p{i}", 1000, MIB, 1, 1000, frozenset()) for i in range(10)]  # 10,000 asked
    out = tuned(pods, total_milli=4000, rng=random.Random(1), tune=1.3)  # target 5,200
    assert len(out) == 5 and set(out) <= set(pods)


def test_a_given_order_is_replayed_arrival_by_arrival() -> None:
    pods, cluster = read_pods(PODS), read_machine_list(NODES)
    order = [pods[3].name, pods[0].name, pods[3].name]  # a copy arrives by its pod's name
    result = pack(pods, cluster, "toposched", order=order)
    assert result.pods == 3
    assert result.allocated_milli == 2 * pods[3].asked + pods[0].asked


def test_an_order_naming_a_pod_the_list_lacks_is_refused_naming_it() -> None:
    pods, cluster = read_pods(PODS), read_machine_list(NODES)
    with pytest.raises(ValueError, match="arrival 1 names pod 'nobody', which the pod list lacks"):
        pack(pods, cluster, "toposched", order=[pods[0].name, "nobody"])
