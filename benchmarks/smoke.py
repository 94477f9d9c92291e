"""Every benchmark at smoke size, each its own process: a benchmark that breaks fails CI.

Run: .venv/bin/python benchmarks/smoke.py [--timeout 120] [--verbose] [NAME ...]
     (make bench-smoke)

Runs each benchmarks/*.py script (found by glob, so that a new one is run too; this runner
and the scripts' helper modules left out) with `--smoke`, one after another, under this
Python, and prints per script `ok` or `FAILED` and its seconds. A script fails by exiting
other than 0 or by running past --timeout seconds (then it is sent SIGINT, so that it stops
what it started, and killed 15 s later with all it started). Each failed script's last
output lines follow the table; the exit status is 1 if any failed. NAMEs (e.g. `placement`)
run only those scripts. The timings are printed, never judged: each script's own output
(--verbose shows it) has its figures.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Not benchmarks: this runner, and the module of helpers the scripts import.
NOT_BENCHMARKS = frozenset({"smoke.py", "_common.py"})
TAIL_LINES = 40


def scripts() -> list[Path]:
    """Every benchmark script, by name."""
    return sorted(p for p in HERE.glob("*.py") if p.name not in NOT_BENCHMARKS)


@dataclass(frozen=True)
class Outcome:
    script: Path
    ok: bool
    seconds: float
    said: str  # stdout and stderr together
    why: str = ""


def signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def run(script: Path, timeout_s: float) -> Outcome:
    # Its own session: on a timeout the servers and control planes it started go with it.
    began = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, str(script), "--smoke"],
        cwd=HERE.parent,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        signal_group(proc.pid, signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        said = out.decode(errors="replace")
        return Outcome(script, False, time.monotonic() - began, said, f"over {timeout_s:g} s")
    seconds = time.monotonic() - began
    said = out.decode(errors="replace")
    why = "" if proc.returncode == 0 else f"exit {proc.returncode}"
    return Outcome(script, proc.returncode == 0, seconds, said, why)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="only these scripts (default: all)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per script")
    parser.add_argument("--verbose", action="store_true", help="print each script's output")
    args = parser.parse_args()
    chosen = scripts()
    if args.names:
        wanted = {name.removesuffix(".py") for name in args.names}
        unknown = wanted - {p.stem for p in chosen}
        if unknown:
            known = ", ".join(p.stem for p in chosen)
            parser.error(f"no benchmark {', '.join(sorted(unknown))} (known: {known})")
        chosen = [p for p in chosen if p.stem in wanted]
    began = time.monotonic()
    outcomes = []
    for script in chosen:
        outcome = run(script, args.timeout)
        outcomes.append(outcome)
        status = "ok" if outcome.ok else f"FAILED ({outcome.why})"
        print(f"{script.name:<20} {outcome.seconds:6.1f} s  {status}", flush=True)
        if args.verbose:
            print(outcome.said.rstrip() + "\n", flush=True)
    failed = [o for o in outcomes if not o.ok]
    total = time.monotonic() - began
    print(f"{len(outcomes) - len(failed)} of {len(outcomes)} benchmarks ok in {total:.1f} s")
    for outcome in failed:
        tail = outcome.said.rstrip().splitlines()[-TAIL_LINES:]
        print(f"\n--- {outcome.script.name} --smoke ({outcome.why}), its last lines:")
        print("\n".join(tail))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
