"""Database fixtures: every storage test runs on SQLite and on PostgreSQL.

PostgreSQL is the server from ``pg_server_url`` (the local service named by
MAILOUT_TEST_POSTGRES_URL, or a throwaway embedded one). One database is migrated
per test session and emptied before each test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from mailout import db
from mailout.db import migrate
from mailout.db.schema import metadata
from tests.support.pg import create_database, drop_database


@pytest.fixture(scope="session")
def pg_database_url(pg_server_url: str) -> Iterator[str]:
    url = create_database(pg_server_url)
    engine = db.make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    yield url
    drop_database(url)


def _empty(url: str) -> None:
    engine = db.make_engine(url)
    with engine.begin() as conn:
        # Every mailout table, so that a table added later is emptied too.
        tables = ", ".join(sorted(metadata.tables))
        conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY"))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty database URL; parametrized over both backends."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'mailout.db'}"
        engine = db.make_engine(url)
        migrate.upgrade(engine)
        engine.dispose()
        return url
    url: str = request.getfixturevalue("pg_database_url")
    _empty(url)
    return url


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> str:
    """A migrated, empty PostgreSQL database URL, for PostgreSQL-only tests."""
    url: str = request.getfixturevalue("pg_database_url")
    _empty(url)
    return url


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    eng = db.make_engine(db_url)
    yield eng
    eng.dispose()
