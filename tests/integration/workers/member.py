"""Test member of a job of any kind: records what it sees, then does as its role is told."""

# Usage: member.py OUT_DIR ROLE=ACTION [ROLE=ACTION ...], ROLE one of worker, ps, launcher (a
# role given no action exits 0). The role is read from what the member was told: TF_CONFIG's
# task (a chief is a worker), the hostfile a launcher gets, else a worker. ACTION is one of
#   exit:N   exit with status N               sleep    sleep until stopped
#   ignore   ignore SIGTERM and sleep         wait     exit 0 once OUT_DIR/go exists
# Each member writes OUT_DIR/info-PID.json (its environment) and then OUT_DIR/ready-PID.

import json
import os
import signal
import sys
import time
from pathlib import Path


def write(path: Path, text: str) -> None:
    # Renamed into place: the test never reads half a file
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.rename(path)


def role() -> str:
    if "TF_CONFIG" in os.environ:
        task = json.loads(os.environ["TF_CONFIG"])["task"]["type"]
        return "ps" if task == "ps" else "worker"
    if "OMPI_MCA_orte_default_hostfile" in os.environ:
        return "launcher"
    return "worker"


def main() -> int:
    out = Path(sys.argv[1])
    actions = dict(arg.split("=", 1) for arg in sys.argv[2:])
    mine = role()
    action = actions.get(mine, "exit:0")
    pid = os.getpid()
    write(out / f"info-{pid}.json", json.dumps({"env": dict(os.environ), "role": mine}))
    print(f"{mine} {pid} says hello")
    if action.startswith("exit:"):
        return int(action.removeprefix("exit:"))
    if action == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    write(out / f"ready-{pid}", "ready")
    deadline = time.monotonic() + 30  # bounds a failed test's leftovers
    while time.monotonic() < deadline:
        if action == "wait" and (out / "go").exists():
            return 0
        time.sleep(0.02)
    return 9


if __name__ == "__main__":
    sys.exit(main())
