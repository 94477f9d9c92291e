"""A long-running job that checkpoints on a signal (`checkpointable.yaml`).

Honest scope: the work is a counter advanced once per --step-time seconds (no GPU, standard
library only); the point is the checkpoint contract toposched relies on to preempt or migrate
a job:

* the worker traps its checkpoint signal (SIGUSR1 in the YAML; --signal here) and SIGTERM;
* on either, it writes its state (the step reached) atomically and exits at once, well within
  the job's grace_s, after which toposched would SIGKILL it;
* it also saves every --save-every steps, as a real trainer would;
* when the job starts again (requeued after a preemption, moved to other GPUs, or restarted
  after a failure), each rank resumes from its own file.

State lives in $CHECKPOINT_DIR if set, else in $TOPOSCHED_CHECKPOINT_DIR (the job's own
directory under the server's data directory, the same for every attempt), else (run by hand)
in ./checkpoints/$TOPOSCHED_JOB: one JSON file per rank. The job succeeds once every rank has
reached --steps.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

asked: int | None = None  # the signal that asked for a checkpoint


def on_signal(signum: int, _frame: FrameType | None) -> None:
    global asked
    asked = signum


def save(path: Path, step: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step, "saved_at": time.time()}))
    tmp.replace(path)  # atomic: a kill mid-write leaves the previous checkpoint intact


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--step-time", type=float, default=1.0, help="seconds per step")
    parser.add_argument("--save-every", type=int, default=30, help="steps between saves")
    parser.add_argument("--signal", default="SIGUSR1", help="the checkpoint signal")
    args = parser.parse_args()
    signal.signal(signal.Signals[args.signal], on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    rank = int(os.environ.get("RANK", "0"))
    job = os.environ.get("TOPOSCHED_JOB", "checkpointable")
    given = os.environ.get("CHECKPOINT_DIR") or os.environ.get("TOPOSCHED_CHECKPOINT_DIR")
    directory = Path(given) if given else Path("checkpoints") / job
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"rank-{rank}.json"
    step = json.loads(path.read_text())["step"] if path.exists() else 0
    attempt = os.environ.get("TOPOSCHED_ATTEMPT", "0")
    print(f"[rank {rank}] attempt {attempt}: starting at step {step}/{args.steps} ({path})")
    while step < args.steps:
        if asked is not None:
            save(path, step)
            name = signal.Signals(asked).name
            print(f"[rank {rank}] {name}: checkpointed at step {step}; exiting")
            return 128 + asked
        time.sleep(args.step_time)
        step += 1
        if step % args.save_every == 0:
            save(path, step)
            print(f"[rank {rank}] step {step}: saved")
    save(path, step)
    print(f"[rank {rank}] finished all {args.steps} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
