"""Purging old finished messages: short batches, paced so that workers keep their share.

:func:`purge` deletes one batch in the caller's transaction; :func:`purge_in_batches`
runs batches in transactions of their own, with a pause between them, until nothing
is left (or it is told to stop), and reports how long the longest batch held its
locks. The ``mailout purge`` command is a thin wrapper around the second.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NamedTuple

from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    Float,
    and_,
    any_,
    bindparam,
    delete,
    func,
    select,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql.elements import ColumnElement

from mailout.db import dialects
from mailout.db.engine import immediate
from mailout.db.schema import (
    attempt_recipients,
    attempts,
    db_now_plus,
    message_attachments,
    messages,
)
from mailout.models import FINAL_STATUSES, Status

# Only finished rows may be purged: a live row is somebody's undelivered mail.
PURGEABLE = FINAL_STATUSES
DEFAULT_BATCH = 1000
DEFAULT_PAUSE = 0.25  # seconds; see docs/capacity.md for what it keeps of the drain rate


def _purgeable(older_than: timedelta, statuses: Iterable[str]) -> ColumnElement[bool]:
    chosen = [Status(s) for s in statuses]
    bad = [s.value for s in chosen if s not in PURGEABLE]
    if bad:
        raise ValueError(f"only finished rows can be purged, not {', '.join(bad)}")
    cutoff = db_now_plus(bindparam("ago", -older_than.total_seconds(), Float))
    # IS NOT NULL spelled out: it lets the partial index on finished_at serve the query.
    return and_(messages.c.status.in_(sorted(s.value for s in chosen)),
                messages.c.finished_at.is_not(None), messages.c.finished_at < cutoff)


def count_purgeable(conn: Connection, older_than: timedelta, statuses: Iterable[str]) -> int:
    """How many rows :func:`purge` would delete. Raises ValueError as :func:`purge` does."""
    cond = _purgeable(older_than, statuses)
    return conn.execute(select(func.count()).select_from(messages).where(cond)).scalar_one()


class Purged(NamedTuple):
    """What one :func:`purge` batch deleted."""

    messages: int
    attempts: int
    last_id: int | None  # the highest id deleted: the next batch starts after it


def purge(
    conn: Connection, older_than: timedelta, statuses: Iterable[str], *,
    batch: int = DEFAULT_BATCH, after: int = 0,
) -> Purged:
    """Delete up to ``batch`` finished rows (in ``statuses``, finished more than
    ``older_than`` ago on the database clock, ``id`` above ``after``) with their
    attempts, lowest ids first.

    Call it in short transactions, each ``after`` the previous batch's ``last_id``,
    until it deletes fewer than ``batch`` (:func:`purge_in_batches` does). Starting
    after the last batch keeps each batch's read off the index entries of the rows
    already deleted, which vacuum has not cleared yet: otherwise every batch walks
    past all of them again, and an old snapshot elsewhere (a long report) turns the
    purge quadratic. The rows are picked with ``FOR UPDATE SKIP LOCKED`` where the
    database has it: a row an operator is requeueing at that moment is skipped, not
    deleted from under the requeue, and the purge never waits for anyone's lock.
    On SQLite the caller's transaction must hold the write lock
    (:func:`mailout.db.immediate`) for the same guarantee.
    Attachment contents left unreferenced stay until
    :func:`mailout.db.attachments.purge_orphans`.
    Raises ValueError for a status that is not final.
    """
    pick = (select(messages.c.id)
            .where(_purgeable(older_than, statuses), messages.c.id > after)
            .order_by(messages.c.id).limit(batch))
    if dialects.locks_rows_skipping_locked(conn):
        pick = pick.with_for_update(skip_locked=True)
    ids = list(conn.scalars(pick))
    if not ids:
        return Purged(0, 0, None)
    # Children first, explicitly: the foreign keys cascade, but SQLite only honours
    # them when the connection turned foreign keys on.
    n_attempts = conn.execute(
        delete(attempts).where(_among(conn, attempts.c.outbox_id, ids))).rowcount
    conn.execute(delete(attempt_recipients)
                 .where(_among(conn, attempt_recipients.c.outbox_id, ids)))
    conn.execute(delete(message_attachments)
                 .where(_among(conn, message_attachments.c.outbox_id, ids)))
    n_messages = conn.execute(delete(messages).where(_among(conn, messages.c.id, ids))).rowcount
    return Purged(n_messages, n_attempts, ids[-1])


def _among(conn: Connection, column: ColumnElement[Any], ids: list[int]) -> ColumnElement[bool]:
    """``column`` is one of ``ids``: one array parameter on PostgreSQL (one short
    statement text whatever the batch), an IN list elsewhere."""
    if dialects.binds_arrays(conn):
        return column == any_(bindparam("ids", ids, type_=postgresql.ARRAY(BigInteger)))
    return column.in_(ids)


@dataclass(slots=True)
class PurgeTotals:
    """What :func:`purge_in_batches` did. Seconds are measured here, around each
    batch's transaction (begin to commit), so they include the round trips."""

    messages: int = 0
    attempts: int = 0
    batches: int = 0
    longest_batch: float = 0.0  # the longest any batch held its row locks
    in_batches: float = 0.0  # seconds spent inside batch transactions
    paused: float = 0.0  # seconds spent pausing between them

    def add(self, batch: Purged, seconds: float) -> None:
        self.messages += batch.messages
        self.attempts += batch.attempts
        self.batches += 1
        self.in_batches += seconds
        self.longest_batch = max(self.longest_batch, seconds)


def purge_in_batches(
    engine: Engine, older_than: timedelta, statuses: Iterable[str], *,
    batch: int = DEFAULT_BATCH, pause: float = DEFAULT_PAUSE,
    stop: threading.Event | None = None,
    progress: Callable[[PurgeTotals], None] | None = None,
) -> PurgeTotals:
    """Purge in transactions of at most ``batch`` rows until a batch comes back
    short or ``stop`` is set (checked between batches).

    Between batches it pauses ``pause`` seconds, or as long as the batch itself took
    if that was longer: the purge then takes at most half the time of one database
    connection, and backs off by itself when a busy database makes its batches slow,
    leaving the CPU and the WAL to the workers. ``pause=0`` runs flat out.

    ``progress`` is called after each batch with the running totals. A database
    error propagates; the batches before it stay committed (each batch is its own
    transaction, so a failure loses one batch's work, never more).
    Raises ValueError for a status that is not final, before deleting anything.
    """
    chosen = list(statuses)
    _purgeable(older_than, chosen)  # the ValueError, before the first transaction
    totals, after = PurgeTotals(), 0
    while stop is None or not stop.is_set():
        t0 = time.perf_counter()
        with immediate(engine) as conn:  # SQLite: the write lock from the first read
            done = purge(conn, older_than, chosen, batch=batch, after=after)
        took = time.perf_counter() - t0
        totals.add(done, took)
        if progress is not None:
            progress(totals)
        if done.last_id is None or done.messages < batch:
            break
        after = done.last_id
        if pause > 0:
            wait = max(pause, took)
            totals.paused += wait
            if stop is not None:
                stop.wait(wait)
            else:
                time.sleep(wait)
    return totals
