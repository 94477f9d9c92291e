"""Errors raised for bad topology input: they say what is wrong and where."""

from __future__ import annotations


class TopologyError(ValueError):
    """A topology (file, capture, preset name or matrix) is malformed or inconsistent.

    `source` names the file or input and `line` the 1-based line, when known, so the
    message can point the user at the exact place to fix.
    """

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None):
        self.reason = message
        self.source = source
        self.line = line
        where = ""
        if source is not None and line is not None:
            where = f"{source}:{line}: "
        elif source is not None:
            where = f"{source}: "
        elif line is not None:
            where = f"line {line}: "
        super().__init__(where + message)
