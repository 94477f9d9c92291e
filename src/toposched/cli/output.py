"""Shared CLI output: JSON on stdout, errors on stderr with the documented exit codes."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

if TYPE_CHECKING:
    from rich.console import Console

EXIT_BAD_INPUT = 2
EXIT_NOT_ENOUGH_GPUS = 3

# Piped into a file or another program, Rich would squeeze tables into 80 columns and cut
# cells; there is no screen to fit, so give tables the room a 16-GPU matrix needs.
PIPED_WIDTH = 240


_made: list[Console] = []


def rich_console() -> Console:
    """The one rich Console of the CLI, made (and rich imported, some 35 ms) on first need."""
    if not _made:
        from rich.console import Console

        _made.append(
            Console(
                highlight=False,
                width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else PIPED_WIDTH,
            )
        )
    return _made[0]


class _ConsoleOnFirstUse:
    """Stands for rich_console() until used: `logs` and the `--json` of every server command
    print without rich. Give rich itself (Progress, Live) rich_console(), not this."""

    def __getattr__(self, name: str) -> Any:
        return getattr(rich_console(), name)


console = cast("Console", _ConsoleOnFirstUse())


def escape(text: str) -> str:
    """`text` with rich's markup escaped (rich.markup.escape, imported on first use)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value) + "\n")


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print `error: message` on stderr and exit with `code` (SystemExit, not typer's Exit:
    the server commands run without typer too; click lets it end the program alike)."""
    sys.stderr.write(f"error: {message}\n")
    raise SystemExit(code)


def request_lines(path: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of a JSONL request file, `-` for stdin.

    A file that cannot be opened or is not UTF-8 text is an error: exit 2.
    """
    try:
        if path == "-":
            yield from enumerate(sys.stdin, start=1)
            return
        with Path(path).open(encoding="utf-8") as handle:
            yield from enumerate(handle, start=1)
    except (OSError, UnicodeDecodeError) as err:
        if isinstance(err, UnicodeDecodeError):
            reason = f"not UTF-8 text ({err.reason})"
        else:
            reason = err.strerror or str(err)
        fail(f"{path}: cannot read: {reason}")


def answer_requests(
    path: str,
    answer: Callable[[Any], dict[str, Any]],
    expected: tuple[type[Exception], ...],
    error: Callable[[int, Exception], tuple[dict[str, Any], int]],
) -> int:
    """One JSON line per request line of `path`, in order; blank lines are skipped.

    `answer` turns a parsed request into its result. A line that is not JSON, or whose
    `answer` raises one of `expected`, gets `error(line, exception)`: the JSON to print and an
    exit status. Returns the exit status of the batch: bad input (2) wins over any other.
    """
    caught: tuple[type[Exception], ...] = (json.JSONDecodeError, *expected)
    worst = 0
    for lineno, line in request_lines(path):
        if not line.strip():
            continue
        try:
            result = answer(json.loads(line))
        except caught as err:
            result, status = error(lineno, err)
            worst = status if status == EXIT_BAD_INPUT else worst or status
        emit_json(result)
    sys.stdout.flush()
    return worst
