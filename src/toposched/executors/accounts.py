"""Which Unix account runs each job: its team's (or its user's) own, not the server's.

As Slurm runs a job as the user who submitted it: a server that runs as root starts every
worker as the account its team (or user) maps to, so that the kernel, not only the API, keeps
jobs from the data directory, the admin token, other jobs' logs and environments, and other
jobs' processes. A team maps to a Unix user named for it (`--job-account nlp=alice`), or, where
none is named, to a uid allocated for it from a range no passwd entry uses (systemd's
DynamicUser range by default), its group the uid's number too. An allocation is kept in the
data directory (`accounts.json`), so that a team's files stay its own across restarts.
"""

from __future__ import annotations

import json
import os
import pwd
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

__all__ = [
    "DYNAMIC_UIDS",
    "Account",
    "AccountError",
    "Accounts",
    "KeyedBy",
    "may_work_in",
    "parse_range",
]

# systemd's DynamicUser= range (61184-65519): kept free of passwd entries by convention.
DYNAMIC_UIDS = (61184, 65519)
STATE_FILE = "accounts.json"
HOMES = "homes"


class AccountError(RuntimeError):
    """No account can be given: an unknown user, root named, or the range used up."""


class KeyedBy(StrEnum):
    """What a job's account is the account of."""

    TEAM = "team"  # every job of a team (its queue) runs as the team's account
    USER = "user"  # every job of a user (its token's user) runs as the user's account


@dataclass(frozen=True)
class Account:
    """A Unix account jobs run as: `home` is its passwd home, or for an allocated account a
    directory of its own under the data directory."""

    name: str
    uid: int
    gid: int
    home: Path

    def describe(self) -> str:
        return f"{self.name} (uid {self.uid})"

    @property
    def ids(self) -> tuple[int, int]:
        return self.uid, self.gid


def parse_range(text: str) -> tuple[int, int]:
    """`LO-HI` as two uids, LO <= HI, neither root."""
    lo, sep, hi = text.partition("-")
    if not sep or not lo.strip().isdigit() or not hi.strip().isdigit():
        raise AccountError(f"uid range {text!r}: write LO-HI, e.g. 61184-65519")
    first, last = int(lo), int(hi)
    if not 0 < first <= last < 2**31:
        raise AccountError(f"uid range {text!r}: need 0 < LO <= HI < 2^31")
    return first, last


class Accounts:
    """The account of each team (or user); allocations are kept in `data_dir`/accounts.json."""

    def __init__(
        self,
        data_dir: Path,
        by: KeyedBy = KeyedBy.TEAM,
        named: Mapping[str, str] | None = None,
        uids: tuple[int, int] = DYNAMIC_UIDS,
    ) -> None:
        self.by = by
        self.uids = uids
        self.homes = data_dir / HOMES
        self._state = data_dir / STATE_FILE
        self._named = {key: _passwd(key, user) for key, user in (named or {}).items()}
        self._allocated = self._read()
        self._lock = threading.Lock()

    def for_job(self, team: str, user: str) -> Account:
        """The account a job of `team`, submitted by `user`, runs as (allocated on first use)."""
        key = team if self.by is KeyedBy.TEAM else user
        if key in self._named:
            return self._named[key]
        with self._lock:
            uid = self._allocated.get(key)
            if uid is None:
                uid = self._allocate(key)
            name = f"toposched-{self.by.value}-{key}"
            return Account(name, uid, uid, self._home(key, uid))

    def allocated(self) -> dict[str, int]:
        with self._lock:
            return dict(self._allocated)

    def _allocate(self, key: str) -> int:
        taken = set(self._allocated.values()) | {a.uid for a in self._named.values()}
        for uid in range(self.uids[0], self.uids[1] + 1):
            if uid in taken or _has_passwd(uid):
                continue
            self._allocated[key] = uid
            self._write()
            return uid
        raise AccountError(
            f"no uid left in {self.uids[0]}-{self.uids[1]} for the {self.by.value} {key!r}: "
            "widen --job-uid-range or name its account with --job-account"
        )

    def _home(self, key: str, uid: int) -> Path:
        """The allocated account's home, made on first use: its own, mode 0700."""
        home = self.homes / key
        if not home.is_dir():
            self.homes.mkdir(exist_ok=True)
            self.homes.chmod(0o711)  # passed through, never listed (mkdir's mode meets umask)
            home.mkdir(mode=0o700, exist_ok=True)
        stat = home.stat()
        if (stat.st_uid, stat.st_gid) != (uid, uid):
            os.chown(home, uid, uid)
        return home

    def _read(self) -> dict[str, int]:
        try:
            data = json.loads(self._state.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            raise AccountError(f"cannot read {self._state}: {err}") from None
        table = data.get("allocated") if isinstance(data, dict) else None
        if not isinstance(table, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v > 0
            for k, v in table.items()
        ):
            raise AccountError(f"{self._state} is not a table of allocated uids")
        return dict(table)

    def _write(self) -> None:
        tmp = self._state.with_name(f".{STATE_FILE}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"allocated": self._allocated}, out, indent=1, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self._state)


def _passwd(key: str, user: str) -> Account:
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise AccountError(f"--job-account {key}={user}: no Unix user {user!r} here") from None
    if entry.pw_uid == 0:
        raise AccountError(f"--job-account {key}={user}: jobs never run as root")
    return Account(user, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))


def _has_passwd(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def may_work_in(path: Path, uid: int, gid: int) -> str | None:
    """Why the account `uid`:`gid` (its own group alone, as workers run) may not work in the
    directory `path`, or None if it may: it must pass through every directory above it and
    list and enter it, by the modes alone (a job's worker enters its directory before it drops
    root, and a container mounts it, so the kernel would not ask)."""
    real = Path(os.path.realpath(path))
    if not real.is_dir():
        return f"{real} is not a directory"
    try:
        for step in [*reversed(real.parents), real]:
            st = os.stat(step)
            need = 0o5 if step == real else 0o1
            if st.st_uid == uid:
                bits = st.st_mode >> 6
            elif st.st_gid == gid:
                bits = st.st_mode >> 3
            else:
                bits = st.st_mode
            if bits & need != need:
                what = "list and enter" if step == real else "pass through"
                return (
                    f"it may not {what} {step} (mode {st.st_mode & 0o777:o}, "
                    f"owner {st.st_uid}:{st.st_gid})"
                )
    except OSError as err:
        return f"cannot read {err.filename}: {err.strerror}"
    return None
