"""A throwaway PostgreSQL cluster for integration tests: initdb, start, yield a URL, clean up."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

# The cluster's superuser and the database the yielded URL names.
USER = "toposched"
DATABASE = "toposched"
READY_TIMEOUT_S = 30.0
WHERE_LOOKED = "`pg_config --bindir`, PATH, and /usr/lib/postgresql/*/bin"


class PostgresUnavailable(RuntimeError):
    """This machine cannot run a throwaway PostgreSQL (tests should skip, not fail)."""


class PostgresStartError(RuntimeError):
    """The binaries are there but the cluster did not come up; the message has the log's tail."""


@dataclass(frozen=True)
class _RunAs:
    """Who runs initdb and postgres: both refuse root, so root hands them to another user."""

    uid: int | None = None
    gid: int | None = None
    name: str | None = None


def _is_server_bindir(path: Path) -> bool:
    return all(os.access(path / exe, os.X_OK) for exe in ("initdb", "postgres"))


def _version_key(path: Path) -> tuple[int, ...]:
    # /usr/lib/postgresql/<version>/bin: the newest version wins.
    return tuple(int(part) for part in path.parent.name.split(".") if part.isdigit())


def find_bindir() -> Path | None:
    """The directory holding initdb and postgres, or None; see WHERE_LOOKED."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
            if out:
                candidates.append(Path(out))
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).resolve().parent)
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    return next((path for path in candidates if _is_server_bindir(path)), None)


def _run_as() -> _RunAs:
    if os.geteuid() != 0:
        return _RunAs()
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            return _RunAs(entry.pw_uid, entry.pw_gid, name)
    raise PostgresUnavailable(
        "running as root, and initdb/postgres refuse root, but neither a `postgres` nor a "
        "`nobody` user exists to run them as"
    )


def free_port() -> int:
    """A port nothing listens on right now (the caller retries if another process takes it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as err:
        return f"(no log: {err})"


def _env() -> dict[str, str]:
    # PG* variables of the caller's shell (PGDATA, PGPORT, ...) must not steer this cluster.
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def _popen(args: list[str], who: _RunAs, log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        # Popen switches user and group in the child before exec, as `setpriv` would, so the pid
        # we hold is the server's own and our signals reach it directly.
        return subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=_env(),
            user=who.uid,
            group=who.gid,
            extra_groups=[] if who.uid is not None else None,
        )


def _connect(port: int, dbname: str) -> psycopg.Connection[tuple[Any, ...]]:
    # Imported here: without psycopg this module still imports, and the tests skip.
    import psycopg

    return psycopg.connect(
        host="127.0.0.1", port=port, user=USER, dbname=dbname, connect_timeout=2, autocommit=True
    )


def _wait_ready(proc: subprocess.Popen[bytes], port: int, log: Path) -> bool:
    """True once a connection succeeds; False if the server exited (e.g. port taken)."""
    import psycopg

    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            conn = _connect(port, "postgres")
        except psycopg.OperationalError:
            time.sleep(0.05)
            continue
        conn.close()
        return True
    raise PostgresStartError(
        f"PostgreSQL did not accept connections on 127.0.0.1:{port} within {READY_TIMEOUT_S:.0f} s;"
        f" server log tail:\n{_tail(log)}"
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    # SIGINT is PostgreSQL's "fast" shutdown: sessions are cut and the server exits at once.
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)


def _start(
    bindir: Path, data: Path, sockets: Path, who: _RunAs
) -> tuple[subprocess.Popen[bytes], int]:
    """Start the server on a free port; return (process, port) once it accepts connections."""
    for attempt in range(3):
        port, log = free_port(), data.parent / f"server-{attempt}.log"
        server = [str(bindir / "postgres"), "-D", str(data), "-p", str(port)]
        server += ["-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={sockets}"]
        # Durability is pointless for a cluster deleted at the end; this makes it quick.
        server += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        proc = _popen(server, who, log, data.parent)
        try:
            ready = _wait_ready(proc, port, log)
        except BaseException:
            _stop(proc)  # timed out or interrupted: the caller never gets the process to stop
            raise
        if ready:
            return proc, port
        # Another process may have taken the port between free_port() and bind: try another.
        if "could not bind" not in _tail(log, 200):
            break
    raise PostgresStartError(f"PostgreSQL exited while starting; server log tail:\n{_tail(log)}")


@contextlib.contextmanager
def throwaway_postgres() -> Iterator[str]:
    """Start a private PostgreSQL; yield `postgresql+psycopg://USER@127.0.0.1:PORT/toposched`.

    Raises PostgresUnavailable (before starting anything) when this machine cannot run one, and
    PostgresStartError when it tried and failed. The cluster and its files are gone afterwards.
    """
    if importlib.util.find_spec("psycopg") is None:
        raise PostgresUnavailable("psycopg (the PostgreSQL driver) is not installed")
    bindir = find_bindir()
    if bindir is None:
        raise PostgresUnavailable(
            f"no PostgreSQL server binaries (initdb, postgres) found; looked in {WHERE_LOOKED}"
        )
    who = _run_as()

    root = Path(tempfile.mkdtemp(prefix="toposched-pg-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        data, sockets = root / "data", root / "sock"
        sockets.mkdir()
        if who.uid is not None:
            assert who.gid is not None
            # The server's user creates the data directory and owns its sockets. A TMPDIR that
            # user cannot enter makes initdb fail, with the reason in the error below.
            for path in (root, sockets):
                os.chown(path, who.uid, who.gid)
        init_log = root / "initdb.log"
        init = [str(bindir / "initdb"), "-D", str(data), "-U", USER, "--auth=trust"]
        init += ["-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"]
        if _popen(init, who, init_log, root).wait(timeout=120) != 0:
            raise PostgresStartError(f"initdb failed; its output's tail:\n{_tail(init_log)}")

        proc, port = _start(bindir, data, sockets, who)
        conn = _connect(port, "postgres")
        try:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        finally:
            conn.close()
        yield f"postgresql+psycopg://{USER}@127.0.0.1:{port}/{DATABASE}"
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(root, ignore_errors=True)
