"""Engines: ``make_engine`` turns a URL into an engine tuned for mailout's access pattern."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url

from mailout.db import dialects
from mailout.exceptions import ConfigError

DEFAULT_URL = "sqlite:///mailout.db"


def database_url(url: str | None = None) -> str:
    """The URL to use: the argument, else ``MAILOUT_DATABASE_URL``, else a local SQLite file.

    ``postgresql://`` and ``postgres://`` select psycopg 3, the supported driver; so do
    an async application's ``postgresql+asyncpg://`` (and ``sqlite+aiosqlite://`` selects
    sqlite3), so that the worker takes the application's own URL.
    """
    raw = url or os.environ.get("MAILOUT_DATABASE_URL") or DEFAULT_URL
    if raw.startswith("sqlite+aiosqlite://"):
        raw = "sqlite://" + raw[len("sqlite+aiosqlite://"):]
    for prefix in ("postgresql://", "postgres://", "postgresql+asyncpg://"):
        if raw.startswith(prefix):
            raw = "postgresql+psycopg://" + raw[len(prefix) :]
    try:
        make_url(raw)
    except Exception as exc:
        raise ConfigError("MAILOUT_DATABASE_URL", f"not a database URL: {exc}") from None
    return raw


def make_engine(url: str | None = None, **kw: Any) -> Engine:
    """An engine for ``url`` (see :func:`database_url`).

    SQLite gets WAL mode and a busy timeout, so that the application, several worker
    processes and the CLI can share one file without "database is locked" errors.
    """
    # pre_ping: after a database restart, pooled connections are dead; test before use.
    kw.setdefault("pool_pre_ping", True)
    engine = create_engine(database_url(url), **kw)
    if dialects.serialises_writers_itself(engine):
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        # pysqlite's own transaction handling defers BEGIN; we issue it ourselves.
        event.listen(engine, "connect", _sqlite_no_autobegin, insert=True)
    return engine


def _sqlite_no_autobegin(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def _sqlite_begin(conn: Any) -> None:
    # A deferred transaction that reads and then writes fails at once with SQLITE_BUSY
    # when another writer got in between; transactions opened by `immediate()` take the
    # write lock at BEGIN (waiting for it) instead. Plain reads stay lock-free.
    immediate = conn.get_execution_options().get("mailout_immediate", False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


@contextmanager
def immediate(engine: Engine) -> Iterator[Connection]:
    """A transaction that reads then writes (a claim). On SQLite it takes the write lock
    up front; elsewhere it is an ordinary transaction."""
    with engine.connect().execution_options(mailout_immediate=True) as conn, conn.begin():
        yield conn
