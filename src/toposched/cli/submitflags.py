"""`submit`'s flags, made from the job's fields (common/jobfields.py), and the fields they give."""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from toposched.cli.flags import OptSpec
from toposched.cli.output import EXIT_BAD_INPUT, fail
from toposched.common import jobfields
from toposched.common.jobfields import JobField

# What each type of field's flag takes, as typer reads it (CHOICE: an enum of its choices).
FLAG_TYPES: dict[str, Any] = {
    jobfields.TEXT: str,
    jobfields.INTEGER: int,
    jobfields.NUMBER: float,
    jobfields.BOOLEAN: bool,
    jobfields.TRUTH: str,
    jobfields.CPUS: str,
    jobfields.MEMORY: str,
    jobfields.NAMES: list[str],
    jobfields.LABELS: list[str],
    jobfields.ELASTIC: str,
    jobfields.DURATION: str,
}


@functools.cache
def choices(field: JobField) -> type[enum.StrEnum]:
    """The enum a CHOICE field's flag takes (one per field, so that typer lists them)."""
    members = {choice.upper().replace("-", "_"): choice for choice in field.choices}
    made: type[enum.StrEnum] = enum.StrEnum(  # type: ignore[misc]
        field.name.title().replace("_", ""), members
    )
    return made


@dataclass(frozen=True)
class FieldFlag:
    """A flag of `submit` that gives a field (`path`: the field, and its part of a record)."""

    field: JobField
    path: tuple[str, ...]

    @property
    def flag(self) -> str:
        return self.field.flags[0].partition("/")[0]

    @property
    def param(self) -> str:
        """The submit function's parameter: the flag's words (`--limit`: limit)."""
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def kind(self) -> Any:
        if self.field.type == jobfields.CHOICE:
            return choices(self.field)
        return OWN_TYPES.get(self.field.name) or FLAG_TYPES[self.field.type]

    def option(self) -> OptSpec:
        settings: dict[str, Any] = {"help": self.field.help, "show_default": False}
        if self.field.metavar is not None:
            settings["metavar"] = self.field.metavar
        return OptSpec(None, *self.field.flags, **settings)


def field_flags(fields: tuple[JobField, ...] = jobfields.FIELDS) -> list[FieldFlag]:
    """The flags of `fields` and of their records' parts, in the table's order."""
    out: list[FieldFlag] = []
    for field in fields:
        if field.flags:
            out.append(FieldFlag(field, (field.name,)))
        out += [FieldFlag(part, (field.name, part.name)) for part in field.parts if part.flags]
    return out


def options(flags: list[FieldFlag]) -> list[tuple[str, Any, OptSpec]]:
    """Each flag as a parameter of a command: (name, type, declaration)."""
    return [(flag.param, flag.kind, flag.option()) for flag in flags]


def given(flags: list[FieldFlag], values: dict[str, Any]) -> dict[str, Any]:
    """The fields the flags given in `values` (by parameter) set, as the API takes them; a
    value that cannot be one ends the command (exit 2) naming its flag."""
    out: dict[str, Any] = {}
    for flag in flags:
        value = values.get(flag.param)
        if value is None or value == []:
            continue
        wire = (OWN.get(flag.field.name) or WIRE[flag.field.type])(flag, value)
        if len(flag.path) == 1:
            out[flag.path[0]] = wire
        else:
            out.setdefault(flag.path[0], {})[flag.path[1]] = wire
    return out


def said_as(flags: list[FieldFlag]) -> dict[str, str]:
    """Each field (dotted for a record's part) -> the flag that gives it."""
    return {".".join(flag.path): flag.flag for flag in flags}


def _plain(flag: FieldFlag, value: Any) -> Any:
    return value


def _finite(flag: FieldFlag, value: float) -> float:
    """Exit 2 on inf or nan: no number, and not even JSON."""
    if not math.isfinite(value):
        unit = f" of {flag.field.metavar.lower()}" if flag.field.metavar else ""
        fail(f"{flag.flag}: expected a finite number{unit}, got {value}", EXIT_BAD_INPUT)
    return value


TRUTHS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _truth(flag: FieldFlag, value: str) -> bool:
    """`true` or `false` (yes/no, 1/0), as Arena's `--gputopology=true` gives it."""
    truth = TRUTHS.get(value.strip().lower())
    if truth is None:
        fail(f"{flag.flag} must be true or false, got {value!r}", EXIT_BAD_INPUT)
    return bool(truth)


def _choice(flag: FieldFlag, value: enum.StrEnum) -> str:
    return value.value


def _quantity(parse: Callable[[object, str], int]) -> Callable[[FieldFlag, str], str]:
    def checked(flag: FieldFlag, value: str) -> str:
        """A quantity as given, once it reads (exit 2 saying what is accepted otherwise)."""
        from toposched.topology.resources import QuantityError

        try:
            parse(value, flag.flag)
        except QuantityError as err:
            fail(str(err), EXIT_BAD_INPUT)
        return value

    return checked


def _cpus(flag: FieldFlag, value: str) -> str:
    from toposched.topology.resources import parse_cpus

    return _quantity(parse_cpus)(flag, value)


def _memory(flag: FieldFlag, value: str) -> str:
    from toposched.topology.resources import parse_memory

    return _quantity(parse_memory)(flag, value)


def _labels(flag: FieldFlag, value: list[str]) -> dict[str, str]:
    from toposched.client.jobfile import parse_env_pairs

    try:
        return parse_env_pairs(value)
    except ValueError as err:
        fail(f"{flag.flag}: {err}", EXIT_BAD_INPUT)


def _elastic(flag: FieldFlag, value: str) -> dict[str, int]:
    from toposched.client.jobfile import parse_elastic

    try:
        return parse_elastic(value)
    except ValueError as err:
        fail(f"{flag.flag}: {err}", EXIT_BAD_INPUT)


def _time_limit(flag: FieldFlag, value: str) -> float:
    """Slurm's `--time`: a plain number is minutes; sent as the field's seconds."""
    from toposched.common.durations import DurationError, parse_time_limit

    try:
        return parse_time_limit(value, "/".join(flag.field.flags[:2]))
    except DurationError as err:
        fail(str(err), EXIT_BAD_INPUT)


def _gpu_types(flag: FieldFlag, value: list[str]) -> list[str]:
    """Repeatable or comma-separated: `--gpu-type V100,A100`."""
    names = [name.strip() for item in value for name in item.split(",")]
    if not all(names):
        fail(f"{flag.flag}: an empty GPU type (e.g. {flag.flag} V100,A100)", EXIT_BAD_INPUT)
    return names


Wire = Callable[[FieldFlag, Any], Any]
# What a flag's value gives its field, by the field's type.
WIRE: dict[str, Wire] = {
    jobfields.TEXT: _plain,
    jobfields.INTEGER: _plain,
    jobfields.NUMBER: _finite,
    jobfields.BOOLEAN: _plain,
    jobfields.TRUTH: _truth,
    jobfields.CHOICE: _choice,
    jobfields.CPUS: _cpus,
    jobfields.MEMORY: _memory,
    jobfields.NAMES: _plain,
    jobfields.LABELS: _labels,
    jobfields.ELASTIC: _elastic,
    jobfields.DURATION: _plain,
}
# Fields whose flag reads its value its own way.
OWN: dict[str, Wire] = {"gpu_type": _gpu_types, "limit_s": _time_limit}
# Fields whose flag takes text that its own reader turns into the field's type.
OWN_TYPES: dict[str, Any] = {"limit_s": str}
