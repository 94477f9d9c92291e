"""`toposched serve`: open the store, find the node, recover, and serve the API with uvicorn."""

from __future__ import annotations

import fcntl
import gc
import logging
import os
import pwd
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

import uvicorn

from toposched.common.jobspec import spec_problem
from toposched.common.paths import DB_FILE, loopback
from toposched.core import make_scheduler_policy
from toposched.discovery.gpu_usage import open_usage
from toposched.executors.accounts import DYNAMIC_UIDS, AccountError, Accounts, KeyedBy
from toposched.executors.containers import Containers
from toposched.executors.local import LocalExecutor
from toposched.server.activity import SAMPLE_S, SOURCE_TEXT, ActivityMonitor
from toposched.server.app import create_app
from toposched.server.auth import ensure_admin_token
from toposched.server.connections import (
    BODY_S,
    HEADER_S,
    ConnectionLimits,
    bounded_protocol,
    connection_bound,
    listen_backlog,
    raise_fd_limit,
)
from toposched.server.intake import MAX_WAITING
from toposched.server.localnode import local_node, topology_name
from toposched.server.metrics import Metrics
from toposched.server.runtime import Runtime
from toposched.server.shared import Unavailable
from toposched.store import BUSY_TIMEOUT_S, Store, StoreError, sqlite_url, write_fault
from toposched.store.fsck import unreadable


class ServeError(RuntimeError):
    """The server cannot start as asked; nothing was changed."""


@dataclass(frozen=True)
class ServeOptions:
    data_dir: Path
    db: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    emulate: str | None = None
    policy: str = "toposched"
    policy_params: Mapping[str, object] = field(default_factory=dict)
    auth: bool = True
    node_name: str | None = None
    db_busy_timeout_s: float = BUSY_TIMEOUT_S
    log_level: str = "info"
    # Whose account runs each job when the server is root: its team's, its user's, or the
    # server's own ("server"); named accounts, and the range others are allocated from.
    job_accounts: str = "team"
    job_account: Mapping[str, str] = field(default_factory=dict)
    job_uids: tuple[int, int] = DYNAMIC_UIDS
    # What runs jobs that name an image (executors/containers.py), and its site's arguments.
    container_runtime: str = "auto"
    container_args: tuple[str, ...] = ()
    # How often each GPU's (or, without NVML, each job's CPU) activity is sampled.
    sample_s: float = SAMPLE_S
    # How long a request's headers, then its body, may take to come; how many connections
    # may be open (None: half the open-file limit, at most connections.MAX_CONNECTIONS).
    header_timeout_s: float = HEADER_S
    body_timeout_s: float = BODY_S
    max_connections: int | None = None
    max_waiting: int = MAX_WAITING  # jobs one queue may have waiting


LOG_LEVELS = ("debug", "info", "warning", "error")
log = logging.getLogger("toposched")
_handler: logging.Handler | None = None


def _configure_logging(level: str) -> None:
    """The package's log to stderr at `level`: INFO has one line per scheduling decision,
    DEBUG adds one per HTTP request. Only the package's loggers: a library's debug output
    (httpx, SQLAlchemy) is not the server's."""
    global _handler
    if _handler is not None:  # serve() again in this process: one handler, not two
        log.removeHandler(_handler)
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log.addHandler(_handler)
    log.setLevel(level.upper())


def _check_port(host: str, port: int) -> None:
    """Refuse a taken address before anything is opened or written, with a clear message."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise ServeError(f"cannot listen on {host}: {err.strerror}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        # As uvicorn binds: connections of a server that just died (TIME_WAIT) do not count,
        # a socket still listening does.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as err:
            raise ServeError(
                f"cannot listen on {host}:{port}: {err.strerror} (is another server there? "
                "choose another --port)"
            ) from None


def lock_data_dir(data_dir: Path) -> IO[str]:
    """One server per data directory: two would both adopt the same workers."""
    handle = (data_dir / "server.lock").open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ServeError(f"another toposched server is using {data_dir}") from None
    return handle


def _check_writable(data_dir: Path) -> None:
    """Refuse a data directory the server cannot write, before it says it listens: it would
    otherwise recover, answer, and fail at its first change."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with tempfile.TemporaryFile(dir=data_dir, prefix=".write-check-"):
            pass
    except OSError as err:
        raise ServeError(
            f"cannot write to the data directory {data_dir} ({err.strerror or err}): make it "
            "writable by this user, or choose another --data-dir"
        ) from None


def _open_store(options: ServeOptions) -> Store:
    """The store, checked writable: one that is not is refused with the path and why."""
    store = Store(
        options.db or sqlite_url(options.data_dir / DB_FILE),
        busy_timeout_s=options.db_busy_timeout_s,
        spec_problem=spec_problem,
    )
    try:
        store.probe()
    except Exception as err:
        store.close()
        raise ServeError(
            f"cannot write to the database {store.place()}: {write_fault(err)}"
        ) from None
    return store


JOB_ACCOUNTS = ("team", "user", "server")


def _accounts(options: ServeOptions, say: Callable[[str], None]) -> Accounts | None:
    """The accounts jobs run as (None: the server's own), with a line that says which."""
    if options.job_accounts not in JOB_ACCOUNTS:
        raise ServeError(
            f"--job-accounts must be one of {', '.join(JOB_ACCOUNTS)}, got {options.job_accounts!r}"
        )
    root = os.geteuid() == 0
    if options.job_accounts == "server" or not root:
        if options.job_account and not root:
            raise ServeError("--job-account needs the server to run as root (to start jobs as it)")
        me = _user_name(os.geteuid())
        why = "--job-accounts server" if root else "run the server as root for one per team"
        say(
            f"jobs run as this server's own user ({me}): any job can read the data directory "
            "(the admin token in it), other jobs' logs and environments, and signal their "
            f"processes; fit for one team or trusted users only ({why})"
        )
        return None
    data_dir = options.data_dir
    # Whatever the server makes from now on is its own alone (the database, its journal, the
    # token, logs); what is there already is made so. Jobs pass through the data directory
    # to their own homes and checkpoints, and can list nothing in it.
    os.umask(0o077)
    data_dir.chmod(0o711)
    for entry in data_dir.iterdir():
        if entry.is_file() and not entry.is_symlink() and entry.stat().st_mode & 0o077:
            entry.chmod(entry.stat().st_mode & 0o700)
    try:
        accounts = Accounts(
            data_dir, KeyedBy(options.job_accounts), options.job_account, options.job_uids
        )
    except AccountError as err:
        raise ServeError(str(err)) from None
    closed = next((p for p in data_dir.resolve().parents if not p.stat().st_mode & 0o001), None)
    if closed is not None:
        say(
            f"warning: {closed} is closed to other users (mode {closed.stat().st_mode & 0o777:o}): "
            "jobs' accounts cannot reach their homes or checkpoint directories under "
            f"{data_dir}; give --data-dir a path every user may pass through (/srv/toposched)"
        )
    named = "".join(f", {key} as {user}" for key, user in sorted(options.job_account.items()))
    say(
        f"jobs run as their {options.job_accounts}'s own account{named}; others as uids "
        f"allocated from {options.job_uids[0]}-{options.job_uids[1]}"
    )
    return accounts


def _user_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name}, uid {uid}"
    except KeyError:
        return f"uid {uid}"


def serve(options: ServeOptions, say: Callable[[str], None] = print) -> None:
    if not options.auth and not loopback(options.host):
        raise ServeError(
            f"refusing to listen on {options.host} without auth: drop --no-auth, or bind 127.0.0.1"
        )
    _check_port(options.host, options.port)
    _configure_logging(options.log_level)
    # Before anything is opened: clients, the store and the workers' files share this limit.
    fd_limit = raise_fd_limit()
    limits = ConnectionLimits(
        header_s=options.header_timeout_s,
        body_s=options.body_timeout_s,
        connections=connection_bound(fd_limit, options.max_connections),
    )
    policy = make_scheduler_policy(options.policy, options.policy_params)
    local = local_node(options.emulate, options.node_name)
    data_dir = options.data_dir
    _check_writable(data_dir)
    lock = lock_data_dir(data_dir)
    accounts = _accounts(options, say)
    store = _open_store(options)
    containers = Containers(
        options.container_runtime,
        options.container_args,
        devices=not local.source.startswith("emulated"),  # emulated GPUs have no devices
    )
    executor = LocalExecutor(
        data_dir / "runs",
        topology=local.node.topology,
        accounts=accounts,
        containers=containers,
    )
    metrics = Metrics()
    runtime = Runtime(
        store,
        executor,
        local,
        policy,
        observe=metrics.latency.observe,
        max_waiting=options.max_waiting,
    )
    metrics.watch(runtime)
    try:
        notes = runtime.recover()
    except (Unavailable, StoreError) as err:
        raise ServeError(f"cannot recover the state from the database: {err}") from None
    for line in notes:
        say(f"recovered: {line}")
    _say_unreadable(store, say)
    # Emulated GPUs are not this machine's: NVML's figures would be about other GPUs.
    usage = open_usage() if local.source == "nvml" else None
    activity = ActivityMonitor(runtime, executor, store, usage, period_s=options.sample_s)
    runtime.activity = activity
    node = runtime.node
    settings = "".join(f", {k}={v}" for k, v in options.policy_params.items())
    say(
        f"toposched: node {node.name}, {node.size} GPUs ({topology_name(node.topology)}, "
        f"{local.source}; {node.hardware.describe()}); policy {options.policy}{settings}; "
        f"database {store.dialect}; "
        f"data in {data_dir}"
    )
    if options.auth:
        path, created = ensure_admin_token(store, data_dir)
        say(f"admin token {'written to' if created else 'in'} {path} (readable by its owner only)")
    else:
        say("auth is off: every caller on this machine acts as admin")
    say(f"GPU activity: {SOURCE_TEXT[activity.source]}, sampled every {options.sample_s:g} s")
    say(
        f"connections: at most {limits.connections} open (open-file limit {fd_limit}), "
        f"headers within {limits.header_s:g} s, bodies within {limits.body_s:g} s"
    )
    say(f"listening on http://{options.host}:{options.port} (API docs at /docs)")
    app = create_app(runtime, metrics, auth=options.auth)
    server = _Server(
        uvicorn.Config(
            app,
            host=options.host,
            port=options.port,
            log_level="warning",
            http=bounded_protocol(limits),
            backlog=listen_backlog(fd_limit),
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        ),
        runtime.closing,
    )
    thresholds = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    runtime.start()
    activity.start()
    watch = threading.Thread(target=_watch, args=(runtime, server), daemon=True)
    watch.start()
    # uvicorn stops on SIGTERM as on SIGINT, then raises the signal again with the handler it
    # found: the default one would end the process there, before the shutdown below (jobs
    # left as they are, the store closed, the last line logged). This handler makes that
    # second SIGTERM an exit through the shutdown, as SIGINT's KeyboardInterrupt is.
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        server.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
        gc.set_threshold(*thresholds)  # as they were, for a process that goes on (tests)
        activity.stop()
        runtime.stop()
        # Read once the loop has stopped: nothing starts or ends in the core after this.
        held = sorted(set(runtime.gpu_owners().values()))
        store.close()
        lock.close()
        if held:
            say(
                f"toposched stopped; {len(held)} job(s) keep running ({', '.join(held)}): "
                "their workers are adopted at the next start"
            )
        else:
            say("toposched stopped; no job was running")
    logging.shutdown()
    if runtime.broken is not None:
        raise ServeError(runtime.broken)


SHOWN_UNREADABLE = 5


def _say_unreadable(store: Store, say: Callable[[str], None]) -> None:
    """Rows the server cannot read as stored are read mended (U+FFFD) or listed as `corrupt`
    jobs: started with, but said, so that an operator learns of them before a user does."""
    found = list(unreadable(store))
    if not found:
        return
    shown = "; ".join(row.describe() for row in found[:SHOWN_UNREADABLE])
    more = f"; and {len(found) - SHOWN_UNREADABLE} more" if len(found) > SHOWN_UNREADABLE else ""
    say(
        f"warning: {len(found)} stored row(s) cannot be read as stored ({shown}{more}): read "
        "with U+FFFD for bad text, a job with no usable spec listed as corrupt; `toposched "
        "admin fsck` lists them, and with --repair (the server stopped) mends or ends them"
    )


# How long the shutdown waits for requests still being answered before it cancels them: well
# within a service manager's grace (systemd's 90 s, Kubernetes' 30 s). Followed logs end at
# once (Runtime.closing); only a request cut short mid-answer waits this long.
SHUTDOWN_GRACE_S = 5


class _Server(uvicorn.Server):
    """uvicorn's server, which tells the routes that it is stopping (`closing`) as soon as
    it is asked to: a followed log otherwise held its connection, and the shutdown, for ever."""

    def __init__(self, config: uvicorn.Config, closing: threading.Event) -> None:
        super().__init__(config)
        self.closing = closing

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.closing.set()
        super().handle_exit(sig, frame)


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(0)  # a service manager's stop: a clean exit, once the shutdown has run


# Python's collector walks every object the server holds (every job's records) in a full
# collection, 100-250 ms with 20,000 jobs, during which no request is answered; with its
# defaults it ran about 24 of them in 45 s of benchmarks/api_load.py --mix. Here young
# collections come every 10,000 allocations instead of 700, and full ones are left to the
# server's watch thread, once every FULL_GC_S: cyclic garbage waits at most that long.
GC_THRESHOLDS = (10_000, 10, 1_000_000)
FULL_GC_S = 300.0


def _watch(runtime: Runtime, server: uvicorn.Server) -> None:
    """Exit when the runtime could not rebuild its state (not for a database fault: it waits
    those out, degraded), so that the service manager starts a new server, which reloads the
    state from the database; and collect garbage fully every FULL_GC_S (GC_THRESHOLDS)."""
    next_full = time.monotonic() + FULL_GC_S
    while not server.should_exit:
        if runtime.broken is not None:
            runtime.closing.set()
            server.should_exit = True
            return
        if time.monotonic() >= next_full:
            gc.collect()
            next_full = time.monotonic() + FULL_GC_S
        time.sleep(0.5)
