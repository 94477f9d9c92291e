"""Submissions per second and latency of the REST API, against a real server with SQLite.

Run: .venv/bin/python benchmarks/api_load.py [--jobs 10000] [--clients 8] [--url URL --token T]

Without --url it starts `toposched serve --emulate dgx1-v100` on a free port with a fresh data
directory (SQLite, WAL) and stops it afterwards. First one job takes all 8 GPUs (it sleeps), so
the measured submissions are stored, scheduled and left waiting: the figure is the API, store and
scheduler path, not process start-up. Each client is a thread with its own keep-alive HTTP
connection (the standard library's, the lightest), submitting one job at a time. Issue 5's
target, printed but not judged here: at least 500 submissions/s and a p99 latency of at most
100 ms on a 2-core machine.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from toposched.common.paths import ADMIN_TOKEN_FILE
from toposched.executors.supervisor import proc_stat, read_pids


@dataclass(frozen=True)
class Server:
    url: str
    token: str
    data_dir: Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def own_server(tmp: Path, timeout_s: float = 30.0) -> Iterator[Server]:
    """`toposched serve --emulate dgx1-v100` on a free port with its data directory (SQLite) in
    `tmp`, once /api/v1/health answers; stopped with SIGINT afterwards (SIGKILL after 15 s), and
    any worker it left behind killed."""
    data_dir = tmp / "data"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable,
        "-m",
        "toposched",
        "serve",
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
        "--node-name",
        "node-a",
        "--emulate",
        "dgx1-v100",
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
        yield Server(url, token, data_dir)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        kill_leftover_workers(data_dir)


def kill_leftover_workers(data_dir: Path) -> None:
    """Workers outlive their server by design (the blocking job's, if the run stopped early).
    Only a group whose leader is still the recorded worker is killed (its pid may be reused)."""
    for pid_file in (data_dir / "runs").glob("*/attempt-*/worker-*.pid"):
        record = read_pids(pid_file.parent, int(pid_file.stem.removeprefix("worker-")))
        stat = proc_stat(record.worker_pid) if record else None
        if record and stat and stat.start == record.worker_start:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(record.pgid, signal.SIGKILL)


def client_loop(url: str, token: str, names: list[str], latencies: list[float]) -> None:
    # The standard library's client: httpx costs a few ms of CPU per request, and on two cores
    # the clients' CPU would be measured instead of the server's.
    where = urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port or 80, timeout=60)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    try:
        for name in names:
            body = json.dumps({"name": name, "command": ["true"]})
            began = time.perf_counter()
            conn.request("POST", "/api/v1/jobs", body=body, headers=headers)
            reply = conn.getresponse()
            text = reply.read()
            latencies.append(time.perf_counter() - began)
            if reply.status != 201:
                raise SystemExit(f"{name}: HTTP {reply.status}: {text.decode(errors='replace')}")
    finally:
        conn.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(url: str, token: str, jobs: int, clients: int) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {token}"}
    blocker = httpx.post(
        f"{url}/api/v1/jobs",
        headers=headers,
        json={"name": "bench-blocker", "gpus": 8, "command": ["sleep", "3600"]},
        timeout=30,
    )
    if blocker.status_code != 201:
        raise SystemExit(f"could not submit the blocking job: {blocker.text}")
    names = [f"bench-{i}" for i in range(jobs)]
    per_client: list[list[float]] = [[] for _ in range(clients)]
    threads = [
        threading.Thread(target=client_loop, args=(url, token, names[c::clients], per_client[c]))
        for c in range(clients)
    ]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    latencies = [x for chunk in per_client for x in chunk]
    if len(latencies) != jobs:
        raise SystemExit(f"only {len(latencies)} of {jobs} submissions completed")
    httpx.delete(f"{url}/api/v1/jobs/bench-blocker", headers=headers, timeout=30)
    return {
        "jobs": jobs,
        "clients": clients,
        "wall_s": wall,
        "submissions_per_s": jobs / wall,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * percentile(latencies, 0.99),
        "max_ms": 1000 * max(latencies),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--url", help="An already running server (else one is started).")
    parser.add_argument("--token", default=os.environ.get("TOPOSCHED_TOKEN"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.url:
        if not args.token:
            raise SystemExit("--url needs --token (or TOPOSCHED_TOKEN)")
        figures = run(args.url, args.token, args.jobs, args.clients)
    else:
        with tempfile.TemporaryDirectory() as tmp, own_server(Path(tmp)) as server:
            print(f"a server on {server.url} (SQLite in {server.data_dir})", file=sys.stderr)
            figures = run(server.url, server.token, args.jobs, args.clients)
    if args.json:
        print(json.dumps(figures))
        return
    print(
        f"{figures['jobs']:,} submissions from {figures['clients']} clients in "
        f"{figures['wall_s']:.1f} s: {figures['submissions_per_s']:,.0f} submissions/s; "
        f"latency p50 {figures['p50_ms']:.1f} ms, p99 {figures['p99_ms']:.1f} ms, "
        f"max {figures['max_ms']:.1f} ms"
    )
    print("issue 5's target: at least 500 submissions/s, p99 at most 100 ms")


if __name__ == "__main__":
    main()
