"""The performance model: iteration time and throughput of a data-parallel job on a placement."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from toposched.perf.comm import (
    NetworkStage,
    allreduce_s,
    buckets,
    exposed_s,
    local_ps_s,
    remote_ps_s,
    ring_peers,
)
from toposched.perf.errors import PerfError
from toposched.perf.interference import interference_factor
from toposched.perf.registry import Catalog
from toposched.perf.specs import FrameworkSpec, GpuSpec, ModelSpec, NetworkProfile, Pattern
from toposched.placement.capacity import full_mask
from toposched.placement.ring import ring_bandwidth
from toposched.placement.tables import MAX_TABLE_GPUS, NodeTooLarge
from toposched.placement.topology_aware import choose
from toposched.topology.cluster import Tier
from toposched.topology.node import NodeTopology

DEFAULT_FRAMEWORK = "pytorch-horovod"
DEFAULT_NETWORK = "default"
DEFAULT_BATCH = 64
MAX_IDEAL_SETS = 20_000

NodeShare = tuple[NodeTopology, Sequence[int]]
"""One node of a placement: its topology and the job's GPU indices on it."""


@dataclass(frozen=True, slots=True)
class Estimate:
    """One job on one placement. Times are per iteration; throughput is samples/s of the job."""

    throughput: float
    iteration_s: float
    compute_s: float
    comm_s: float
    comm_exposed_s: float
    interference: float = 1.0


class PerfModel:
    """Answers `estimate` from a catalog; memoises inside the instance, so keep one around.

    Nothing here reads a clock, a file or a random source: equal questions get equal answers.
    """

    def __init__(self, catalog: Catalog | None = None, *, memo_limit: int = 200_000) -> None:
        self.catalog = catalog if catalog is not None else Catalog.load()
        self.memo_limit = memo_limit
        self._memo: dict[tuple[object, ...], Estimate] = {}
        self._rings: dict[tuple[NodeTopology, tuple[int, ...]], float] = {}
        self._specs: dict[tuple[str, str, str], tuple[ModelSpec, GpuSpec, FrameworkSpec]] = {}
        self._networks: dict[str, NetworkProfile] = {}
        self._ideal: dict[tuple[object, ...], Estimate] = {}
        self._best: dict[tuple[NodeTopology, int, Pattern], tuple[int, ...]] = {}

    # ------------------------------------------------------------------ public API

    def estimate(
        self,
        model: str,
        gpu_type: str,
        placement: Sequence[NodeShare],
        *,
        framework: str = DEFAULT_FRAMEWORK,
        network: str = DEFAULT_NETWORK,
        tier: Tier = Tier.RACK,
        batch: int = DEFAULT_BATCH,
        neighbours: Sequence[Sequence[int]] | None = None,
        interference: float | None = None,
    ) -> Estimate:
        """Iteration time of `model` with `batch` samples per GPU on `placement`.

        `placement` lists the job's nodes, each as (topology, GPU indices). `tier` is the
        network level that joins the nodes (ignored on one node). `neighbours`, one entry per
        node, lists the GPUs other jobs hold there (for interference); or `interference`
        gives the factor itself (`interference_factor`, the worst over the nodes), for a
        caller that keeps it (the simulator).
        """
        if type(batch) is not int or batch < 1:
            raise PerfError(
                f"must be a whole number of samples per GPU >= 1, got {batch!r}", field="batch"
            )
        if interference is not None and (neighbours is not None or not interference >= 1.0):
            raise PerfError(
                f"give neighbours or an interference factor >= 1, got {interference!r}",
                field="interference",
            )
        shares = tuple((topology, tuple(gpus)) for topology, gpus in placement)
        others = None if neighbours is None else tuple(tuple(n) for n in neighbours)
        key = (model, gpu_type, framework, network, tier, batch, shares, others, interference)
        found = self._memo.get(key)
        if found is not None:
            return found
        result = self._estimate(
            model, gpu_type, shares, framework, network, tier, batch, others, interference
        )
        if len(self._memo) >= self.memo_limit:
            # A long simulation asks ever new neighbour sets; start afresh, not grow for ever.
            self._memo.clear()
        self._memo[key] = result
        return result

    def ideal(
        self,
        model: str,
        gpu_type: str,
        gpus: int,
        topology: NodeTopology,
        *,
        framework: str = DEFAULT_FRAMEWORK,
        network: str = DEFAULT_NETWORK,
        batch: int = DEFAULT_BATCH,
    ) -> Estimate:
        """The best case for `gpus` GPUs on nodes of `topology`: the best-connected GPU set of
        one node, or as few whole nodes as hold them in one rack; no neighbours."""
        key = (model, gpu_type, gpus, topology, framework, network, batch)
        found = self._ideal.get(key)
        if found is not None:
            return found
        if gpus < 1:
            raise PerfError(f"a job needs at least one GPU, got {gpus}", field="gpus")
        size = topology.size
        pattern = self.catalog.framework(framework).pattern
        if gpus <= size:
            placement: list[NodeShare] = [(topology, self._best_set(topology, gpus, pattern))]
        else:
            whole, rest = divmod(gpus, size)
            placement = [(topology, tuple(range(size)))] * whole
            if rest:
                placement.append((topology, self._best_set(topology, rest, pattern)))
        result = self.estimate(
            model,
            gpu_type,
            placement,
            framework=framework,
            network=network,
            tier=Tier.RACK,
            batch=batch,
        )
        self._ideal[key] = result
        return result

    def speed_ratio(
        self,
        model: str,
        gpu_type: str,
        placement: Sequence[NodeShare],
        *,
        framework: str = DEFAULT_FRAMEWORK,
        network: str = DEFAULT_NETWORK,
        tier: Tier = Tier.RACK,
        batch: int = DEFAULT_BATCH,
        neighbours: Sequence[Sequence[int]] | None = None,
        interference: float | None = None,
    ) -> float:
        """Throughput on `placement` over the ideal throughput of as many GPUs (<= 1 mostly).

        The ideal uses the first node's topology; a simulator scales a job's progress by it.
        """
        actual = self.estimate(
            model,
            gpu_type,
            placement,
            framework=framework,
            network=network,
            tier=tier,
            batch=batch,
            neighbours=neighbours,
            interference=interference,
        )
        total = sum(len(gpus) for _, gpus in placement)
        best = self.ideal(
            model,
            gpu_type,
            total,
            placement[0][0],
            framework=framework,
            network=network,
            batch=batch,
        )
        return actual.throughput / best.throughput

    def ring_gbps(self, topology: NodeTopology, gpus: Sequence[int]) -> float:
        """Nominal GB/s of the best ring through `gpus` (two or more GPUs of one node).

        Nodes beyond the exact tables (over 20 GPUs) get the slowest pair of `gpus`, a lower
        bound of every ring through them.
        """
        key = (topology, tuple(sorted(gpus)))
        found = self._rings.get(key)
        if found is None:
            if len(set(key[1])) < 2:
                raise PerfError(f"a ring needs two or more GPUs, got {list(gpus)}", field="gpus")
            try:
                ring = ring_bandwidth(topology, key[1])
            except NodeTooLarge:
                ring = None
            if ring is None:
                bw = topology.bandwidth_matrix
                ring = min(bw[i][j] for i, j in combinations(key[1], 2))
            found = self._rings[key] = ring
        return found

    # ------------------------------------------------------------------ the formula

    def _estimate(
        self,
        model_name: str,
        gpu_name: str,
        shares: tuple[tuple[NodeTopology, tuple[int, ...]], ...],
        framework_name: str,
        network_name: str,
        tier: Tier,
        batch: int,
        neighbours: tuple[tuple[int, ...], ...] | None,
        interference: float | None,
    ) -> Estimate:
        model, gpu, framework = self._resolve(model_name, gpu_name, framework_name)
        self._network(network_name)  # a misspelt profile is an error even on one node
        _check_request(shares, tier, neighbours)
        workers = sum(len(gpus) for _, gpus in shares)

        slowdown = 1.0 if interference is None else interference
        if neighbours is not None:
            for (topology, gpus), others in zip(shares, neighbours, strict=True):
                factor = interference_factor(topology, gpus, others, framework, model)
                slowdown = max(slowdown, factor)
        per_sample = framework.compute_scale / self.catalog.throughput(model, gpu)
        # The job's own GPUs on one node share its host (CPU, memory, PCIe) as well.
        crowd = 1.0 + framework.colocation * (max(len(gpus) for _, gpus in shares) - 1)
        batch_s = batch * per_sample * slowdown * crowd
        compute = self.catalog.fixed_s(model, gpu) + batch_s

        comm = 0.0
        overhead = 0.0
        if workers > 1:
            comm = self._comm(model, framework, network_name, shares, tier, workers)
            overhead = framework.step_overhead_ms * 1e-3
        # Only the batch's backward pass produces gradients to hide traffic behind.
        tail = min(1.0, framework.exposed_buckets / buckets(model.gradient_gb, framework))
        exposed = exposed_s(comm, batch_s, framework.overlap, model.backward_fraction, tail)
        iteration = compute + overhead + exposed
        return Estimate(
            throughput=workers * batch / iteration,
            iteration_s=iteration,
            compute_s=compute,
            comm_s=comm,
            comm_exposed_s=exposed,
            interference=slowdown,
        )

    def _comm(
        self,
        model: ModelSpec,
        framework: FrameworkSpec,
        network_name: str,
        shares: tuple[tuple[NodeTopology, tuple[int, ...]], ...],
        tier: Tier,
        workers: int,
    ) -> float:
        gb = model.gradient_gb
        if framework.pattern is Pattern.ALLREDUCE:
            node_rings = [
                self.ring_gbps(topology, gpus) if len(gpus) > 1 else None
                for topology, gpus in shares
            ]
            stage = None
            if len(shares) > 1:
                net = self._network(network_name)
                stage = NetworkStage(
                    net.node_gbps(tier, ring_peers(len(shares))), net.contention, net.latency_us
                )
            sizes = [len(gpus) for _, gpus in shares]
            return allreduce_s(gb, sizes, node_rings, stage, framework)
        if len(shares) == 1:
            topology, gpus = shares[0]
            per_switch = _per_switch(topology, gpus)
            return local_ps_s(gb, per_switch, topology.bandwidth.pix, framework)
        net = self._network(network_name)
        net_gbps = net.gbps(tier)
        multi = [(topology, gpus) for topology, gpus in shares if len(gpus) > 1]
        rings = [self.ring_gbps(topology, gpus) for topology, gpus in multi]
        sizes = [len(gpus) for _, gpus in multi]
        return remote_ps_s(gb, len(shares), rings, sizes, net_gbps, framework, net.latency_us)

    def _resolve(
        self, model: str, gpu: str, framework: str
    ) -> tuple[ModelSpec, GpuSpec, FrameworkSpec]:
        key = (model, gpu, framework)
        found = self._specs.get(key)
        if found is None:
            found = (
                self.catalog.model(model),
                self.catalog.gpu(gpu),
                self.catalog.framework(framework),
            )
            self._specs[key] = found
        return found

    def _network(self, name: str) -> NetworkProfile:
        found = self._networks.get(name)
        if found is None:
            found = self._networks[name] = self.catalog.network(name)
        return found

    def _best_set(self, topology: NodeTopology, k: int, pattern: Pattern) -> tuple[int, ...]:
        """The fastest k GPUs of an empty node: the best ring (placement rule 1) for all-reduce;
        for parameter servers on one node, the fewest GPUs sharing a PCIe switch's uplink."""
        key = (topology, k, pattern)
        found = self._best.get(key)
        if found is None:
            found = self._best[key] = self._search_best_set(topology, k, pattern)
        return found

    def _search_best_set(self, topology: NodeTopology, k: int, pattern: Pattern) -> tuple[int, ...]:
        if k == 1:
            return (0,)
        size = topology.size
        if pattern is Pattern.ALLREDUCE and size <= MAX_TABLE_GPUS:
            # Exactly what topology-aware placement picks on an empty node (best ring first).
            return choose(topology, full_mask(size), k)
        if math.comb(size, k) > MAX_IDEAL_SETS:
            # Too many sets to try; nodes this large are switched fabrics in practice, where the
            # first k GPUs are as good as any.
            return tuple(range(k))
        sets = combinations(range(size), k)
        if pattern is Pattern.PS:
            return min(sets, key=lambda s: (_per_switch(topology, s), -self.ring_gbps(topology, s)))
        # All-reduce on a node beyond the exact tables: rings judged by their slowest pair.
        return max(sets, key=lambda s: self.ring_gbps(topology, s))


def _per_switch(topology: NodeTopology, gpus: Sequence[int]) -> int:
    """Most of `gpus` under one PCIe switch: they share its uplink to the host."""
    switches = topology.switches
    return max(sum(1 for g in gpus if switches[g] == switches[s]) for s in gpus)


def _check_request(
    shares: tuple[tuple[NodeTopology, tuple[int, ...]], ...],
    tier: Tier,
    neighbours: tuple[tuple[int, ...], ...] | None,
) -> None:
    if not shares:
        raise PerfError("a placement needs at least one node", field="placement")
    for index, (topology, gpus) in enumerate(shares):
        where = f"node {index + 1}" if len(shares) > 1 else "the node"
        if not gpus:
            raise PerfError(f"{where} holds no GPU of the job", field="placement")
        if len(set(gpus)) != len(gpus):
            raise PerfError(f"{where} lists a GPU twice: {list(gpus)}", field="placement")
        bad = [g for g in gpus if not 0 <= g < topology.size]
        if bad:
            raise PerfError(
                f"GPU {bad[0]} is out of range 0..{topology.size - 1} on {where}",
                field="placement",
            )
    if len(shares) > 1 and tier is Tier.NODE:
        raise PerfError(
            "a job on several nodes needs a network tier: rack, pod or cluster", field="tier"
        )
    if neighbours is None:
        return
    if len(neighbours) != len(shares):
        raise PerfError(
            f"give one list of other jobs' GPUs per node: {len(shares)} node(s), "
            f"{len(neighbours)} list(s)",
            field="neighbours",
        )
    for (topology, gpus), others in zip(shares, neighbours, strict=True):
        bad = [g for g in others if not 0 <= g < topology.size]
        if bad:
            raise PerfError(
                f"GPU {bad[0]} is out of range 0..{topology.size - 1}", field="neighbours"
            )
        taken = sorted(set(gpus) & set(others))
        if taken:
            raise PerfError(
                f"GPU {taken[0]} is both the job's and another job's", field="neighbours"
            )
