"""Performance-model invariants on random topologies: monotone in bandwidth and neighbours."""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies import topologies
from toposched.perf import Catalog, NetworkProfile, PerfModel, interference_factor
from toposched.perf.interference import factor_from_counts, level_masks, neighbour_counts
from toposched.placement.tables import to_mask
from toposched.topology import BandwidthTable, NodeTopology, preset
from toposched.topology.cluster import Tier

FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CATALOG = Catalog.load()
MODELS = ("vgg16", "resnet50", "alexnet", "inception3", "bert-large", "lstm")
FRAMEWORKS = tuple(CATALOG.frameworks)


def _faster(topology: NodeTopology, factor: float) -> NodeTopology:
    table = BandwidthTable(**{k: v * factor for k, v in vars(topology.bandwidth).items()})
    return NodeTopology(
        links=topology.links, numa=topology.numa, switch=topology.switch, bandwidth=table
    )


@st.composite
def jobs(draw: st.DrawFn) -> tuple[NodeTopology, tuple[int, ...], str, str, int]:
    topology = draw(topologies(min_gpus=1, max_gpus=8))
    k = draw(st.integers(1, topology.size))
    gpus = tuple(sorted(draw(st.permutations(range(topology.size)))[:k]))
    return (
        topology,
        gpus,
        draw(st.sampled_from(MODELS)),
        draw(st.sampled_from(FRAMEWORKS)),
        draw(st.sampled_from((1, 16, 64, 256))),
    )


@FAST
@given(jobs(), st.floats(1.0, 20.0), st.integers(1, 3))
def test_more_bandwidth_is_never_slower(job, factor: float, nodes: int) -> None:
    topology, gpus, model_name, framework, batch = job
    model = PerfModel(CATALOG)
    placement = [(topology, gpus)] * nodes
    base = model.estimate(model_name, "V100", placement, framework=framework, batch=batch)
    faster_nodes = [(_faster(topology, factor), gpus)] * nodes
    faster = model.estimate(model_name, "V100", faster_nodes, framework=framework, batch=batch)
    assert faster.iteration_s <= base.iteration_s * (1 + 1e-12)
    if nodes > 1:
        current = CATALOG.network("default")
        wider = NetworkProfile(
            "wider", {t: v * factor for t, v in current.bandwidth_gbps.items()}, current.efficiency
        )
        on_wider = PerfModel(CATALOG.with_network(wider)).estimate(
            model_name, "V100", placement, framework=framework, batch=batch, network="wider"
        )
        assert on_wider.iteration_s <= base.iteration_s * (1 + 1e-12)
        for tier in (Tier.POD, Tier.CLUSTER):
            further = model.estimate(
                model_name, "V100", placement, framework=framework, batch=batch, tier=tier
            )
            assert further.iteration_s >= base.iteration_s * (1 - 1e-12)


@FAST
@given(jobs(), st.data())
def test_more_neighbours_are_never_faster_and_one_gpu_never_talks(job, data) -> None:
    topology, gpus, model_name, framework, batch = job
    model = PerfModel(CATALOG)
    free = [g for g in range(topology.size) if g not in gpus]
    order = data.draw(st.permutations(free))
    last = None
    for count in range(len(order) + 1):
        result = model.estimate(
            model_name,
            "V100",
            [(topology, gpus)],
            framework=framework,
            batch=batch,
            neighbours=[order[:count]],
        )
        if last is not None:
            assert result.iteration_s >= last.iteration_s * (1 - 1e-12)
            assert result.interference >= last.interference
        last = result
        if len(gpus) == 1:
            assert result.comm_s == 0.0 and result.iteration_s == result.compute_s


@FAST
@given(jobs())
def test_ideal_is_at_least_as_fast_as_any_single_node_placement(job) -> None:
    topology, gpus, model_name, framework, batch = job
    model = PerfModel(CATALOG)
    ratio = model.speed_ratio(
        model_name, "V100", [(topology, gpus)], framework=framework, batch=batch
    )
    assert 0.0 < ratio <= 1.0 + 1e-9


@FAST
@given(jobs())
def test_neighbour_counts_determine_the_interference_factor(job) -> None:
    """Every set of neighbours, by brute force: the factor made from `neighbour_counts` (what
    the simulator computes) is `interference_factor`, and equal counts slow the job alike."""
    topology, gpus, model_name, framework_name, _ = job
    model, framework = CATALOG.model(model_name), CATALOG.framework(framework_name)
    levels = level_masks(topology)
    own = to_mask(gpus)
    free = [g for g in range(topology.size) if g not in gpus]
    factors: dict[tuple[tuple[int, int, int], ...], float] = {}
    for count in range(len(free) + 1):
        for others in combinations(free, count):
            counts = neighbour_counts(levels, own, to_mask(others))
            assert len(counts) == len(gpus)
            assert all(sum(c) == count for c in counts)
            factor = interference_factor(topology, gpus, others, framework, model)
            assert factor_from_counts(counts, framework, model) == factor
            assert factors.setdefault(counts, factor) == factor


@FAST
@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=4),
    st.sampled_from(("bert", "cifar10", "imagenet", "vgg16")),
    st.sampled_from(("pytorch-ddp", "pytorch-horovod", "tensorflow-horovod")),
    st.sampled_from((1, 8, 64, 512)),
    st.sampled_from(("flow_gbps", "efficiency", "contention", "latency_us")),
    st.sampled_from(
        ("colocation", "bridge_sharing", "exposed_buckets", "step_overhead_ms", "step_latency_us")
    ),
    st.floats(1.05, 4.0),
)
def test_a_worse_cluster_is_never_faster(
    counts, model_name, framework, batch, network_field, framework_field, factor
) -> None:
    """Less per-flow or NIC bandwidth, more NIC contention or latency, more host sharing, more
    exposed buckets or overhead: never a faster step (the fitted terms of `perf fit`)."""
    node = preset("g4dn-12xlarge")
    placement = [(node, tuple(range(k))) for k in counts]
    tier = Tier.RACK if len(counts) > 1 else Tier.NODE
    net = CATALOG.network("aws-50g")
    frame = CATALOG.framework(framework)
    worse_net = {
        "flow_gbps": replace(net, flow_gbps=(net.flow_gbps or 1.0) / factor),
        "efficiency": replace(net, efficiency=net.efficiency / factor),
        "contention": replace(net, contention=net.contention * factor + 0.01),
        "latency_us": replace(net, latency_us=net.latency_us * factor + 1.0),
    }[network_field]
    worse_frame = replace(
        frame,
        **{framework_field: min(getattr(frame, framework_field) * factor + 0.01, 1.0)}
        if framework_field == "bridge_sharing"
        else {framework_field: getattr(frame, framework_field) * factor + 0.01},
    )

    def step(catalog: Catalog) -> float:
        estimate = PerfModel(catalog).estimate(
            model_name, "T4", placement, framework=framework, network="aws-50g", tier=tier,
            batch=batch,
        )  # fmt: skip
        return estimate.iteration_s

    base = step(CATALOG)
    assert step(CATALOG.with_entries(networks=[worse_net])) >= base * (1 - 1e-12)
    assert step(CATALOG.with_entries(frameworks=[worse_frame])) >= base * (1 - 1e-12)
