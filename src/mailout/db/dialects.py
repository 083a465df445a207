"""What each database can do, asked as capability questions (River's ``Supports...``).

Callers ask "can this database LISTEN?" rather than "is this PostgreSQL?", so adding a
database means answering these questions for it, in this one module. Each function
takes an ``Engine`` or a ``Connection``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from sqlalchemy import Connection, Engine, Insert, Table, insert, text

POSTGRESQL: Final = "postgresql"
SQLITE: Final = "sqlite"

Bind = Engine | Connection


def name_of(bind: Bind) -> str:
    """The SQLAlchemy dialect name: for messages and per-dialect statement caches only."""
    return bind.dialect.name


def supports_listen_notify(bind: Bind) -> bool:
    """Can workers be woken by NOTIFY when a message is committed? (Else they poll.)"""
    return name_of(bind) == POSTGRESQL


def claims_in_one_statement(bind: Bind) -> bool:
    """Can a claim pick, lock (SKIP LOCKED) and lease rows in one UPDATE ... RETURNING?

    Elsewhere a claim selects candidates and updates them inside a transaction that
    already holds the write lock (SQLite's BEGIN IMMEDIATE).
    """
    return name_of(bind) == POSTGRESQL


def writes_batches_as_json(bind: Bind) -> bool:
    """Can a batch of rows travel as one JSON parameter expanded by the server?

    One statement text and one parameter whatever the batch size: the driver parses
    no query of thousands of placeholders, and it is one round trip.
    """
    return name_of(bind) == POSTGRESQL


def serialises_writers_itself(bind: Bind) -> bool:
    """Must mailout take the write lock at BEGIN (SQLite), instead of row locks?"""
    return name_of(bind) == SQLITE


def limit_statement_time(conn: Connection, milliseconds: int) -> None:
    """Bound how long statements of the current transaction may run, where the
    database allows it per transaction; elsewhere do nothing."""
    if name_of(conn) == POSTGRESQL:
        conn.execute(text(f"SET LOCAL statement_timeout = {int(milliseconds)}"))


def insert_ignoring_duplicates(bind: Bind, table: Table, keys: Sequence[str]) -> Insert:
    """An INSERT that skips a row whose ``keys`` (a unique index) already exist: no
    error, no update; with RETURNING, a skipped row returns nothing. A concurrent
    insert of the same keys waits for the first to commit, then skips."""
    if name_of(bind) == POSTGRESQL:
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table).on_conflict_do_nothing(index_elements=list(keys))
    if name_of(bind) == SQLITE:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table).on_conflict_do_nothing(index_elements=list(keys))
    return insert(table).prefix_with("IGNORE")  # MySQL and MariaDB
