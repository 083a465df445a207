"""The worker's leases: claim, release and lease upkeep, each asked of the
connection's store (:mod:`mailout.db.stores`), and when the next message is due.

Every function takes a SQLAlchemy ``Connection`` and runs inside whatever
transaction the caller holds; the caller decides where transactions begin and end.
The rows a claim reads back become ClaimedMessage records in :mod:`mailout.db.claimed`.
Finished attempts are written by :mod:`mailout.db.outcomes`, new rows by
:mod:`mailout.db.inserts`; operator queries (status, list, trace, requeue, purge) live
in :mod:`mailout.db.operator`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import Connection, and_, func, or_, select

from mailout.db.schema import db_now, messages
from mailout.db.stores import store_for
from mailout.models import ClaimedMessage, Status
from mailout.support.timeutil import aware


def claim(
    conn: Connection,
    *,
    owner: str,
    limit: int,
    lease_seconds: float,
    queues: Sequence[str] | None = None,
    exclude_queues: Sequence[str] = (),
    exclude_templates: Sequence[str] = (),
    expired_only: bool = False,
    transport: str | None = None,
) -> list[ClaimedMessage]:
    """Lease up to ``limit`` due messages to ``owner``, highest priority first.

    ``expired_only`` claims only rows past their age limit (``expires_at``): a
    worker whose transport is down claims these to dead-letter them.

    Due means ``pending`` with ``next_attempt_at`` in the past, or ``sending`` with an
    expired lease (its worker died or stalled). Claimed rows become ``sending`` with
    ``attempts + 1``, a fresh lease token and a lease expiry on the database clock.
    For a reclaimed row the abandoned attempt is logged as ``unknown``: nobody knows
    whether the server got it, and the row remembers when (``unknown_since``) and
    through which transport (``unknown_via``: the ``transport`` of the claim that
    abandoned it). Commit promptly: on SQLite the claim holds the write lock.
    """
    params = {"owner": owner, "token": str(uuid.uuid4()), "lease": lease_seconds,
              "limit": limit, "transport": transport}
    return store_for(conn).claim(conn, params, queues=queues, exclude_queues=exclude_queues,
                                 exclude_templates=exclude_templates,
                                 expired_only=expired_only)


def release(conn: Connection, leases: Iterable[tuple[int, str]]) -> int:
    """Give back claimed rows that were never started (shutdown): pending again, uncharged."""
    return store_for(conn).release(conn, leases)


def extend_leases(conn: Connection, leases: Iterable[tuple[int, str]], seconds: float) -> int:
    """Push the lease expiry of rows still held (heartbeat). Returns how many were held."""
    return store_for(conn).extend_leases(conn, leases, seconds)


def next_due_in(conn: Connection, queues: Sequence[str] | None = None,
                exclude_queues: Sequence[str] = (),
                exclude_templates: Sequence[str] = ()) -> float | None:
    """Seconds until the next message becomes due, 0 if one is due now, None if none waits.

    Messages in excluded (paused) queues or templates do not count: they wait for
    an operator, not for time.
    """
    soonest = func.min(
        func.coalesce(messages.c.lease_expires_at, messages.c.next_attempt_at)
    )
    live = messages.c.status.in_([Status.PENDING.value, Status.SENDING.value])
    cond = live if not queues else and_(live, messages.c.queue.in_(list(queues)))
    if exclude_queues:
        cond = and_(cond, messages.c.queue.not_in(list(exclude_queues)))
    if exclude_templates:
        tpl = messages.c.template
        cond = and_(cond, or_(tpl.is_(None), tpl.not_in(list(exclude_templates))))
    row = conn.execute(select(soonest, db_now()).where(cond)).one()
    at: datetime | None = aware(row[0])
    now: datetime | None = aware(row[1])
    if at is None or now is None:
        return None
    return max(0.0, (at - now).total_seconds())
