"""SQLite's store: in process, one writer at a time.

A claim reads the due rows and leases them inside a transaction that holds the
database write lock (BEGIN IMMEDIATE), so it cannot race another claimer; its reads
carry ``likely()`` hints (:mod:`mailout.db.stores.claiming`). Completions are one
UPDATE per row: a statement costs microseconds here, not a round trip.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from mailout.db import dialects
from mailout.db.schema import messages
from mailout.db.stores import claiming, completing
from mailout.db.stores.common import CommonStore
from mailout.db.stores.inserting import INSERT_VALUES, Stored, insert_params, with_existing
from mailout.models import ClaimedMessage, Completion

_READS = claiming.ReadClaim(locking=False, likely=True, returning=True, queue_hint=None)
# Built once: building it per call costs more than running it.
_INSERT = (sqlite_insert(messages).on_conflict_do_nothing(index_elements=["idempotency_key"])
           .values(INSERT_VALUES)
           .returning(messages.c.id, messages.c.idempotency_key, messages.c.message_id))


class SQLiteStore(CommonStore):
    """SQLite 3.35+ (RETURNING)."""

    name = dialects.SQLITE

    def claim(self, conn: Connection, params: Mapping[str, Any], *,
              queues: Sequence[str] | None, exclude_queues: Sequence[str],
              exclude_templates: Sequence[str], expired_only: bool) -> list[ClaimedMessage]:
        return claiming.claim_in_reads(conn, params, _READS, queues, exclude_queues,
                                       exclude_templates, expired_only)

    def complete(self, conn: Connection, batch: Sequence[Completion]) -> list[int]:
        completing.log_recipients(conn, batch)
        rows = [completing.completion_row(c) for c in batch]
        return completing.complete_rows(conn, batch, rows)

    def insert(self, conn: Connection, first: Mapping[str, Mapping[str, Any]],
               notify: bool) -> dict[str, Stored]:
        params = [insert_params(r) for r in first.values()]
        created: dict[str, Stored] = {}
        if params:
            # One row goes as a plain execute: executemany costs more than it saves.
            result = conn.execute(_INSERT, params[0] if len(params) == 1 else params)
            for rid, key, mid in result:
                created[key] = Stored(rid, mid, True, first[key])
        return with_existing(conn, first, created)

    def take_write_lock(self, conn: Connection) -> None:
        dialects.take_write_lock(conn)
