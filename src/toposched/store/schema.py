"""The tables of the store (SQLAlchemy Core); `migrations.py` brings a database up to them."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()

schema_version = Table(
    "schema_version",
    metadata,
    Column("version", Integer, nullable=False),
)

# One row per job ever submitted: a name finds at most one job. A deleted (ended) job's row is
# kept under `NAME/SEQ`, a name no job can take, in state `deleted`: its name is free again.
jobs = Table(
    "jobs",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("owner", String(200), nullable=False),
    Column("queue", String(200), nullable=False),
    Column("priority", Integer, nullable=False),
    Column("spec", JSON, nullable=False),
    # A job state's name, `dependency-failed` the longest (widened from 16 in v6).
    Column("state", String(32), nullable=False),
    Column("reason", Text, nullable=False),
    Column("placement", JSON, nullable=True),
    Column("attempt", Integer, nullable=False),
    Column("restarts", Integer, nullable=False),
    Column("stop_kind", String(16), nullable=True),
    Column("submitted_at", Float, nullable=False),
    Column("started_at", Float, nullable=True),
    Column("ended_at", Float, nullable=True),
    # GPU-seconds of service as least attained service counts it (since the job's last
    # promotion), as of its last start or stop: a restart hands it back to the core (v3).
    Column("service_gpu_s", Float, nullable=False, server_default="0"),
    # 1: deleted while live (`toposched delete` of a running job): removed once it has ended,
    # its name free without a second delete (v4).
    Column("delete_when_ended", Integer, nullable=False, server_default="0"),
)
Index("jobs_state", jobs.c.state)

job_history = Table(
    "job_history",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_seq", Integer, ForeignKey("jobs.seq"), nullable=False),
    Column("time", Float, nullable=False),
    Column("old", String(32), nullable=True),  # widened from 16 in v6, as jobs.state
    Column("new", String(32), nullable=False),
    Column("reason", Text, nullable=False),
)
Index("job_history_job", job_history.c.job_seq)

queues = Table(
    "queues",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("guaranteed_gpus", Integer, nullable=False),
    # The idle rule (JSON text of the wire's IdleIn) of its jobs that set none (v5).
    Column("idle", Text, nullable=True),
)

node_labels = Table(
    "node_labels",
    metadata,
    Column("node", String(200), primary_key=True),
    Column("key", String(300), primary_key=True),
    Column("value", String(300), nullable=False),
)

# A submission's idempotency key (client-chosen, per owner): a retried submit finds the job its
# first try made instead of making a second one.
submit_keys = Table(
    "submit_keys",
    metadata,
    Column("owner", String(200), primary_key=True),
    Column("key", String(200), primary_key=True),
    Column("job_seq", Integer, ForeignKey("jobs.seq"), nullable=False),
)

# When a stopping job's workers are killed (wall-clock time): a restart honours it instead of
# granting the whole grace again. A row exists while the job is stopping.
job_stops = Table(
    "job_stops",
    metadata,
    Column("job_seq", Integer, ForeignKey("jobs.seq"), primary_key=True),
    Column("deadline", Float, nullable=False),
)

tokens = Table(
    "tokens",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    # Only a hash is kept: a leaked database gives no one a working token.
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("user", String(200), nullable=False),
    Column("team", String(200), nullable=False),
    Column("role", String(16), nullable=False),
    Column("created_at", Float, nullable=False),
)
