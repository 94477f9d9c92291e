"""Test stand-in for a server: starts one run with its own executor, then waits to be killed."""

# Usage: serve.py ROOT SPEC_JSON; prints "started" once the run's workers all have pids.

import json
import sys
import time
from pathlib import Path

from toposched.executors.local import LocalExecutor, RunSpec


def main() -> None:
    spec = json.loads(sys.argv[2])
    executor = LocalExecutor(Path(sys.argv[1]))
    executor.start(
        RunSpec(
            job=spec["job"],
            attempt=spec["attempt"],
            queue="default",
            command=tuple(spec["command"]),
            env={},
            workdir=None,
            workers=tuple((node, tuple(gpus)) for node, gpus in spec["workers"]),
            restart_count=0,
        )
    )
    print("started", flush=True)
    time.sleep(60)  # the test kill -9s it long before


if __name__ == "__main__":
    main()
