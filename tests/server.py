"""A real `toposched serve` in a subprocess, on a free port, for integration and e2e tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from toposched.executors.supervisor import proc_stat, read_pids

REPO = Path(__file__).resolve().parent.parent
TOPOSCHED = [sys.executable, "-m", "toposched"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class ServerProcess:
    """One running server; `kill()` is a kill -9, `restart()` starts it again on the same
    data directory, database and port."""

    data_dir: Path
    db: str | None
    port: int
    args: Sequence[str] = ()
    proc: subprocess.Popen[bytes] | None = None
    # Run in the server's process before it starts (e.g. a resource limit).
    preexec: Callable[[], None] | None = None
    # Environment variables the server process gets besides the test's own.
    environ: Mapping[str, str] = field(default_factory=dict)
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.data_dir.parent / f"server-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        return (self.data_dir / "admin.token").read_text().strip()

    def env(self) -> dict[str, str]:
        """What a CLI user of this server has in the environment."""
        return {**os.environ, "TOPOSCHED_URL": self.url, "TOPOSCHED_DATA_DIR": str(self.data_dir)}

    def start(self, timeout_s: float = 30.0) -> None:
        command = [
            *TOPOSCHED,
            "serve",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--node-name",
            "node-a",
            *(["--db", self.db] if self.db else []),
            # The tests' jobs are their own code, in directories only root may enter: as root
            # they run as the server's user unless a test asks for accounts of their own.
            *([] if "--job-accounts" in self.args else ["--job-accounts", "server"]),
            *self.args,
        ]
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=log,
            cwd=REPO,
            preexec_fn=self.preexec,
            env={**os.environ, **self.environ} if self.environ else None,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/api/v1/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server did not answer within {timeout_s} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self) -> None:
        self.start()

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token or self.token}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


@contextmanager
def running_server(
    tmp: Path,
    db: str | None = None,
    args: Sequence[str] = ("--emulate", "dgx1-v100"),
    preexec: Callable[[], None] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp / "data", db, free_port(), args, preexec=preexec, environ=environ or {}
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()
        kill_leftover_workers(server.data_dir)


FAKE_NVML_MODULE = REPO / "tests" / "fakes" / "nvml_module"


@contextmanager
def fake_nvml_server(
    tmp: Path, preset: str = "dgx1-v100", **settings: Any
) -> Iterator[tuple[ServerProcess, Path]]:
    """A server whose NVML is FakeNvml (tests/fakes/nvml_module), sampling every 0.5 s; the
    JSON file yielded sets each GPU's busy percent, memory in use and pids while it runs.
    `settings` go in that file at the start (`mig`, `mig_root`: see the module)."""
    state = tmp / "nvml.json"
    state.write_text(json.dumps({"preset": preset, "gpus": {}, **settings}))
    environ = {
        "PYTHONPATH": os.pathsep.join([str(FAKE_NVML_MODULE), str(REPO)]),
        "TOPOSCHED_FAKE_NVML": str(state),
    }
    with running_server(tmp, args=("--sample-every", "0.5"), environ=environ) as server:
        yield server, state


def kill_leftover_workers(data_dir: Path) -> None:
    """Workers outlive a killed server by design; a test must not leave any behind. Only a
    group whose leader is still the recorded worker is killed (its pid may have been reused)."""
    for pid_file in (data_dir / "runs").glob("*/attempt-*/worker-*.pid"):
        record = read_pids(pid_file.parent, int(pid_file.stem.removeprefix("worker-")))
        stat = proc_stat(record.worker_pid) if record else None
        if record and stat and stat.start == record.worker_start:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(record.pgid, signal.SIGKILL)


# A worker that writes its environment to $OUT/env-<rank>-<restarts>-<pid>.json, then waits for
# $OUT/$WAIT_<rank> or $OUT/$WAIT (if set) and exits with $EXIT_<rank> (default 0). It saves a
# checkpoint marker and exits 0 on SIGUSR1.
WORKER = r"""
import json, os, pathlib, signal, sys, time
out = pathlib.Path(os.environ["OUT"])
rank = os.environ["RANK"]
keys = ["CUDA_VISIBLE_DEVICES", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
        "MASTER_ADDR", "MASTER_PORT", "TOPOSCHED_JOB", "TOPOSCHED_QUEUE",
        "TOPOSCHED_RESTART_COUNT"]
env = {k: os.environ.get(k) for k in keys}
env["pid"] = os.getpid()
# Written whole, then renamed: a test polling for it must never read half a file.
name = f"env-{rank}-{os.environ['TOPOSCHED_RESTART_COUNT']}-{os.getpid()}.json"
(out / ("." + name)).write_text(json.dumps(env))
(out / ("." + name)).rename(out / name)
def checkpoint(signum, frame):
    (out / f"checkpointed-{rank}").write_text("yes")
    sys.exit(0)
signal.signal(signal.SIGUSR1, checkpoint)
print(f"hello from rank {rank}", flush=True)
print(f"warning from rank {rank}", file=sys.stderr, flush=True)
wait = os.environ.get(f"WAIT_{rank}") or os.environ.get("WAIT")
if wait:
    while not (out / wait).exists():
        time.sleep(0.05)
sys.exit(int(os.environ.get(f"EXIT_{rank}", "0")))
"""


def wait_for(check: Callable[[], Any], what: str, timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    stat = proc_stat(pid)
    return stat is not None and stat.alive


class Api:
    """A thin test client: JSON in, JSON out, the status checked."""

    def __init__(self, server: ServerProcess, token: str | None = None) -> None:
        self.http = server.client(token)

    def submit(self, expect: int = 201, **body: Any) -> Any:
        reply = self.http.post("/api/v1/jobs", json=body)
        assert reply.status_code == expect, reply.text
        return reply.json()

    def get(self, path: str, expect: int = 200) -> Any:
        reply = self.http.get(path)
        assert reply.status_code == expect, reply.text
        return reply.json()

    def job(self, name: str) -> Any:
        return self.get(f"/api/v1/jobs/{name}")

    def state(self, name: str) -> str:
        return str(self.job(name)["state"])

    def until(self, name: str, state: str, timeout_s: float = 20.0) -> Any:
        wait_for(lambda: self.state(name) == state, f"{name} to be {state}", timeout_s)
        return self.job(name)

    def holders(self) -> dict[int, str | None]:
        node = self.get("/api/v1/nodes")["nodes"][0]
        return {gpu["index"]: gpu["job"] for gpu in node["gpus"]}

    def drain(self) -> None:
        """Cancel every live job and wait until none is left: the node empty for the next
        test of a module that shares its server."""
        for job in self.get("/api/v1/jobs")["jobs"]:
            self.http.delete(f"/api/v1/jobs/{job['name']}")
        wait_for(lambda: not self.get("/api/v1/jobs")["jobs"], "the node to drain")


def worker(out: Path, wait: str | None = None, **exits: int) -> dict[str, Any]:
    env = {"OUT": str(out), **{f"EXIT_{rank[1:]}": str(code) for rank, code in exits.items()}}
    if wait:
        env["WAIT"] = wait
    return {"command": [sys.executable, "-c", WORKER], "env": env}


def envs(out: Path, rank: int) -> list[dict[str, Any]]:
    found = sorted(out.glob(f"env-{rank}-*.json"), key=lambda p: p.stat().st_mtime)
    return [json.loads(p.read_text()) for p in found]


# Another process that takes the SQLite file's write lock (as a backup, or a `sqlite3` shell in
# a transaction, would) and holds it until its stdin closes.
HOLDER = r"""
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


@contextmanager
def db_locked(server: ServerProcess) -> Iterator[Callable[[], None]]:
    """The server's database write-locked by another process; yields the release."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(server.data_dir / "toposched.db")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert holder.stdin is not None and holder.stdout is not None
    assert holder.stdout.readline() == b"locked\n"

    def release() -> None:
        if holder.poll() is None:
            assert holder.stdin is not None
            holder.stdin.close()
            holder.wait(timeout=10)

    try:
        yield release
    finally:
        release()
