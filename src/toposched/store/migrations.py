"""Versioned schema: each migration moves a database one version up, in its own transaction."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    JSON,
    Column,
    Connection,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    inspect,
    select,
    text,
)

from toposched.store import schema


class MigrationError(RuntimeError):
    """The database cannot be brought to this version of toposched."""


# `jobs` and `queues` as version 1 made them, frozen here because v3 and v5 alter the live
# definitions.
_V1 = MetaData()
_V1_JOBS = Table(
    "jobs",
    _V1,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("owner", String(200), nullable=False),
    Column("queue", String(200), nullable=False),
    Column("priority", Integer, nullable=False),
    Column("spec", JSON, nullable=False),
    Column("state", String(16), nullable=False),
    Column("reason", Text, nullable=False),
    Column("placement", JSON, nullable=True),
    Column("attempt", Integer, nullable=False),
    Column("restarts", Integer, nullable=False),
    Column("stop_kind", String(16), nullable=True),
    Column("submitted_at", Float, nullable=False),
    Column("started_at", Float, nullable=True),
    Column("ended_at", Float, nullable=True),
)
Index("jobs_state", _V1_JOBS.c.state)
_V1_QUEUES = Table(
    "queues",
    _V1,
    Column("name", String(200), primary_key=True),
    Column("guaranteed_gpus", Integer, nullable=False),
)
# `job_history` as version 1 made it, frozen here because v6 alters the live definition.
_V1_HISTORY = Table(
    "job_history",
    _V1,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_seq", Integer, ForeignKey("jobs.seq"), nullable=False),
    Column("time", Float, nullable=False),
    Column("old", String(16), nullable=True),
    Column("new", String(16), nullable=False),
    Column("reason", Text, nullable=False),
)
Index("job_history_job", _V1_HISTORY.c.job_seq)


def _v1(conn: Connection) -> None:
    # The first schema: `jobs` as frozen above, the other tables as `schema.py` defines them.
    # A later migration that alters one of those must first freeze it here too, so that v1
    # stays v1.
    _V1.create_all(conn, tables=[_V1_JOBS, _V1_QUEUES, _V1_HISTORY])
    schema.metadata.create_all(
        conn,
        tables=[
            schema.node_labels,
            schema.tokens,
        ],
    )


def _v2(conn: Connection) -> None:
    # New tables only, so `_v1` above may keep reading the live definitions of its own tables.
    schema.metadata.create_all(conn, tables=[schema.submit_keys, schema.job_stops])


def _v3(conn: Connection) -> None:
    # Each job's attained service (least attained service), 0 for the jobs stored before.
    conn.execute(text("ALTER TABLE jobs ADD COLUMN service_gpu_s FLOAT DEFAULT 0 NOT NULL"))


def _v4(conn: Connection) -> None:
    # A live job deleted: removed once it has ended (0 for the jobs stored before).
    conn.execute(text("ALTER TABLE jobs ADD COLUMN delete_when_ended INTEGER DEFAULT 0 NOT NULL"))


def _v5(conn: Connection) -> None:
    # A queue's idle rule for its jobs that set none (none for the queues stored before).
    conn.execute(text("ALTER TABLE queues ADD COLUMN idle TEXT"))


def _v6(conn: Connection) -> None:
    # State names up to 32 characters (`dependency-failed` is 17). SQLite holds any length in
    # a VARCHAR column whatever it declares; PostgreSQL refuses a longer one, so it is widened.
    if conn.dialect.name != "postgresql":
        return
    for table, column in (("jobs", "state"), ("job_history", "old"), ("job_history", "new")):
        conn.execute(text(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE VARCHAR(32)"))


MIGRATIONS: list[Callable[[Connection], None]] = [_v1, _v2, _v3, _v4, _v5, _v6]
SCHEMA_VERSION = len(MIGRATIONS)


def current_version(conn: Connection) -> int:
    if not inspect(conn).has_table("schema_version"):
        return 0
    version = conn.execute(select(schema.schema_version.c.version)).scalar()
    return int(version or 0)


def check_version(engine: Engine) -> int:
    """The version of a toposched database this toposched can read as it is, read without
    writing; MigrationError if it is not toposched's, or is at another version."""
    with engine.connect() as conn:
        tables = set(inspect(conn).get_table_names())
        if not {"schema_version", "jobs"} <= tables:
            raise MigrationError(
                "is not a toposched database (it has no schema_version and jobs tables): "
                "nothing was read or written"
            )
        version = current_version(conn)
    if version != SCHEMA_VERSION:
        newer = "newer" if version > SCHEMA_VERSION else "older"
        raise MigrationError(
            f"is at schema version {version}, {newer} than this toposched's "
            f"({SCHEMA_VERSION}); nothing was written: use the toposched of its version, "
            "or let `toposched serve` migrate it first"
        )
    return version


def migrate(engine: Engine) -> int:
    """Apply the migrations the database lacks; return the version it is at now."""
    with engine.begin() as conn:
        schema.metadata.create_all(conn, tables=[schema.schema_version])
        version = current_version(conn)
        if version > SCHEMA_VERSION:
            raise MigrationError(
                f"the database is at schema version {version}, newer than this toposched "
                f"knows ({SCHEMA_VERSION}); upgrade toposched"
            )
    for target in range(version + 1, SCHEMA_VERSION + 1):
        with engine.begin() as conn:
            MIGRATIONS[target - 1](conn)
            conn.execute(schema.schema_version.delete())
            conn.execute(schema.schema_version.insert().values(version=target))
    return SCHEMA_VERSION
