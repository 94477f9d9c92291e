"""What every wire schema checks: names, sizes, paths, and the strict base of request bodies."""

from __future__ import annotations

import posixpath
import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from toposched.common.wiretext import faults

NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$")
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")
NAME_RULE = (
    "lower-case letters, digits, '.', '_' and '-', 1-64 long, starting and ending alphanumeric"
)


# Bounds on what a job stores, so that no answer grows without bound (a job's `get` carries
# all of it): Linux takes 2 MiB of arguments and environment, far more than a job needs here.
MAX_COMMAND_BYTES = 64 * 1024
MAX_ENV_BYTES = 64 * 1024
MAX_WORKDIR_BYTES = 4096
MAX_SELECTOR = 64
MAX_GPU_TYPES = 16
MAX_AFTER = 64  # jobs one job runs after
MAX_IDEMPOTENCY_KEY = 200  # characters of an Idempotency-Key header (at least 1)
# Signals a process cannot catch: a job cannot save its state on them.
UNCATCHABLE = ("SIGKILL", "SIGSTOP")


def check_name(value: str, what: str) -> str:
    # fullmatch: `$` would let a trailing newline through.
    if not NAME.fullmatch(value):
        raise ValueError(f"{what} {value!r}: use {NAME_RULE}")
    return value


def no_nul(value: str, what: str) -> str:
    """`value`, unless it holds a NUL: no C string (argv, environ, a path) can carry one."""
    if "\0" in value:
        raise ValueError(f"{what} {value[:60]!r} contains a NUL character")
    return value


def check_size(used: int, limit: int, what: str) -> None:
    if used > limit:
        raise ValueError(f"{what} is {used} bytes; at most {limit} bytes ({limit // 1024} KiB)")


def utf8_len(words: list[str]) -> int:
    return sum(len(word.encode("utf-8", "surrogatepass")) for word in words)


def check_workdir(value: str) -> str:
    """An absolute path with no `.` or `..` step (what it names is what the workers get)."""
    no_nul(value, "workdir")
    check_size(utf8_len([value]), MAX_WORKDIR_BYTES, "workdir")
    if not value.startswith("/"):
        raise ValueError(f"workdir {value!r} must be an absolute path")
    if any(part in (".", "..") for part in value.split("/")):
        plain = posixpath.normpath(value)
        raise ValueError(f"workdir {value!r} must not contain '.' or '..' steps (write {plain!r})")
    return value


class Strict(BaseModel):
    # Strict types: JSON `true` is no worker count, nor "5" a priority.
    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        """Refuse, by its path, any text the store could not read back and any nesting too
        deep to walk: before a field is read, so that every route applies the same rule."""
        found = list(faults(data))
        if found:
            raise ValidationError.from_exception_data(
                cls.__name__,
                [
                    InitErrorDetails(
                        type=PydanticCustomError("unstorable", "{why}", {"why": why}),
                        loc=path,
                        input="(not echoed)",
                    )
                    for path, why in found
                ],
            )
        return data


Seconds = Annotated[float, Field(allow_inf_nan=False)]
