"""Errors of the performance model: a bad catalog file, an unknown name, an impossible request."""

from __future__ import annotations


class PerfError(ValueError):
    """A request the performance model cannot answer (unknown name, bad placement, bad batch).

    `field` names the argument or request key that is wrong, when there is one, so that a
    batch of requests can say which key of which line to fix.
    """

    def __init__(self, message: str, *, field: str | None = None):
        self.reason = message
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class CatalogError(PerfError):
    """A catalog file that cannot be used: names the file, the line and the field at fault."""

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ):
        self.source = source
        self.line = line
        where = ":".join(str(part) for part in (source, line) if part is not None)
        text = f"{field}: {message}" if field else message
        super().__init__(f"{where}: {text}" if where else text)
        self.field = field
        self.reason = message
