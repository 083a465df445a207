"""Time travel on the real database: make leases run out and retries fall due now.

A test that waits for a lease to expire or a backoff to pass would sleep for it, and
a sleep is either too short on a busy machine or too long everywhere. Scheduling runs
on the database's clock (:class:`mailout.db.schema.db_now`), so instead these helpers
move the stored times into the past, on the database's clock, and the next claim sees
what it would see later: nothing else about the rows changes.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Engine, Update, literal, update

from mailout.db.schema import db_now_plus, messages
from mailout.models import Status

PAST = -1.0  # seconds from the database's now: due, but not in any way special


def expire_leases(engine: Engine, ids: Iterable[int] | None = None) -> int:
    """End every lease now (of ``ids`` only, if given), as if its time had run out.

    The lease's owner and token stay: a late completion by its owner is still fenced
    by the token once another worker reclaims the row. Returns the rows changed.
    """
    statement = (update(messages).where(messages.c.lease_expires_at.is_not(None))
                 .values(lease_expires_at=db_now_plus(literal(PAST))))
    return _run(engine, statement, ids)


def make_due(engine: Engine, ids: Iterable[int] | None = None) -> int:
    """Make pending rows due now (``ids`` only, if given): their backoff has passed.

    Returns the rows changed.
    """
    statement = (update(messages).where(messages.c.status == Status.PENDING.value)
                 .values(next_attempt_at=db_now_plus(literal(PAST))))
    return _run(engine, statement, ids)


def _run(engine: Engine, statement: Update, ids: Iterable[int] | None) -> int:
    if ids is not None:
        statement = statement.where(messages.c.id.in_(list(ids)))
    with engine.begin() as conn:
        return conn.execute(statement).rowcount


def age_unknown(engine: Engine, seconds: float, ids: Iterable[int] | None = None) -> int:
    """Move the first unknown attempt of rows (``ids`` only, if given) ``seconds`` into
    the past, on the database's clock: a key window that was open has closed.

    Returns the rows changed.
    """
    statement = (update(messages).where(messages.c.unknown_since.is_not(None))
                 .values(unknown_since=db_now_plus(literal(-seconds))))
    return _run(engine, statement, ids)
