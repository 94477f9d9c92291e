"""How a job reads in the terminal: its state, shape, placement, speed and activity, `get`'s
page and `list`'s table (the server's JSON in, Rich text out)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from toposched.cli.output import console, escape

if TYPE_CHECKING:
    from rich.table import Table


STATE_STYLE = {
    "pending": "yellow",
    "running": "green",
    "stopping": "yellow",
    "succeeded": "bold green",
    "failed": "bold red",
    "cancelled": "dim",
    "rejected": "red",
    "dependency-failed": "red",
    "idle-stopped": "yellow",
    "timed-out": "yellow",
    "corrupt": "bold red",
}


def state_text(state: str) -> str:
    style = STATE_STYLE.get(state)
    return f"[{style}]{state}[/]" if style else state


def placement_text(job: dict[str, Any]) -> str:
    """`node-a:0,1 node-a:2,3`: each worker's node and GPUs, in rank order."""
    return " ".join(f"{slot['node']}:{gpus_text(slot['gpus'])}" for slot in job["placement"])


def gpus_text(gpus: list[int]) -> str:
    """`0,1`; `-` for a worker without GPUs."""
    return ",".join(str(g) for g in gpus) or "-"


def duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def when(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    clock = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))
    return f"{clock} ({duration(time.time() - stamp)} ago)"


def shape(job: dict[str, Any]) -> str:
    """`4x2`: workers x GPUs each; an elastic job's running size, then its range; `1x0.25`
    a share of one GPU (`1x0.25+4Gi` with a memory share, `1x4Gi` that alone)."""
    workers = len(job["placement"]) or job["workers"]
    spec = job.get("spec") or {}
    text = f"{workers}x{job['gpus_per_worker']}"
    fraction, memory = spec.get("gpu_fraction"), spec.get("gpu_memory_share")
    if (fraction is not None and fraction < 1) or memory:
        parts = [f"{fraction:g}"] if fraction is not None and fraction < 1 else []
        text = f"{workers}x" + "+".join(parts + ([str(memory)] if memory else []))
    elastic = spec.get("elastic")
    return f"{text} ({elastic['min']}-{elastic['max']})" if elastic else text


def speed_text(job: dict[str, Any]) -> str:
    """`ring 6 GB/s, predicted 437 samples/s (51% of best)`: the GPUs' ring and what the
    performance model predicts of them; empty for a job that holds no GPUs."""
    predicted = job.get("predicted")
    if not predicted:
        return ""
    ring = job.get("ring_gbps")
    ring_text = f"ring {ring:g} GB/s" if ring is not None else "no ring (one GPU)"
    return (
        f"{ring_text}, predicted {predicted['samples_per_s']:.0f} samples/s "
        f"({predicted['share']:.0%} of best)"
    )


def activity_text(job: dict[str, Any]) -> str:
    """`GPUs 97% busy now, 91% on average (12 samples)`, or `-` before the first sample."""
    activity = job.get("activity")
    if not activity:
        return "-"
    what = "GPUs" if activity["source"] == "nvml" else "CPU stand-in (no NVML)"
    text = (
        f"{what} {activity['busy_pct']:.0f}% busy now, {activity['mean_pct']:.0f}% on average "
        f"({activity['samples']} samples)"
    )
    if activity.get("idle_since") is not None:
        text += f"; idle since {time.strftime('%H:%M:%S', time.localtime(activity['idle_since']))}"
    return text


def idle_rule_text(rule: dict[str, Any]) -> str:
    """`stop after 30m below 5%`."""
    from toposched.common.durations import duration_text

    return f"{rule['action']} after {duration_text(rule['after'])} below {rule['below']:g}%"


def session_text(job: dict[str, Any], server_url: str) -> str:
    """An interactive session's URL on the server's host while it runs."""
    port = job.get("port")
    if port is None:
        return "interactive; its URL once it runs"
    from urllib.parse import urlsplit

    host = urlsplit(server_url).hostname or "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"interactive: http://{host}:{port}/ (port {port}, in TOPOSCHED_PORT)"


def workers_text(job: dict[str, Any]) -> str:
    """`4 x 1 GPU(s)`; an elastic job says how many of its workers run now."""
    spec = job.get("spec") or {}
    elastic = spec.get("elastic")
    count = f"{job['workers']}"
    if elastic:
        running = len(job["placement"])
        held = f"{running} running" if running else "none running"
        count = f"{held} (elastic {elastic['min']}:{elastic['max']})"
    return f"{count} x {job['gpus_per_worker']} GPU(s), locality {spec.get('locality', '-')}"


def print_job(job: dict[str, Any], server_url: str = "") -> None:
    from rich.table import Table

    spec = job.get("spec") or {}
    rows = [
        ("name", escape(job["name"])),
        ("state", state_text(job["state"])),
        ("reason", escape(job["reason"])),
        ("queue", f"{escape(job['queue'])} (owner {escape(job['owner'])})"),
        ("priority", str(job["priority"])),
        ("workers", workers_text(job)),
    ]
    if spec.get("gputopology") is False:
        rows.append(("topology", "off (--gputopology=false): the lowest free GPU indices"))
    if spec.get("after"):
        rows.append(("after", escape(after_text(job))))
    if job.get("predicted"):
        predicted = job["predicted"]
        rows.append(("speed", speed_text(job)))
        rows.append(
            (
                "model",
                f"{escape(predicted['model'])} (the best placement of as many GPUs: "
                f"{predicted['best_samples_per_s']:.0f} samples/s)",
            )
        )
    if job.get("activity"):
        rows.append(("activity", activity_text(job)))
    if spec.get("idle"):
        rows.append(("idle rule", idle_rule_text(spec["idle"])))
    rows.append(("command", escape(" ".join(job["command"]))))
    if spec.get("checkpoint"):
        cp = spec["checkpoint"]
        every = f", every {cp['interval_s']:g} s of work" if cp.get("interval_s") else ""
        rows.append(("checkpoint", f"{cp['signal']}, {cp['grace_s']:g} s grace{every}"))
    if spec.get("workdir"):
        rows.append(("workdir", escape(spec["workdir"])))
    if spec.get("image"):
        rows.append(("image", escape(spec["image"])))
    if spec.get("interactive"):
        rows.append(("session", session_text(job, server_url)))
    if spec.get("exported"):
        names = ", ".join(spec["exported"])
        rows.append(("exported", f"{escape(names)} (from the submitter's environment)"))
    rows += [
        ("submitted", when(job["submitted_at"])),
        ("started", when(job["started_at"])),
        ("ended", when(job["ended_at"])),
        ("attempt", attempt_text(job)),
    ]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for key, value in rows:
        grid.add_row(key, value)
    console.print(grid)
    if job["placement"]:
        table = Table(title="placement", title_justify="left")
        for column in ("worker", "node", "GPUs"):
            table.add_column(column)
        for slot in job["placement"]:
            table.add_row(str(slot["worker"]), escape(slot["node"]), gpus_text(slot["gpus"]))
        console.print(table)
    if job.get("cores"):  # per process, as `logs --worker` numbers them
        table = Table(title="CPU cores", title_justify="left")
        for column in ("process", "name", "cores", "note"):
            table.add_column(column)
        for got in job["cores"]:
            note = escape(got["note"]) or "-"
            table.add_row(str(got["process"]), got["name"], got["cores"], note)
        console.print(table)
    if job.get("history"):
        console.print("[bold]history[/]")
        for h in job["history"]:
            clock = time.strftime("%H:%M:%S", time.localtime(h["time"]))
            console.print(f"  {clock}  {h['old'] or '-'} -> {h['new']}: {escape(h['reason'])}")


def after_text(job: dict[str, Any]) -> str:
    """`prep:ok (succeeded), data:any (running)`: the jobs it runs after and their states
    (those of `get`; a list row has the names alone)."""
    found = job.get("after")
    if found is None:
        return ", ".join(job["spec"]["after"])
    return ", ".join(f"{dep['job']}:{dep['until']} ({dep['state']})" for dep in found)


def restarts_text(job: dict[str, Any]) -> str:
    """`1 (attempt 2)`: restarts after failures, and the attempt now (each start, restart,
    preemption, migration or resize is one); `-` for the attempt of a job never started."""
    attempt = job.get("attempt", -1)
    shown = f" (attempt {attempt})" if attempt is not None and attempt >= 0 else ""
    return f"{job.get('restarts', 0)}{shown}"


def attempt_text(job: dict[str, Any]) -> str:
    """`2 (1 restart(s))`; a job never started has had no attempt."""
    if job["attempt"] < 0:
        return "none yet (not started)"
    return f"{job['attempt']} ({job['restarts']} restart(s))"


def jobs_table(jobs: list[dict[str, Any]], title: str | None = None, wide: bool = False) -> Table:
    """One row per job; `wide` adds the ring, the model and its predicted speed."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    columns = ["NAME", "QUEUE", "OWNER", "STATE", "SHAPE", "GPUS", "RESTARTS", "AGE"]
    if wide:
        columns += ["RING", "MODEL", "PREDICTED"]
    for column in [*columns, "REASON"]:
        table.add_column(column, overflow="fold")
    now = time.time()
    for job in jobs:
        cells = [
            escape(job["name"]),
            escape(job["queue"]),
            escape(job["owner"]),
            state_text(job["state"]),
            shape(job),
            placement_text(job) or "-",
            restarts_text(job),
            duration(now - job["submitted_at"]),
        ]
        if wide:
            cells += _wide_cells(job)
        table.add_row(*cells, escape(job["reason"]))
    return table


def _wide_cells(job: dict[str, Any]) -> list[str]:
    """RING, MODEL and PREDICTED of `list --wide`: `6 GB/s`, `vgg16`, `437/s (51%)`."""
    predicted = job.get("predicted")
    ring = job.get("ring_gbps")
    if not predicted:
        return ["-", escape(job["spec"].get("model") or "-"), "-"]
    return [
        f"{ring:g} GB/s" if ring is not None else "-",
        escape(predicted["model"]),
        f"{predicted['samples_per_s']:.0f}/s ({predicted['share']:.0%})",
    ]


# ---------------------------------------------------------------------- submit
