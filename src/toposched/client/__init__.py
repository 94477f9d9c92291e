"""Client side of the toposched server: the HTTP client and the YAML job spec.

Light on purpose: the CLI imports this for every command, so nothing here loads the server's
web stack (FastAPI, uvicorn, SQLAlchemy); httpx and PyYAML only.
"""

from toposched.client.http import UNREACHABLE, ApiError, Client
from toposched.client.jobfile import JobFile, JobFileError, load_job_file

__all__ = ["UNREACHABLE", "ApiError", "Client", "JobFile", "JobFileError", "load_job_file"]
