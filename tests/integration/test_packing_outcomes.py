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
    "toposched": (224, 591_220, 34.652),
    "fgd": (217, 596_410, 29.479),
    "best-fit": (258, 584_290, 41.651),
    "gpu-packing": (261, 581_720, 44.192),
    "random": (250, 551_680, 73.650),
}


@cache
def case() -> tuple[tuple[Pod, ...], Cluster]:
    cluster = read_machine_list(NODES)
    return tuple(read_pods(PODS)), Cluster(cluster.nodes[::10])


@pytest.mark.parametrize("policy", sorted(PINNED))
def test_each_policy_has_its_pinned_outcome(policy: str) -> None:
    pods, cluster = case()
    result = pack(pods, cluster, policy)
    assert (result.total_gpus, result.pods) == (626, 1047)
    got = (result.failed, result.allocated_milli, round(result.fragmentation, 3))
    assert got == PINNED[policy]
