"""The known trace formats by name, and telling a file's format from its header."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from toposched.sim.traces import helios, openb, philly, tiresias
from toposched.sim.traces.rows import TraceFormat

# To add a format, write a module with a FORMAT (see docs/traces.md) and list it here.
FORMATS: Mapping[str, TraceFormat] = MappingProxyType(
    {fmt.name: fmt for fmt in (philly.FORMAT, helios.FORMAT, tiresias.FORMAT, openb.FORMAT)}
)


def known_formats() -> str:
    """`name (description); ...` for every format, for error messages and `--help`."""
    return "; ".join(f"{fmt.name} ({fmt.description})" for fmt in FORMATS.values())


def detect_format(header: Iterable[str]) -> list[TraceFormat]:
    """Every format whose signature columns all appear in `header` (lower-case names)."""
    names = set(header)
    return [fmt for fmt in FORMATS.values() if fmt.signature <= names]
