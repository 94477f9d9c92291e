"""A gang annotated with its model goes where the performance model predicts it runs fastest
(`spread_by_model`), against the real API server: on g4dn nodes with 50 Gb/s networking,
spread over more nodes than it needs, as measured there; packed without the option."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.conftest import run_cli
from tests.kube.test_scheduler_e2e import Cluster, node, pod, podgroup, until
from toposched.kube.annotations import encode_topology
from toposched.kube.objects import GPU_PRODUCT, MODEL
from toposched.topology import preset


def g4dn_nodes(c: Cluster, count: int = 4) -> None:
    """AWS g4dn.12xlarge nodes: 4 T4s each, every pair through the host bridge."""
    for i in range(count):
        made = node(f"g4dn-{i}", annotation=encode_topology(preset("g4dn-12xlarge")))
        made["status"]["allocatable"]["nvidia.com/gpu"] = "4"
        made["metadata"]["labels"][GPU_PRODUCT] = "Tesla-T4"
        c.server.create(made)


def gang_of(c: Cluster, job: str, workers: int, annotations: dict[str, str]) -> list[str]:
    group = podgroup(job, workers)
    group["metadata"]["annotations"] = annotations
    c.server.create(group)
    names = [f"{job}-{rank}" for rank in range(workers)]
    for name in names:
        c.server.create(pod(name, 1, group=job))
    return names


def pods_per_node(c: Cluster, names: list[str]) -> list[int]:
    bound = until(lambda: c.bound(*names), "the gang bound")
    return sorted(Counter(node for node, _ in bound.values()).values())


# The network and framework fitted to Pollux's g4dn measurements (docs/perfmodel.md).
FITTED = {"network": "aws-50g", "framework": "pytorch-ddp"}


def test_a_gang_of_a_known_model_spreads_where_the_model_predicts_it_faster(
    cluster: Cluster,
) -> None:
    g4dn_nodes(cluster)
    names = gang_of(cluster, "imagenet", 8, {MODEL: "imagenet"})
    cluster.start(params={"spread_by_model": 0}, **FITTED)
    # Measured on such nodes, 2+2 GPUs run slower than 1+1+1+1: 8 GPUs packed on two nodes
    # (4+4) are predicted slower than spread over all four.
    per_node = pods_per_node(cluster, names)
    assert len(per_node) == 4 and max(per_node) < 4, per_node


@pytest.mark.parametrize(
    ("params", "annotations"),
    [
        ({"spread_by_model": None}, {MODEL: "imagenet"}),
        ({"spread_by_model": 0}, {}),
        ({"spread_by_model": 0}, {MODEL: "no-such-model"}),
    ],
    ids=["option-off", "no-model", "unknown-model"],
)
def test_without_the_option_or_a_known_model_a_gang_spans_the_fewest_nodes(
    cluster: Cluster, params: dict[str, float], annotations: dict[str, str]
) -> None:
    g4dn_nodes(cluster)
    names = gang_of(cluster, "packed", 8, annotations)
    cluster.start(params=params, **FITTED)
    assert pods_per_node(cluster, names) == [4, 4]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--network", "no-such-net"], "no-such-net"),
        (["--framework", "no-such-framework"], "no-such-framework"),
        (["--catalog", "/no/such/catalog.yaml"], "/no/such/catalog.yaml"),
    ],
)
def test_the_scheduler_refuses_a_catalog_it_cannot_use(
    tmp_path: Path, args: list[str], words: str
) -> None:
    done = run_cli("kube", "scheduler", "--kubeconfig", str(tmp_path / "none"), *args)
    assert done.code == 2 and words in done.err, done.err
