"""Engines: ``make_engine`` turns a URL into an engine tuned for mailout's access pattern."""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from mailout.db import dialects
from mailout.exceptions import ConfigError

DEFAULT_URL = "sqlite:///mailout.db"
LOCK_CONFLICT_TRIES = 5  # a claim chosen as a deadlock victim is run again this often

log = logging.getLogger("mailout.db")
T = TypeVar("T")


# Spellings a user may give -> the driver mailout supports for it. PostgreSQL: psycopg 3;
# MySQL and MariaDB: PyMySQL (the mailout[mysql] extra), under SQLAlchemy's "mysql"
# dialect for both, so that one set of MySQL statements serves either server.
_DRIVERS = {
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "postgresql+asyncpg": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
    "mysql+aiomysql": "mysql+pymysql",
    "mariadb": "mysql+pymysql",
    "mariadb+pymysql": "mysql+pymysql",
    "sqlite+aiosqlite": "sqlite",
}
# Drivers that come with an extra, and the extra that installs them.
_EXTRAS = {"pymysql": "mysql", "aiomysql": "mysql"}


def database_url(url: str | None = None) -> str:
    """The URL to use: the argument, else ``MAILOUT_DATABASE_URL``, else a local SQLite file.

    ``postgresql://`` and ``postgres://`` select psycopg 3; ``mysql://`` and
    ``mariadb://`` select PyMySQL. An async application's URL
    (``postgresql+asyncpg://``, ``mysql+aiomysql://``, ``sqlite+aiosqlite://``) selects
    the same sync driver, so that the worker takes the application's own URL. Raises
    :class:`ConfigError` for a malformed URL, or (one line, naming the ``pip install``
    command) when the driver's extra is missing.
    """
    raw = url or os.environ.get("MAILOUT_DATABASE_URL") or DEFAULT_URL
    scheme, sep, rest = raw.partition("://")
    if sep and scheme.lower() in _DRIVERS:
        raw = f"{_DRIVERS[scheme.lower()]}://{rest}"
    try:
        parsed = make_url(raw)
    except Exception as exc:
        raise ConfigError("MAILOUT_DATABASE_URL", f"not a database URL: {exc}") from None
    _require_driver(parsed.get_driver_name())
    return raw


def _require_driver(driver: str) -> None:
    extra = _EXTRAS.get(driver)
    if extra is None or importlib.util.find_spec(driver) is not None:
        return
    raise ConfigError("MAILOUT_DATABASE_URL",
                      f"the {driver} driver is not installed: pip install 'mailout[{extra}]'")


def make_engine(url: str | None = None, **kw: Any) -> Engine:
    """An engine for ``url`` (see :func:`database_url`).

    SQLite gets WAL mode and a busy timeout, so that the application, several worker
    processes and the CLI can share one file without "database is locked" errors.
    """
    # pre_ping: after a database restart, pooled connections are dead; test before use.
    kw.setdefault("pool_pre_ping", True)
    engine = create_engine(database_url(url), **kw)
    if dialects.locks_gaps_under_default_isolation(engine) and "isolation_level" not in kw:
        # REPEATABLE READ locks the gaps a claim scans, so a claim would block
        # enqueues and two claims could deadlock; READ COMMITTED locks only the rows
        # a claim takes. docs/mysql.md says more.
        engine.update_execution_options(isolation_level="READ COMMITTED")
    if dialects.stores_times_without_zone(engine):
        event.listen(engine, "connect", _utc_session)
    if dialects.serialises_writers_itself(engine):
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        # pysqlite's own transaction handling defers BEGIN; we issue it ourselves.
        event.listen(engine, "connect", _sqlite_no_autobegin, insert=True)
    return engine


def _utc_session(dbapi_conn: Any, _record: Any) -> None:
    # DATETIME has no zone: mailout stores UTC, and UNIX_TIMESTAMP() and NOW() must
    # read and write it as UTC whatever the server's default zone.
    cur = dbapi_conn.cursor()
    cur.execute("SET time_zone = '+00:00'")
    cur.close()


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


def immediate_retrying(engine: Engine, work: Callable[[Connection], T],
                       tries: int = LOCK_CONFLICT_TRIES) -> T:
    """Run ``work`` in an :func:`immediate` transaction; when the database gives up
    on a lock (InnoDB's deadlock victim, a lock wait timeout), the transaction was
    rolled back whole, so run it again, at most ``tries`` times in all. The last
    conflict propagates; any other error at once."""
    for attempt in range(1, tries + 1):
        try:
            with immediate(engine) as conn:
                return work(conn)
        except DBAPIError as exc:
            if attempt == tries or not dialects.is_lock_conflict(exc):
                raise
            log.info("lock conflict (try %d of %d), running the transaction again",
                     attempt, tries)
    raise AssertionError("unreachable: the last try returns or raises")
