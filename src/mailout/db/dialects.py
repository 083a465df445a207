"""What each database can do, asked as capability questions (River's ``Supports...``).

The modules of :mod:`mailout.db` ask "can this database return the rows it wrote?"
rather than "is this PostgreSQL?". What differs in the hot path (the claim, the
completions, the INSERT) is each store's own SQL (:mod:`mailout.db.stores`); code
outside :mod:`mailout.db` asks a store, never this module. Each function takes an
``Engine`` or a ``Connection``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from sqlalchemy import Connection, Engine, Insert, Table, Update, insert, select, text
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.sql.elements import ColumnElement

POSTGRESQL: Final = "postgresql"
SQLITE: Final = "sqlite"
MYSQL: Final = "mysql"  # MySQL 8 and MariaDB 10.6+: SQLAlchemy's one "mysql" dialect

# MySQL server error numbers (the first argument of the driver's exception).
ER_DUP_ENTRY: Final = 1062  # a unique key already holds the value
ER_LOCK_WAIT_TIMEOUT: Final = 1205  # innodb_lock_wait_timeout passed
ER_LOCK_DEADLOCK: Final = 1213  # InnoDB chose this transaction as a deadlock victim
ER_NO_SUCH_TABLE: Final = 1146  # the statement names a table that does not exist
PG_UNDEFINED_TABLE: Final = "42P01"  # SQLSTATE undefined_table
SQLITE_BUSY: Final = 5  # primary result code; extended ones (BUSY_SNAPSHOT) keep it in the low byte
# What a statement carries besides its large values (its text, the other columns),
# generously: a value is refused when it would leave less than this of the packet.
STATEMENT_OVERHEAD: Final = 16 * 1024
# Bytes the MySQL drivers send as two (a backslash escape) inside a quoted value.
_ESCAPED = tuple(bytes([b]) for b in b"\0\n\r\\'\"\x1a")

Bind = Engine | Connection


def name_of(bind: Bind) -> str:
    """The SQLAlchemy dialect name: for messages and per-dialect statement caches only."""
    return bind.dialect.name










def returns_written_rows(bind: Bind) -> bool:
    """Can INSERT and UPDATE say which rows they wrote (``RETURNING``)? MySQL cannot,
    and MariaDB only from INSERT and DELETE, so mailout uses neither there."""
    return name_of(bind) != MYSQL


def locks_gaps_under_default_isolation(bind: Bind) -> bool:
    """Does the server's default isolation (InnoDB's REPEATABLE READ) lock the gaps
    between index entries a locking read scans? Engines mailout makes then run READ
    COMMITTED, where a claim locks only the rows it takes."""
    return name_of(bind) == MYSQL


def stores_times_without_zone(bind: Bind) -> bool:
    """Is a timestamp stored without its zone (MySQL's DATETIME)? Sessions then run
    in UTC, the zone mailout writes."""
    return name_of(bind) == MYSQL




def locks_rows_skipping_locked(bind: Bind) -> bool:
    """Can a read lock the rows it returns and pass over those another transaction
    holds (``FOR UPDATE SKIP LOCKED``)? SQLite has no row locks: a transaction that
    reads then writes takes the database write lock instead."""
    return name_of(bind) != SQLITE


def binds_arrays(bind: Bind) -> bool:
    """Can a list of ids travel as one array parameter (``= ANY(:ids)``)?"""
    return name_of(bind) == POSTGRESQL


def is_lock_conflict(exc: BaseException) -> bool:
    """Was ``exc`` the server giving up on a lock (a deadlock victim, a lock wait
    timeout)? The transaction is rolled back and can simply be tried again."""
    if not isinstance(exc, DBAPIError) or exc.orig is None:
        return False
    args = getattr(exc.orig, "args", ())
    if args and args[0] in (ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT):
        return True
    # PostgreSQL: deadlock_detected and serialization_failure.
    return getattr(exc.orig, "sqlstate", None) in ("40P01", "40001")


def is_missing_table(exc: BaseException, prefix: str = "mailout_") -> bool:
    """Did the statement fail because a table named ``prefix...`` does not exist (the
    schema was never migrated)? Read from the error itself: on PostgreSQL the
    transaction is aborted, so nothing more can be asked of the database."""
    if not isinstance(exc, DBAPIError) or exc.orig is None:
        return False
    orig = exc.orig
    args = getattr(orig, "args", ())
    if getattr(orig, "sqlstate", None) == PG_UNDEFINED_TABLE or (
            args and args[0] == ER_NO_SUCH_TABLE):
        return prefix in str(orig)
    return str(orig).startswith(f"no such table: {prefix}")  # SQLite's wording


def is_sqlite_busy(exc: BaseException) -> bool:
    """Did SQLite refuse a statement with SQLITE_BUSY ("database is locked")? Either the
    busy timeout ran out, or a transaction that read before another connection committed
    tried to write (SQLITE_BUSY_SNAPSHOT: refused at once, whatever the timeout). The
    statement did nothing; once its transaction is rolled back it can be tried again."""
    if not isinstance(exc, DBAPIError) or exc.orig is None:
        return False
    code = getattr(exc.orig, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF == SQLITE_BUSY


def take_write_lock(conn: Connection) -> None:
    """On SQLite, take the database's write lock now, in the transaction ``conn`` has
    begun (a deferred BEGIN, such as Django's), waiting out the busy timeout as
    ``BEGIN IMMEDIATE`` would. A transaction that reads first and writes later cannot
    wait: a commit by another connection in between refuses its write at once. An
    UPDATE starts the write transaction even when it matches no row. Elsewhere it does
    nothing: rows are locked as they are written."""
    if name_of(conn) == SQLITE:
        conn.execute(text("UPDATE mailout_messages SET id = id WHERE 0"))


def statement_limit(conn: Connection) -> int | None:
    """The largest statement the server accepts, where that matters at mail sizes:
    MySQL's ``max_allowed_packet`` (read once per connection). Above it the server
    drops the connection mid-transaction. None: no such limit."""
    if name_of(conn) != MYSQL:
        return None
    info = conn.connection.info
    if "mailout_max_packet" not in info:
        packet = conn.execute(text("SELECT @@max_allowed_packet")).scalar_one()
        info["mailout_max_packet"] = int(packet)
    return int(info["mailout_max_packet"])


def sent_size(value: bytes | str | None) -> int:
    """How many bytes ``value`` takes inside a MySQL statement: UTF-8, with the bytes
    the driver escapes counted twice."""
    if value is None:
        return 0
    data = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
    return len(data) + sum(data.count(b) for b in _ESCAPED)


def serialises_writers_itself(bind: Bind) -> bool:
    """Must mailout take the write lock at BEGIN (SQLite), instead of row locks?"""
    return name_of(bind) == SQLITE


def limit_statement_time(conn: Connection, milliseconds: int) -> None:
    """Bound how long statements of the current transaction may run, where the
    database allows it per transaction; elsewhere do nothing."""
    if name_of(conn) == POSTGRESQL:
        conn.execute(text(f"SET LOCAL statement_timeout = {int(milliseconds)}"))
    # MySQL has no per-transaction limit (max_statement_time is per session and
    # would outlive the transaction on a pooled connection): nothing is set.


def insert_ignoring_duplicates(bind: Bind, table: Table, keys: Sequence[str]) -> Insert:
    """An INSERT that skips a row whose ``keys`` (a unique index) already exist: no
    error, no update; with RETURNING, a skipped row returns nothing. A concurrent
    insert of the same keys waits for the first to commit, then skips.

    MySQL has no RETURNING on INSERT: use :func:`insert_new_row` to learn whether a
    row was written. Its form is ``ON DUPLICATE KEY UPDATE key = key``, not ``INSERT
    IGNORE``, which would also turn other errors (a value too long, a broken foreign
    key) into warnings and write the row anyway."""
    if name_of(bind) == POSTGRESQL:
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table).on_conflict_do_nothing(index_elements=list(keys))
    if name_of(bind) == SQLITE:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table).on_conflict_do_nothing(index_elements=list(keys))
    from sqlalchemy.dialects.mysql import insert as mysql_insert

    stmt = mysql_insert(table)
    return stmt.on_duplicate_key_update({k: stmt.table.c[k] for k in keys[:1]})


def insert_new_row(conn: Connection, table: Table, keys: Sequence[str],
                   values: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """Insert one row unless a row with its ``keys`` (a unique index) exists; its
    primary key, or None when the keys were taken. Racing inserts of the same keys
    wait for the first to commit (then find it taken) or roll back (then insert)."""
    pk = list(table.primary_key.columns)
    if returns_written_rows(conn):
        row = conn.execute(insert_ignoring_duplicates(conn, table, keys)
                           .values(dict(values)).returning(*pk)).first()
        return None if row is None else tuple(row)
    # MySQL: a plain INSERT in a savepoint; only a duplicate of these keys is taken
    # as "exists", every other error propagates.
    try:
        with conn.begin_nested():
            result = conn.execute(insert(table).values(dict(values)))
    except IntegrityError as exc:
        if getattr(exc.orig, "args", (None,))[0] == ER_DUP_ENTRY:
            return None
        raise
    return tuple(result.inserted_primary_key or ())


def updated_ids(conn: Connection, stmt: Update, id_column: ColumnElement[Any]) -> list[Any]:
    """Run ``stmt`` and return the ids of the rows it changed.

    Without UPDATE ... RETURNING (MySQL) the matching rows are first read and locked
    (``FOR UPDATE``), then exactly those are updated: a concurrent change cannot slip
    in between, so the ids are the rows changed.
    """
    if returns_written_rows(conn):
        return list(conn.scalars(stmt.returning(id_column)))
    locked = select(id_column).with_for_update()
    if stmt.whereclause is not None:
        locked = locked.where(stmt.whereclause)
    ids = list(conn.scalars(locked))
    if ids:
        conn.execute(stmt.where(id_column.in_(ids)))
    return ids
