"""Fixtures of the integration tests: database URLs (SQLite files and databases in one throwaway
PostgreSQL), and a server shared by a module's tests."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from tests.integration.postgres import PostgresUnavailable, throwaway_postgres
from tests.server import Api, ServerProcess, running_server
from toposched.store import sqlite_url


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of the session's PostgreSQL cluster (its `toposched` database); skips if none can run."""
    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(throwaway_postgres())
        except PostgresUnavailable as err:
            pytest.skip(f"PostgreSQL unavailable: {err}")
        yield url


@pytest.fixture(scope="session")
def _postgres_admin(postgres_url: str) -> Iterator[Engine]:
    engine = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


@pytest.fixture
def fresh_postgres_url(postgres_url: str, _postgres_admin: Engine) -> str:
    """URL of an empty schema of its own in the session cluster: no other test sees its rows.

    A schema, not a database: CREATE DATABASE copies template1 and took 0.05-2 s per test on a
    busy machine, CREATE SCHEMA takes about a millisecond. The URL's search_path makes the schema
    the connection's default, so everything the store creates and reads lands in it. Schemas are
    not dropped: the whole cluster is deleted at the end of the session.
    """
    name = f"t_{uuid.uuid4().hex}"
    with _postgres_admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {name}"))
    url = make_url(postgres_url).update_query_dict({"options": f"-csearch_path={name}"})
    return url.render_as_string(hide_password=False)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database on each backend: a SQLite file in tmp_path, or a fresh PostgreSQL one."""
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "store.db")
    # Looked up only here, so that SQLite-only runs never start PostgreSQL.
    url: str = request.getfixturevalue("fresh_postgres_url")
    return url


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """A directory for what a test's workers write."""
    path = tmp_path / "out"
    path.mkdir()
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real server on an emulated DGX-1, shared by the module's tests (a module may define
    a server of its own instead)."""
    with running_server(tmp_path_factory.mktemp("srv")) as srv:
        yield srv


@pytest.fixture
def api(server: ServerProcess) -> Iterator[Api]:
    """The admin's API of `server`, every live job cancelled after the test."""
    client = Api(server)
    yield client
    client.drain()
