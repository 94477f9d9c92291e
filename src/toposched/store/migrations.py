"""Versioned schema: each migration moves a database one version up, in its own transaction."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection, Engine, inspect, select

from toposched.store import schema


class MigrationError(RuntimeError):
    """The database cannot be brought to this version of toposched."""


def _v1(conn: Connection) -> None:
    # The first schema is the tables as `schema.py` defines them. A later migration that alters
    # a table must first freeze this step's definitions here, so that v1 stays v1.
    schema.metadata.create_all(
        conn,
        tables=[
            schema.jobs,
            schema.job_history,
            schema.queues,
            schema.node_labels,
            schema.tokens,
        ],
    )


def _v2(conn: Connection) -> None:
    # New tables only, so `_v1` above may keep reading the live definitions of its own tables.
    schema.metadata.create_all(conn, tables=[schema.submit_keys, schema.job_stops])


MIGRATIONS: list[Callable[[Connection], None]] = [_v1, _v2]
SCHEMA_VERSION = len(MIGRATIONS)


def current_version(conn: Connection) -> int:
    if not inspect(conn).has_table("schema_version"):
        return 0
    version = conn.execute(select(schema.schema_version.c.version)).scalar()
    return int(version or 0)


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
