"""The model's terms for measured clusters: fixed step time, colocation, NIC sharing, per-flow
caps, pipelined and hierarchical all-reduce, the exposed last bucket, mixed precision."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from toposched.perf import Catalog, CatalogError, NodeShare, PerfModel
from toposched.perf.comm import NetworkStage, allreduce_s, ring_peers
from toposched.perf.specs import Allreduce, Precision
from toposched.topology import preset
from toposched.topology.cluster import Tier

G4DN = preset("g4dn-12xlarge")
BASE = Catalog.load()


def nodes(*counts: int) -> list[NodeShare]:
    return [(G4DN, tuple(range(k))) for k in counts]


def with_framework(**fields: Any) -> PerfModel:
    frame = replace(BASE.framework("pytorch-horovod"), **fields)
    return PerfModel(BASE.with_entries(frameworks=[frame]))


def with_network(**fields: Any) -> PerfModel:
    net = replace(BASE.network("aws-50g"), **fields)
    return PerfModel(BASE.with_entries(networks=[net]))


def step(model: PerfModel, *counts: int, batch: int = 8, job: str = "bert") -> float:
    tier = Tier.RACK if len(counts) > 1 else Tier.NODE
    estimate = model.estimate(job, "T4", nodes(*counts), network="aws-50g", tier=tier, batch=batch)
    return estimate.iteration_s


def test_g4dn_preset_and_its_gpu_type() -> None:
    assert G4DN.size == 4
    assert {G4DN.bandwidth_matrix[i][j] for i in range(4) for j in range(4) if i != j} == {12.0}
    assert len(set(G4DN.switches)) == 4 and len(set(G4DN.sockets)) == 1
    assert BASE.gpu_for("g4dn-12xlarge") == "T4"
    assert BASE.gpu_for("dgx1-v100") == "V100"
    assert BASE.gpu_for("my-box") == "V100"


def test_the_fixed_part_of_a_step_is_added_once_and_never_hidden() -> None:
    bert = BASE.model("bert")
    t4 = BASE.gpu("T4")
    assert BASE.fixed_s(bert, t4) == pytest.approx(0.2267)
    one = PerfModel().estimate("bert", "T4", nodes(1), batch=8)
    frame = BASE.framework("pytorch-horovod")
    assert one.compute_s == pytest.approx(0.2267 + 8 * frame.compute_scale / 20.06)
    # No measurement on V100: the T4 figure scaled by speed.
    assert BASE.fixed_s(bert, BASE.gpu("V100")) == pytest.approx(0.2267 * t4.speed)
    assert BASE.fixed_s(BASE.model("vgg16"), t4) == 0.0


def test_colocation_slows_the_jobs_own_gpus_on_a_node() -> None:
    plain = with_framework(colocation=0.0)
    crowded = with_framework(colocation=0.1)
    one = plain.estimate("bert", "T4", nodes(1), batch=8)
    assert crowded.estimate("bert", "T4", nodes(1), batch=8) == one
    four = crowded.estimate("bert", "T4", nodes(4), batch=8)
    assert four.compute_s - one.compute_s == pytest.approx(0.3 * (one.compute_s - 0.2267))


def test_step_overhead_is_paid_by_distributed_steps_only() -> None:
    slow = with_framework(step_overhead_ms=50.0)
    fast = with_framework(step_overhead_ms=0.0)
    assert step(slow, 1) == step(fast, 1)
    assert step(slow, 2) == pytest.approx(step(fast, 2) + 0.05)


def test_nic_contention_and_the_per_flow_cap_make_packing_slower() -> None:
    """The issue's shape: 22 is slower than 1111. A flow cap (two nodes: one peer) and the NIC
    shared by the job's GPUs on a node each produce it; without them the two are equal."""
    nominal = with_network(flow_gbps=None, contention=0.0, efficiency=0.1)
    assert step(nominal, 2, 2, batch=1) <= step(nominal, 1, 1, 1, 1, batch=1) * 1.01
    capped = with_network(flow_gbps=0.4, contention=0.0, efficiency=1.0)
    assert step(capped, 2, 2, batch=1) > 1.5 * step(capped, 1, 1, 1, 1, batch=1)
    shared = with_network(flow_gbps=None, contention=0.5, efficiency=0.1)
    assert step(shared, 4, 4, batch=1) > step(shared, 2, 2, 2, 2, batch=1)
    assert [ring_peers(n) for n in (2, 3, 4, 16)] == [1, 2, 2, 2]
    profile = BASE.network("aws-50g")
    assert profile.node_gbps(Tier.RACK, 1) == pytest.approx(min(0.75, profile.flow_gbps or 0))


def test_ring_pipelined_and_hierarchical_all_reduce() -> None:
    frame = BASE.framework("pytorch-horovod")
    net = NetworkStage(gbps=1.0, contention=0.0, latency_us=100.0)
    sizes, rings = [2, 2], [12.0, 12.0]
    gb = 0.064  # one fusion buffer
    ring = allreduce_s(gb, sizes, rings, net, frame)
    bandwidth = 2 * 3 / 4 * gb / 1.0
    assert ring == pytest.approx(bandwidth + 2 * 3 * (frame.step_latency_us + 100.0) * 1e-6)
    piped = allreduce_s(gb, sizes, rings, net, replace(frame, allreduce=Allreduce.PIPELINED))
    assert piped == pytest.approx(bandwidth + 2 * (2 * frame.step_latency_us + 2 * 100.0) * 1e-6)
    staged = allreduce_s(gb, sizes, rings, net, replace(frame, allreduce=Allreduce.HIERARCHICAL))
    local = 2 * 1 / 2 * gb / (frame.link_efficiency * 12.0)
    across = 2 * 1 / 2 * gb / 1.0
    latency = (2 * 1 * frame.step_latency_us + 2 * 1 * (frame.step_latency_us + 100.0)) * 1e-6
    assert staged == pytest.approx(local + across + latency)
    # One node: every algorithm is the node's ring.
    for algorithm in Allreduce:
        variant = replace(frame, allreduce=algorithm)
        assert allreduce_s(gb, [4], [12.0], None, variant) == pytest.approx(
            allreduce_s(gb, [4], [12.0], None, frame)
        )


def test_bridge_sharing_divides_a_nodes_links_among_its_gpus() -> None:
    frame = replace(BASE.framework("pytorch-horovod"), bridge_sharing=1.0)
    shared = allreduce_s(0.064, [4], [12.0], None, frame)
    alone = allreduce_s(0.064, [4], [12.0], None, replace(frame, bridge_sharing=0.0))
    latency = 2 * 3 * frame.step_latency_us * 1e-6
    assert shared - latency == pytest.approx(4 * (alone - latency))


def test_the_last_bucket_stays_exposed() -> None:
    hidden = with_framework(exposed_buckets=0.0, overlap=1.0)
    tail = with_framework(exposed_buckets=1.0, overlap=1.0)
    big = 512  # a long backward pass hides all of ResNet-50's traffic
    a = hidden.estimate("resnet50", "T4", nodes(2, 2), network="aws-50g", batch=big)
    b = tail.estimate("resnet50", "T4", nodes(2, 2), network="aws-50g", batch=big)
    assert a.comm_exposed_s == 0.0
    assert b.comm_exposed_s == pytest.approx(b.comm_s / 2)  # 102 MB: two 64 MB buffers


def test_mixed_precision_is_a_catalog_property() -> None:
    mixed = BASE.model("resnet50-mixed")
    assert mixed.precision is Precision.MIXED and mixed.gradient_bytes == 4.0
    no_measurement = replace(mixed, throughput={}, fixed_s={})
    t4, v100 = BASE.gpu("T4"), BASE.gpu("V100")
    estimate = BASE.throughput(no_measurement, t4)
    assert estimate == pytest.approx(65.0e3 * 0.15 / (3 * 8.2))
    fp32 = replace(no_measurement, precision=Precision.FP32)
    assert estimate > 2 * BASE.throughput(fp32, t4)
    # Scaled between GPU types by their fp16 peaks (times speed over fp32 peak).
    on_v100 = BASE.throughput(mixed, v100)
    assert on_v100 == pytest.approx(275.7 * (125.0 / 15.7) / (65.0 / 8.1 * t4.speed))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("models:\n  m:\n    params_m: 1\n    forward_gflops: 1\n    precision: fp8\n",
         "x.yaml:5: models.m.precision: must be one of fp32, mixed, got 'fp8'"),
        ("frameworks:\n  f:\n    pattern: allreduce\n    overlap: 0.5\n    link_efficiency: 0.5\n"
         "    allreduce: tree\n", "frameworks.f.allreduce: must be one of ring, pipelined"),
        ("frameworks:\n  f:\n    pattern: allreduce\n    overlap: 0.5\n    link_efficiency: 0.5\n"
         "    bridge_sharing: 2\n", "frameworks.f.bridge_sharing: must be >= 0 and <= 1, got 2"),
        ("networks:\n  n:\n    bandwidth_gbps: 1\n    flow_gbps: 0\n",
         "x.yaml:4: networks.n.flow_gbps: must be > 0, got 0"),
        ("models:\n  m:\n    params_m: 1\n    forward_gflops: 1\n    fixed_s: {V100: -1}\n",
         "models.m.fixed_s.V100: must be >= 0, got -1"),
    ],
)  # fmt: skip
def test_new_catalog_fields_are_checked(text: str, message: str) -> None:
    with pytest.raises(CatalogError) as info:
        Catalog.load([("x.yaml", text)])
    assert message in str(info.value)
