"""Borrowed connections: mailout's statements on a DB-API connection someone else owns.

A framework (Django) holds its own connection and its own transaction. To write an
outbox row *inside* that transaction, mailout runs its SQLAlchemy statements on the
very same DB-API connection, through :func:`borrow`. The owner keeps every decision
about the transaction, so SQLAlchemy here:

- never begins, commits, rolls back or closes the connection (the dialect's
  ``do_begin``/``do_commit``/``do_rollback``/``do_close`` do nothing, so neither
  ``Connection.close()`` nor an error path can end the owner's transaction);
- never resets it when it is returned (no reset-on-return) and never pings it;
- runs no first-connect or connect hooks on it (no ``on_connect`` handlers, no
  isolation level changes): the dialect is initialised once per driver with reads
  only, and the connection's own settings are left as the owner made them.

Savepoints still work (``Connection.begin_nested()`` issues ``SAVEPOINT``), nested in
the owner's transaction. Values the owner's driver returns in its own way are read
back as mailout expects: Django makes psycopg return ``jsonb`` as text and makes
``sqlite3`` return timestamps as ``datetime``.

Supported drivers: psycopg 3, sqlite3, and mysqlclient or PyMySQL (MySQL, MariaDB).
Any other (psycopg2, Oracle...) raises :class:`~mailout.exceptions.ConfigError` naming
it. A borrowed MySQL connection keeps its owner's session: Django's is READ COMMITTED
already, and mailout's MySQL statements take times from ``UTC_TIMESTAMP()``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any, Final

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.pool import ConnectionPoolEntry, NullPool
from sqlalchemy.types import JSON, DateTime, TypeEngine

from mailout.exceptions import ConfigError

# The module a DB-API connection's class comes from -> the SQLAlchemy URL prefix.
DRIVERS: Final = {
    "psycopg": "postgresql+psycopg",
    "sqlite3": "sqlite+pysqlite",
    "MySQLdb": "mysql+mysqldb",  # mysqlclient, Django's MySQL driver
    "pymysql": "mysql+pymysql",
}
# Drivers of databases mailout has no store for yet: a clear refusal, not a crash later.
_NO_STORE: Final = {"oracledb": "Oracle", "cx_Oracle": "Oracle"}

_LENT: ContextVar[Any] = ContextVar("mailout_borrowed_connection")


def driver_of(dbapi_connection: Any) -> str:
    """The SQLAlchemy URL prefix for ``dbapi_connection``'s driver.

    Raises :class:`ConfigError` for a driver mailout cannot write through.
    """
    module = type(dbapi_connection).__module__.split(".")[0]
    if module in DRIVERS:
        return DRIVERS[module]
    if module == "_sqlite3":  # sqlite3.Connection's class lives in the C module
        return DRIVERS["sqlite3"]
    database = _NO_STORE.get(module)
    if database is not None:
        raise ConfigError("DATABASES", f"mailout has no {database} store yet: the outbox "
                          "lives on PostgreSQL or SQLite (see README, Django)")
    raise ConfigError("DATABASES", f"mailout cannot write through the {module!r} driver; "
                      "supported: psycopg 3 (PostgreSQL), sqlite3, mysqlclient and PyMySQL "
                      "(MySQL, MariaDB)")


@contextmanager
def borrow(dbapi_connection: Any) -> Iterator[Connection]:
    """A SQLAlchemy ``Connection`` over ``dbapi_connection``, in its owner's transaction.

    Whatever happens inside (success or an exception), the owner's transaction is
    neither committed nor rolled back here: a failed statement leaves it as the
    database left it (on PostgreSQL, aborted until the owner rolls back).
    """
    engine = _engine(driver_of(dbapi_connection))
    token = _LENT.set(dbapi_connection)
    try:
        _initialise_once(engine)
        with engine.connect() as conn:
            yield conn
    finally:
        _LENT.reset(token)


def _lent_connection() -> Any:
    return _LENT.get()


class _LendingPool(NullPool):
    """Hands out the connection set by :func:`borrow`; forgets it on return (never
    closes it: it is not ours)."""

    def _do_return_conn(self, record: ConnectionPoolEntry) -> None:
        pass


class _DecodedJSON(JSON):
    """JSON read back from a driver told to return it as text (Django's psycopg)."""

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        inner = super().result_processor(dialect, coltype)
        if inner is not None:
            return inner
        return lambda value: json.loads(value) if isinstance(value, str | bytes) else value


class _ParsedDateTime(DateTime):
    """Timestamps the driver may already have parsed (Django's sqlite3 converters)."""

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        inner = super().result_processor(dialect, coltype)
        if inner is None:
            return None
        return lambda value: value if isinstance(value, datetime) else inner(value)


def _leave_it(self: Any, dbapi_connection: Any) -> None:
    """The owner begins, commits, rolls back and closes: never mailout."""


def _borrowing_dialect(base: type[Dialect]) -> Any:
    colspecs: dict[type[TypeEngine[Any]], type[TypeEngine[Any]]] = dict(base.colspecs)
    for generic, impl in base.colspecs.items():
        if issubclass(generic, JSON):
            colspecs[generic] = type(f"Decoded{impl.__name__}", (_DecodedJSON, impl), {})
        elif issubclass(generic, DateTime):
            colspecs[generic] = type(f"Parsed{impl.__name__}", (_ParsedDateTime, impl), {})
    colspecs.setdefault(JSON, _DecodedJSON)
    colspecs.setdefault(DateTime, _ParsedDateTime)
    return type(f"Borrowing{base.__name__}", (base,), {
        "colspecs": colspecs, "do_begin": _leave_it, "do_commit": _leave_it,
        "do_rollback": _leave_it, "do_close": _leave_it, "supports_statement_cache": True,
    })


_ENGINES: dict[str, Engine] = {}
_INITIALISED: set[str] = set()
_LOCK = threading.Lock()


def _engine(driver: str) -> Engine:
    """One engine per driver, shared by every borrowed connection (and its statement
    cache with them); built without ``create_engine``, so no connect hooks exist."""
    engine = _ENGINES.get(driver)
    if engine is None:
        with _LOCK:
            engine = _ENGINES.get(driver)
            if engine is None:
                url = make_url(f"{driver}://")
                base = url.get_dialect()
                # No native hstore: the psycopg dialect would register it on the owner's
                # connection during initialize().
                options = {"use_native_hstore": False} if base.name == "postgresql" else {}
                dialect = _borrowing_dialect(base)(dbapi=base.import_dbapi(), **options)
                pool = _LendingPool(_lent_connection, reset_on_return=None, dialect=dialect)
                engine = _ENGINES[driver] = Engine(pool, dialect, url)
    return engine


def _initialise_once(engine: Engine) -> None:
    """The dialect's one-time set-up (server version, default schema...): reads only,
    on the first borrowed connection of this driver."""
    driver = engine.url.drivername
    if driver in _INITIALISED:
        return
    with _LOCK:
        if driver in _INITIALISED:
            return
        with engine.connect() as conn:
            engine.dialect.initialize(conn)
        _INITIALISED.add(driver)
