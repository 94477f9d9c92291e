"""Durable state of the standalone server: jobs and their history, queues, labels, tokens."""

from toposched.store.db import (
    BUSY_TIMEOUT_S,
    CORRUPT,
    FAULT_KINDS,
    DuplicateJob,
    HistoryRow,
    JobRow,
    NewJob,
    Store,
    StoreError,
    TokenRow,
    fault_kind,
    sqlite_url,
    write_fault,
)
from toposched.store.migrations import SCHEMA_VERSION

__all__ = [
    "BUSY_TIMEOUT_S",
    "CORRUPT",
    "FAULT_KINDS",
    "SCHEMA_VERSION",
    "DuplicateJob",
    "HistoryRow",
    "JobRow",
    "NewJob",
    "Store",
    "StoreError",
    "TokenRow",
    "fault_kind",
    "sqlite_url",
    "write_fault",
]
