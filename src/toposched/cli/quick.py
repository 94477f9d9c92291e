"""The server commands' plain uses, parsed and run without typer and click (issue 32: a CLI
that answers at once).

`toposched list --all`, `get NAME`, `submit --gpus 2 -- CMD`, ... are parsed here from the
command function's own declaration (toposched.cli.flags: the one typer reads too) and the
function called as typer would call it. Anything this parser does not take plainly, it leaves
to typer, which then parses the same words with its own rules and messages: help, a flag it
does not know, a value that is not plainly a number in bounds, `-abc`, `-n5`, a value that
starts with `-`, a missing argument, shell completion. So a use runs here only where typer
would run it the same way (tests/unit/test_cli_quick.py compares the two on many uses).
"""

from __future__ import annotations

import enum
import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from toposched.cli.flags import (
    AFTER_DASHES,
    DECIMAL,
    NUMBER,
    ArgSpec,
    CommandContext,
    OptSpec,
    made_options,
)

# What the completion scripts set to ask for completions: typer's to answer.
COMPLETE_VAR = "_TOPOSCHED_COMPLETE"


@dataclass(frozen=True)
class Quick:
    """A command run here: `module`'s function `attr`; `dashes`: the words after the first
    `--` are set aside for it (in its context's meta), as SubmitCommand does."""

    module: str
    attr: str
    dashes: bool = False


JOBS = "toposched.cli.jobs_cmd"
ADMIN = "toposched.cli.admin_cmd"
QUICK = {
    ("list",): Quick(JOBS, "list_jobs"),
    ("get",): Quick(JOBS, "get"),
    ("submit",): Quick(JOBS, "submit", dashes=True),
    ("logs",): Quick(JOBS, "logs"),
    ("delete",): Quick(JOBS, "delete"),
    ("explain",): Quick(JOBS, "explain"),
    ("top", "node"): Quick(ADMIN, "top_node"),
    ("top", "job"): Quick(ADMIN, "top_job"),
    ("whoami",): Quick(ADMIN, "whoami"),
}


class NotPlain(Exception):
    """Typer's to parse: this parser does not take the words plainly."""


@dataclass
class Context:
    """The stand-in for click's Context that a command's CommandContext parameter gets."""

    meta: dict[str, Any] = field(default_factory=dict)


def find(argv: list[str]) -> tuple[Quick, list[str]] | None:
    """The quick command that `argv` names, and the words after its name; None if none."""
    for words, quick in QUICK.items():
        if tuple(argv[: len(words)]) == words:
            return quick, argv[len(words) :]
    return None


def run(argv: list[str]) -> bool:
    """Run `argv` (the words after `toposched`) if it is a plain use of a quick command;
    False, having done nothing, if it is typer's."""
    if COMPLETE_VAR in os.environ:
        return False
    found = find(argv)
    if found is None:
        return False
    quick, words = found
    function = getattr(importlib.import_module(quick.module), quick.attr)
    try:
        kwargs = parse(function, words, quick.dashes)
    except NotPlain:
        return False
    call(function, kwargs)
    return True


def call(function: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    """Run the command as click's standalone mode would: a closed pipe or ^C ends it quietly
    with status 1 (Abort's message)."""
    try:
        function(**kwargs)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (| head): nothing more to say, and nowhere to say it.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        sys.stderr.write("\nAborted.\n")
        raise SystemExit(1) from None


@dataclass
class Declared:
    """A parameter of a command: its name, type and declaration."""

    name: str
    kind: Any
    declared: OptSpec | ArgSpec | None


def declared(function: Callable[..., Any]) -> list[Declared]:
    """The parameters of `function`, read from its code (no `inspect`: it is not loaded yet)."""
    code = function.__code__
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    positional = function.__defaults__ or ()
    defaults = dict(zip(names[code.co_argcount - len(positional) :], positional, strict=True))
    defaults.update(function.__kwdefaults__ or {})
    hints = get_type_hints(function)
    own = [Declared(name, hints.get(name), defaults.get(name)) for name in names]
    return own + [Declared(name, kind, spec) for name, kind, spec in made_options(function)]


def parse(function: Callable[..., Any], words: list[str], dashes: bool = False) -> dict[str, Any]:
    """The keyword arguments typer would call `function` with for `words`; NotPlain where
    the words are typer's to read."""
    kwargs: dict[str, Any] = {}
    context = Context()
    if dashes:
        at = words.index("--") if "--" in words else None
        if at is not None:
            words, context.meta[AFTER_DASHES] = words[:at], words[at + 1 :]
        else:
            context.meta[AFTER_DASHES] = None
    params = declared(function)
    flags, arguments = parameters(params)
    for param in params:
        if param.kind is CommandContext:
            kwargs[param.name] = context
        elif isinstance(param.declared, OptSpec):
            kwargs[param.name] = missing(param)
    given: list[str] = []
    rest = iter(words)
    for word in rest:
        if word == "--" or (word.startswith("-") and word != "-"):
            flag, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
            if flag not in flags:
                raise NotPlain(flag)  # --help, an unknown flag, -abc, -n5, --
            param, flag_value = flags[flag]
            if flag_value is not None:
                if eq:
                    raise NotPlain(word)
                kwargs[param.name] = flag_value
                continue
            if not eq:
                following = next(rest, None)
                if following is None or (following.startswith("-") and following != "-"):
                    raise NotPlain(flag)  # no value, or one typer may read otherwise
                value = following
            converted = convert(param, value)
            if is_list(param.kind):
                kwargs[param.name] = [*(kwargs[param.name] or ()), converted]
            else:
                kwargs[param.name] = converted
        else:
            given.append(word)
    kwargs.update(place(arguments, given))
    return kwargs


Flags = dict[str, tuple[Declared, bool | None]]


def parameters(params: list[Declared]) -> tuple[Flags, list[Declared]]:
    """The flags of a command's options, each with its option and, for a flag that takes no
    value, the value it sets; and its arguments in order."""
    flags: Flags = {}
    arguments: list[Declared] = []
    for param in params:
        if param.kind is CommandContext:
            continue
        if isinstance(param.declared, OptSpec):
            on, off = param.declared.names()
            flag_value = True if param.kind is bool else None
            flags.update({flag: (param, flag_value) for flag in on})
            flags.update({flag: (param, False) for flag in off})
        elif isinstance(param.declared, ArgSpec):
            arguments.append(param)
        else:
            raise NotPlain(f"{param.name}: neither an option nor an argument")
    return flags, arguments


def missing(param: Declared) -> Any:
    """What typer gives a parameter not given: its default (None for a repeatable one)."""
    assert param.declared is not None
    default = param.declared.default
    if default is ...:
        raise NotPlain(f"{param.name} is required")
    if is_list(param.kind) and default is not None:
        raise NotPlain(f"{param.name}: a repeatable default")
    return default


def place(arguments: list[Declared], given: list[str]) -> dict[str, Any]:
    """The arguments' values from the words that are no option, in order: one each, and the
    rest to a repeatable last one (any other layout: typer's)."""
    out: dict[str, Any] = {}
    words = list(given)
    for index, param in enumerate(arguments):
        if is_list(param.kind):
            if index != len(arguments) - 1:
                raise NotPlain("a repeatable argument before another")
            out[param.name] = [convert(param, word) for word in words] if words else missing(param)
            words = []
        elif words:
            out[param.name] = convert(param, words.pop(0))
        else:
            out[param.name] = missing(param)
    if words:
        raise NotPlain("more arguments than the command takes")
    return out


def is_list(kind: Any) -> bool:
    return get_origin(kind) is list


def convert(param: Declared, value: str) -> Any:
    """`value` as typer converts it for `param`, where that is plain; else NotPlain."""
    kind = param.kind
    if is_list(kind):
        [kind] = get_args(kind) or [str]
    settings = param.declared.settings if param.declared is not None else {}
    if set(settings) - {"help", "metavar", "min", "max", "show_default"}:
        raise NotPlain(f"{param.name}: settings beyond the plain ones")
    if kind is str:
        return value
    if kind is Path:
        if not value:
            raise NotPlain(f"{param.name}: an empty path")
        return Path(value)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        for member in kind:
            if member.value == value:
                return member
        raise NotPlain(f"{param.name}: not one of the choices")
    number: int | float
    if kind is int and DECIMAL.fullmatch(value):
        number = int(value)
    elif kind is float and NUMBER.fullmatch(value):
        number = float(value)
    else:
        raise NotPlain(f"{param.name}: not plainly a {kind}")
    low, high = settings.get("min"), settings.get("max")
    if (low is not None and number < low) or (high is not None and number > high):
        raise NotPlain(f"{param.name}: out of bounds")  # typer says how
    return number
