"""Client side of the toposched server: the HTTP client and the YAML job spec.

Light on purpose: the CLI imports this for every command, so nothing here loads the server's
web stack (FastAPI, uvicorn, SQLAlchemy); httpx and PyYAML only, each when first used: the
names below are imported from their modules on first access, so that `toposched list`, which
needs toposched.client.http, does not load the job file's reader (PyYAML) with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toposched.client.http import UNREACHABLE, ApiError, Client
    from toposched.client.jobfile import JobFile, JobFileError, load_job_file

__all__ = ["UNREACHABLE", "ApiError", "Client", "JobFile", "JobFileError", "load_job_file"]

_HOME = {
    "UNREACHABLE": "toposched.client.http",
    "ApiError": "toposched.client.http",
    "Client": "toposched.client.http",
    "JobFile": "toposched.client.jobfile",
    "JobFileError": "toposched.client.jobfile",
    "load_job_file": "toposched.client.jobfile",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
