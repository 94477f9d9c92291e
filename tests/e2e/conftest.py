"""Run the `toposched` command as a user types it, in a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def json_lines(self) -> list[Any]:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]


def run_cli(*args: str, stdin: str | None = None, **env: str) -> Result:
    """`toposched ARGS` in a subprocess, with `env` added to this process's environment."""
    # pytest exports COLUMNS=80 to children; a user's pipe has no such limit.
    base = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    proc = subprocess.run(
        [sys.executable, "-m", "toposched", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, **env},
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli() -> Callable[..., Result]:
    return run_cli


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
