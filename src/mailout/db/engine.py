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
from sqlalchemy.exc import DBAPIError, NoSuchModuleError

from mailout.db import dialects, pooler
from mailout.exceptions import ConfigError

DEFAULT_URL = "sqlite:///mailout.db"
LOCK_CONFLICT_TRIES = 5  # a claim chosen as a deadlock victim is run again this often

log = logging.getLogger(__name__)
T = TypeVar("T")


# Spellings a user may give -> the driver mailout supports for it. PostgreSQL: psycopg 3,
# whatever driver the application itself uses; MySQL and MariaDB: PyMySQL (the
# mailout[mysql] extra), under SQLAlchemy's "mysql" dialect for both, so that one set of
# MySQL statements serves either server. This table is the one place URLs are mapped.
_DRIVERS = {
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "postgresql+psycopg": "postgresql+psycopg",
    "postgresql+psycopg2": "postgresql+psycopg",
    "postgresql+psycopg2cffi": "postgresql+psycopg",
    "postgresql+psycopg_async": "postgresql+psycopg",
    "postgresql+asyncpg": "postgresql+psycopg",
    "postgresql+pg8000": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
    "mysql+aiomysql": "mysql+pymysql",
    "mariadb": "mysql+pymysql",
    "mariadb+pymysql": "mysql+pymysql",
    "sqlite+aiosqlite": "sqlite",
}
# Drivers that come with an extra, and the extra that installs them.
_EXTRAS = {"pymysql": "mysql", "aiomysql": "mysql"}
# The databases mailout has a store for (SQLAlchemy backend names).
_BACKENDS = ("postgresql", "sqlite", "mysql")
SETTING = "MAILOUT_DATABASE_URL"


def database_url(url: str | None = None) -> str:
    """The URL to use: the argument, else ``MAILOUT_DATABASE_URL``, else a local SQLite file.

    Every PostgreSQL spelling (``postgres://``, ``postgresql://``,
    ``postgresql+asyncpg://``, ``+psycopg2://``...) selects psycopg 3; ``mysql://``
    and ``mariadb://`` select PyMySQL. An async application's URL
    (``postgresql+asyncpg://``, ``mysql+aiomysql://``, ``sqlite+aiosqlite://``) selects
    the same sync driver, so that the worker takes the application's own URL. Raises
    :class:`ConfigError`, in one line, for what is not a database URL, a database
    mailout has no store for (``foo://``), or a driver whose extra is missing (naming
    the ``pip install`` command).
    """
    raw = url if url is not None else os.environ.get(SETTING) or DEFAULT_URL
    scheme, sep, rest = raw.partition("://")
    if not sep or not scheme:
        raise ConfigError(SETTING, f"not a database URL (expected e.g. "
                          f"postgresql://user@host/db or sqlite:///file.db): {_shown(raw)!r}")
    raw = f"{_DRIVERS.get(scheme.lower(), scheme)}://{rest}"
    try:
        parsed = make_url(raw)
    except Exception as exc:
        raise ConfigError(SETTING, f"not a database URL: {type(exc).__name__}") from None
    if parsed.get_backend_name() not in _BACKENDS:
        raise ConfigError(SETTING, f"{scheme}:// is not a database mailout supports; use "
                          "postgresql://..., mysql://... or sqlite:///file.db")
    _require_driver(parsed.get_driver_name())
    return raw


def _require_driver(driver: str) -> None:
    extra = _EXTRAS.get(driver)
    if extra is None or importlib.util.find_spec(driver) is not None:
        return
    raise ConfigError(SETTING,
                      f"the {driver} driver is not installed: pip install 'mailout[{extra}]'")


def _shown(raw: str) -> str:
    """``raw`` without a password, for an error message."""
    scheme, sep, rest = raw.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if sep and at and ":" in userinfo:
        return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"
    return raw[:200]


def sqlite_file(url: str) -> str | None:
    """The file a SQLite URL names; None for other databases and in-memory SQLite."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or \
            parsed.database == ":memory:" or parsed.database.startswith("file:"):
        return None
    return parsed.database


def make_engine(url: str | None = None, **kw: Any) -> Engine:
    """An engine for ``url`` (see :func:`database_url`).

    SQLite gets WAL mode and a busy timeout, so that the application, several worker
    processes and the CLI can share one file without "database is locked" errors.
    Behind a transaction-mode PgBouncer (``MAILOUT_PGBOUNCER=transaction``) psycopg
    prepares no statements (:mod:`mailout.db.pooler`).
    """
    # pre_ping: after a database restart, pooled connections are dead; test before use.
    kw.setdefault("pool_pre_ping", True)
    checked = database_url(url)
    kw = pooler.engine_kwargs(checked, kw)
    try:
        engine = create_engine(checked, **kw)
    except (ImportError, NoSuchModuleError) as exc:
        # The URL's driver is not installed: say which, in one line.
        missing = getattr(exc, "name", None) or str(exc).split(":")[-1].strip()
        raise ConfigError(SETTING, f"{checked.partition('://')[0]}:// needs a driver that is "
                          f"not installed ({missing}); install it, or use postgresql://, "
                          "mysql:// or sqlite:///") from None
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


def immediate_options(*, one_statement: bool = False) -> dict[str, object]:
    """The execution options of an :func:`immediate` transaction: SQLite's write lock
    at BEGIN, or, for ``one_statement``, autocommit (see :func:`immediate`)."""
    return {"isolation_level": "AUTOCOMMIT"} if one_statement else {"mailout_immediate": True}


@contextmanager
def immediate(engine: Engine, *, one_statement: bool = False) -> Iterator[Connection]:
    """A transaction that reads then writes (a claim). On SQLite it takes the write lock
    up front; elsewhere it is an ordinary transaction.

    ``one_statement``: the caller's writes are a single statement, atomic on its own
    (a PostgreSQL claim, see ``Store.claims_in_one_statement``), so the connection
    is in autocommit: no BEGIN and COMMIT, two round trips fewer. Reads before it
    (the pause list) then see the database as of their own statement."""
    options = immediate_options(one_statement=one_statement)
    with engine.connect().execution_options(**options) as conn, conn.begin():
        yield conn


class HeldConnection:
    """One pooled connection kept across units of work that run one at a time (a
    lane's claims, the completion writer's batches), each in :meth:`begin`.

    A connection checked out of the pool for each unit costs the pool's pre-ping, a
    round trip, every time; held, it is pinged only when (re)connected, and
    PostgreSQL keeps its prepared statements. A database error invalidates it, since
    the server may have restarted or dropped it: the error propagates and the next
    unit connects afresh. Not for concurrent use (a Connection is not thread-safe);
    sequential use from different threads (``asyncio.to_thread``) is fine.
    """

    def __init__(self, engine: Engine, **options: object) -> None:
        self._engine = engine
        self._options = options  # execution options, set on each new connection
        self._conn: Connection | None = None

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """The held connection in a transaction, committed when the block ends."""
        conn = self._conn
        if conn is None:
            conn = self._engine.connect()
            if self._options:
                conn.execution_options(**self._options)
            self._conn = conn
        try:
            with conn.begin():
                yield conn
        except DBAPIError:
            self._conn = None
            conn.invalidate()
            conn.close()
            raise

    def close(self) -> None:
        """Give the connection back to the pool (a later :meth:`begin` takes another)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def immediate_retrying(engine: Engine | HeldConnection, work: Callable[[Connection], T],
                       tries: int = LOCK_CONFLICT_TRIES, *, one_statement: bool = False) -> T:
    """Run ``work`` in an :func:`immediate` transaction; when the database gives up
    on a lock (InnoDB's deadlock victim, a lock wait timeout), the transaction was
    rolled back whole, so run it again, at most ``tries`` times in all. The last
    conflict propagates; any other error at once.

    Given a :class:`HeldConnection` (opened with :func:`immediate_options`), the
    transaction runs on its connection, and ``one_statement`` is not looked at."""
    for attempt in range(1, tries + 1):
        try:
            opened = (engine.begin() if isinstance(engine, HeldConnection)
                      else immediate(engine, one_statement=one_statement))
            with opened as conn:
                return work(conn)
        except DBAPIError as exc:
            if attempt == tries or not dialects.is_lock_conflict(exc):
                raise
            log.info("lock conflict (try %d of %d), running the transaction again",
                     attempt, tries, extra={"event": "lock_conflict", "try": attempt,
                                            "tries": tries})
    raise AssertionError("unreachable: the last try returns or raises")
