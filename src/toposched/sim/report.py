"""Files a simulation leaves behind: metrics.json, one CSV of jobs per policy, and PNG plots."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from toposched.sim.engine import SimResult
from toposched.sim.metrics import quality, team_shares

JOB_COLUMNS = (
    "name",
    "queue",
    "model",
    "gpus",
    "submit_s",
    "start_s",
    "finish_s",
    "jct_s",
    "queue_s",
    "run_s",
    "placement_quality",
    "preemptions",
    "migrations",
    "state",
)


def write_metrics(
    results: Sequence[SimResult],
    summaries: Mapping[str, Mapping[str, object]],
    out: Path,
    extra: Mapping[str, object],
) -> Path:
    """metrics.json: `extra`, each policy's summary (see metrics.summarise), team shares."""
    path = out / "metrics.json"
    document = {
        **extra,
        "policies": dict(summaries),
        "team_shares": {r.policy: team_shares(r) for r in results},
    }
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return path


def write_jobs(result: SimResult, out: Path) -> Path:
    path = out / f"jobs-{result.policy}.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(JOB_COLUMNS)
        for job in result.jobs:
            t = job.trace
            q = quality(job)
            writer.writerow(
                (
                    t.name,
                    t.queue,
                    t.model,
                    job.trace.gpus,
                    f"{t.submit_s:g}",
                    "" if job.first_start is None else f"{job.first_start:g}",
                    "" if job.finish is None else f"{job.finish:g}",
                    "" if job.finish is None else f"{job.finish - t.submit_s:g}",
                    "" if job.first_start is None else f"{job.first_start - t.submit_s:g}",
                    f"{job.run_s:g}",
                    "" if q is None else f"{q:.4f}",
                    job.preemptions,
                    job.migrations,
                    job.state.value if job.state else "",
                )
            )
    return path


PLOTS_NEED = (
    "PNG plots need matplotlib, which the scheduler does not install: "
    "pip install 'toposched[sim]' (--no-plots leaves them out; --html draws its own)"
)


def plotting_missing() -> str | None:
    """Why the PNG plots cannot be drawn here (matplotlib is an extra), or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return PLOTS_NEED
    return None


def write_plots(results: Sequence[SimResult], out: Path) -> list[Path]:
    """JCT CDF, GPU utilisation over time and queue length over time, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        jct = sorted(j.finish - j.trace.submit_s for j in r.jobs if j.finish is not None)
        if jct:
            ax.plot(jct, [(i + 1) / len(jct) for i in range(len(jct))], label=r.policy)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of finished jobs")
    ax.set_title("JCT CDF")
    ax.grid(alpha=0.3)
    ax.legend()
    paths.append(_save(fig, out / "jct_cdf.png"))

    gpus = results[0].cluster.gpus if results else 1
    for name, label, attribute, scale in (
        ("utilisation.png", "GPUs allocated (fraction)", "allocated", 1 / gpus),
        ("queue_length.png", "jobs waiting", "queued", 1.0),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for r in results:
            times = [s.time / 3600 for s in r.samples]
            ax.plot(times, [getattr(s, attribute) * scale for s in r.samples], label=r.policy)
        ax.set_xlabel("simulated time (h)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
        paths.append(_save(fig, out / name))
    return paths


def _save(fig: object, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110, bbox_inches="tight")  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[arg-type]
    return path
