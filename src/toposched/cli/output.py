"""Shared CLI output: JSON on stdout, errors on stderr with the documented exit codes."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, NoReturn

import typer
from rich.console import Console

EXIT_BAD_INPUT = 2
EXIT_NOT_ENOUGH_GPUS = 3

# Piped into a file or another program, Rich would squeeze tables into 80 columns and cut
# cells; there is no screen to fit, so give tables the room a 16-GPU matrix needs.
PIPED_WIDTH = 240

console = Console(
    highlight=False,
    width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else PIPED_WIDTH,
)


def emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value) + "\n")


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print `error: message` on stderr and exit with `code`."""
    sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(code)
