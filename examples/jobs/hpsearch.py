"""An elastic hyperparameter search (`hpsearch-elastic.yaml`): workers share a grid of trials.

Honest scope: the "training" of each trial is a stand-in (a noisy quadratic in the learning
rate and weight decay, a fraction of a second of sleep per trial); it uses no GPU and needs
only the standard library. What it shows is the elastic contract:

* worker RANK of WORLD_SIZE runs the trials i with i % WORLD_SIZE == RANK that are not done;
* each finished trial is appended to its rank's results file at once, so nothing is lost when
  toposched stops the job (to shrink it for a waiting job, or to grow it into idle GPUs);
* on the stop signal (SIGTERM here, `checkpoint.signal` in the YAML) a worker finishes nothing
  more and exits; the restarted job, at its new size, reads every rank's results and splits
  only the trials left over.

Results go to $HPSEARCH_DIR if set, else to $TOPOSCHED_CHECKPOINT_DIR (the job's own directory
under the server's data directory, the same for every attempt), else (run by hand) to
./hpsearch/$TOPOSCHED_JOB; rank 0 prints the best trial once all are done.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import sys
import time
from pathlib import Path
from types import FrameType

stop = False


def on_signal(signum: int, _frame: FrameType | None) -> None:
    global stop
    stop = True


def grid(trials: int) -> list[dict[str, float]]:
    rng = random.Random(0)  # the same grid on every worker and every restart
    return [
        {"lr": 10 ** rng.uniform(-4, -1), "weight_decay": 10 ** rng.uniform(-6, -2)}
        for _ in range(trials)
    ]


def objective(params: dict[str, float], seed: int) -> float:
    """A stand-in validation loss: best near lr=3e-3, weight_decay=1e-4."""
    noise = random.Random(seed).gauss(0, 0.02)
    lr, wd = math.log10(params["lr"]), math.log10(params["weight_decay"])
    return (lr + 2.5) ** 2 + 0.3 * (wd + 4) ** 2 + noise


def done_trials(out: Path) -> dict[int, float]:
    done: dict[int, float] = {}
    for path in out.glob("rank-*.jsonl"):
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done[row["trial"]] = row["loss"]
    return done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--trial-time", type=float, default=0.5, help="seconds per trial")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGUSR1, on_signal)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    job = os.environ.get("TOPOSCHED_JOB", "hpsearch")
    given = os.environ.get("HPSEARCH_DIR") or os.environ.get("TOPOSCHED_CHECKPOINT_DIR")
    out = Path(given) if given else Path("hpsearch") / job
    out.mkdir(parents=True, exist_ok=True)
    trials = grid(args.trials)
    done = done_trials(out)
    mine = [i for i in range(len(trials)) if i % world == rank and i not in done]
    attempt = os.environ.get("TOPOSCHED_ATTEMPT", "0")  # one more at each start, resize included
    print(
        f"[rank {rank}/{world}] attempt {attempt}: {len(done)} trial(s) done before, "
        f"{len(mine)} for me (results in {out})"
    )
    with (out / f"rank-{rank}.jsonl").open("a") as results:
        for i in mine:
            if stop:
                print(f"[rank {rank}/{world}] asked to stop; the rest waits for the restart")
                return 0
            time.sleep(args.trial_time)  # the "training"
            loss = objective(trials[i], seed=i)
            results.write(json.dumps({"trial": i, **trials[i], "loss": loss}) + "\n")
            results.flush()
            print(
                f"[rank {rank}/{world}] trial {i}: lr={trials[i]['lr']:.2e} "
                f"wd={trials[i]['weight_decay']:.2e} loss={loss:.4f}"
            )
    if rank == 0:
        # The others may still be on their last trial: wait for every result (or a stop).
        while not stop and len(done := done_trials(out)) < len(trials):
            time.sleep(0.2)
        if len(done) == len(trials):
            best = min(done, key=lambda i: done[i])
            print(f"best of {len(trials)} trials: #{best} {trials[best]} loss {done[best]:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
