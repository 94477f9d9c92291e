"""Fit a cluster's network, its framework and each job's 1-GPU speed to measured step times."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from toposched.perf.comm import buckets
from toposched.perf.dump import catalog_yaml
from toposched.perf.errors import PerfError
from toposched.perf.lsq import Vector, least_squares
from toposched.perf.measurements import Measurement
from toposched.perf.model import PerfModel
from toposched.perf.protocol import PAIR_GAP, Metrics, ratio_metrics
from toposched.perf.registry import Catalog
from toposched.perf.specs import Allreduce, FrameworkSpec, ModelSpec, NetworkProfile, Pattern
from toposched.topology.cluster import Tier
from toposched.topology.node import NodeTopology

BUCKET_MB = (25.0, 64.0)
"""Gradient bucket sizes the fit tries besides the framework's own: PyTorch DDP's default
`bucket_cap_mb` and Horovod's default fusion buffer."""


NCCL_ALGORITHMS = (Allreduce.PIPELINED, Allreduce.HIERARCHICAL)
"""All-reduce algorithms the fit tries by default: what NCCL, under PyTorch DDP and Horovod
alike, runs on GPUs. Its ring is pipelined (each buffer streams through the ring in chunks), so
the unpipelined `ring`, whose every step waits for the slowest hop, is tried only when asked."""


START_SHARES = (0.02, 0.15, 0.5)
"""Further starting points of the search: this share of the way through every range."""


@dataclass(frozen=True)
class Param:
    """One fitted field: which entry holds it, its bounds and where the search starts."""

    name: str
    entry: str  # "network" or "framework"
    low: float
    high: float
    start: float


def fitted_params(nominal_gbps: float) -> tuple[Param, ...]:
    """The cluster's and the framework's free parameters, with bounds that keep them physical:
    rates no higher than the NIC's nominal one, shares and overlap within [0, 1]."""
    return (
        Param("efficiency", "network", 0.005, 1.0, 0.3),
        Param("flow_gbps", "network", 0.01, nominal_gbps, min(0.5, nominal_gbps / 2)),
        Param("latency_us", "network", 0.0, 5000.0, 50.0),
        Param("contention", "network", 0.0, 2.0, 0.2),
        Param("overlap", "framework", 0.0, 1.0, 0.5),
        Param("exposed_buckets", "framework", 0.0, 2.0, 1.0),
        Param("step_latency_us", "framework", 0.0, 5000.0, 10.0),
        Param("link_efficiency", "framework", 0.01, 1.0, 0.4),
        Param("bridge_sharing", "framework", 0.0, 1.0, 0.5),
        Param("step_overhead_ms", "framework", 0.0, 500.0, 5.0),
        Param("colocation", "framework", 0.0, 1.0, 0.05),
    )


@dataclass(frozen=True)
class JobSpeed:
    """A job's 1-GPU step on its GPU type: `fixed_s` plus `per_sample_s` per sample."""

    model: ModelSpec
    gpu_type: str
    fixed_s: float
    per_sample_s: float
    rows: int  # 1-GPU rows it was fitted from (0: taken from the catalog)


@dataclass(frozen=True)
class Fit:
    """What `fit` found: the parameters, each job's speed, the catalog that holds them, the
    prediction of every row, and each job's errors when it was left out of the fit."""

    params: Mapping[str, float]
    jobs: Mapping[str, JobSpeed]
    catalog: Catalog
    network: str
    framework: str
    rows: Sequence[Measurement]
    predicted: Sequence[float]
    held_out: Mapping[str, Metrics]
    cost: float
    pair_gap: float = PAIR_GAP  # how far apart two placements' times are to make a pair

    def catalog_yaml(self, header: str) -> str:
        """The fitted entries as a catalog file: every job's model (with its measured 1-GPU
        speed), the GPU types, the network and the framework, complete, and the jobs' names
        as aliases where they differ from their models'."""
        models = {self.catalog.model(job).name: self.catalog.model(job) for job in self.jobs}
        gpus = {s.gpu_type: self.catalog.gpu(s.gpu_type) for s in self.jobs.values()}
        aliases = {
            job: self.catalog.model(job).name
            for job in sorted(self.jobs)
            if job.casefold() != self.catalog.model(job).name.casefold()
        }
        return catalog_yaml(
            header=header,
            models=models.values(),
            gpus=gpus.values(),
            networks=[self.catalog.network(self.network)],
            frameworks=[self.catalog.framework(self.framework)],
            aliases=aliases,
        )


class _Design:
    """The measurements as arrays, so that one evaluation of the model over them is a handful
    of numpy operations (the fit evaluates it thousands of times); `PerfModel` gives the same
    answers (tests/unit/test_perf_fit.py checks it row by row)."""

    def __init__(
        self,
        rows: Sequence[Measurement],
        speeds: Mapping[str, JobSpeed],
        rings: Callable[[int], float],
        framework: FrameworkSpec,
        nominal_gbps: float,
    ) -> None:
        width = max(len(m.counts) for m in rows)
        self.framework = framework
        self.nominal = nominal_gbps
        self.step_s = np.array([m.step_s for m in rows])
        self.batch = np.array([float(m.batch) for m in rows])
        self.n = np.array([float(m.gpus) for m in rows])
        self.nodes = np.array([float(len(m.counts)) for m in rows])
        self.kmax = np.array([float(max(m.counts)) for m in rows])
        self.k = np.zeros((len(rows), width))
        self.bw = np.ones((len(rows), width))
        for i, m in enumerate(rows):
            for j, count in enumerate(m.counts):
                self.k[i, j] = count
                if count > 1:
                    self.bw[i, j] = rings(count)
        speed = [speeds[m.job] for m in rows]
        self.fixed = np.array([s.fixed_s for s in speed])
        self.per_sample = np.array([s.per_sample_s for s in speed])
        self.gb = np.array([s.model.gradient_gb for s in speed])
        self.backward = np.array([s.model.backward_fraction for s in speed])
        self.buckets = np.array([float(buckets(g, framework)) for g in self.gb])
        counts: dict[str, int] = defaultdict(int)
        for m in rows:
            counts[m.job] += 1
        # Every job weighs the same, however many rows it has.
        self.weight = np.array([1.0 / math.sqrt(counts[m.job]) for m in rows])

    def predict(self, p: Mapping[str, float]) -> Vector:
        multi = self.n > 1
        apart = self.nodes > 1
        crowd = 1.0 + p["colocation"] * (self.kmax - 1.0)
        batch_s = self.batch * self.per_sample * crowd
        share = np.where(self.k > 1, self.k ** p["bridge_sharing"], 0.0)
        inside = share / (p["link_efficiency"] * self.bw)
        peers = np.minimum(self.nodes - 1.0, 2.0)
        rate = np.minimum(self.nominal * p["efficiency"], peers * p["flow_gbps"])
        rate = np.where(apart, rate, 1.0)
        nic = np.where(apart, (1.0 + p["contention"] * (self.kmax - 1.0)) / rate, 0.0)
        step_us = p["step_latency_us"]
        ring = 2.0 * (self.n - 1.0) / np.maximum(self.n, 1.0) * self.gb
        flat = ring * np.maximum(inside.max(axis=1), nic)
        if self.framework.allreduce is Allreduce.PIPELINED:
            hops_us = (self.n - self.nodes) * step_us + apart * self.nodes * p["latency_us"]
        else:
            hops_us = (self.n - 1.0) * (step_us + apart * p["latency_us"])
        flat += 2.0 * hops_us * self.buckets * 1e-6
        comm = flat
        if self.framework.allreduce is Allreduce.HIERARCHICAL:
            local = (2.0 * (self.k - 1.0) / np.maximum(self.k, 1.0) * inside).max(axis=1)
            across = 2.0 * (self.nodes - 1.0) / self.nodes * nic
            steps_us = 2.0 * (self.kmax - 1.0) * step_us
            steps_us += 2.0 * (self.nodes - 1.0) * (step_us + p["latency_us"])
            staged = (local + across) * self.gb + self.buckets * steps_us * 1e-6
            comm = np.where(apart, staged, flat)
        comm = np.where(multi, comm, 0.0)
        tail = np.minimum(1.0, p["exposed_buckets"] / self.buckets)
        exposed = np.maximum(comm * tail, comm - p["overlap"] * self.backward * batch_s)
        overhead = np.where(multi, p["step_overhead_ms"] * 1e-3, 0.0)
        return np.asarray(self.fixed + batch_s + overhead + exposed)

    def residuals(self, p: Mapping[str, float]) -> Vector:
        return np.asarray(self.weight * np.log(self.predict(p) / self.step_s))


def job_speed(
    job: str, rows: Sequence[Measurement], catalog: Catalog, gpu_type: str, framework: FrameworkSpec
) -> JobSpeed:
    """A job's 1-GPU step time, `fixed + batch x per_sample`, from its own 1-GPU rows: a line
    through them (fixed >= 0) where they cover two batch sizes or more; else the catalog's."""
    model = catalog.model(job)
    gpu = catalog.gpu(gpu_type)
    single = [(float(m.batch), m.step_s) for m in rows if m.gpus == 1]
    fixed = catalog.fixed_s(model, gpu)
    per_sample = framework.compute_scale / catalog.throughput(model, gpu)
    batches = {b for b, _ in single}
    if len(batches) >= 2:
        x = np.array([b for b, _ in single])
        y = np.array([t for _, t in single])
        slope, intercept = np.polyfit(x, y, 1)
        if intercept < 0.0:
            intercept, slope = 0.0, float(x @ y / (x @ x))
        fixed, per_sample = float(intercept), float(slope)
    elif single:
        batch = single[0][0]
        mean = sum(t for _, t in single) / len(single)
        if mean <= fixed:
            fixed = 0.0
        per_sample = (mean - fixed) / batch
    if not per_sample > 0.0:
        raise PerfError(f"job {job!r}: its 1-GPU rows give no positive time per sample")
    return JobSpeed(model, gpu.name, fixed, per_sample, len(single))


def fit(
    rows: Sequence[Measurement],
    catalog: Catalog,
    topology: NodeTopology,
    *,
    network: str,
    framework: str,
    leave_one_out: bool = True,
    algorithms: Sequence[Allreduce] = (),
    pair_gap: float = PAIR_GAP,
) -> Fit:
    """Fit the parameters of `fitted_params` to the multi-GPU rows of every job (each job's
    1-GPU speed first, from its own rows; each placement shape and batch once, by its median)
    with each all-reduce algorithm of `algorithms` (NCCL_ALGORITHMS by default), keep the
    best, then refit without each job in turn and score how well the others predict it
    (`ratio_metrics`, pairs `pair_gap` apart). The nodes sit in one rack of `network`."""
    if not rows:
        raise PerfError("no measurements to fit")
    frame = catalog.framework(framework)
    if frame.pattern is not Pattern.ALLREDUCE:
        raise PerfError(f"can only fit all-reduce frameworks; {frame.name} uses {frame.pattern}")
    net = catalog.network(network)
    for m in rows:
        if max(m.counts) > topology.size:
            raise PerfError(
                f"{m.source}:{m.line}: placement needs {max(m.counts)} GPUs on a node; "
                f"{topology.name or 'the topology'} has {topology.size}",
                field="placement",
            )
    jobs = _speeds(rows, catalog, topology, frame)
    model = PerfModel(catalog)

    def rings(count: int) -> float:
        return model.ring_gbps(topology, tuple(range(count)))

    nominal = net.bandwidth_gbps[Tier.RACK]
    params = fitted_params(nominal)
    multi = placement_medians([m for m in rows if m.gpus > 1])
    if not multi:
        raise PerfError("no multi-GPU rows to fit the cluster to (every row is on one GPU)")
    problem = _Problem(params, net, rings)
    best, frame, cost = problem.best(multi, jobs, frame, algorithms)
    held: dict[str, Metrics] = {}
    if leave_one_out:
        for job in sorted({m.job for m in multi}):
            train = [m for m in multi if m.job != job]
            if not train:
                continue
            found, variant, _ = problem.best(train, jobs, frame, algorithms)
            predicted = _Design(rows, jobs, rings, variant, nominal).predict(found)
            mine = [(m, float(t)) for m, t in zip(rows, predicted, strict=True) if m.job == job]
            held[job] = ratio_metrics(mine, pair_gap)
    note = (
        f"fitted by `toposched perf fit` to {len(rows)} measured steps of {', '.join(sorted(jobs))}"
    )
    fitted = _catalog(catalog, best, jobs, net, frame, note)
    design = _Design(rows, jobs, rings, frame, nominal)
    return Fit(
        params=best,
        jobs=jobs,
        catalog=fitted,
        network=net.name,
        framework=frame.name,
        rows=list(rows),
        predicted=[float(t) for t in design.predict(best)],
        held_out=held,
        cost=cost,
        pair_gap=pair_gap,
    )


def placement_medians(rows: Sequence[Measurement]) -> list[Measurement]:
    """One row per job, placement shape and batch, holding the median of its step times: what
    the protocol scores (`ratio_metrics`). Node orders of one shape are one placement to the
    model, and a shape measured in six orders must not weigh six times one measured in one;
    the median also keeps a one-off slow run (a third off, in Pollux's data) from pulling the
    fit."""
    groups: dict[tuple[str, str | None, tuple[int, ...], int], list[Measurement]] = defaultdict(
        list
    )
    for m in rows:
        groups[(m.job, m.gpu_type, m.shape, m.batch)].append(m)
    return [
        replace(mine[0], counts=shape, step_s=float(statistics.median(m.step_s for m in mine)))
        for (_, _, shape, _), mine in groups.items()
    ]


def _speeds(
    rows: Sequence[Measurement], catalog: Catalog, topology: NodeTopology, frame: FrameworkSpec
) -> dict[str, JobSpeed]:
    by_job: dict[str, list[Measurement]] = defaultdict(list)
    for m in rows:
        by_job[m.job].append(m)
    speeds: dict[str, JobSpeed] = {}
    for job, mine in by_job.items():
        types = {m.gpu_type or catalog.gpu_for(topology.name) for m in mine}
        if len(types) > 1:
            raise PerfError(f"job {job!r} was measured on several GPU types: {sorted(types)}")
        try:
            speeds[job] = job_speed(job, mine, catalog, types.pop(), frame)
        except PerfError as err:
            where = f"{mine[0].source}:{mine[0].line}"
            raise PerfError(
                f"{where}: {err.reason} (a job needs a catalog entry giving its parameter "
                "count: a built-in model, or a --catalog file)",
                field=err.field,
            ) from None
    return speeds


@dataclass(frozen=True)
class _Problem:
    """What every fit of one cluster shares: the free parameters, the network, the node's rings."""

    params: Sequence[Param]
    net: NetworkProfile
    rings: Callable[[int], float]

    def best(
        self,
        rows: Sequence[Measurement],
        jobs: Mapping[str, JobSpeed],
        frame: FrameworkSpec,
        algorithms: Sequence[Allreduce],
    ) -> tuple[dict[str, float], FrameworkSpec, float]:
        """The best parameters for `rows`. The all-reduce algorithm and the gradient bucket
        size are choices, not numbers: each is fitted and the one that fits best is kept."""
        choices = []
        for algorithm in algorithms or NCCL_ALGORITHMS:
            for fusion in sorted({frame.fusion_mb, *BUCKET_MB}):
                variant = replace(frame, allreduce=algorithm, fusion_mb=fusion)
                found, cost = self.solve(rows, jobs, variant)
                choices.append((cost, f"{algorithm.value} {fusion}", found, variant))
        cost, _, found, variant = min(choices, key=lambda c: (c[0], c[1]))
        return found, variant, cost

    def solve(
        self, rows: Sequence[Measurement], jobs: Mapping[str, JobSpeed], frame: FrameworkSpec
    ) -> tuple[dict[str, float], float]:
        params = self.params
        design = _Design(rows, jobs, self.rings, frame, self.net.bandwidth_gbps[Tier.RACK])
        names = [p.name for p in params]

        def residuals(x: Vector) -> Vector:
            return design.residuals(dict(zip(names, (float(v) for v in x), strict=True)))

        # Fixed starts, so that the answer does not depend on the catalog's current values: plain
        # guesses, then spreads over the ranges (the sum of squares has local minima).
        starts = [[p.start for p in params]]
        starts += [[p.low + share * (p.high - p.low) for p in params] for share in START_SHARES]
        found = least_squares(residuals, starts, [p.low for p in params], [p.high for p in params])
        return dict(zip(names, (float(v) for v in found.x), strict=True)), found.cost


def _catalog(
    catalog: Catalog,
    params: Mapping[str, float],
    jobs: Mapping[str, JobSpeed],
    net: NetworkProfile,
    frame: FrameworkSpec,
    note: str,
) -> Catalog:
    entries = {p.name: p.entry for p in fitted_params(net.bandwidth_gbps[Tier.RACK])}

    def fields(entry: str) -> dict[str, Any]:
        return {name: v for name, v in params.items() if entries[name] == entry}

    fitted_net = replace(net, source=note, **fields("network"))
    fitted_frame = replace(frame, source=note, **fields("framework"))
    models: dict[str, ModelSpec] = {}
    for speed in jobs.values():
        base = models.get(speed.model.name, speed.model)
        if speed.rows == 0:
            models[base.name] = base
            continue
        throughput = {**base.throughput, speed.gpu_type: frame.compute_scale / speed.per_sample_s}
        fixed = {**base.fixed_s, speed.gpu_type: speed.fixed_s}
        models[base.name] = replace(base, throughput=throughput, fixed_s=fixed)
    return catalog.with_entries(
        models=models.values(), networks=[fitted_net], frameworks=[fitted_frame]
    )
