"""Bearer tokens: users belong to teams (queues); admins may do everything."""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from toposched.common.paths import ADMIN_TOKEN_FILE
from toposched.store import Store


@dataclass(frozen=True)
class Principal:
    user: str
    team: str
    role: str

    @property
    def admin(self) -> bool:
        return self.role == "admin"

    def may_touch(self, queue: str) -> bool:
        """Users act on their own team's jobs only (logs, cancel); admins on all."""
        return self.admin or self.team == queue


# With auth off (loopback only), every caller is the local admin.
LOCAL_ADMIN = Principal("local", "default", "admin")


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return "tsk_" + secrets.token_urlsafe(32)


def create_token(store: Store, user: str, team: str, admin: bool) -> str:
    token = new_token()
    store.add_token(token_hash(token), user, team, "admin" if admin else "user", time.time())
    return token


def lookup(store: Store, token: str) -> Principal | None:
    row = store.token(token_hash(token))
    return None if row is None else Principal(row.user, row.team, row.role)


def ensure_admin_token(store: Store, data_dir: Path) -> tuple[Path, bool]:
    """The admin token file in the data directory, created (owner-only) on first start; a file
    kept from an earlier store is registered again. Returns (path, created)."""
    path = data_dir / ADMIN_TOKEN_FILE
    if path.exists():
        # A kept file (restored from a backup, copied in) may be readable by others: it makes
        # its reader an admin, so it is made owner-only before it is trusted.
        if path.stat().st_mode & 0o077:
            path.chmod(0o600)
        token = path.read_text(encoding="utf-8").strip()
        if token and lookup(store, token) is None:
            store.add_token(token_hash(token), "admin", "default", "admin", time.time())
        if token:
            return path, False
    token = create_token(store, "admin", "default", admin=True)
    # O_EXCL with mode 0600: the token is never readable by others, not even for an instant.
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(token + "\n")
    tmp.replace(path)
    return path, True
