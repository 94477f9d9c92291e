"""`toposched top | node | queue | token | whoami`: the cluster's state and its administration.

Exit codes as for the job commands (see toposched.cli.jobs_cmd).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from toposched.cli.flags import Arg, Opt
from toposched.cli.jobs_cmd import JSON, SERVER, api
from toposched.cli.jobview import duration, idle_rule_text, placement_text, shape, state_text
from toposched.cli.output import EXIT_BAD_INPUT, console, emit_json, escape, fail

if TYPE_CHECKING:
    import typer
    from rich.table import Table

# toposched.topology (for its quantities' texts) is imported where a node's GPUs, CPUs and
# memory are written: `top job` and the other server commands start without it.

LINK_STYLE = {"PIX": "cyan", "PXB": "cyan", "PHB": "yellow", "NODE": "yellow", "SYS": "red"}


def link_text(code: str) -> str:
    if code == "X":
        return "[dim]X[/]"
    style = "green" if code.startswith("NV") else LINK_STYLE.get(code)
    return f"[{style}]{escape(code)}[/]" if style else escape(code)


def node_table(node: dict[str, Any]) -> Table:
    from rich.table import Table

    gpus = node["gpus"]
    busy = sum(1 for g in gpus if g["job"] is not None or g.get("shares"))
    title = (
        f"{escape(node['name'])}: {len(gpus)} GPUs, {busy} in use "
        f"({escape(node['topology'])}; {escape(node['source'])})"
    )
    table = Table(title=title, title_justify="left")
    table.add_column("GPU")
    table.add_column("JOB")
    table.add_column("BUSY", justify="right")
    for j in range(len(gpus)):
        table.add_column(f"GPU{j}", justify="center")
    links = node["links"]
    for i, gpu in enumerate(gpus):
        job = escape(gpu["job"]) if gpu["job"] is not None else "[dim]-[/]"
        if gpu.get("shares"):
            job = shares_text(gpu["shares"])
        if not gpu["healthy"]:
            job += " [bold red](unhealthy)[/]"
        if gpu.get("outside"):
            pids = ", ".join(map(str, gpu["outside"]))
            job += f" [bold yellow](pids {pids} outside the scheduler)[/]"
        row = [link_text(code) for code in links[i]] if i < len(links) else []
        table.add_row(f"GPU{gpu['index']}", job, busy_text(gpu), *row)
    return table


def shares_text(shares: list[dict[str, Any]]) -> str:
    """A shared GPU's holders and their shares: `a 0.25, b 0.25 4096Mi`, then what is left
    of its compute (`shared, 0.5 left`)."""
    held = [
        escape(s["job"])
        + (f" {s['milli'] / 1000:g}" if s["milli"] else "")
        + (f" {s['memory_mib']}Mi" if s["memory_mib"] else "")
        for s in shares
    ]
    left = 1000 - sum(s["milli"] for s in shares)
    return ", ".join(held) + f" [dim](shared, {left / 1000:g} left)[/]"


def busy_text(gpu: dict[str, Any]) -> str:
    """`87%`, `87% 12.0 GiB` with NVML's memory in use, or `-` where not sampled."""
    busy = gpu.get("busy_pct")
    if busy is None:
        return "[dim]-[/]"
    memory = gpu.get("memory_used")
    return f"{busy:.0f}%" + (f" {memory / 2**30:.1f} GiB" if memory else "")


def top_node(server: str = SERVER, as_json: bool = JSON) -> None:
    """Each node's GPU map: which job holds each GPU, and the links between them.

    Link kinds: NV# NVLink (# links), PIX/PXB PCIe switch, PHB/NODE host bridge, SYS across
    CPU sockets."""
    with api(server) as client:
        nodes = client.nodes()
    if as_json:
        emit_json({"nodes": nodes})
    else:
        print_nodes(nodes)


def print_nodes(nodes: list[dict[str, Any]]) -> None:
    """Each node's GPU map, hardware and labels (`top node`, here and on a cluster)."""
    for node in nodes:
        console.print(node_table(node))
        if node.get("activity_source"):
            console.print(f"BUSY: {escape(node['activity_source'])}")
        cpus, memory = held_texts(node)
        kind = escape(gpu_type_text(node))
        console.print(f"GPUs: {kind}; CPUs used: {cpus}; memory used: {memory}")
        labels = ", ".join(f"{k}={v}" for k, v in sorted(node["labels"].items()))
        console.print(f"labels: {escape(labels) or '(none)'}")


def gpu_type_text(node: dict[str, Any]) -> str:
    """`V100 16 GiB`, or `-` when the node does not say."""
    from toposched.topology.resources import gib_text

    kind = node.get("gpu_type") or "-"
    memory = node.get("gpu_memory") or 0
    return f"{kind} {gib_text(memory)}" if memory else kind


def held_texts(node: dict[str, Any]) -> tuple[str, str]:
    """CPUs and memory its workers hold, of what it has: `16/80`, `32 GiB/512 GiB`, or the
    held amount alone where the node's total is not counted."""
    from toposched.topology.resources import cpus_text, gib_text

    cpus, memory = node.get("cpus"), node.get("memory")
    used_cpus, used_memory = node.get("cpus_used", 0), node.get("memory_used", 0)
    cpu_text = cpus_text(used_cpus) + (f"/{cpus_text(cpus)}" if cpus is not None else "")
    mem_text = gib_text(used_memory) + (f"/{gib_text(memory)}" if memory is not None else "")
    return cpu_text, mem_text


def top_job(server: str = SERVER, as_json: bool = JSON) -> None:
    """Running jobs, one line each: shape, GPUs (node:indices per worker), time running."""
    from rich.table import Table

    with api(server) as client:
        jobs = list(client.all_jobs(states=["running", "stopping"]))
    if as_json:
        emit_json({"jobs": jobs})
        return
    if not jobs:
        console.print("no running jobs")
        return
    table = Table()
    for column in ("NAME", "QUEUE", "STATE", "SHAPE", "GPUS", "RUNNING", "BUSY", "MEAN"):
        table.add_column(column, overflow="fold")
    now = time.time()
    for job in jobs:
        started = job["started_at"]
        table.add_row(
            escape(job["name"]),
            escape(job["queue"]),
            state_text(job["state"]),
            shape(job),
            placement_text(job),
            duration(now - started) if started is not None else "-",
            *busy_columns(job),
        )
    console.print(table)
    sources = {j["activity"]["source"] for j in jobs if j.get("activity")}
    if "cpu" in sources:
        console.print("BUSY, MEAN: the CPU time of each job's processes (no NVML on the server)")


def busy_columns(job: dict[str, Any]) -> tuple[str, str]:
    """How busy its GPUs are now and on average; `idle` marks one idle under its rule."""
    activity = job.get("activity")
    if not activity:
        return "-", "-"
    now = f"{activity['busy_pct']:.0f}%"
    if activity.get("idle_since") is not None:
        now += " [yellow]idle[/]"
    if activity.get("gpu_memory_notice"):
        now += " [bold red]over memory share[/]"
    return now, f"{activity['mean_pct']:.0f}%"


def node_list(server: str = SERVER, as_json: bool = JSON) -> None:
    """Nodes: GPUs in all, free and unhealthy, labels and topology (`top node` shows which
    job holds each GPU)."""
    from rich.table import Table

    with api(server) as client:
        nodes = client.nodes()
    if as_json:
        emit_json({"nodes": nodes})
        return
    table = Table()
    columns = ("NODE", "TYPE", "GPUS", "FREE", "UNHEALTHY", "CPUS USED/ALL", "MEMORY USED/ALL")
    for column in (*columns, "TOPOLOGY", "LABELS"):
        table.add_column(column, overflow="fold")
    for node in nodes:
        gpus = node["gpus"]
        sick = [g["index"] for g in gpus if not g["healthy"]]
        free = sum(1 for g in gpus if g["job"] is None and g["healthy"])
        labels = ",".join(f"{k}={v}" for k, v in sorted(node["labels"].items()))
        table.add_row(
            escape(node["name"]),
            escape(gpu_type_text(node)),
            str(len(gpus)),
            str(free),
            f"[bold red]{','.join(map(str, sick))}[/]" if sick else "-",
            *held_texts(node),
            escape(node["topology"]),
            escape(labels) or "-",
        )
    console.print(table)


def node_label(
    node: str = Arg(..., help="Node name (see `toposched top node`)."),
    label: str = Arg(..., metavar="KEY=VALUE|KEY-", help="Set KEY, or remove it."),
    server: str = SERVER,
    as_json: bool = JSON,
) -> None:
    """Set a node label (KEY=VALUE) or remove one (KEY-), as kubectl label does (admin)."""
    key, sep, value = label.partition("=")
    new: str | None = value
    if not sep:
        if not label.endswith("-") or len(label) < 2:
            fail(f"expected KEY=VALUE to set a label or KEY- to remove it, got {label!r}")
        key, new = label[:-1], None
    if not key:
        fail(f"the label has no key: {label!r}", EXIT_BAD_INPUT)
    with api(server) as client:
        nodes = client.label(node, key, new)
    if as_json:
        emit_json({"nodes": nodes})
        return
    for found in nodes:
        if found["name"] == node:
            labels = ", ".join(f"{k}={v}" for k, v in sorted(found["labels"].items()))
            console.print(f"{escape(node)}: labels {escape(labels) or '(none)'}")


def queue_list(server: str = SERVER, as_json: bool = JSON) -> None:
    """Queues: guaranteed GPUs, GPUs in use, running and pending jobs."""
    from rich.table import Table

    with api(server) as client:
        queues = client.queues()
    if as_json:
        emit_json({"queues": queues})
        return
    if not queues:
        console.print("no queues yet (one appears with its first job or `toposched queue set`)")
        return
    table = Table()
    for column in ("QUEUE", "GUARANTEED", "USED", "RUNNING", "PENDING", "IDLE RULE"):
        table.add_column(column, justify="left" if column in ("QUEUE", "IDLE RULE") else "right")
    for q in queues:
        table.add_row(
            escape(q["name"]),
            str(q["guaranteed_gpus"]),
            str(q["used_gpus"]),
            str(q["running"]),
            str(q["pending"]),
            idle_rule_text(q["idle"]) if q.get("idle") else "-",
        )
    console.print(table)


def queue_set(
    queue: str = Arg(..., help="Queue name (a team)."),
    gpus: int = Arg(None, min=0, help="GPUs guaranteed to the queue (kept if left out)."),
    idle_after: str = Opt(
        None,
        "--idle-after",
        metavar="TIME",
        help="The queue's idle rule, for its jobs that set none: give their GPUs back once "
        "every one stays below --idle-below percent busy this long (30m, 1h, 45s).",
    ),
    idle_below: float = Opt(None, "--idle-below", metavar="PERCENT", help="Default 5."),
    idle_action: str = Opt(None, "--idle-action", metavar="notify|stop", help="Default notify."),
    no_idle: bool = Opt(False, "--no-idle", help="Remove the queue's idle rule."),
    server: str = SERVER,
    as_json: bool = JSON,
) -> None:
    """Set a queue's guaranteed share in GPUs and its idle rule (admin)."""
    rule = {"after": idle_after, "below": idle_below, "action": idle_action}
    idle = {key: value for key, value in rule.items() if value is not None} or None
    if idle is not None and "after" not in idle:
        fail("--idle-below and --idle-action need --idle-after (how long)", EXIT_BAD_INPUT)
    if idle is not None and no_idle:
        fail("--no-idle removes the rule: give it without --idle-* options", EXIT_BAD_INPUT)
    if gpus is None and idle is None and not no_idle:
        fail("give GPUS, an idle rule (--idle-after ...), or --no-idle", EXIT_BAD_INPUT)
    with api(server) as client:
        queues = client.set_queue(queue, gpus, idle=idle, no_idle=no_idle)
    if as_json:
        emit_json({"queues": queues})
        return
    found = next((q for q in queues if q["name"] == queue), None)
    share = f"{found['guaranteed_gpus']} GPU(s) guaranteed" if found else "set"
    rule_text = idle_rule_text(found["idle"]) if found and found.get("idle") else "none"
    console.print(f"queue {escape(queue)}: {share}; idle rule: {rule_text}")


def token_create(
    user: str = Opt(..., "--user", help="User name."),
    team: str = Opt(..., "--team", help="The user's team: the queue they may use."),
    admin: bool = Opt(False, "--admin", help="May do everything, in every queue."),
    server: str = SERVER,
    as_json: bool = JSON,
) -> None:
    """Create a token for a user (admin).

    Only the token goes to stdout: export TOPOSCHED_TOKEN=$(toposched token create --user ann
    --team a)"""
    with api(server) as client:
        made = client.create_token(user, team, admin)
    if as_json:
        emit_json(made)
        return
    sys.stdout.write(made["token"] + "\n")
    sys.stdout.flush()
    sys.stderr.write(
        f"token for user {made['user']} (team {made['team']}, {made['role']}); it is shown "
        "only this once: use it as TOPOSCHED_TOKEN\n"
    )


def whoami(server: str = SERVER, as_json: bool = JSON) -> None:
    """Who the server takes you for (from TOPOSCHED_TOKEN or the local admin token)."""
    with api(server) as client:
        me = client.whoami()
        url = client.url
    if as_json:
        emit_json(me)
        return
    console.print(f"{escape(me['user'])} (team {escape(me['team'])}, {me['role']}) at {url}")


def register(app: typer.Typer) -> None:
    import typer

    from toposched.cli.flags import typer_function

    top_app = typer.Typer(no_args_is_help=True, help="What runs where: GPUs of each node, jobs.")
    top_app.command("node")(typer_function(top_node))
    top_app.command("job")(typer_function(top_job))
    app.add_typer(top_app, name="top")
    node_app = typer.Typer(no_args_is_help=True, help="Nodes: their GPUs and labels.")
    node_app.command("list")(typer_function(node_list))
    node_app.command("label")(typer_function(node_label))
    app.add_typer(node_app, name="node")
    queue_app = typer.Typer(no_args_is_help=True, help="Queues (one per team) and their shares.")
    queue_app.command("list")(typer_function(queue_list))
    queue_app.command("set")(typer_function(queue_set))
    app.add_typer(queue_app, name="queue")
    token_app = typer.Typer(no_args_is_help=True, help="API tokens (admin).")
    token_app.command("create")(typer_function(token_create))
    app.add_typer(token_app, name="token")
    app.command("whoami")(typer_function(whoami))
