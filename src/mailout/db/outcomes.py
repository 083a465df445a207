"""Finished attempts: each row's next state, and its attempt log, written by the
connection's store (:mod:`mailout.db.stores`) from the completion rules in
:mod:`mailout.db.stores.completing`.

A row is updated only while the attempt's lease token still holds it (a fenced
completion: its worker lost the lease and another has claimed the row); the attempt
is logged either way, because it happened. Every function runs inside the caller's
transaction. Rows are claimed and leased by :mod:`mailout.db.leasing`.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection

from mailout.db.stores import store_for
from mailout.models import Completion


def complete(conn: Connection, completions: Iterable[Completion]) -> list[int]:
    """Record finished attempts; return the ids whose completion was fenced out.

    Each update checks the lease token, so a worker whose lease expired (and whose
    row another worker has since claimed) cannot overwrite the newer attempt. Its
    attempt is still logged, because it happened; only the row is left alone.
    On PostgreSQL the whole batch is one statement (one round trip); on MySQL a
    batch without unknown outcomes is two; SQLite writes row by row.
    """
    batch = list(completions)
    if not batch:
        return []
    return store_for(conn).complete(conn, batch)
