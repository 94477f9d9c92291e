"""A command's options and arguments, declared once without importing typer.

The server commands (`list`, `get`, `submit`, ...) declare each parameter as a default of
their function, `Opt(default, *flags, **settings)` or `Arg(default, **settings)`, with the
arguments typer.Option and typer.Argument take. Two readers share that one declaration:
`typer_function` gives typer the function with typer's own parameters (help, completion, every
error message); toposched.cli.quick parses the plain cases itself, so that such a command
starts without typer and click (issue 32).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, get_type_hints

if TYPE_CHECKING:
    import inspect

# Where a command class leaves the words after the first `--` (SubmitCommand, and
# toposched.cli.quick alike), for the command to read from its context's meta.
AFTER_DASHES = "toposched.command"
# Numbers as typer reads them, plainly: the parsers that answer for typer (the app's
# QuickValue, toposched.cli.quick) take these and leave anything else to it.
DECIMAL = re.compile(r"-?(0|[1-9][0-9]{0,17})")
NUMBER = re.compile(r"-?(0|[1-9][0-9]{0,14})(\.[0-9]{1,15})?")


class OptSpec:
    """An option, as `typer.Option(default, *flags, **settings)` would declare it."""

    def __init__(self, default: Any, *flags: str, **settings: Any) -> None:
        self.default = default
        self.flags = flags
        self.settings = settings

    def names(self) -> tuple[list[str], list[str]]:
        """The flags that set it, and those of a boolean's off side (`--a/--b`: [--a], [--b])."""
        on: list[str] = []
        off: list[str] = []
        for flag in self.flags:
            first, slash, second = flag.partition("/")
            on.append(first.strip())
            if slash:
                off.append(second.strip())
        return on, off


class ArgSpec:
    """An argument, as `typer.Argument(default, **settings)` would declare it (`...`:
    required)."""

    def __init__(self, default: Any, **settings: Any) -> None:
        self.default = default
        self.settings = settings


# Typed Any, as typer's own: the declaration stands as the parameter's default, of any type.
def Opt(default: Any, *flags: str, **settings: Any) -> Any:
    """An option of a command (typer.Option's arguments)."""
    return OptSpec(default, *flags, **settings)


def Arg(default: Any, **settings: Any) -> Any:
    """An argument of a command (typer.Argument's arguments)."""
    return ArgSpec(default, **settings)


class CommandContext(Protocol):
    """What a command reads of its context: `meta`, where a command class leaves what it set
    aside while parsing (typer passes click's Context; toposched.cli.quick a stand-in)."""

    meta: dict[str, Any]


# Where a command made partly from a table keeps the options it takes as `**kwargs`.
MADE_OPTIONS = "toposched_options"
Made = list[tuple[str, Any, OptSpec]]


def with_options(made: Made) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command whose function ends in `**kwargs` the options `made` (name, type,
    declaration), as if each were a parameter of its own (`submit`'s job fields)."""

    def mark(func: Callable[..., Any]) -> Callable[..., Any]:
        vars(func)[MADE_OPTIONS] = made
        return func

    return mark


def made_options(func: Callable[..., Any]) -> Made:
    made: Made = vars(func).get(MADE_OPTIONS, [])
    return made


def declared(func: Callable[..., Any]) -> list[tuple[inspect.Parameter, Any]]:
    """Each parameter of `func` with its type (annotations evaluated), the options it was
    given by `with_options` in place of its `**kwargs`."""
    import inspect

    hints = get_type_hints(func)
    own = [
        (param, hints.get(param.name, param.annotation))
        for param in inspect.signature(func).parameters.values()
        if param.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    keyword = inspect.Parameter.KEYWORD_ONLY
    made = [
        (inspect.Parameter(name, keyword, default=spec), kind)
        for name, kind, spec in made_options(func)
    ]
    return own + made


def typer_function(func: Callable[..., Any]) -> Callable[..., Any]:
    """`func` as typer reads a command: each Opt and Arg made typer's Option and Argument, a
    CommandContext parameter typer's Context."""
    import functools
    import inspect

    import typer

    params = []
    for param, kind in declared(func):
        default = param.default
        if isinstance(default, OptSpec):
            default = typer.Option(default.default, *default.flags, **default.settings)
        elif isinstance(default, ArgSpec):
            default = typer.Argument(default.default, **default.settings)
        if kind is CommandContext:
            kind = typer.Context
        params.append(param.replace(annotation=kind, default=default))

    @functools.wraps(func)
    def command(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {param.name: param.annotation for param in params}
    return command
