"""`toposched serve`: run the scheduler server on this machine."""

from __future__ import annotations

from pathlib import Path

import typer

from toposched.cli.output import fail
from toposched.cli.params import policy_params
from toposched.core import PolicyError
from toposched.topology.errors import TopologyError


def serve_cmd(
    db: str = typer.Option(
        None, "--db", help="SQLAlchemy URL (default: SQLite in the data directory)."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
    port: int = typer.Option(8080, "--port", help="TCP port."),
    emulate: str = typer.Option(
        None,
        "--emulate",
        help="A preset or topology file to schedule instead of this machine's GPUs "
        "(the default when NVML finds none: dgx1-v100).",
    ),
    policy: str = typer.Option("toposched", "--policy", help="Scheduling policy."),
    param: list[str] = typer.Option(
        [],
        "--param",
        help="KEY=VALUE: a parameter of the policy (repeatable), e.g. demote_after_gpu_h=null.",
    ),
    data_dir: Path = typer.Option(
        None,
        "--data-dir",
        help="Database, logs and the admin token (default: $TOPOSCHED_DATA_DIR, else "
        "$XDG_DATA_HOME/toposched, else ~/.local/share/toposched).",
    ),
    no_auth: bool = typer.Option(
        False, "--no-auth", help="No tokens: every caller is admin (loopback addresses only)."
    ),
    node_name: str = typer.Option(None, "--node-name", help="Node name (default: hostname)."),
    db_busy_timeout: float = typer.Option(
        5.0,
        "--db-busy-timeout",
        metavar="SECONDS",
        help="How long a write waits for another process's lock on the SQLite file before the "
        "server refuses changes (503) until it can write again.",
    ),
    log_level: str = typer.Option(
        "info",
        "--log-level",
        help="debug|info|warning|error: info logs each scheduling decision (job, states, "
        "placement, reason), debug also each HTTP request.",
    ),
    job_accounts: str = typer.Option(
        "team",
        "--job-accounts",
        help="team|user|server: a server run as root starts each job as its team's (or "
        "user's) own Unix account, so that no job can read the data directory or touch "
        "another's; 'server' runs them all as root (trusted users only).",
    ),
    job_account: list[str] = typer.Option(
        [],
        "--job-account",
        metavar="NAME=USER",
        help="The Unix user a team (or user) runs as (repeatable); others get a uid "
        "allocated from --job-uid-range.",
    ),
    job_uid_range: str = typer.Option(
        "61184-65519",
        "--job-uid-range",
        metavar="LO-HI",
        help="Where uids of teams (or users) with no --job-account come from (default: "
        "systemd's DynamicUser range, free of passwd entries).",
    ),
    container_runtime: str = typer.Option(
        "auto",
        "--container-runtime",
        metavar="auto|podman|docker|PATH",
        help="What runs the jobs that name an image (submit --image); auto: the first of "
        "podman and docker that answers `version`, looked for at the first such job.",
    ),
    container_arg: list[str] = typer.Option(
        [],
        "--container-arg",
        metavar="ARG",
        help="An argument the runtime's `run` gets for every container, before the image "
        "(repeatable), e.g. --container-arg=--runtime=runc.",
    ),
    sample_every: float = typer.Option(
        5.0,
        "--sample-every",
        metavar="SECONDS",
        help="How often each GPU's utilization is sampled (NVML; without it, each job's CPU "
        "time as a stand-in), for `top`, `get`, /metrics and the idle rules.",
    ),
    header_timeout: float = typer.Option(
        10.0,
        "--header-timeout",
        metavar="SECONDS",
        help="How long a request's headers may take to come before its connection is closed (408).",
    ),
    body_timeout: float = typer.Option(
        60.0,
        "--body-timeout",
        metavar="SECONDS",
        help="How long a request's body may take to come, once its headers have.",
    ),
    max_connections: int = typer.Option(
        None,
        "--max-connections",
        metavar="N",
        help="Connections open at once (default: half the open-file limit, which the server "
        "raises to its hard limit, at most 4096); over it, the one that has waited longest "
        "for a whole request is closed.",
    ),
    max_waiting: int = typer.Option(
        50_000,
        "--max-waiting",
        metavar="N",
        help="Jobs one queue may have waiting; a submit past it is refused (429) saying so.",
    ),
) -> None:
    """Run the scheduler server: jobs run as local processes on this machine's GPUs."""
    # The web stack loads only here, so the other commands start fast.
    from toposched.common.paths import default_data_dir
    from toposched.executors.accounts import AccountError, parse_range
    from toposched.server.serve import LOG_LEVELS, ServeError, ServeOptions, serve
    from toposched.store import StoreError

    if not 0 < port < 65536:
        fail(f"--port must be 1..65535, got {port}")
    if not 0 <= db_busy_timeout <= 3600:
        fail(f"--db-busy-timeout must be 0..3600 seconds, got {db_busy_timeout:g}")
    if not 0.1 <= sample_every <= 3600:
        fail(f"--sample-every must be 0.1..3600 seconds, got {sample_every:g}")
    for flag, seconds in (("--header-timeout", header_timeout), ("--body-timeout", body_timeout)):
        if not 0.1 <= seconds <= 3600:
            fail(f"{flag} must be 0.1..3600 seconds, got {seconds:g}")
    if max_connections is not None and max_connections < 1:
        fail(f"--max-connections must be at least 1, got {max_connections}")
    if max_waiting < 1:
        fail(f"--max-waiting must be at least 1, got {max_waiting}")
    if log_level.lower() not in LOG_LEVELS:
        fail(f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}")
    try:
        params = policy_params(param, [policy])[policy]
    except PolicyError as err:
        fail(str(err))
    named: dict[str, str] = {}
    for item in job_account:
        key, sep, user = item.partition("=")
        if not sep or not key or not user:
            fail(f"--job-account {item!r}: write NAME=USER, e.g. nlp=alice")
        named[key] = user
    try:
        uids = parse_range(job_uid_range)
    except AccountError as err:
        fail(str(err))
    options = ServeOptions(
        data_dir=data_dir or default_data_dir(),
        db=db,
        host=host,
        port=port,
        emulate=emulate,
        policy=policy,
        policy_params=params,
        auth=not no_auth,
        node_name=node_name,
        db_busy_timeout_s=db_busy_timeout,
        log_level=log_level.lower(),
        job_accounts=job_accounts,
        job_account=named,
        job_uids=uids,
        container_runtime=container_runtime,
        container_args=tuple(container_arg),
        sample_s=sample_every,
        header_timeout_s=header_timeout,
        body_timeout_s=body_timeout,
        max_connections=max_connections,
        max_waiting=max_waiting,
    )
    try:
        serve(options, say=lambda line: typer.echo(line, err=True))
    except (ServeError, StoreError, TopologyError, PolicyError) as err:
        fail(str(err))
