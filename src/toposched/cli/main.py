"""Entry point of the `toposched` command: the server commands' plain uses run at once
(toposched.cli.quick); everything else goes to the typer app (toposched.cli.app).

Nothing is imported here before it is needed: the installed `toposched` script and
`python -m toposched` import this module, and typer and click alone took some 50 ms of every
command's start. The app's names (`command`, `COMMANDS`, ...) are reachable from here too,
loaded on first use.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

APP = "toposched.cli.app"


def main() -> None:
    from toposched.cli import quick

    if quick.run(sys.argv[1:]):
        return
    importlib.import_module(APP).main()


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        # Asked by the import system itself (`__path__` for `from ... import main`).
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(APP), name)
