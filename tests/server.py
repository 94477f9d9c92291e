"""A real `toposched serve` in a subprocess, on a free port, for integration and e2e tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

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
            *self.args,
        ]
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(command, stdout=log, stderr=log, cwd=REPO)
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
    tmp: Path, db: str | None = None, args: Sequence[str] = ("--emulate", "dgx1-v100")
) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp / "data", db, free_port(), args)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        kill_leftover_workers(server.data_dir)


def kill_leftover_workers(data_dir: Path) -> None:
    """Workers outlive a killed server by design; a test must not leave any behind."""
    import json

    for pid_file in (data_dir / "runs").glob("*/*/worker-*.pid"):
        try:
            pgid = json.loads(pid_file.read_text())["pgid"]
            os.killpg(pgid, signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass
