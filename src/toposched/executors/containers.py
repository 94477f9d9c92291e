"""Workers in a container image (`submit --image`): the runtime found on the server (podman or
docker) and the `run` command line that keeps the executor's contract inside the container."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

KNOWN = ("podman", "docker")
PROBE_TIMEOUT_S = 10.0


class NoContainerRuntime(RuntimeError):
    """No usable container runtime: the message says which were tried and why not."""


@dataclass(frozen=True)
class ContainerRuntime:
    """A runtime's program, and the site's own arguments for `run` (`--container-arg`: a
    machine that needs `--runtime runc` or lower `--ulimit`s says so there)."""

    program: str
    extra: tuple[str, ...] = ()
    # The node's GPUs are real: each is passed as a CDI device (`nvidia.com/gpu=N`), and the
    # container, which sees only those, numbers them from 0. Emulated GPUs pass nothing.
    devices: bool = False

    def run_argv(
        self,
        image: str,
        command: Sequence[str],
        *,
        name: str,
        env_file: str,
        gpus: Sequence[int],
        mounts: Sequence[str],
        workdir: str | None,
        user: tuple[int, int] | None,
    ) -> list[str]:
        """`run` of one worker: in the foreground (its exit is the worker's), removed after,
        the host's network and IPC (ranks meet on loopback ports and share memory as
        processes would), each of `mounts` at its own path, the variables in `env_file` (their
        values stay out of `ps`, and out of the client's own environment: a job's LD_PRELOAD
        must not run in the runtime's client, which runs as the server).

        No capability and no gain of privilege inside: a setuid file of the image cannot make
        its process root, nor root in the container override the modes of what is mounted."""
        argv = [self.program, "run", "--rm", "--name", name, "--network", "host", "--ipc", "host"]
        argv += ["--init"]  # the command is not PID 1: signals reach it, zombies are reaped
        argv += ["--security-opt=no-new-privileges", "--cap-drop=ALL"]
        for path in mounts:
            argv += ["--volume", f"{path}:{path}"]
        if workdir is not None:
            argv += ["--workdir", workdir]
        if user is not None:
            argv += ["--user", f"{user[0]}:{user[1]}"]
        if self.devices:
            argv += [arg for g in gpus for arg in ("--device", f"nvidia.com/gpu={g}")]
        argv += ["--env-file", env_file]
        return [*argv, *self.extra, image, *command]

    def inner_env(self, env: Mapping[str, str], gpus: Sequence[int]) -> dict[str, str]:
        """The worker's variables as the container must see them: with real devices, its
        GPUs are 0..k-1 there (TOPOSCHED_GPUS keeps the host's indices)."""
        out = dict(env)
        out["TOPOSCHED_GPUS"] = ",".join(str(g) for g in gpus)
        if self.devices:
            out["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(gpus)))
        return out


def env_file(variables: Mapping[str, str]) -> str:
    """`variables` as a container runtime's `--env-file` (KEY=VALUE lines); a value no such
    line can carry (a newline) or a name it would misread is a ValueError naming it."""
    lines = []
    for key in sorted(variables):
        value = variables[key]
        if not key or "=" in key or key[0] in "#;" or any(c.isspace() for c in key):
            raise ValueError(f"variable name {key!r} cannot be passed into a container")
        if "\n" in value or "\r" in value or "\0" in value:
            raise ValueError(
                f"variable {key!r} holds a line break, which a container's env file cannot carry"
            )
        lines.append(f"{key}={value}\n")
    return "".join(lines)


def find_runtime(
    choice: str = "auto", extra: Sequence[str] = (), *, devices: bool = False
) -> ContainerRuntime:
    """The runtime `choice` names (podman, docker or a path), or the first of podman and docker
    that answers `version`; NoContainerRuntime says what was tried."""
    candidates = list(KNOWN) if choice == "auto" else [choice]
    tried = []
    for candidate in candidates:
        program = shutil.which(candidate)
        if program is None:
            tried.append(f"{candidate}: not installed (not on PATH)")
            continue
        why = _probe(program)
        if why is None:
            return ContainerRuntime(program, tuple(extra), devices)
        tried.append(f"{candidate}: {why}")
    raise NoContainerRuntime(
        "no container runtime on the server to run an image (install podman or docker); "
        + "; ".join(tried)
    )


def _probe(program: str) -> str | None:
    """Why `program version` does not answer (docker without its daemon does not), or None."""
    try:
        done = subprocess.run(
            [program, "version"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        return said[-1] if said else f"`version` exited {done.returncode}"
    return None


class Containers:
    """The server's container runtime, found on first use (a server that never runs an image
    never probes); a failed search is tried again at the next use, so that a runtime
    installed meanwhile is found."""

    def __init__(
        self, choice: str = "auto", extra: Sequence[str] = (), *, devices: bool = False
    ) -> None:
        self.choice = choice
        self.extra = tuple(extra)
        self.devices = devices
        self._found: ContainerRuntime | None = None
        self._lock = threading.Lock()

    def get(self) -> ContainerRuntime:
        """The runtime; NoContainerRuntime says why there is none."""
        with self._lock:
            if self._found is None:
                self._found = find_runtime(self.choice, self.extra, devices=self.devices)
            return self._found
