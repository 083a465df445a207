"""Django's own database connection, lent to mailout for one block of statements.

``with borrowed_connection("default") as conn`` gives a SQLAlchemy ``Connection``
over the DB-API connection of ``django.db.connections["default"]``: statements run
in whatever transaction Django has open there (``transaction.atomic()``, a
savepoint of a nested block, ``ATOMIC_REQUESTS``). mailout never commits or rolls
it back (see :mod:`mailout.db.borrowed`). Outside any atomic block the statements
of one borrow are wrapped in one transaction of their own, so that a message and
its attachments are written together or not at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from mailout.db import pooler, wakeups
from mailout.db.borrowed import borrow
from mailout.db.engine import LOCK_CONFLICT_TRIES
from mailout.db.stores import Store, store_for
from mailout.exceptions import ConfigError
from mailout.models import EnqueueResult

# Django's OPTIONS for PostgreSQL that are Django's own, not libpq connection parameters.
_DJANGO_ONLY_OPTIONS = frozenset({"isolation_level", "server_side_binding", "pool",
                                  "assume_role", "cursor_factory", "context"})
# Django's vendor names of the databases mailout keeps an outbox on.
SUPPORTED_VENDORS = ("postgresql", "sqlite", "mysql")


@contextmanager
def borrowed_connection(using: str = "default") -> Iterator[Connection]:
    """A SQLAlchemy connection over Django's connection ``using``, in its transaction.

    Raises :class:`~mailout.exceptions.ConfigError` when ``using`` is not in
    ``DATABASES`` or is a database mailout has no store for (MySQL, Oracle).
    """
    from django.db import transaction

    wrapper = _wrapper(using)
    if wrapper.vendor not in SUPPORTED_VENDORS:
        raise ConfigError("DATABASES", f"{using!r} is {wrapper.display_name}: mailout has no "
                          f"{wrapper.display_name} store yet; its outbox lives on "
                          "PostgreSQL or SQLite")
    # savepoint=False: inside the caller's block this joins it and costs nothing;
    # outside any block it makes one transaction of this borrow.
    with transaction.atomic(using=using, savepoint=False):
        wrapper.ensure_connection()
        with borrow(wrapper.connection) as conn, wakeups.owned_by(_owner(using)):
            yield conn


_OWNERS: dict[str, wakeups.Owner] = {}
_WAKING_ENGINES: dict[str, Engine] = {}


def _owner(using: str) -> wakeups.Owner:
    """Django's transaction on ``using`` as the owner that wakes workers after its
    commit (``transaction.on_commit``, which a rollback discards), from an engine of
    mailout's own on the same database (Django's connections belong to their threads)."""
    owner = _OWNERS.get(using)
    if owner is None:
        from django.db import transaction

        def engine() -> Engine:
            found = _WAKING_ENGINES.get(using)
            if found is None:
                url = database_url(using)
                found = _WAKING_ENGINES[using] = create_engine(url, **pooler.engine_kwargs(
                    url, {"pool_size": 1, "max_overflow": 1, "pool_pre_ping": True}))
            return found

        owner = _OWNERS[using] = wakeups.Owner(
            on_commit=lambda fn: transaction.on_commit(fn, using=using), engine=engine)
    return owner


T = TypeVar("T")


def run_borrowed(using: str, work: Callable[[Connection], T],
                 tries: int = LOCK_CONFLICT_TRIES) -> T:
    """``work`` on :func:`borrowed_connection` ``using``; run again, at most ``tries``
    times in all, when the borrow owns its transaction (no atomic block is open) and
    the database refused it over a lock (SQLite's busy timeout, InnoDB's deadlock
    victim or lock wait timeout). The transaction was rolled back whole, so nothing of
    the failed try remains. An owned transaction on SQLite takes the write lock before
    ``work`` reads (:meth:`~mailout.db.stores.base.Store.take_write_lock`): one that read first
    would be refused at once whenever a worker committed before it wrote.

    Inside the caller's atomic block the error propagates at the first try: only the
    block's owner can run its transaction again. So does any other error, and the
    last try's conflict.
    """
    for attempt in range(1, tries + 1):
        owned = not _wrapper(using).in_atomic_block
        store: Store | None = None
        try:
            with borrowed_connection(using) as conn:
                store = store_for(conn)
                if owned:
                    store.take_write_lock(conn)
                return work(conn)
        except DBAPIError as exc:
            conflict = store is not None and store.is_conflict(exc)
            if not owned or not conflict or attempt == tries:
                raise
    raise AssertionError("unreachable: the last try returns or raises")


def _wrapper(using: str) -> Any:
    """Django's connection ``using``; ConfigError when DATABASES has no such alias."""
    from django.db import connections
    from django.utils.connection import ConnectionDoesNotExist

    try:
        return connections[using]
    except ConnectionDoesNotExist:
        raise ConfigError("MAILOUT_DATABASE", f"no database {using!r} in DATABASES") from None


def enqueue(*, using: str = "default", **kwargs: Any) -> EnqueueResult:
    """:func:`mailout.enqueue` on Django's connection ``using``; the same arguments.

    Inside ``transaction.atomic()`` the row commits or rolls back with the block.
    """
    from mailout.outbox import enqueue as enqueue_on

    with borrowed_connection(using) as conn:
        return enqueue_on(conn, **kwargs)


def database_url(using: str = "default") -> str:
    """The SQLAlchemy URL of Django's database ``using``, for mailout's own engines
    (the worker, the CLI): the same server, database and credentials.

    Raises :class:`~mailout.exceptions.ConfigError` for an in-memory SQLite database
    (no other process can reach it) and for databases mailout has no store for.
    """
    wrapper = _wrapper(using)
    conf = wrapper.settings_dict
    if wrapper.vendor == "sqlite":
        name = str(conf["NAME"])
        if name == ":memory:" or "mode=memory" in name:
            raise ConfigError("DATABASES", f"{using!r} is an in-memory SQLite database: "
                              "a worker in another process cannot reach it")
        return f"sqlite:///{name}"
    if wrapper.vendor not in SUPPORTED_VENDORS:
        raise ConfigError("DATABASES", f"{using!r} is {wrapper.display_name}: mailout has no "
                          f"{wrapper.display_name} store yet")
    # PostgreSQL: libpq parameters (sslmode...) ride along; MySQL's OPTIONS are
    # mysqlclient's (init_command, charset), not URL parameters of PyMySQL.
    options = {k: str(v) for k, v in (conf.get("OPTIONS") or {}).items()
               if k not in _DJANGO_ONLY_OPTIONS and isinstance(v, str | int)
               and wrapper.vendor == "postgresql"}
    driver = "postgresql+psycopg" if wrapper.vendor == "postgresql" else "mysql+pymysql"
    url = URL.create(driver, username=conf.get("USER") or None,
                     password=conf.get("PASSWORD") or None, host=conf.get("HOST") or None,
                     port=int(conf["PORT"]) if conf.get("PORT") else None,
                     database=conf.get("NAME") or None, query=options)
    return url.render_as_string(hide_password=False)
