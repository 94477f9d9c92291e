"""Shared CLI output: JSON on stdout, errors on stderr with the documented exit codes."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer
from rich.console import Console

EXIT_BAD_INPUT = 2
EXIT_NOT_ENOUGH_GPUS = 3

console = Console(highlight=False)


def emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value) + "\n")


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print `error: message` on stderr and exit with `code`."""
    sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(code)
