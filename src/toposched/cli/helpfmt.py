"""Plain help text: the words a user types in place of `<int>`, `<list[str]>` or `{name}`."""

from __future__ import annotations

from typing import Any, get_args

# Typer (0.2x) shows an option without a metavar by its Python type (`<int>`, `<list[str]>`,
# and `<bool>` even for a flag, which takes no value), an argument's type beside its name and
# a required argument as `{name}` in the usage line; these are the words click itself uses.
TYPE_WORDS = {int: "INTEGER", float: "NUMBER", str: "TEXT", bool: "BOOLEAN"}


def _walk(command: Any) -> list[Any]:
    """`command` and its sub-commands; of a lazy group's (toposched.cli.main.LazyCommands),
    only those loaded: the others are made plain as they load, not imported here."""
    found = [command]
    subs = getattr(command, "commands", {})
    for sub in getattr(subs, "loaded", subs).values():
        found.extend(_walk(sub))
    return found


def _word(param: Any) -> str:
    desc = getattr(param, "type_descriptor", None)
    if desc is None:
        return "TEXT"
    if desc.is_choice and desc.choices:
        return "[" + "|".join(str(getattr(c, "value", c)) for c in desc.choices) + "]"
    if desc.is_path or desc.is_file:
        return "PATH"
    annotation = desc.annotation
    if desc.is_list:
        annotation = (get_args(annotation) or (str,))[0]
    return TYPE_WORDS.get(annotation, "TEXT")


def _plain_option(param: Any) -> Any:
    if param is not None and param.metavar is None:
        flag = getattr(param, "is_flag", False) or getattr(param, "count", False)
        param.metavar = "" if flag else _word(param)
    return param


def _plain_argument(param: Any) -> None:
    if param.metavar is None:
        word = (param.name or "arg").upper()
        param.metavar = word if param.nargs == 1 else f"{word}..."
    shown = param.metavar if param.required else f"[{param.metavar}]"
    # The name says what to type; no `<str>` beside it, no braces around it.
    param._usage_display_name = lambda: shown
    param.display_type_rich = lambda ctx: None


def plain_metavars(command: Any) -> Any:
    """Make the help of `command` and its sub-commands show no Python types: nothing for a
    flag, NAME for an argument `name`, TEXT/INTEGER/NUMBER/PATH or the choices for an
    option's value, unless the parameter names its own metavar. Returns `command`."""
    for cmd in _walk(command):
        for param in cmd.params:
            if getattr(param, "param_type_name", "") == "argument":
                _plain_argument(param)
            else:
                _plain_option(param)
        help_option = cmd.get_help_option
        cmd.get_help_option = lambda ctx, made=help_option: _plain_option(made(ctx))
    return command
