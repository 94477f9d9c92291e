"""Entry point of the `toposched` command: wires the sub-commands together."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import typer
from typer._completion_classes import completion_init
from typer._completion_shared import get_completion_script

from toposched import __version__
from toposched.cli import (
    admin_cmd,
    demo_cmd,
    fsck_cmd,
    jobs_cmd,
    kube_cmd,
    perf_cmd,
    place_cmd,
    serve_cmd,
    sim_cmd,
    topology_cmd,
)
from toposched.cli.helpfmt import plain_metavars

PROG = "toposched"
# What the completion scripts set to ask the program for completions (click's convention).
COMPLETE_VAR = "_TOPOSCHED_COMPLETE"

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="toposched: a topology-aware gang scheduler for deep-learning jobs on GPU servers.",
)
app.add_typer(topology_cmd.app, name="topology")
app.add_typer(kube_cmd.app, name="kube")
app.add_typer(fsck_cmd.admin_app, name="admin")
app.command("place")(place_cmd.place)
app.command("demo")(demo_cmd.demo)
app.command("perf")(perf_cmd.perf)
app.command("sim")(sim_cmd.sim)
app.command("serve")(serve_cmd.serve_cmd)
jobs_cmd.register(app)
admin_cmd.register(app)


class Shell(StrEnum):
    BASH = "bash"
    ZSH = "zsh"
    FISH = "fish"


@app.command("completion")
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
    """The `toposched` command as click runs it, its help free of Python type names."""
    return plain_metavars(typer.main.get_command(app))


def main() -> None:
    # Typer's completion classes answer the scripts that `completion` prints.
    completion_init()
    command()(prog_name=PROG, complete_var=COMPLETE_VAR)
