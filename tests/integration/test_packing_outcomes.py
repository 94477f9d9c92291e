"""What each share policy decides under the FGD paper's protocol, pinned: a speed-up changes none.

sim/packing.py is made faster from time to time; this pins its outcome on a case of about a
thousand pods (openb_pod_list_gpuspec33.csv on every tenth node of the openb GPU node list, 121
nodes, 626 GPUs): per policy, the pods that failed, the thousandths allocated and FGD's measure
at the end. Any one placement made differently changes at least one of them in practice. A
change meant to change what a policy decides updates the figures here and says so in its
commit.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from toposched.sim.clusters import read_machine_list
from toposched.sim.packing import Pod, pack, read_pods
from toposched.topology.cluster import Cluster

ROOT = Path(__file__).resolve().parents[2]
PODS = ROOT / "data" / "traces" / "openb" / "openb_pod_list_gpuspec33.csv"
NODES = ROOT / "data" / "clusters" / "openb" / "openb_node_list_gpu_node.csv"

# policy: (failed pods, thousandths allocated, FGD's measure at the end in GPUs)
PINNED = {
    "toposched": (237, 593_750, 32.128),
    "fgd": (237, 593_750, 32.127),
    "best-fit": (279, 586_740, 39.120),
    "gpu-packing": (279, 574_890, 50.491),
    "random": (274, 532_170, 93.425),
}


@cache
def case() -> tuple[tuple[Pod, ...], Cluster]:
    cluster = read_machine_list(NODES)
    return tuple(read_pods(PODS)), Cluster(cluster.nodes[::10])


@pytest.mark.parametrize("policy", sorted(PINNED))
def test_each_policy_has_its_pinned_outcome(policy: str) -> None:
    pods, cluster = case()
    result = pack(pods, cluster, policy)
    assert (result.total_gpus, result.pods) == (626, 1068)
    got = (result.failed, result.allocated_milli, round(result.fragmentation, 3))
    assert got == PINNED[policy]
