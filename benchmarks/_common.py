"""What the benchmarks that time a real server share: starting it, and cleaning up after it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from toposched.common.paths import ADMIN_TOKEN_FILE
from toposched.executors.supervisor import proc_stat, read_pids


@dataclass(frozen=True)
class Server:
    url: str
    token: str
    data_dir: Path
    pid: int

    def env(self) -> dict[str, str]:
        """What a CLI user of this server has in the environment."""
        return {**os.environ, "TOPOSCHED_URL": self.url, "TOPOSCHED_DATA_DIR": str(self.data_dir)}

    def api(self, method: str, path: str, body: object = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}"}
        url = f"{self.url}/api/v1{path}"
        return httpx.request(method, url, headers=headers, json=body, timeout=30)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def own_server(
    tmp: Path,
    toposched: Sequence[str] = (sys.executable, "-m", "toposched"),
    options: Sequence[str] = (),
    timeout_s: float = 30.0,
) -> Iterator[Server]:
    """`toposched serve --emulate dgx1-v100 OPTIONS` on a free port with its data directory
    (SQLite) in `tmp`, once /api/v1/health answers; stopped with SIGINT afterwards (SIGKILL
    after 15 s), and any worker it left behind killed."""
    data_dir = tmp / "data"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        *toposched,
        "serve",
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
        "--node-name",
        "node-a",
        "--emulate",
        "dgx1-v100",
        *options,
    ]
    log_path = tmp / "server.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the server exited {proc.returncode}:\n{log_path.read_text()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/api/v1/health", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"no answer within {timeout_s} s:\n{log_path.read_text()}")
            time.sleep(0.1)
        token = (data_dir / ADMIN_TOKEN_FILE).read_text().strip()
        yield Server(url, token, data_dir, proc.pid)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        kill_leftover_workers(data_dir)


def kill_leftover_workers(data_dir: Path, wait_s: float = 10.0) -> None:
    """Workers outlive their server by design (a blocking job's, if the run stopped early).
    Only a group whose leader is still the recorded worker is killed (its pid may be reused).
    Then each worker's supervisor is waited for: it writes the worker's exit record into the
    data directory as it ends, which fails the removal of a temporary one under way."""
    supervisors = []
    for pid_file in (data_dir / "runs").glob("*/attempt-*/worker-*.pid"):
        record = read_pids(pid_file.parent, int(pid_file.stem.removeprefix("worker-")))
        if record is None:
            continue
        supervisors.append((record.supervisor_pid, record.supervisor_start))
        stat = proc_stat(record.worker_pid)
        if stat and stat.start == record.worker_start:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(record.pgid, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    for pid, start in supervisors:
        while time.monotonic() < deadline:
            stat = proc_stat(pid)
            if stat is None or stat.start != start or not stat.alive:
                break
            time.sleep(0.05)
