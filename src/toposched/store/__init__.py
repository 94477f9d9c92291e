"""Durable state of the standalone server: jobs and their history, queues, labels, tokens."""

from toposched.store.db import (
    DuplicateJob,
    HistoryRow,
    JobRow,
    Store,
    StoreError,
    TokenRow,
    sqlite_url,
)
from toposched.store.migrations import SCHEMA_VERSION

__all__ = [
    "SCHEMA_VERSION",
    "DuplicateJob",
    "HistoryRow",
    "JobRow",
    "Store",
    "StoreError",
    "TokenRow",
    "sqlite_url",
]
