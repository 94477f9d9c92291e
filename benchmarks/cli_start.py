"""How fast the `toposched` commands that only talk to a server answer: each started as its own
process, the way a person or a script runs it.

Run: .venv/bin/python benchmarks/cli_start.py [--runs 10] [--smoke] [--no-bytecode-cache]

It starts `toposched serve --emulate dgx1-v100` on a free port with a fresh data directory
(SQLite) and stops it afterwards. One tiny job (`echo`) runs to its end, so that `get` and `logs`
have a job and output to show; then a blocking job takes all 8 GPUs, so that the jobs `submit`
adds wait instead of starting processes while the commands are timed, and `delete` deletes
waiting jobs made for it beforehand (one per run, submitted through the API, not timed).

Each command is run once untimed (it warms the file cache and writes the bytecode), then --runs
times, as a subprocess of the installed entry point (.venv/bin/toposched), its output captured,
the server found through $TOPOSCHED_URL and the token through $TOPOSCHED_DATA_DIR, as a user of
this machine's server finds them. Printed per command: the median, min and max seconds from
start to exit, and the median CPU seconds (user and system) of a run, which waits for no other
process (a CPU shared with other work still runs it slower). Issue 32's target, printed but
not judged here: a median of at most 0.3 s for every command that talks to the server. The
last line is JSON: command -> median seconds from start to exit.

Bytecode: an installed toposched has its modules compiled (pip does it as it installs); an
editable checkout has them compiled at their first import, unless $PYTHONDONTWRITEBYTECODE says
not to, when every run compiles them again. So that the figures are an installed command's
wherever this runs, the commands keep their bytecode in the run's temporary directory
($PYTHONPYCACHEPREFIX; nothing is written into the checkout). `--no-bytecode-cache` runs them
with this environment as it is instead.

`--smoke`: 2 runs per command (CI: it still starts the server and runs every command).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import Server, own_server

TARGET_S = 0.3
# The tiny job whose output `logs` prints and whose state `get` shows.
SHOWN = "bench-shown"
BLOCKER = "bench-blocker"


def entry_point() -> str:
    """The installed `toposched` beside this Python (the venv's), else the one on $PATH."""
    here = Path(sys.executable).parent / "toposched"
    if here.exists():
        return str(here)
    found = subprocess.run(["which", "toposched"], capture_output=True, text=True).stdout.strip()
    if not found:
        raise SystemExit("no `toposched` entry point: install the project (make venv)")
    return found


def submit(server: Server, name: str, command: list[str], gpus: int = 1) -> None:
    reply = server.api("POST", "/jobs", {"name": name, "gpus": gpus, "command": command})
    if reply.status_code != 201:
        raise SystemExit(f"could not submit {name}: HTTP {reply.status_code}: {reply.text}")


def wait_state(server: Server, name: str, states: set[str], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.api("GET", f"/jobs/{name}").json()["state"] in states:
            return
        time.sleep(0.1)
    raise SystemExit(f"{name} did not reach {sorted(states)} within {timeout_s} s")


def prepare(server: Server, runs: int) -> None:
    """The shown job run to its end; then all GPUs taken; then one waiting job per `delete`."""
    submit(server, SHOWN, ["sh", "-c", "echo hello from the benchmark"])
    wait_state(server, SHOWN, {"succeeded"})
    submit(server, BLOCKER, ["sleep", "3600"], gpus=8)
    wait_state(server, BLOCKER, {"running"})
    for run in range(runs + 1):
        submit(server, f"bench-delete-{run}", ["true"])


def commands(runs: int) -> dict[str, list[list[str]]]:
    """Each timed command, as the words of each of its runs, the untimed one first (`submit`
    and `delete` name a new job each time)."""
    same = {
        "list": ["list"],
        "get": ["get", SHOWN],
        "logs": ["logs", SHOWN],
        "top node": ["top", "node"],
        "top job": ["top", "job"],
        "--help": ["--help"],
    }
    table = {name: [words] * (runs + 1) for name, words in same.items()}
    table["submit"] = [
        ["submit", "--name", f"bench-submit-{run}", "--gpus", "1", "--", "true"]
        for run in range(runs + 1)
    ]
    table["delete"] = [["delete", f"bench-delete-{run}"] for run in range(runs + 1)]
    order = ["list", "get", "submit", "logs", "delete", "top node", "top job", "--help"]
    return {name: table[name] for name in order}


def timed(toposched: str, words: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Seconds from start to exit of `toposched WORDS`, and the CPU seconds it used (user and
    system: what other work on the machine does not lengthen)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run([toposched, *words], env=env, capture_output=True)
    took = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace")
        raise SystemExit(f"`toposched {' '.join(words)}` exited {done.returncode}:\n{said}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return took, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="Runs per command (default 10).")
    parser.add_argument("--smoke", action="store_true", help="2 runs per command (for CI).")
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="Run the commands with this environment's bytecode setting as it is.",
    )
    args = parser.parse_args()
    runs = 2 if args.smoke else args.runs
    if runs < 1:
        parser.error("--runs must be at least 1")
    toposched = entry_point()
    medians: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory(prefix="toposched-cli-start-") as tmp,
        # The jobs here are `echo` and `sleep`: they run as the server's user, even as root.
        own_server(Path(tmp), [toposched], ["--job-accounts", "server"]) as server,
    ):
        prepare(server, runs)
        env = server.env()
        if args.no_bytecode_cache:
            said = f"PYTHONDONTWRITEBYTECODE={env.get('PYTHONDONTWRITEBYTECODE', '')!r}"
        else:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "bytecode")
            said = "bytecode cached"
        print(f"{runs} run(s) per command of {toposched} ({said}), seconds from start to exit")
        print(f"{'command':<10} {'median':>7} {'min':>7} {'max':>7}  {'cpu median':>10}")
        for name, (first, *each_run) in commands(runs).items():
            timed(toposched, first, env)  # warms the file cache, writes the bytecode
            runs_of = [timed(toposched, words, env) for words in each_run]
            times = [took for took, _ in runs_of]
            cpu = statistics.median(cpu for _, cpu in runs_of)
            medians[name] = statistics.median(times)
            mark = "" if name == "--help" or medians[name] <= TARGET_S else "  (over 0.3)"
            print(
                f"{name:<10} {medians[name]:7.3f} {min(times):7.3f} {max(times):7.3f}  "
                f"{cpu:10.3f}{mark}"
            )
        server.api("DELETE", f"/jobs/{BLOCKER}")
        wait_state(server, BLOCKER, {"cancelled"})
    print(json.dumps({name: round(value, 4) for name, value in medians.items()}))


if __name__ == "__main__":
    main()
