"""Database fixtures: every storage test runs on SQLite, PostgreSQL and MariaDB.

PostgreSQL is the server from ``pg_server_url`` (the local service named by
MAILOUT_TEST_POSTGRES_URL, or a throwaway embedded one). MariaDB (or MySQL) is the
server named by MAILOUT_TEST_MYSQL_URL; without it the "mariadb" parameter is
skipped with that reason. On each server one uniquely named database is migrated
per test session and emptied before each test; SQLite tests get a copy of a file
migrated once per session.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.support.pg import create_database, drop_database
from sqlalchemy import Engine, text

from mailout import db
from mailout.db import migrate
from mailout.db.schema import metadata
from tests.support import mysql

BACKENDS = ["sqlite", "postgresql", "mariadb"]


@pytest.fixture(scope="session")
def pg_database_url(pg_server_url: str) -> Iterator[str]:
    url = create_database(pg_server_url)
    engine = db.make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    yield url
    drop_database(url)


@pytest.fixture(scope="session")
def mysql_database_url() -> Iterator[str]:
    server = mysql.mysql_server_url()
    if server is None:
        pytest.skip(mysql.SKIP_REASON)
    url = mysql.create_database(server)
    engine = db.make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    yield url
    mysql.drop_database(url)


def _empty(url: str) -> None:
    engine = db.make_engine(url)
    with engine.begin() as conn:
        # Every mailout table, so that a table added later is emptied too.
        if engine.dialect.name == "mysql":
            # TRUNCATE refuses a table that a foreign key points at, checks or not.
            conn.execute(text("SET FOREIGN_KEY_CHECKS = 0"))
            for table in sorted(metadata.tables):
                conn.execute(text(f"DELETE FROM {table}"))
                conn.execute(text(f"ALTER TABLE {table} AUTO_INCREMENT = 1"))
            conn.execute(text("SET FOREIGN_KEY_CHECKS = 1"))
        else:
            tables = ", ".join(sorted(metadata.tables))
            conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY"))
    engine.dispose()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once per session: each test gets a copy of it (a file
    copy takes well under a millisecond, a migration a quarter of a second)."""
    path = tmp_path_factory.mktemp("sqlite-template") / "migrated.db"
    engine = db.make_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    with engine.connect() as conn:
        # Everything into the main file, so that the file alone is the database.
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    engine.dispose()
    return path


def _migrated_sqlite(template: Path, path: Path) -> str:
    shutil.copyfile(template, path)
    return f"sqlite:///{path}"


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty database URL; parametrized over the three backends."""
    if request.param == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        return _migrated_sqlite(template, tmp_path / "mailout.db")
    fixture = "pg_database_url" if request.param == "postgresql" else "mysql_database_url"
    url: str = request.getfixturevalue(fixture)
    _empty(url)
    return url


@pytest.fixture
def sqlite_url(tmp_path: Path, sqlite_template: Path) -> str:
    """A migrated SQLite file (``outbox.db`` in the test's tmp dir), for tests of one
    process's behaviour that need no server."""
    return _migrated_sqlite(sqlite_template, tmp_path / "outbox.db")


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> str:
    """A migrated, empty PostgreSQL database URL, for PostgreSQL-only tests."""
    url: str = request.getfixturevalue("pg_database_url")
    _empty(url)
    return url


@pytest.fixture(params=["postgresql", "mariadb"])
def server_url(request: pytest.FixtureRequest) -> str:
    """A migrated, empty database URL on a server (PostgreSQL, MariaDB), for tests
    of concurrent connections and processes that SQLite serialises anyway."""
    fixture = "pg_database_url" if request.param == "postgresql" else "mysql_database_url"
    url: str = request.getfixturevalue(fixture)
    _empty(url)
    return url


@pytest.fixture
def mysql_url(request: pytest.FixtureRequest) -> str:
    """A migrated, empty MariaDB/MySQL database URL, for MySQL-only tests."""
    url: str = request.getfixturevalue("mysql_database_url")
    _empty(url)
    return url


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    eng = db.make_engine(db_url)
    yield eng
    eng.dispose()
