"""`toposched sim`: replay a job trace on a cluster under several policies, side by side."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import typer
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from toposched.cli.output import console, emit_json, fail, rich_console
from toposched.cli.params import policy_params
from toposched.core import SCHEDULER_POLICIES, PolicyError, make_scheduler_policy
from toposched.dashboard.simreport import write_html
from toposched.discovery.catalog_files import load_perf_model
from toposched.discovery.files import load_cluster
from toposched.perf import PerfError
from toposched.sim.clusters import is_machine_list, read_machine_list
from toposched.sim.engine import SimResult, Simulation
from toposched.sim.metrics import comparable, summarise
from toposched.sim.report import plotting_missing, write_jobs, write_metrics, write_plots
from toposched.sim.traces import FORMATS, Trace, TraceError, read_trace
from toposched.sim.traces.job import NOTES
from toposched.sim.typed import type_share
from toposched.sim.workload import DEFAULT_WORKLOAD
from toposched.topology.cluster import ClusterError

# Columns of the side-by-side table: (metric key, heading, format).
TABLE = (
    ("finished", "finished", "{:,}"),
    ("avg_jct_s", "avg JCT h", "hours"),
    ("p50_jct_s", "p50 JCT h", "hours"),
    ("p99_jct_s", "p99 JCT h", "hours"),
    ("avg_queue_s", "avg queue h", "hours"),
    ("makespan_s", "makespan h", "hours"),
    ("gpu_alloc_util", "alloc util", "{:.1%}"),
    ("effective_util", "effective util", "{:.1%}"),
    ("placement_quality_mean", "placement quality", "{:.3f}"),
    ("preemptions", "preempt", "{:,}"),
    ("preemptions_per_job", "preempt/job", "{:.3f}"),
    ("preemptions_per_job_p99", "preempt/job p99", "{:.0f}"),
    ("stopped_share", "jobs stopped", "{:.1%}"),
    ("lost_gpu_hours", "lost GPU·h", "{:,.0f}"),
    ("migrations", "migrate", "{:,}"),
    ("partial_hold_gpu_hours", "partial-hold GPU·h", "{:,.0f}"),
    ("wall_s", "wall s", "{:.1f}"),
)


DEADLOCKED = "n/a (deadlocked)"  # a figure that counts only the jobs that got through


def _cell(value: float | int | bool | None, style: str) -> str:
    if value is None:
        return DEADLOCKED
    if style == "hours":
        return f"{float(value) / 3600:,.2f}"
    return style.format(value)


def _trace_summary(trace: Trace) -> str:
    """What was replayed: the jobs, the rows left out by reason, the jobs changed by kind."""
    parts = [f"{len(trace.jobs):,} jobs replayed"]
    if trace.skip_reasons:
        reasons = ", ".join(f"{n:,} {kind}" for kind, n in trace.skip_reasons.items())
        parts.append(f"rows left out: {reasons}")
    parts += [f"{n:,} {NOTES.get(kind, kind)}" for kind, n in trace.notes.items()]
    return "; ".join(parts)


def sim(
    trace: str = typer.Option(..., "--trace", help="Trace file (CSV)."),
    format: str | None = typer.Option(
        None, "--format", help=f"Trace format ({', '.join(FORMATS)}); told from the header."
    ),
    cluster: str = typer.Option(
        ...,
        "--cluster",
        help="Cluster file, a shorthand such as 64*dgx1-v100/8, or a machine list (.csv: an "
        "openb node list or a PAI 2020 machine spec).",
    ),
    policy: str = typer.Option(
        "toposched,k8s-default", "--policy", help="Scheduler policies, comma-separated."
    ),
    out: Path = typer.Option(Path("sim-out"), "--out", help="Directory for metrics, CSV, plots."),
    seed: int = typer.Option(0, "--seed", help="Seeds model draws and random placement."),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N jobs."),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Skip and count bad trace rows."),
    network: str | None = typer.Option(
        None,
        "--network",
        help="A network profile of the performance catalog (default: the cluster's own tiers).",
    ),
    framework: str = typer.Option(
        "pytorch-horovod",
        "--framework",
        help="A framework of the performance catalog that every job trains with.",
    ),
    relax_after: float = typer.Option(
        DEFAULT_WORKLOAD.relax_after_s,
        "--relax-after",
        help="Seconds a job waits before it accepts any placement.",
    ),
    no_checkpoint: bool = typer.Option(
        False, "--no-checkpoint", help="Jobs cannot checkpoint: a stopped job starts over."
    ),
    checkpoint_every: float = typer.Option(
        DEFAULT_WORKLOAD.checkpoint_interval_s,
        "--checkpoint-every",
        metavar="SECONDS",
        help="Seconds of work between a job's checkpoints: a stop loses the work since the "
        "last one.",
    ),
    restore: float = typer.Option(
        DEFAULT_WORKLOAD.restore_s,
        "--restore",
        metavar="SECONDS",
        help="What a restart after a stop costs (processes, data loader, restore).",
    ),
    guarantee: list[str] = typer.Option(
        [], "--guarantee", help="QUEUE=GPUS guaranteed to a queue (repeatable); others get none."
    ),
    param: list[str] = typer.Option(
        [],
        "--param",
        help="[POLICY.]KEY=VALUE: a policy parameter (repeatable; no POLICY: every policy), "
        "e.g. toposched.demote_after_gpu_h=null.",
    ),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="Write PNG plots."),
    html: Path | None = typer.Option(
        None, "--html", help="Also write one self-contained HTML report (tables, SVG plots)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the metrics as JSON."),
    catalogs: list[str] = typer.Option(
        [],
        "--catalog",
        help="Extra performance catalog YAML (repeatable; `perf fit --out` writes one).",
    ),
    typed_share: float = typer.Option(
        0.0,
        "--typed-share",
        help="Share (0-1) of untyped jobs that accept one GPU type only, drawn (--seed) from "
        "the cluster's types in proportion to their GPUs.",
    ),
) -> None:
    """Replay a trace with each policy; print a side-by-side table and write files to --out."""
    names = [p.strip() for p in policy.split(",") if p.strip()]
    if not names:
        fail(f"--policy: name at least one of {', '.join(SCHEDULER_POLICIES)}")
    for name in names:
        try:
            make_scheduler_policy(name)
        except PolicyError as err:
            fail(f"--policy: {err}")
    try:
        params = policy_params(param, names)
    except PolicyError as err:
        fail(str(err))
    guarantees: dict[str, int] = {}
    for item in guarantee:
        queue, _, gpus = item.partition("=")
        if not queue or not gpus.isdigit():
            fail(f"--guarantee takes QUEUE=GPUS, got {item!r}")
        guarantees[queue] = int(gpus)
    if limit is not None and limit < 1:
        fail(f"--limit must be at least 1, got {limit}")
    if not 0.0 <= typed_share <= 1.0:
        fail(f"--typed-share must be between 0 and 1, got {typed_share}")
    try:
        built = read_machine_list(cluster) if is_machine_list(cluster) else load_cluster(cluster)
        jobs = read_trace(trace, format, skip_bad=skip_bad, limit=limit, seed=seed)
        jobs = type_share(jobs, built, typed_share, seed)
        perf = load_perf_model(catalogs, network, framework)
        if not jobs.jobs:
            fail(f"{trace}: the trace has no jobs")
        out.mkdir(parents=True, exist_ok=True)  # before minutes of simulation, not after
    except (ClusterError, TraceError, PerfError) as err:
        fail(str(err))
    except OSError as err:
        fail(f"--out {out}: {err.strerror or err}")
    if not 0 < checkpoint_every < math.inf:
        fail(f"--checkpoint-every must be a positive number of seconds, got {checkpoint_every}")
    if not 0 <= restore < math.inf:
        fail(f"--restore must be a number of seconds >= 0, got {restore}")
    workload = replace(
        DEFAULT_WORKLOAD,
        relax_after_s=relax_after,
        checkpoint_interval_s=checkpoint_every,
        restore_s=restore,
    )
    if no_checkpoint:
        workload = replace(workload, checkpoint_grace_s=None)
    results: list[SimResult] = []
    began = time.perf_counter()
    with Progress(
        TextColumn("{task.description:<20}"),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,} jobs"),
        TimeElapsedColumn(),
        console=rich_console(),
        transient=as_json,
        disable=as_json,
    ) as bar:
        for name in names:
            task = bar.add_task(name, total=len(jobs.jobs))
            simulation = Simulation(
                jobs,
                built,
                name,
                perf=perf,
                workload=workload,
                seed=seed,
                network=network,
                framework=framework,
                guarantees=guarantees,
                policy_params=params[name],
            )

            def advance(done: int, _total: int, task: TaskID = task) -> None:
                bar.update(task, completed=done)

            results.append(simulation.run(advance))
    summaries = {r.policy: comparable(summarise(r)) for r in results}
    extra = {
        "trace": trace,
        "format": jobs.format,
        "cluster": cluster,
        "seed": seed,
        "skipped_rows": jobs.skipped,
        "skip_reasons": jobs.skip_reasons,
        "notes": {NOTES.get(kind, kind): n for kind, n in jobs.notes.items()},
        "typed_share": typed_share,
        "wall_s": time.perf_counter() - began,
    }
    write_metrics(results, summaries, out, extra)
    for result in results:
        write_jobs(result, out)
    if plots and (missing := plotting_missing()) is not None:
        plots = False
        print(f"no plots: {missing}", file=sys.stderr)  # stdout may be --json's
    if plots:
        write_plots(results, out)
    rows = [
        (heading, [_cell(summaries[n][key], style) for n in names]) for key, heading, style in TABLE
    ]
    if html is not None:
        try:
            facts = {k: v for k, v in extra.items() if not isinstance(v, dict)}
            write_html(html, results, rows, {"jobs": _trace_summary(jobs), **facts})
        except OSError as err:
            fail(f"--html {html}: {err.strerror or err}")
    if as_json:
        emit_json({"policies": summaries})
        return
    console.print(_trace_summary(jobs))
    table = Table(title=f"{len(jobs.jobs):,} jobs of {trace} on {cluster}")
    table.add_column("metric")
    for name in names:
        table.add_column(name, justify="right")
    for heading, cells in rows:
        table.add_row(heading, *cells)
    console.print(table)
    deadlocked = [r.policy for r in results if r.deadlocked]
    if deadlocked:
        console.print(
            f"[red]deadlocked[/red]: {', '.join(deadlocked)} (jobs hold part of their GPUs and "
            f"wait for the rest, which other waiting jobs hold); its figures marked {DEADLOCKED} "
            "would count only the jobs that got through"
        )
    console.print(
        f"wrote {out}/metrics.json, jobs-<policy>.csv"
        + (", *.png" if plots else "")
        + (f", and {html}" if html is not None else "")
    )
