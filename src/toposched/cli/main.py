"""Entry point of the `toposched` command: wires the sub-commands together."""

from __future__ import annotations

import typer

from toposched import __version__
from toposched.cli import (
    admin_cmd,
    demo_cmd,
    jobs_cmd,
    kube_cmd,
    perf_cmd,
    place_cmd,
    serve_cmd,
    sim_cmd,
    topology_cmd,
)

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="toposched: a topology-aware gang scheduler for deep-learning jobs on GPU servers.",
)
app.add_typer(topology_cmd.app, name="topology")
app.add_typer(kube_cmd.app, name="kube")
app.command("place")(place_cmd.place)
app.command("demo")(demo_cmd.demo)
app.command("perf")(perf_cmd.perf)
app.command("sim")(sim_cmd.sim)
app.command("serve")(serve_cmd.serve_cmd)
jobs_cmd.register(app)
admin_cmd.register(app)


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


def main() -> None:
    app()
