"""A stand-in training job of any kind, long enough to watch (`pytorch-steps.yaml`, ...).

Honest scope: no framework and no GPU library; each "step" is a sleep of --step-s seconds. What
it shows is what toposched gives each member of a job of each kind, and the checkpoint
contract:

* pytorch: each worker reads RANK, WORLD_SIZE, LOCAL_RANK and CUDA_VISIBLE_DEVICES, as a
  torchrun script would, and runs --steps steps;
* tensorflow: each member reads TF_CONFIG; the chief and the workers run the steps, a
  parameter server (`ps`) serves until it is stopped (toposched stops it once every worker
  has ended);
* mpi: the launcher runs `mpirun` over the hostfile ($TOPOSCHED_HOSTFILE) when there is one,
  and otherwise starts one rank per slot itself, as mpirun would on one machine; each rank
  reads OMPI_COMM_WORLD_RANK and takes GPU number LOCAL_RANK of CUDA_VISIBLE_DEVICES.

A member that steps saves its step to $TOPOSCHED_CHECKPOINT_DIR (the job's own directory
under the server's data directory, the same for every attempt) every --save-every steps, and
at once on the checkpoint signal (--signal) or SIGTERM, then exits; started again (after a
preemption, a migration or a restart), it resumes there. Run by hand (no toposched), it keeps
its state in ./checkpoints.

    RANK=0 WORLD_SIZE=1 python examples/jobs/steps.py --steps 5 --step-s 0.2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

asked: int | None = None  # the signal that asked this member to save and stop


def on_signal(signum: int, _frame: FrameType | None) -> None:
    global asked
    asked = signum


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--step-s", type=float, default=1.0, help="seconds per step")
    parser.add_argument("--save-every", type=int, default=10, help="steps between saves")
    parser.add_argument("--signal", default="SIGUSR1", help="the checkpoint signal")
    return parser.parse_args()


def who() -> tuple[str, str]:
    """This member's role (`step`, `ps` or `launcher`) and its name in the printed lines."""
    env = os.environ
    if "TF_CONFIG" in env:
        task = json.loads(env["TF_CONFIG"])["task"]
        name = f"{task['type']} {task['index']}"
        return ("ps" if task["type"] == "ps" else "step"), name
    if "OMPI_COMM_WORLD_RANK" in env:
        return "step", f"rank {env['OMPI_COMM_WORLD_RANK']}/{env['OMPI_COMM_WORLD_SIZE']}"
    if "PMI_RANK" in env:  # MPICH's mpirun
        return "step", f"rank {env['PMI_RANK']}/{env.get('PMI_SIZE', '?')}"
    if "TOPOSCHED_HOSTFILE" in env:
        return "launcher", "launcher"
    return "step", f"rank {env.get('RANK', '0')}/{env.get('WORLD_SIZE', '1')}"


def gpu() -> str:
    """The GPU this member would use: its local rank's among those it may see."""
    visible = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
    return visible[local] if local < len(visible) else "none"


def step(args: argparse.Namespace, name: str) -> int:
    directory = Path(os.environ.get("TOPOSCHED_CHECKPOINT_DIR", "checkpoints"))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name.split('/')[0].replace(' ', '-')}.json"
    done = json.loads(path.read_text())["step"] if path.exists() else 0
    attempt = os.environ.get("TOPOSCHED_ATTEMPT", "0")
    print(f"[{name}] attempt {attempt}, GPU {gpu()}: from step {done} of {args.steps} ({path})")

    def save() -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"step": done, "saved_at": time.time()}))
        tmp.replace(path)  # atomic: a kill mid-write leaves the previous checkpoint

    while done < args.steps:
        if asked is not None:
            save()
            print(f"[{name}] {signal.Signals(asked).name}: saved step {done}; exiting")
            return 128 + asked
        time.sleep(args.step_s)
        done += 1
        print(f"[{name}] step {done}/{args.steps}")
        if done % args.save_every == 0:
            save()
    save()
    print(f"[{name}] done")
    return 0


def serve(name: str) -> int:
    """A parameter server: serves until stopped (it has nothing of its own to save)."""
    cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
    print(f"[{name}] serving the variables of {cluster}")
    began = time.monotonic()
    while asked is None:
        time.sleep(0.1)
    served = time.monotonic() - began
    print(f"[{name}] {signal.Signals(asked).name} after {served:.0f} s: exiting")
    return 0


def slots(hostfile: Path) -> int:
    """How many ranks the hostfile has room for (`HOST slots=N` per line)."""
    total = 0
    for line in hostfile.read_text().splitlines():
        for word in line.split()[1:]:
            if word.startswith("slots="):
                total += int(word.removeprefix("slots="))
    return total


def launch(args: argparse.Namespace) -> int:
    hostfile = Path(os.environ["TOPOSCHED_HOSTFILE"])
    ranks = slots(hostfile)
    me = [sys.executable, os.path.abspath(__file__), *sys.argv[1:]]
    mpirun = shutil.which("mpirun")
    if mpirun is not None:
        print(f"[launcher] mpirun -np {ranks} over {hostfile}: {hostfile.read_text().strip()}")
        env = dict(os.environ)
        if os.geteuid() == 0:  # Open MPI refuses root unless told twice; others ignore these
            env |= {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
        return subprocess.call(
            [mpirun, "-np", str(ranks), "--hostfile", str(hostfile), *me], env=env
        )
    print(f"[launcher] no mpirun here: starting the {ranks} ranks myself, as it would")
    procs = []
    for rank in range(ranks):
        env = os.environ | {
            "OMPI_COMM_WORLD_RANK": str(rank),
            "OMPI_COMM_WORLD_SIZE": str(ranks),
            "OMPI_COMM_WORLD_LOCAL_RANK": str(rank),
        }
        # In the launcher's process group: toposched's signals reach every rank directly
        procs.append(subprocess.Popen(me, env=env))
    codes = [proc.wait() for proc in procs]
    print(f"[launcher] ranks ended with {codes}")
    return next((code for code in codes if code != 0), 0)


def main() -> int:
    args = parse_args()
    role, name = who()
    # The launcher waits for its ranks, which get the same signals from toposched
    for sig in {signal.Signals[args.signal], signal.SIGTERM}:
        signal.signal(sig, on_signal)
    if role == "launcher":
        return launch(args)
    if role == "ps":
        return serve(name)
    return step(args, name)


if __name__ == "__main__":
    sys.exit(main())
