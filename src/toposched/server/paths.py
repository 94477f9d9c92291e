"""Where the server keeps its files; light on imports, so that the CLI can share the rules."""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR_ENV = "TOPOSCHED_DATA_DIR"
ADMIN_TOKEN_FILE = "admin.token"


def default_data_dir() -> Path:
    """$TOPOSCHED_DATA_DIR, else $XDG_DATA_HOME/toposched, else ~/.local/share/toposched."""
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "toposched"
