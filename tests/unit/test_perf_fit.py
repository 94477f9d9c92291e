"""Fitting the performance model to measured step times, and the protocol on Pollux's jobs."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from toposched.perf import Catalog, PerfError, PerfModel
from toposched.perf.fit import NCCL_ALGORITHMS, Fit, fit, job_speed, placement_medians
from toposched.perf.lsq import least_squares
from toposched.perf.measurements import (
    Measurement,
    MeasurementError,
    parse_measurements,
    parse_placement,
)
from toposched.perf.protocol import ratio_metrics
from toposched.perf.specs import Allreduce
from toposched.topology import preset
from toposched.topology.cluster import Tier

ROOT = Path(__file__).resolve().parents[2]
POLLUX = ROOT / "data" / "measurements" / "pollux-t4"
JOBS = ("bert", "cifar10", "imagenet")
G4DN = preset("g4dn-12xlarge")


def pollux(job: str) -> list[Measurement]:
    path = POLLUX / job / "placements.csv"
    return parse_measurements(path.read_text(), source=str(path), job=job)


@pytest.fixture(scope="module")
def fitted() -> Fit:
    rows = [m for job in JOBS for m in pollux(job)]
    return fit(rows, Catalog.load(), G4DN, network="aws-50g", framework="pytorch-horovod")


# ---------------------------------------------------------------- reading measurements


@pytest.mark.parametrize(
    ("text", "counts"),
    [("1", (1,)), ("22", (2, 2)), ("1114", (1, 1, 1, 4)), ("2,2", (2, 2)), ("3+1", (3, 1)),
     ("0,1;0,1", (2, 2)), ("0;0,1,2", (1, 3))],
)  # fmt: skip
def test_placements_in_every_spelling(text: str, counts: tuple[int, ...]) -> None:
    assert parse_placement(text) == counts


def test_pollux_directory_rows_and_the_simple_format() -> None:
    rows = pollux("bert")
    assert len(rows) == 540
    first = rows[0]
    assert (first.job, first.counts, first.batch, first.line) == ("bert", (1,), 4, 2)
    assert first.step_s == pytest.approx(0.45532354712486267)
    simple = parse_measurements(
        "model,gpu_type,placement,batch,step_time\nresnet50,T4,13,32,0.5\nresnet50,T4,31,32,0.6\n",
        source="mine.csv",
    )
    assert [(m.job, m.gpu_type, m.counts, m.shape) for m in simple] == [
        ("resnet50", "T4", (1, 3), (3, 1)),
        ("resnet50", "T4", (3, 1), (3, 1)),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,b\n1,2\n", "mine.csv:1: the header must name the columns model, gpu_type"),
        ("model,gpu_type,placement,batch,step_time\n", "mine.csv: no measurements in the file"),
        ("model,gpu_type,placement,batch,step_time\nm,T4,2x,8,0.1\n", "mine.csv:2: placement:"),
        ("model,gpu_type,placement,batch,step_time\nm,T4,20,8,0.1\n", "at least one GPU"),
        ("model,gpu_type,placement,batch,step_time\nm,T4,2,8,0.1\nm,T4,2,0,0.1\n",
         "mine.csv:3: batch: must be a whole number"),
        ("model,gpu_type,placement,batch,step_time\nm,T4,2,8,-1\n",
         "mine.csv:2: step_time: must be seconds > 0, got '-1'"),
        ("model,gpu_type,placement,batch,step_time\nm,T4,2,8,\n", "mine.csv:2: step_time: empty"),
    ],
)  # fmt: skip
def test_a_bad_file_names_the_row_and_the_column(text: str, message: str) -> None:
    with pytest.raises(MeasurementError) as info:
        parse_measurements(text, source="mine.csv")
    assert message in str(info.value)


# ---------------------------------------------------------------- the solver


def test_bounded_least_squares_finds_the_minimum_and_keeps_to_its_bounds() -> None:
    x = np.linspace(0.0, 4.0, 30)
    y = 2.5 * np.exp(-0.7 * x) + 0.3

    def residuals(p: np.ndarray) -> np.ndarray:
        return np.asarray(p[0] * np.exp(-p[1] * x) + p[2] - y)

    free = least_squares(residuals, [[1.0, 0.1, 0.0]], [0.0, 0.0, 0.0], [10.0, 5.0, 1.0])
    assert free.x == pytest.approx([2.5, 0.7, 0.3], rel=1e-4)
    capped = least_squares(residuals, [[1.0, 0.1, 0.0]], [0.0, 0.0, 0.0], [2.0, 5.0, 1.0])
    assert 1.99 < capped.x[0] <= 2.0
    with pytest.raises(ValueError, match="low < high"):
        least_squares(residuals, [[1.0]], [1.0], [1.0])


# ---------------------------------------------------------------- fitting


def test_one_gpu_rows_give_a_fixed_part_and_a_time_per_sample() -> None:
    catalog = Catalog.load()
    frame = catalog.framework("pytorch-horovod")
    rows = [
        Measurement("resnet50", "T4", (1,), b, 0.05 + 0.004 * b, "m.csv", i)
        for i, b in enumerate((16, 32, 64))
    ]
    speed = job_speed("resnet50", rows, catalog, "T4", frame)
    assert (speed.fixed_s, speed.per_sample_s, speed.rows) == pytest.approx((0.05, 0.004, 3))
    one = job_speed("resnet50", rows[:1], catalog, "T4", frame)
    assert one.per_sample_s == pytest.approx((0.05 + 0.004 * 16) / 16)
    none = job_speed("resnet50", [], catalog, "T4", frame)
    assert none.rows == 0
    assert none.per_sample_s == pytest.approx(
        frame.compute_scale / catalog.throughput(catalog.model("resnet50"), catalog.gpu("T4"))
    )


def test_a_fit_recovers_the_step_times_it_was_made_from() -> None:
    """Step times made by the model itself, with known parameters, are fitted back exactly."""
    base = Catalog.load()
    truth = base.with_entries(
        networks=[replace(base.network("aws-50g"), efficiency=0.2, flow_gbps=0.4, contention=0.1)],
        frameworks=[
            replace(
                base.framework("pytorch-ddp"),
                overlap=0.6,
                colocation=0.05,
                step_overhead_ms=20.0,
                exposed_buckets=1.0,
            )
        ],
    )
    model = PerfModel(truth)
    rows: list[Measurement] = []
    for job in ("bert", "cifar10"):
        for counts in ((1,), (2,), (4,), (1, 1), (2, 2), (1, 3), (1, 1, 1, 1), (4, 4), (2, 2, 2)):
            for batch in (8, 32, 128):
                estimate = model.estimate(
                    job,
                    "T4",
                    [(G4DN, tuple(range(k))) for k in counts],
                    framework="pytorch-ddp",
                    network="aws-50g",
                    batch=batch,
                )
                rows.append(
                    Measurement(job, None, counts, batch, estimate.iteration_s, "m.csv", len(rows))
                )
    found = fit(
        rows,
        base,
        G4DN,
        network="aws-50g",
        framework="pytorch-ddp",
        leave_one_out=False,
        algorithms=(Allreduce.PIPELINED,),
    )
    assert found.cost < 1e-8
    assert (
        max(abs(p / m.step_s - 1) for m, p in zip(found.rows, found.predicted, strict=True)) < 1e-3
    )


def test_the_written_catalog_answers_what_the_fit_predicted(fitted: Fit) -> None:
    """The fit evaluates the model as arrays; `PerfModel` on the written file agrees per row."""
    text = fitted.catalog_yaml("a test")
    assert text.startswith("# a test\n")
    catalog = Catalog.load([("out.yaml", text)])
    model = PerfModel(catalog)
    for row, predicted in list(zip(fitted.rows, fitted.predicted, strict=True))[::7]:
        estimate = model.estimate(
            row.job,
            "T4",
            [(G4DN, tuple(range(k))) for k in row.counts],
            network="aws-50g",
            tier=Tier.RACK if len(row.counts) > 1 else Tier.NODE,
            batch=row.batch,
        )
        assert estimate.iteration_s == pytest.approx(predicted, rel=1e-5), row
    assert catalog.model("imagenet").name == "resnet50-mixed"
    assert catalog.gpu_for("g4dn-12xlarge") == "T4"


def test_the_fit_keeps_parameters_physical(fitted: Fit) -> None:
    p = fitted.params
    nominal = Catalog.load().network("aws-50g").bandwidth_gbps[Tier.RACK]
    assert 0.0 < p["flow_gbps"] <= nominal
    assert 0.0 < p["efficiency"] <= 1.0
    assert 0.0 <= p["overlap"] <= 1.0
    assert 0.0 <= p["bridge_sharing"] <= 1.0
    assert all(v >= 0.0 for v in p.values())
    # What the issue measured: 0.5-1 GB/s between nodes, a tenth of the nominal 6.25.
    per_node = min(nominal * p["efficiency"], 2 * p["flow_gbps"])
    assert 0.4 < p["flow_gbps"] < 1.0 and 0.4 < per_node < 1.2


def test_the_fitted_model_expresses_what_was_measured(fitted: Fit) -> None:
    """22 slower than 1111 in every job; a 4-GPU step of a small model slower than its 1-GPU
    step; fixed per-step time; packing is not always faster."""
    model = PerfModel(fitted.catalog)

    def step(job: str, counts: tuple[int, ...], batch: int) -> float:
        shares = [(G4DN, tuple(range(k))) for k in counts]
        tier = Tier.RACK if len(counts) > 1 else Tier.NODE
        return model.estimate(
            job, "T4", shares, network="aws-50g", tier=tier, batch=batch
        ).iteration_s

    for job, batch in (("bert", 4), ("cifar10", 32), ("imagenet", 20)):
        assert step(job, (2, 2), batch) > 1.07 * step(job, (1, 1, 1, 1), batch)
        assert step(job, (4,), batch) > step(job, (1,), batch)
    assert step("cifar10", (4,), 32) > 1.1 * step("cifar10", (1,), 32)
    assert fitted.jobs["bert"].fixed_s > 0.1  # BERT's optimizer step: 0.23 s at any batch


def test_a_job_without_a_catalog_entry_is_named() -> None:
    rows = [Measurement("mystery", None, (1,), 8, 0.1, "m.csv", 2)]
    with pytest.raises(PerfError, match=r"m\.csv:2: unknown model 'mystery'.*parameter count"):
        fit(rows, Catalog.load(), G4DN, network="aws-50g", framework="pytorch-horovod")


def test_placements_larger_than_the_node_are_refused() -> None:
    rows = [Measurement("bert", None, (8,), 8, 0.1, "m.csv", 5)]
    with pytest.raises(PerfError, match=r"m\.csv:5: placement needs 8 GPUs on a node"):
        fit(rows, Catalog.load(), G4DN, network="aws-50g", framework="pytorch-horovod")


def test_the_fit_scores_each_placement_once_by_its_median() -> None:
    """Node orders of one shape at one batch are one placement: the fit sees their median once,
    as the protocol scores it, so a shape measured in six orders weighs as much as one."""
    rows = [
        Measurement("j", None, (1, 3), 8, 0.5, "m.csv", 2),
        Measurement("j", None, (3, 1), 8, 0.9, "m.csv", 3),
        Measurement("j", None, (1, 3), 8, 0.6, "m.csv", 4),
        Measurement("j", None, (1, 3), 16, 0.7, "m.csv", 5),
        Measurement("k", None, (1, 3), 8, 2.0, "m.csv", 6),
    ]
    merged = {(m.job, m.counts, m.batch): m.step_s for m in placement_medians(rows)}
    assert merged == {("j", (3, 1), 8): 0.6, ("j", (3, 1), 16): 0.7, ("k", (3, 1), 8): 2.0}


def test_the_fit_tries_what_nccl_runs_unless_told_otherwise() -> None:
    assert NCCL_ALGORITHMS == (Allreduce.PIPELINED, Allreduce.HIERARCHICAL)


# ---------------------------------------------------------------- the protocol


def test_ratio_metrics_count_ordered_pairs_and_merge_node_orders() -> None:
    def m(counts: tuple[int, ...], step: float) -> Measurement:
        return Measurement("j", None, counts, 8, step, "m.csv", 0)

    rows = [
        (m((1,), 1.0), 1.0),
        (m((2, 2), 2.0), 1.9),
        (m((1, 1, 1, 1), 1.5), 1.6),  # faster than 22, predicted faster: ordered
        (m((1, 3), 2.2), 1.5),  # slower than 22 and 1111, predicted faster than both
        (m((3, 1), 2.4), 1.5),  # same placement as 13: the median of the two is used
        (m((4,), 1.05), 1.0),
    ]
    metrics = ratio_metrics(rows)
    assert {e.shape: e.measured for e in metrics.errors}[(3, 1)] == pytest.approx(2.3)
    assert {e.shape: e.error for e in metrics.errors}[(2, 2)] == pytest.approx(1.9 / 2.0 - 1)
    # Pairs of 4 GPUs differing by more than 10%: 22/1111, 22/31, 22/4, 1111/31, 1111/4, 31/4.
    assert metrics.pairs == 6
    assert metrics.pairs_ordered == 4  # all but 31 against 22 and against 1111
    assert metrics.worst == pytest.approx(abs(1.5 / 2.3 - 1))
    # More than 50% apart: 22/4, 1111/31 (predicted the wrong way round) and 31/4.
    wide = ratio_metrics(rows, gap=0.5)
    assert (wide.pairs, wide.pairs_ordered) == (3, 2)
    assert wide.errors == metrics.errors


def test_protocol_on_pollux_measurements(fitted: Fit) -> None:
    """docs/perfmodel.md, "Fitting to your measurements": fit on two jobs, predict the third
    from its 1-GPU rows. These are the figures it reaches: the issue's median target (<= 10%)
    is met for every job, its worst (<= 25%) and pair (90%) targets are not (see the docs); a
    change that makes any figure worse fails here."""
    held = fitted.held_out
    assert set(held) == set(JOBS)
    reached = {  # median, worst, pair accuracy, as printed by `toposched perf fit`
        "bert": (0.092, 0.307, 0.860),
        "cifar10": (0.062, 0.443, 0.780),
        "imagenet": (0.055, 0.399, 0.755),
    }
    for job, (median, worst, pairs) in reached.items():
        m = held[job]
        assert m.median <= min(median + 0.002, 0.10), (job, m.median)
        assert m.worst <= worst + 0.002, (job, m.worst)
        assert m.pair_accuracy >= pairs - 0.002, (job, m.pair_accuracy)
        assert m.pairs > 200
    assert all(math.isfinite(t) and t > 0 for t in fitted.predicted)
