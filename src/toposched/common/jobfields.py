"""A job's fields, defined once: from this table come `submit`'s flags, the job file's
reader, the API's JobSubmit and what a stored spec holds (docs/architecture.md, "A job field").

Imported by every `toposched submit`: it imports nothing slow (no pydantic, no typer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toposched.common.frameworks import MAX_PS

# What a field holds, as each reader of the table reads it: the job file (client/jobfile.py),
# the API (server/schemas.py) and `submit`'s flags (cli/submitflags.py). A field of a plain
# type (the first group) needs nothing more than its line in FIELDS.
TEXT = "text"
INTEGER = "integer"
NUMBER = "number"  # finite; a flag's inf or nan is refused before it is sent
BOOLEAN = "boolean"  # a flag that takes no value (`--mixed-types`)
TRUTH = "truth"  # a boolean whose flag takes true or false (Arena's `--gputopology=false`)
CHOICE = "choice"  # one of `choices`
CPUS = "cpus"  # a Kubernetes quantity of CPUs: 4, 2.5 or 500m
MEMORY = "memory"  # a Kubernetes quantity of bytes: 16Gi, 512Mi, 16G or bytes
NAMES = "names"  # a list of text (a file may give one as plain text); a repeatable flag
LABELS = "labels"  # a mapping of text; flags KEY=VALUE, repeatable
DURATION = "duration"  # 30m, 1h30m, 45s, or seconds
# Types with readers of their own, each the behaviour of one field.
KIND = "kind"
COMMAND = "command"
ELASTIC = "elastic"  # MIN:MAX or {min, max}
RECORD = "record"  # a mapping of the field's `parts`, each a field of its own

# Drivers that honour a field: the server (`toposched serve`, local processes) and a cluster
# (`toposched kube submit`, which makes pods for the Kubernetes driver).
SERVER = "server"
KUBE = "kube"
BOTH = frozenset({SERVER, KUBE})
LOCAL = frozenset({SERVER})

REQUIRED: Any = ...  # the default of a field every job must give


@dataclass(frozen=True)
class JobField:
    """One field of a job: its name (the wire's, the job file's and the stored spec's), what it
    holds, its default, its bounds, the one help text of its flag and of the API's schema,
    and the drivers that honour it.

    `flag`: submit's flag for it ("" for the default, `--` and the name with `-` for `_`;
    None: no flag of its own); `aliases`: other flags that set it (Arena's spellings).
    `null_is_absent`: whether a job file's `null` leaves it out (default: where its default
    is None; else the file must give a value). `stored`: "always", or "asked": a job that
    leaves it at its default stores nothing of it (readers take the default).
    `parts`: a record's fields."""

    name: str
    type: str
    default: Any = None
    help: str = ""
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    choices: tuple[str, ...] = ()
    flag: str | None = ""
    aliases: tuple[str, ...] = ()
    metavar: str | None = None
    in_file: bool = True
    null_is_absent: bool | None = None
    stored: str = "asked"
    drivers: frozenset[str] = LOCAL
    parts: tuple[JobField, ...] = ()

    @property
    def flags(self) -> tuple[str, ...]:
        """Submit's flags that set the field, its own first ((): none)."""
        if self.flag is None:
            return ()
        return (self.flag or "--" + self.name.replace("_", "-"), *self.aliases)

    @property
    def nullable(self) -> bool:
        """Whether a file's `null` for it is the same as leaving it out (by default, where
        its default is none)."""
        return self.default is None if self.null_is_absent is None else self.null_is_absent

    def unasked(self, value: Any) -> bool:
        """Whether `value` says no more than leaving the field out (not stored then)."""
        return value == self.default or (not self.default and not value)


SECONDS_IN_A_DAY = 86_400

CHECKPOINT_PARTS = (
    JobField(
        "signal",
        TEXT,
        "SIGTERM",
        "The job checkpoints on this signal (e.g. SIGUSR1), so it may be preempted for "
        "higher-priority work of its queue or for jobs that have had less service, and migrated. "
        "A job without one is preempted only to give back GPUs its queue borrowed beyond its "
        "guarantee.",
        flag="--checkpoint-signal",
        metavar="SIGNAL",
    ),
    JobField(
        "grace_s",
        NUMBER,
        30.0,
        "Seconds from the checkpoint signal to SIGKILL when the job is preempted or moved "
        "(default 30); a cancel or a failed worker gives at least the server's stop grace "
        "(10 s by default).",
        ge=0,
        le=SECONDS_IN_A_DAY,
        flag="--checkpoint-grace",
        metavar="SECONDS",
    ),
    JobField(
        "interval_s",
        NUMBER,
        None,
        "Seconds of work between the job's checkpoints: what a stop would lose.",
        gt=0,
        le=30 * SECONDS_IN_A_DAY,
        flag="--checkpoint-every",
        metavar="SECONDS",
    ),
)

IDLE_PARTS = (
    JobField(
        "after",
        DURATION,
        REQUIRED,
        "Give the GPUs back once every one stays below --idle-below percent busy this long "
        "(30m, 1h, 45s); default: the queue's rule, if any (docs/idle.md).",
        flag="--idle-after",
        metavar="TIME",
    ),
    JobField(
        "below",
        NUMBER,
        5.0,
        "The idle threshold, percent busy (default 5): NVML utilization, or the CPU stand-in "
        "where the server has no NVML.",
        gt=0,
        le=100,
        flag="--idle-below",
        metavar="PERCENT",
    ),
    JobField(
        "action",
        CHOICE,
        "notify",
        "notify (default): say so in `get`, the history and /metrics; stop: stop it as a "
        "preemption does (a checkpointable job waits again, others end idle-stopped).",
        choices=("notify", "stop"),
        flag="--idle-action",
        metavar="notify|stop",
    ),
)

# In the order of the API's schema and of `submit --help`.
FIELDS: tuple[JobField, ...] = (
    JobField(
        "name",
        TEXT,
        None,
        "Job name (default: made up by the server). Taken until the job has ended and been "
        "deleted.",
        drivers=BOTH,
    ),
    JobField("queue", TEXT, None, "Queue (default: your team).", drivers=BOTH),
    JobField(
        "priority", INTEGER, 0, "-1000..1000 (default 0).", ge=-1000, le=1000, stored="always"
    ),
    JobField(
        "workers",
        INTEGER,
        1,
        "Workers in the gang (default 1).",
        ge=1,
        le=4096,
        stored="always",
        drivers=BOTH,
    ),
    JobField(
        "gpus",
        INTEGER,
        1,
        "GPUs per worker (default 1); 0: a job of CPUs and memory alone (give cpus), as a "
        "pipeline's data preparation.",
        ge=0,
        le=64,
        stored="always",
        drivers=BOTH,
    ),
    JobField(
        "kind",
        KIND,
        "pytorch",
        "pytorch, tensorflow or mpi (Arena's pytorchjob, tfjob, mpijob accepted)",
        flag=None,  # the word before `--`: submit tfjob -- ...
        stored="always",
        drivers=BOTH,
    ),
    JobField(
        "ps",
        INTEGER,
        0,
        "Parameter servers (tensorflow jobs; no GPU).",
        ge=0,
        le=MAX_PS,
        metavar="N",
        stored="always",
        drivers=BOTH,
    ),
    JobField(
        "locality",
        TEXT,
        "node",
        "node, rack, pod, any, or PREFER,ACCEPT@SECONDS (default node).",
        stored="always",
        drivers=BOTH,
    ),
    JobField(
        "selector",
        LABELS,
        {},
        "Run only on nodes with this label (see `toposched node list`); repeatable, every one "
        "must match (as Kubernetes' nodeSelector).",
        metavar="KEY=VALUE",
        null_is_absent=True,
        stored="always",
    ),
    JobField("cpus", CPUS, None, "CPUs per worker: 8, 2.5 or 500m.", metavar="QUANTITY"),
    JobField(
        "memory",
        MEMORY,
        None,
        "Memory per worker: 64Gi, 512Mi, 64G or bytes.",
        metavar="QUANTITY",
    ),
    JobField(
        "gpu_memory",
        MEMORY,
        None,
        "The least memory each GPU must have, e.g. 32Gi (a filter, as --gpu-type is).",
        # --gpu-memory is the share (as Run:ai and issue 42 spell it): this one is the floor.
        flag="--min-gpu-memory",
        metavar="QUANTITY",
    ),
    JobField(
        "gpu_fraction",
        NUMBER,
        None,
        "A share of one GPU's compute, 0 < F <= 1 (e.g. 0.25; 1: a whole GPU, as without it): "
        "one worker of one GPU, which jobs of fractions share (docs/server.md, shared GPUs).",
        gt=0,
        le=1,
        metavar="F",
    ),
    JobField(
        "gpu_memory_share",
        MEMORY,
        None,
        "A share of one GPU's memory (10Gi; Arena's --gpumemory): one worker of one GPU, "
        "which others may share; with --gpu-fraction, both (default: its fraction of the "
        "GPU's memory).",
        flag="--gpu-memory",
        aliases=("--gpu-memory-share", "--gpumemory"),
        metavar="QUANTITY",
    ),
    JobField(
        "gpu_memory_action",
        CHOICE,
        "flag",
        "What a shared job using more GPU memory than its share meets (NVML's reading per "
        "process): flag (default: said in `get`, `top` and /metrics) or stop (stopped as a "
        "preemption stops it).",
        choices=("flag", "stop"),
        metavar="flag|stop",
    ),
    JobField(
        "gpu_type",
        NAMES,
        None,
        "A GPU type the job accepts (e.g. V100; see `toposched node list`); repeatable or "
        "comma-separated (default: any type). A gang runs on one type unless mixed types.",
        metavar="TYPE",
    ),
    JobField("mixed_types", BOOLEAN, False, "One gang may span GPU types."),
    JobField(
        "mig",
        TEXT,
        None,
        "A MIG instance of this profile (e.g. 3g.40gb) on a GPU in MIG mode, for one worker of "
        "one GPU; the profiles are NVIDIA's for the GPU's model (docs/placement.md, MIG).",
        min_length=1,
        max_length=32,
        metavar="PROFILE",
    ),
    JobField(
        "gputopology",
        TRUTH,
        True,
        "Arena's switch: false places the job as plain GPU counting does (the lowest free GPU "
        "indices); true (the default) by how the GPUs are linked.",
        metavar="true|false",
    ),
    JobField(
        "image",
        TEXT,
        None,
        "Run the workers in this container image (podman or docker on the server; GPUs passed "
        "as devices). Nothing is exported by default then: the image has its own programs.",
        min_length=1,
        max_length=512,
        metavar="IMAGE",
    ),
    JobField(
        "model",
        TEXT,
        None,
        "What the job trains, a model of `toposched perf --list` (default resnet50): `get` "
        "predicts its speed on the GPUs it gets.",
        max_length=100,
        metavar="NAME",
        drivers=BOTH,
    ),
    JobField(
        "topology_level",
        TEXT,
        None,
        "A network level of the cluster (e.g. clique, leaf, rack) one domain of which must hold "
        "the whole gang: it waits until one does, and its reason says so.",
        max_length=32,
        metavar="LEVEL",
    ),
    JobField(
        "topology_prefer",
        TEXT,
        None,
        "A network level one domain of which should hold the whole gang: the fastest level "
        "up to it that holds it, else placed as usual.",
        max_length=32,
        metavar="LEVEL",
    ),
    JobField(
        "elastic",
        ELASTIC,
        None,
        "Run with any worker count in MIN..MAX.",
        metavar="MIN:MAX",
        stored="always",
    ),
    JobField("checkpoint", RECORD, None, flag=None, stored="always", parts=CHECKPOINT_PARTS),
    JobField(
        "idle",
        RECORD,
        None,
        "Give its GPUs back when they sit idle (default: the queue's rule)",
        flag=None,
        parts=IDLE_PARTS,
    ),
    JobField(
        "restart",
        CHOICE,
        "never",
        "never (default) or on-failure.",
        choices=("never", "on-failure"),
        stored="always",
    ),
    JobField("max_restarts", INTEGER, 3, "Default 3.", ge=0, le=100, stored="always"),
    JobField(
        "limit_s",
        NUMBER,
        None,
        "Time limit of each run, as Slurm's --time: 90 (minutes), 1:30:00, 2-12:00, 1h30m or "
        "45s. At it the job gets its checkpoint signal (else SIGTERM), then SIGKILL after its "
        "grace, and ends timed-out; backfill plans with it. Seconds in a job file and the API.",
        gt=0,
        flag="--time",
        aliases=("--limit", "-t"),
        metavar="TIME",
        stored="always",
    ),
    JobField("command", COMMAND, REQUIRED, min_length=1, flag=None, stored="always", drivers=BOTH),
    JobField(
        "env",
        LABELS,
        {},
        "An environment variable; repeatable.",
        aliases=("-e",),
        metavar="KEY=VALUE",
        stored="always",
        drivers=BOTH,
    ),
    JobField(
        "exported",
        NAMES,
        [],
        "The names in `env` that came from the submitter's environment (`submit --export`), "
        "which `get` shows",
        flag=None,  # set by --export, with the values it adds to env
        in_file=False,
    ),
    JobField(
        "workdir",
        TEXT,
        None,
        "Working directory of the workers (default, for this machine's server: here).",
        metavar="DIR",
        stored="always",
    ),
    JobField(
        "command_visible",
        BOOLEAN,
        False,
        "Whether other teams may see the command (default: hidden from them).",
        flag="--command-visible/--command-hidden",
        stored="always",
    ),
    JobField(
        "interactive",
        BOOLEAN,
        False,
        "A session (a notebook, a shell, an editor server): one worker with a port of its "
        "own, TOPOSCHED_PORT in its environment and $(TOPOSCHED_PORT) in the command replaced "
        "by it; `get` shows its URL; never restarted; stopped after an hour idle unless it or "
        "its queue has an idle rule (docs/idle.md).",
    ),
    JobField(
        "after",
        NAMES,
        [],
        "Run after job NAME, as Slurm's --dependency: :ok (the default) once it has "
        "succeeded, :any once it has ended, however. The job waits, saying for which; if one "
        "under :ok does not succeed, it ends dependency-failed without running. Repeatable.",
        metavar="NAME[:ok|:any]",
        null_is_absent=True,
    ),
)

BY_NAME = {field.name: field for field in FIELDS}


def stored_value(spec: dict[str, Any], name: str) -> Any:
    """The field `name` of a stored spec, its default where the spec leaves it out."""
    field = BY_NAME[name]
    default = field.default
    return spec.get(name, None if default is REQUIRED else default)


def compact(spec: dict[str, Any], fields: tuple[JobField, ...] = FIELDS) -> dict[str, Any]:
    """`spec` without the fields stored only when asked that say nothing (their defaults)."""
    asked = {field.name: field for field in fields if field.stored == "asked"}
    return {
        key: value
        for key, value in spec.items()
        if key not in asked or not asked[key].unasked(value)
    }
