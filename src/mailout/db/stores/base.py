"""The store protocol: what the worker, the enqueue path and the operator ask of a
database, one implementation per database (River's driver interface is the model).

Each store answers for its own SQL: the claim, the completion of finished attempts,
the INSERT of new rows and lease upkeep, and the few operator writes whose form differs
(an UPDATE that reports the rows it changed, an INSERT that skips a taken key).
Code outside :mod:`mailout.db` asks a store, never which database it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from sqlalchemy import Connection, Table, Update
from sqlalchemy.sql.elements import ColumnElement

from mailout.db.stores.inserting import Stored
from mailout.models import ClaimedMessage, Completion


class Store(Protocol):
    """One database's SQL. Every method runs in the caller's transaction."""

    @property
    def name(self) -> str:
        """The SQLAlchemy dialect name this store serves."""

    @property
    def listens(self) -> bool:
        """Can workers be woken by NOTIFY when a message is committed? (Else they poll.)"""

    @property
    def claims_in_one_statement(self) -> bool:
        """Is a claim one statement, atomic without a transaction (autocommit)?"""

    def claim(self, conn: Connection, params: Mapping[str, Any], *,
              queues: Sequence[str] | None, exclude_queues: Sequence[str],
              exclude_templates: Sequence[str], expired_only: bool) -> list[ClaimedMessage]:
        """Lease due rows (``params``: owner, token, lease, limit, transport)."""

    def complete(self, conn: Connection, batch: Sequence[Completion]) -> list[int]:
        """Record finished attempts; return the ids whose completion was fenced out."""

    def insert(self, conn: Connection, first: Mapping[str, Mapping[str, Any]],
               notify: bool) -> dict[str, Stored]:
        """Insert the rows ``first`` maps their keys to, skipping keys already present."""

    def notify(self, conn: Connection, queues: Sequence[str]) -> None:
        """Wake workers serving ``queues`` when the transaction commits, if it can."""

    def extend_leases(self, conn: Connection, leases: Iterable[tuple[int, str]],
                      seconds: float) -> int:
        """Push the expiry of leases still held; how many were held."""

    def release(self, conn: Connection, leases: Iterable[tuple[int, str]]) -> int:
        """Give back claimed rows never started: pending again, uncharged."""

    def take_write_lock(self, conn: Connection) -> None:
        """Take the database's write lock now, where writers are serialised by one."""

    def is_conflict(self, exc: BaseException) -> bool:
        """Did the server give up on a lock (the transaction can simply be retried)?"""

    def updated_ids(self, conn: Connection, stmt: Update,
                    id_column: ColumnElement[Any]) -> list[Any]:
        """Run ``stmt``; the ids of the rows it changed."""

    def insert_new_row(self, conn: Connection, table: Table, keys: Sequence[str],
                       values: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """Insert one row unless its ``keys`` are taken; its primary key, or None."""
