"""Entry point of the `toposched` command: wires the sub-commands together.

Each sub-command's module is imported only when that command runs (or its own help or
completions are asked for): `toposched list` loads the job commands and the HTTP client, not
the simulator, placement or the server's web stack. The root's help and its completion of
command names show each command's one-line help from COMMANDS below, without importing it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

import typer
import typer.main
from typer._click import Command as ClickCommand
from typer._click import Context as ClickContext
from typer._completion_classes import completion_init
from typer._completion_shared import get_completion_script
from typer.core import TyperCommand, TyperGroup

from toposched import __version__
from toposched.cli import quick
from toposched.cli.flags import DECIMAL, NUMBER
from toposched.cli.helpfmt import plain_metavars

PROG = "toposched"
# What the completion scripts set to ask the program for completions (click's convention).
COMPLETE_VAR = quick.COMPLETE_VAR


@dataclass(frozen=True)
class Lazy:
    """A sub-command of `toposched` and where it comes from: `module`'s `attr`, which is the
    command's function (`how` "command"), a Typer app added under `name` ("typer"), or a
    `register(app)` that adds it among others ("register"). `help` is the first paragraph of
    its help, as the root's help lists it (tests/unit/test_cli_lazy.py checks it is)."""

    name: str
    module: str
    attr: str
    how: Literal["command", "typer", "register"]
    help: str


CLI = "toposched.cli."
# Every sub-command, in the order the root's help lists them.
COMMANDS = (
    Lazy(
        "place",
        CLI + "place_cmd",
        "place",
        "command",
        "Choose GPUs for a job inside one node. Exit 3 if not enough are free, 2 on bad input.",
    ),
    Lazy(
        "demo",
        CLI + "demo_cmd",
        "demo",
        "command",
        "Compare policies on one node: where topology-aware placement picks better GPUs than\n"
        "index order (some GPUs busy already), then a k-GPU job after 1-GPU jobs.",
    ),
    Lazy(
        "perf",
        CLI + "perf_cmd",
        "perf",
        "command",
        "Estimate training throughput of a data-parallel job on a placement, or (`perf fit`) "
        "fit\nthe catalog to measured step times. Exit 2 on bad input.",
    ),
    Lazy(
        "sim",
        CLI + "sim_cmd",
        "sim",
        "command",
        "Replay a trace with each policy; print a side-by-side table and write files to --out.",
    ),
    Lazy(
        "serve",
        CLI + "serve_cmd",
        "serve_cmd",
        "command",
        "Run the scheduler server: jobs run as local processes on this machine's GPUs.",
    ),
    Lazy(
        "submit",
        CLI + "jobs_cmd",
        "register",
        "register",
        "Submit a job: a gang of WORKERS processes with GPUS GPUs each.",
    ),
    Lazy(
        "get",
        CLI + "jobs_cmd",
        "register",
        "register",
        "Show a job: state and why, placement (worker, node, GPUs), history.",
    ),
    Lazy(
        "list",
        CLI + "jobs_cmd",
        "register",
        "register",
        "List jobs in submission order, one page: the live ones (pending, running, stopping)\n"
        "unless --all or --state. --all shows ended jobs too, and every page.",
    ),
    Lazy(
        "logs",
        CLI + "jobs_cmd",
        "register",
        "register",
        "Print a worker's output (stdout and stderr) of the job's latest attempt.",
    ),
    Lazy(
        "delete",
        CLI + "jobs_cmd",
        "register",
        "register",
        "Delete jobs, as kubectl and Arena do: each is gone once it has stopped.",
    ),
    Lazy(
        "explain",
        CLI + "jobs_cmd",
        "register",
        "register",
        "Why a job waits, or why it runs where it runs.",
    ),
    Lazy(
        "whoami",
        CLI + "admin_cmd",
        "register",
        "register",
        "Who the server takes you for (from TOPOSCHED_TOKEN or the local admin token).",
    ),
    Lazy(
        "completion",
        __name__,
        "completion",
        "command",
        "Print the shell completion script for SHELL.",
    ),
    Lazy(
        "topology",
        CLI + "topology_cmd",
        "app",
        "typer",
        "Inspect GPU topologies: presets, files, this machine.",
    ),
    Lazy("kube", CLI + "kube_cmd", "app", "typer", "toposched on Kubernetes."),
    Lazy(
        "admin",
        CLI + "fsck_cmd",
        "admin_app",
        "typer",
        "Work on the server's database directly.",
    ),
    Lazy(
        "top",
        CLI + "admin_cmd",
        "register",
        "register",
        "What runs where: GPUs of each node, jobs.",
    ),
    Lazy("node", CLI + "admin_cmd", "register", "register", "Nodes: their GPUs and labels."),
    Lazy(
        "queue",
        CLI + "admin_cmd",
        "register",
        "register",
        "Queues (one per team) and their shares.",
    ),
    Lazy("token", CLI + "admin_cmd", "register", "register", "API tokens (admin)."),
)


def load(lazy: Lazy) -> ClickCommand:
    """The click command of `lazy`, its module imported now; built by typer as the whole
    tree's would be, alone."""
    module = importlib.import_module(lazy.module)
    found = getattr(module, lazy.attr)
    one = typer.Typer()
    if lazy.how == "command":
        one.command(lazy.name)(found)
    elif lazy.how == "typer":
        one.add_typer(found, name=lazy.name)
    else:
        found(one)
        one.registered_commands = [c for c in one.registered_commands if c.name == lazy.name]
        one.registered_groups = [g for g in one.registered_groups if g.name == lazy.name]
    built: ClickCommand = typer.main.get_group(one).commands[lazy.name]
    for command in _walk(built):
        quicken_command(command)
    return built


def _walk(command: ClickCommand) -> Iterator[ClickCommand]:
    yield command
    for sub in getattr(command, "commands", {}).values():
        yield from _walk(sub)


# Typer (0.2x) converts each parameter's value with a pydantic TypeAdapter built when the
# command runs, for every parameter but a flag: importing pydantic and building them is some
# 0.1 s of a command that talks to a server. QuickValue answers as that adapter does without
# building it where the answer is plain; anything else goes to typer's own, built then.
NOT_PLAIN = object()


class QuickValue:
    """A parameter's runtime conversion, as typer's RuntimeParam: `coerce` gives what typer's
    would for a missing value (None, or () for a repeatable one), text for a text parameter
    (`str`, `list[str]`), a plain decimal for an `int` or `float` one within its bounds, and
    hands anything else to typer's RuntimeParam, built on first need and then kept."""

    def coerce(self, value: Any, param: Any, ctx: ClickContext) -> Any:
        quick = plain_value(value, param)
        if quick is not NOT_PLAIN:
            return quick
        from typer._coercion import build_runtime_param

        param._runtime_param = build_runtime_param(param.type_descriptor)
        return param._runtime_param.coerce(value, param=param, ctx=ctx)


def plain_value(value: Any, param: Any) -> Any:
    """What typer makes of `value` for `param` where that is plain (see QuickValue), else
    NOT_PLAIN."""
    many = param.multiple or param.nargs == -1
    if value is None:
        return () if many else None
    desc = param.type_descriptor
    info = desc.parameter_info
    if desc.file_annotation is not None or info.parser is not None:
        return NOT_PLAIN
    annotation = desc.annotation
    if many:
        if isinstance(value, str) or not isinstance(value, list | tuple):
            return NOT_PLAIN
        if annotation == list[str] and all(isinstance(item, str) for item in value):
            return list(value)
        return NOT_PLAIN
    if annotation is str and isinstance(value, str):
        return value
    if info.clamp:
        return NOT_PLAIN
    number: int | float | None = None
    if annotation is int:
        if isinstance(value, str) and DECIMAL.fullmatch(value):
            number = int(value)
        elif type(value) is int:
            number = value
    elif annotation is float:
        if isinstance(value, str) and NUMBER.fullmatch(value):
            number = float(value)
        elif type(value) is float:
            number = value
    if number is None:
        return NOT_PLAIN
    if (info.min is not None and number < info.min) or (info.max is not None and number > info.max):
        return NOT_PLAIN  # typer's adapter says how it is out of bounds
    return number


def quicken_command(command: Any) -> None:
    """QuickValue for each parameter of `command`, its --help too (made per context)."""
    for param in command.params:
        quicken(param)
    made = command.get_help_option

    def help_option(ctx: ClickContext) -> Any:
        option = made(ctx)
        if option is not None:
            quicken(option)
        return option

    command.get_help_option = help_option


def quicken(param: Any) -> None:
    """Give `param` a QuickValue, where it is typer's parameter that converts its value at
    run time and has not yet built its converter (any other typer: left as it is)."""
    if getattr(param, "_runtime_param", False) is None and hasattr(param, "type_descriptor"):
        param._runtime_param = QuickValue()


class LazyCommands(MutableMapping[str, ClickCommand]):
    """A group's sub-commands by name, each loaded on first use (`commands[name]`): the names,
    their order and `in` cost no import. `prepare` is applied to each command as it loads."""

    def __init__(self, eager: dict[str, ClickCommand], lazy: tuple[Lazy, ...]) -> None:
        self.loaded = dict(eager)
        self.lazy = {entry.name: entry for entry in lazy if entry.name not in eager}
        self.order = [*self.lazy, *eager]
        self.prepare: Callable[[ClickCommand], Any] = lambda command: command

    def __getitem__(self, name: str) -> ClickCommand:
        if name not in self.loaded:
            if name not in self.lazy:
                raise KeyError(name)
            command = load(self.lazy[name])
            self.prepare(command)
            self.loaded[name] = command
        return self.loaded[name]

    def __setitem__(self, name: str, command: ClickCommand) -> None:
        self.loaded[name] = command
        if name not in self.order:
            self.order.append(name)

    def __delitem__(self, name: str) -> None:
        self.order.remove(name)
        self.loaded.pop(name, None)
        self.lazy.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self.order

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.order))

    def __len__(self) -> int:
        return len(self.order)

    def summary(self, name: str) -> ClickCommand | None:
        """`name` as the root's help and completion list it: the command itself once loaded,
        else a stand-in that carries only its name and one-line help."""
        if name in self.loaded or name not in self.lazy:
            return self.loaded.get(name)
        return TyperCommand(name, help=self.lazy[name].help)


class LazyGroup(TyperGroup):
    """The `toposched` group: sub-commands from COMMANDS, loaded as they are used. Listing them
    (the root's help, completing a command name) imports none."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for command in [self, *self.commands.values()]:
            quicken_command(command)
        # Commands added to `app` itself (none) come after COMMANDS.
        self.commands = LazyCommands(dict(self.commands), COMMANDS)
        self._listing = False

    @contextmanager
    def listing(self) -> Iterator[None]:
        """While listing, get_command answers with summaries (LazyCommands.summary)."""
        self._listing = True
        try:
            yield
        finally:
            self._listing = False

    def get_command(self, ctx: ClickContext, cmd_name: str) -> ClickCommand | None:
        if self._listing and isinstance(self.commands, LazyCommands):
            return self.commands.summary(cmd_name)
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: ClickContext) -> list[str]:
        return list(self.commands)

    def format_help(self, ctx: ClickContext, formatter: Any) -> None:
        with self.listing():
            super().format_help(ctx, formatter)

    def shell_complete(self, ctx: ClickContext, incomplete: str) -> list[Any]:
        with self.listing():
            return super().shell_complete(ctx, incomplete)


app = typer.Typer(
    cls=LazyGroup,
    no_args_is_help=True,
    add_completion=False,
    help="toposched: a topology-aware gang scheduler for deep-learning jobs on GPU servers.",
)


class Shell(StrEnum):
    BASH = "bash"
    ZSH = "zsh"
    FISH = "fish"


def completion(shell: Shell = typer.Argument(..., help="bash, zsh or fish.")) -> None:
    """Print the shell completion script for SHELL.

    bash: `source <(toposched completion bash)` in ~/.bashrc.

    zsh: `toposched completion zsh > "${fpath[1]}/_toposched"`.

    fish: `toposched completion fish > ~/.config/fish/completions/toposched.fish`.
    """
    typer.echo(get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell.value))


def _version(value: bool) -> None:
    if value:
        typer.echo(f"toposched {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """toposched: a topology-aware gang scheduler for deep-learning jobs on GPU servers."""


def command() -> Any:
    """The `toposched` command as click runs it, its help free of Python type names (each
    sub-command's made so as it loads)."""
    group = typer.main.get_command(app)
    if isinstance(group.commands, LazyCommands):  # type: ignore[attr-defined]
        group.commands.prepare = plain_metavars  # type: ignore[attr-defined]
    return plain_metavars(group)


def main() -> None:
    # Typer's completion classes answer the scripts that `completion` prints.
    completion_init()
    command()(prog_name=PROG, complete_var=COMPLETE_VAR)
