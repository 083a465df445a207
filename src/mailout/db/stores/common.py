"""What the three stores do alike: lease upkeep, and the operator writes answered by
:mod:`mailout.db.dialects`. Each store subclasses it and overrides what differs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Table, Update
from sqlalchemy.sql.elements import ColumnElement

from mailout.db import dialects
from mailout.db.stores import claiming


class CommonStore:
    """The store methods whose SQL is the same everywhere."""

    name = ""  # set by each store
    listens = False
    claims_in_one_statement = False

    def notify(self, conn: Connection, queues: Sequence[str]) -> None:
        """Nothing: this database's workers poll."""

    def extend_leases(self, conn: Connection, leases: Iterable[tuple[int, str]],
                      seconds: float) -> int:
        return claiming.extend_leases(conn, leases, seconds)

    def release(self, conn: Connection, leases: Iterable[tuple[int, str]]) -> int:
        return claiming.release(conn, leases)

    def take_write_lock(self, conn: Connection) -> None:
        """Nothing: rows are locked as they are written."""

    def is_conflict(self, exc: BaseException) -> bool:
        # Read from the error itself, whichever server raised it.
        return dialects.is_sqlite_busy(exc) or dialects.is_lock_conflict(exc)

    def updated_ids(self, conn: Connection, stmt: Update,
                    id_column: ColumnElement[Any]) -> list[Any]:
        return dialects.updated_ids(conn, stmt, id_column)

    def insert_new_row(self, conn: Connection, table: Table, keys: Sequence[str],
                       values: Mapping[str, Any]) -> tuple[Any, ...] | None:
        return dialects.insert_new_row(conn, table, keys, values)
