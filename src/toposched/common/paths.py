"""Where the server keeps its files, and which addresses are this machine's own; light on
imports, so that the CLI shares these rules."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

DATA_DIR_ENV = "TOPOSCHED_DATA_DIR"
ADMIN_TOKEN_FILE = "admin.token"
DB_FILE = "toposched.db"  # the SQLite database, where no --db names another


def default_data_dir() -> Path:
    """$TOPOSCHED_DATA_DIR, else $XDG_DATA_HOME/toposched, else ~/.local/share/toposched."""
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "toposched"


LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def loopback(host: str) -> bool:
    """A loopback name or address (127.0.0.0/8, ::1)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
