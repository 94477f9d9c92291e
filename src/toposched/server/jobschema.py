"""The API's JobSubmit, made from the job's fields (common/jobfields.py): each field's type,
default, bounds and help from the table; the checks of particular fields and across fields
here."""

from __future__ import annotations

import functools
from signal import Signals
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from toposched.common import jobfields
from toposched.common.durations import DurationError, parse_duration
from toposched.common.frameworks import Kind, KindError, kind_of
from toposched.common.jobfields import JobField
from toposched.common.jobspec import gpu_milli
from toposched.core.job import After, Checkpoint, JobError, LocalityRule
from toposched.server.wirebase import (
    ENV_KEY,
    IMAGE,
    MAX_AFTER,
    MAX_COMMAND_BYTES,
    MAX_ENV_BYTES,
    MAX_GPU_TYPES,
    MAX_SELECTOR,
    UNCATCHABLE,
    Seconds,
    Strict,
    check_name,
    check_size,
    check_workdir,
    no_nul,
    utf8_len,
)
from toposched.topology.resources import (
    QuantityError,
    cpus_text,
    memory_text,
    parse_cpus,
    parse_memory,
)


class ElasticIn(Strict):
    min: Annotated[int, Field(ge=1, le=4096)]
    max: Annotated[int, Field(ge=1, le=4096)]

    @model_validator(mode="after")
    def _order(self) -> ElasticIn:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self


class CheckpointIn(Strict):
    signal: str = "SIGTERM"
    grace_s: Annotated[Seconds, Field(ge=0, le=86_400)] = 30.0
    interval_s: Annotated[Seconds, Field(gt=0, le=30 * 86_400)] | None = Field(
        None, description="Seconds of work between its checkpoints: what a stop would lose"
    )

    @field_validator("signal")
    @classmethod
    def _signal(cls, value: str) -> str:
        try:
            Checkpoint(value, 0)
        except JobError as err:
            raise ValueError(str(err)) from None
        # The executor sends it by name: one it does not know (SIGFOO) would make every stop
        # of the job fail, leaving it stopping for ever with its GPUs held.
        if value.upper() not in Signals.__members__:
            raise ValueError(f"checkpoint signal {value!r} is not a signal of this system")
        if value.upper() in UNCATCHABLE:
            raise ValueError(
                f"checkpoint signal {value!r} cannot be caught, so nothing can checkpoint on it; "
                "use one such as SIGUSR1 or SIGTERM"
            )
        return value


class IdleIn(Strict):
    """Give back a job's GPUs when every one stays below `below` percent busy for `after`."""

    after: str | Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        description="How long, e.g. 30m, 1h30m, 45s, or seconds"
    )
    below: Annotated[float, Field(gt=0, le=100, allow_inf_nan=False)] = Field(
        5.0, description="Percent busy (NVML utilization, or the CPU stand-in without NVML)"
    )
    action: Literal["notify", "stop"] = Field(
        "notify", description="notify: say so and keep the GPUs; stop: stop as a preemption"
    )

    @field_validator("after")
    @classmethod
    def _after(cls, value: str | float) -> float:
        try:
            seconds = parse_duration(value, "idle after")
        except DurationError as err:
            raise ValueError(str(err)) from None
        if seconds > 30 * 86_400:
            raise ValueError(f"idle after must be at most 30 days, got {value!r}")
        return seconds


class JobChecks(Strict):
    """The checks of a submitted job's particular fields and across its fields; its fields
    come from the table (JobSubmit, below)."""

    if TYPE_CHECKING:
        # The fields are made from the table at run time: typed here as what they hold.
        def __getattr__(self, name: str) -> Any: ...

    @field_validator("name", check_fields=False)
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        return None if value is None else check_name(value, "job name")

    @field_validator("queue", check_fields=False)
    @classmethod
    def _queue(cls, value: str | None) -> str | None:
        return None if value is None else check_name(value, "queue")

    @field_validator("kind", check_fields=False)
    @classmethod
    def _kind(cls, value: str) -> str:
        try:
            return kind_of(value).value  # stored by its own name: `tfjob` is `tensorflow`
        except KindError as err:
            raise ValueError(str(err)) from None

    @field_validator("ps", check_fields=False)
    @classmethod
    def _ps(cls, value: int, info: ValidationInfo) -> int:
        kind = info.data.get("kind")  # absent when the kind itself was refused
        if value and kind is not None and kind != Kind.TENSORFLOW.value:
            raise ValueError(f"parameter servers (ps={value}) are for tensorflow jobs, not {kind}")
        return value

    @field_validator("selector", check_fields=False)
    @classmethod
    def _selector(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_SELECTOR:
            raise ValueError(f"a selector has at most {MAX_SELECTOR} labels, got {len(value)}")
        for key, text in value.items():
            # A node label's own bounds (LabelIn): a longer one could never match.
            if not key or len(key) > 300 or len(text) > 300:
                raise ValueError(f"selector label {key[:60]!r}: 1-300 characters, value 0-300")
            no_nul(key, "selector label")
            no_nul(text, f"the value of selector label {key}")
        return value

    @field_validator("gpu_type", check_fields=False)
    @classmethod
    def _gpu_type(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("give at least one GPU type (e.g. [V100, A100]), or leave it out")
        if len(value) > MAX_GPU_TYPES:
            raise ValueError(f"at most {MAX_GPU_TYPES} GPU types, got {len(value)}")
        # `V100,A100` is two types, as `submit --gpu-type V100,A100` says it: no type's name
        # holds a comma, and a job waiting for one that does would wait for ever.
        names = [name.strip() for item in value for name in item.split(",")]
        for name in names:
            if not name or len(name) > 100:
                raise ValueError(f"a GPU type is 1-100 characters, got {name[:60]!r}")
            no_nul(name, "a GPU type")
        return names

    @field_validator("locality", check_fields=False)
    @classmethod
    def _locality(cls, value: str) -> str:
        try:
            LocalityRule.parse(value)
        except JobError as err:
            raise ValueError(str(err)) from None
        return value

    @field_validator("command", check_fields=False)
    @classmethod
    def _command(cls, value: list[str]) -> list[str]:
        if not value[0].strip():
            raise ValueError("the command's first word (the program) must not be empty")
        for i, word in enumerate(value):
            no_nul(word, f"word {i} of the command")
        check_size(utf8_len(value), MAX_COMMAND_BYTES, "the command")
        return value

    @field_validator("env", check_fields=False)
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if not ENV_KEY.fullmatch(key):
                raise ValueError(f"environment variable name {key[:60]!r} is not valid")
            no_nul(text, f"the value of environment variable {key}")
        check_size(utf8_len([*value, *value.values()]), MAX_ENV_BYTES, "the environment")
        return value

    @field_validator("image", check_fields=False)
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        # A reference as registries write them: no spaces, and never read as an option.
        if value is not None and (not IMAGE.fullmatch(value) or value.startswith("-")):
            raise ValueError(f"{value[:80]!r} is not an image reference (e.g. nvcr.io/x/y:1.0)")
        return value

    @field_validator("workdir", check_fields=False)
    @classmethod
    def _workdir(cls, value: str | None) -> str | None:
        return None if value is None else check_workdir(value)

    @field_validator("after", check_fields=False)
    @classmethod
    def _after(cls, value: list[str], info: ValidationInfo) -> list[str]:
        # Stored as NAME:ok or NAME:any, each once: what `get` shows and the core reads.
        if len(value) > MAX_AFTER:
            raise ValueError(f"at most {MAX_AFTER} jobs to run after, got {len(value)}")
        out: list[str] = []
        for text in value:
            try:
                dep = After.parse(text)
            except JobError as err:
                raise ValueError(str(err).removeprefix("after: ")) from None
            check_name(dep.job, "the job to run after")
            if dep.job == info.data.get("name"):
                raise ValueError(
                    f"job {dep.job!r} cannot run after itself (a cycle of dependencies)"
                )
            if any(After.parse(seen).job == dep.job for seen in out):
                raise ValueError(f"{dep.job!r} is named twice")
            out.append(str(dep))
        return out

    @model_validator(mode="after")
    def _elastic_range(self) -> JobChecks:
        if self.elastic is not None and not self.elastic.min <= self.workers <= self.elastic.max:
            raise ValueError(
                f"workers ({self.workers}) must lie in the elastic range "
                f"{self.elastic.min}:{self.elastic.max}"
            )
        missing = [name for name in self.exported if name not in self.env]
        if missing:
            raise ValueError(f"exported names {missing[0][:60]!r}, which env does not hold")
        if self.interactive:
            self._one_session()
        if self.gpus == 0:
            self._cpus_alone()
        if self.mig is not None:
            self._one_instance()
        if self.gpu_fraction is not None or self.gpu_memory_share is not None:
            self._one_share()
        elif self.gpu_memory_action != "flag":
            raise _field_error(
                "gpu_memory_action",
                "watches a share of a GPU: give gpu_fraction or gpu_memory_share with it",
            )
        return self

    def _one_share(self) -> None:
        """A share is of one GPU for one worker (only a single GPU per worker can be
        fractional); refused by the share's field, saying what is allowed."""
        field = "gpu_fraction" if self.gpu_fraction is not None else "gpu_memory_share"
        whole = self.gpu_fraction == 1
        if whole and self.gpu_memory_share is not None:
            raise _field_error(
                "gpu_memory_share",
                "is a share of part of one GPU, and gpu_fraction 1 asks the whole GPU: "
                "give a fraction below 1, or leave one of them out",
            )
        if whole:
            return  # the ordinary request of whole GPUs
        if self.gpu_fraction is not None and gpu_milli(self.gpu_fraction) < 1:
            raise _field_error(
                "gpu_fraction", f"must be at least 0.001 (a thousandth), got {self.gpu_fraction}"
            )
        wrong = [
            (self.gpus != 1, f"gpus must be 1 (got {self.gpus}); for more, ask whole GPUs"),
            (self.workers != 1, f"workers must be 1 (got {self.workers})"),
            (self.elastic is not None, "it cannot be elastic"),
        ]
        for bad, why in wrong:
            if bad:
                raise _field_error(field, f"a share is of one GPU for one worker: {why}")

    def _one_session(self) -> None:
        """An interactive session is one process that is never restarted or moved."""
        wrong = [
            ("workers", self.workers != 1, f"workers must be 1, got {self.workers}"),
            ("elastic", self.elastic is not None, "it cannot be elastic"),
            ("kind", self.kind != Kind.PYTORCH.value, f"it has no kind ({self.kind})"),
            ("restart", self.restart != "never", "restart must be never: it is not restarted"),
            ("checkpoint", self.checkpoint is not None, "it cannot checkpoint"),
        ]
        for field, bad, why in wrong:
            if bad:
                raise _field_error(field, f"an interactive session runs one worker once: {why}")

    def _one_instance(self) -> None:
        """A MIG instance is for one worker of one GPU: refused by the field at fault."""
        wrong = [
            ("workers", self.workers != 1, f"workers must be 1, got {self.workers}"),
            ("gpus", self.gpus != 1, f"gpus must be 1, got {self.gpus}"),
            ("elastic", self.elastic is not None, "it cannot be elastic"),
        ]
        for field, bad, why in wrong:
            if bad:
                raise _field_error(field, f"mig {self.mig} is one MIG instance: {why}")

    def _cpus_alone(self) -> None:
        """A job of CPUs alone (gpus 0) is placed by its CPUs: it must ask for some, and
        nothing that only GPUs have; refused by the field at fault."""
        if self.cpus is None:
            raise _field_error(
                "cpus", "a job without GPUs (gpus 0) must ask for CPUs (e.g. 2 or 500m)"
            )
        for name in ("elastic", "gpu_type", "gpu_memory"):
            if getattr(self, name) is not None:
                raise _field_error(name, "is for jobs with GPUs; this one asks for none (gpus 0)")


def _field_error(field: str, message: str) -> ValidationError:
    """A refusal of the whole submission that names `field` (a check across fields)."""
    error = PydanticCustomError("value_error", "Value error, {why}", {"why": message})
    return ValidationError.from_exception_data(
        "JobSubmit", [InitErrorDetails(type=error, loc=(field,), input="(not echoed)")]
    )


def _quantity(parse: Any, value: object, what: str) -> int:
    try:
        amount: int = parse(value, what)
    except QuantityError as err:
        raise ValueError(str(err)) from None
    if amount > 2**62:
        raise ValueError(f"{what} {value!r} is more than any machine has")
    return amount


# The least a worker may ask of CPUs: each job takes a process and its share of a core's
# time, so `1m` (sixty such jobs ran on two CPUs) claims a thousandth and gets far more.
MIN_CPUS_MILLI = 100


def _cpus(name: str, value: str | float) -> str:
    milli = _quantity(parse_cpus, value, name)
    if milli < MIN_CPUS_MILLI:
        raise ValueError(
            f"{name} {value!r} is less than the least a worker may ask, "
            f"{MIN_CPUS_MILLI}m (a tenth of a CPU); leave {name} out not to count CPUs"
        )
    # Stored as its shortest exact text: what `get` shows, and what the executor reads.
    return cpus_text(milli)


def _memory(name: str, value: str | int) -> str:
    return memory_text(_quantity(parse_memory, value, name))


def _value_type(field: JobField) -> Any:
    """What the API takes for a field of a plain type, checked (bounds apart)."""
    match field.type:
        case jobfields.TEXT | jobfields.KIND:
            return str
        case jobfields.INTEGER:
            return int
        case jobfields.NUMBER:
            return Seconds  # any finite number
        case jobfields.BOOLEAN | jobfields.TRUTH:
            return bool
        case jobfields.CHOICE:
            return Literal[field.choices]
        case jobfields.CPUS:
            cpus = functools.partial(_cpus, field.name)
            return Annotated[str | int | float, AfterValidator(cpus)]
        case jobfields.MEMORY:
            return Annotated[str | int, AfterValidator(functools.partial(_memory, field.name))]
        case jobfields.NAMES | jobfields.COMMAND:
            return list[str]
        case jobfields.LABELS:
            return dict[str, str]
        case jobfields.DURATION:
            return str | Annotated[float, Field(gt=0, allow_inf_nan=False)]
    raise ValueError(f"job field {field.name!r}: no API type for its type {field.type!r}")


# Fields whose value is a schema of its own.
OWN_TYPES: dict[str, Any] = {
    "elastic": ElasticIn,
    "checkpoint": CheckpointIn,
    "idle": IdleIn,
}


def _definition(field: JobField) -> tuple[Any, Any]:
    """A field's (annotation, FieldInfo), as create_model takes it."""
    bounds: dict[str, Any] = {
        key: value
        for key, value in (
            ("ge", field.ge),
            ("gt", field.gt),
            ("le", field.le),
            ("min_length", field.min_length),
            ("max_length", field.max_length),
        )
        if value is not None
    }
    kind = OWN_TYPES.get(field.name) or _value_type(field)
    if bounds:
        kind = Annotated[kind, Field(**bounds)]
    if field.default is None:
        kind = kind | None
    default: dict[str, Any] = {}
    if isinstance(field.default, dict | list):
        empty = field.default
        default["default_factory"] = lambda: type(empty)(empty)
    else:
        default["default"] = field.default
    return kind, Field(**default, description=field.help or None)


def job_submit_model(fields: tuple[JobField, ...]) -> type[JobChecks]:
    """The API's schema of a job of `fields` (JobSubmit: those of the table)."""
    made: type[JobChecks] = create_model(  # type: ignore[call-overload]
        "JobSubmit",
        __base__=JobChecks,
        __doc__="A job as a client submits it (the YAML job spec has the same fields).",
        **{field.name: _definition(field) for field in fields},
    )
    return made


if TYPE_CHECKING:
    JobSubmit = JobChecks
else:
    JobSubmit = job_submit_model(jobfields.FIELDS)
