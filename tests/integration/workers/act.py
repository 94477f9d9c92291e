"""Test worker: records what it sees, then does what its argument for this rank says."""

# Usage: act.py OUT_DIR ACTION_FOR_RANK_0 [ACTION_FOR_RANK_1 ...], where ACTION is one of
#   exit:N    exit with status N            signal:NAME  send itself signal NAME
#   sleep     sleep (default dispositions)  trap         SIGTERM exits 0, SIGUSR1 is recorded
#   ignore    ignore SIGTERM and sleep      spawn        start a child, sleep
#   orphan    start a child that ignores SIGTERM, exit 0

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

CHILD = """
import signal, sys, time
if sys.argv[1] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
time.sleep(30)
"""


def write(path: Path, text: str) -> None:
    # Renamed into place: the test never reads half a file
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.rename(path)


def main() -> int:
    out = Path(sys.argv[1])
    rank = int(os.environ["RANK"])
    action = sys.argv[2 + rank]
    info = {
        "env": dict(os.environ),
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "pgid": os.getpgid(0),
        "cwd": os.getcwd(),
    }
    write(out / f"info-{rank}.json", json.dumps(info))
    print(f"to stdout from rank {rank}")
    print(f"to stderr from rank {rank}", file=sys.stderr)
    if action.startswith("exit:"):
        return int(action.removeprefix("exit:"))
    if action.startswith("signal:"):
        os.kill(os.getpid(), signal.Signals[action.removeprefix("signal:")])
    if action == "trap":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        signal.signal(signal.SIGUSR1, lambda *_: write(out / f"usr1-{rank}", "got it"))
    if action == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if action in ("spawn", "orphan"):
        mode = "ignore" if action == "orphan" else "default"
        child = subprocess.Popen([sys.executable, "-c", CHILD, mode])
        write(out / f"child-{rank}", str(child.pid))
        if action == "orphan":
            return 0
    write(out / f"ready-{rank}", "ready")
    time.sleep(30)  # the tests stop it long before; this only bounds a failed test's leftovers
    return 9


if __name__ == "__main__":
    sys.exit(main())
