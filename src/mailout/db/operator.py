"""Operator SQL: status counts, listing, lookups, requeue and cancel.

Purging lives in :mod:`mailout.db.purging`.

Every function takes a SQLAlchemy ``Connection`` and runs inside the caller's
transaction; the caller decides where transactions begin and end. Times that
decide anything ("due", "older than", "now") come from the database clock, so the
answers agree with what the workers see. Records never carry a message's params
or body: operator output must not leak customer content.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Float,
    and_,
    bindparam,
    distinct,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.sql.elements import ColumnElement

from mailout.db import dialects
from mailout.db.outages import TransportTrouble, transport_trouble
from mailout.db.schema import (
    attempts,
    db_now,
    db_now_plus,
    messages,
)
from mailout.models import Outcome, Status
from mailout.support.timeutil import aware

# Statuses an operator may send back to pending after reviewing them.
RETRYABLE = frozenset({Status.DEAD, Status.FAILED, Status.UNKNOWN, Status.CANCELLED})
OPERATOR_REASON = "operator"

_SUMMARY_COLUMNS = (
    "id", "idempotency_key", "queue", "priority", "status", "reason", "recipient", "sender",
    "template", "subject", "message_id", "provider_message_id", "attempts", "next_attempt_at",
    "expires_at", "lease_owner", "lease_expires_at", "last_reply_code", "last_reply_text",
    "created_at", "first_attempt_at", "last_attempt_at", "sent_at", "finished_at", "locale",
)


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """One outbox row as an operator sees it: no params, no body."""

    id: int
    key: str
    queue: str
    priority: int
    status: str
    reason: str | None
    recipient: str
    sender: str | None
    template: str | None
    subject: str | None  # only stored for messages enqueued without a template
    message_id: str
    provider_message_id: str | None
    attempts: int
    next_attempt_at: datetime | None
    expires_at: datetime | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    last_reply_code: int | None
    last_reply_text: str | None
    created_at: datetime | None
    first_attempt_at: datetime | None
    last_attempt_at: datetime | None
    sent_at: datetime | None
    finished_at: datetime | None
    locale: str | None = None  # the template variant asked for


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One line of a message's attempt log."""

    attempt: int
    outcome: str
    stage: str | None
    reply_code: int | None
    enhanced_code: str | None
    reply_text: str | None
    detail: str | None
    recipient: str | None
    worker: str | None
    started_at: datetime | None
    finished_at: datetime | None
    charged: bool = True  # False: an outage or configuration error, given back


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """Counts and lag of one queue. Ages are seconds on the database clock."""

    queue: str
    counts: dict[str, int]  # every status, zeros included
    due: int  # pending rows whose time has come, plus rows whose lease ran out
    oldest_due_age_seconds: float | None  # since the oldest due row was created
    due_lag_seconds: float | None  # since the longest-waiting due row became due


@dataclass(frozen=True, slots=True)
class StatusReport:
    """What ``mailout status`` shows."""

    now: datetime
    totals: dict[str, int]
    queues: list[QueueStatus]
    retrying: int  # pending after at least one failed attempt
    dead: int
    unknown_attempts: int  # attempt rows whose outcome is unknown
    unknown_messages: int  # distinct messages with at least one such attempt
    held_unknown: int  # rows parked in status unknown, awaiting review
    last_sent_at: datetime | None
    transport: TransportTrouble | None = None  # an outage or pause going on now


@dataclass(frozen=True, slots=True)
class Change:
    """The result of an operator change: the ids changed, and why others were not."""

    changed: list[int]
    skipped: dict[int, str]  # id -> its current status, or "not found"


def _utc(value: datetime) -> datetime:
    # SQLite's DateTime binding drops the zone: convert first so the digits are UTC.
    return aware(value)


def _seconds_between(later: datetime | None, earlier: datetime | None) -> float | None:
    a, b = aware(later), aware(earlier)
    return None if a is None or b is None else max(0.0, (a - b).total_seconds())


def record_from_row(m: Mapping[Any, Any]) -> MessageRecord:
    """A :class:`MessageRecord` from a row of :func:`summary_select`."""
    values = {c: m[c] for c in _SUMMARY_COLUMNS if c != "idempotency_key"}
    for name, value in values.items():
        if isinstance(value, datetime):
            values[name] = aware(value)
    return MessageRecord(key=m["idempotency_key"], **values)


def summary_select() -> Any:
    """SELECT of the operator-visible columns: never params or bodies."""
    return select(*(messages.c[c] for c in _SUMMARY_COLUMNS))


def _due_now() -> ColumnElement[bool]:
    return or_(
        and_(messages.c.status == Status.PENDING.value, messages.c.next_attempt_at <= db_now()),
        and_(messages.c.status == Status.SENDING.value, messages.c.lease_expires_at <= db_now()),
    )


def status(conn: Connection) -> StatusReport:
    """Counts per status and queue, due backlog and lag, retrying/dead/unknown numbers.

    Run it in one transaction (``engine.connect()`` does) so the numbers agree. The
    per-status counts read every row; on very large tables that takes a while.
    """
    now = aware(conn.execute(select(db_now())).scalar_one())
    assert now is not None  # the database always knows the time
    counts = _counts_by_queue(conn)
    due = _due_by_queue(conn)
    queues = []
    for name in sorted(counts):
        n, oldest, due_at = due.get(name, (0, None, None))
        queues.append(QueueStatus(name, counts[name], n, _seconds_between(now, oldest),
                                  _seconds_between(now, due_at)))
    totals = {s.value: sum(q.counts[s.value] for q in queues) for s in Status}
    n_attempts, n_messages = _unknown_attempts(conn)
    retrying = conn.execute(
        select(func.count())
        .select_from(messages)
        .where(messages.c.status == Status.PENDING.value, messages.c.attempts > 0)
    ).scalar_one()
    return StatusReport(
        now=now, totals=totals, queues=queues, retrying=retrying,
        dead=totals[Status.DEAD.value], unknown_attempts=n_attempts,
        unknown_messages=n_messages, held_unknown=totals[Status.UNKNOWN.value],
        last_sent_at=_last_sent(conn), transport=transport_trouble(conn),
    )


def _counts_by_queue(conn: Connection) -> dict[str, dict[str, int]]:
    counted = select(messages.c.queue, messages.c.status, func.count()).group_by(
        messages.c.queue, messages.c.status
    )
    per_queue: dict[str, dict[str, int]] = {}
    for queue, st, n in conn.execute(counted):
        per_queue.setdefault(queue, {s.value: 0 for s in Status})[st] = n
    return per_queue


def _due_by_queue(conn: Connection) -> dict[str, tuple[int, datetime | None, datetime | None]]:
    """queue -> (due rows, oldest created_at among them, earliest time one became due)."""
    due_rows = select(
        messages.c.queue, func.count(), func.min(messages.c.created_at),
        func.min(func.coalesce(messages.c.lease_expires_at, messages.c.next_attempt_at)),
    ).where(_due_now()).group_by(messages.c.queue)
    return {q: (n, created, at) for q, n, created, at in conn.execute(due_rows)}


def _unknown_attempts(conn: Connection) -> tuple[int, int]:
    """(attempt rows with an unknown outcome, distinct messages among them)."""
    row = conn.execute(
        select(func.count(), func.count(distinct(attempts.c.outbox_id)))
        .select_from(attempts)
        .where(attempts.c.outcome == Outcome.UNKNOWN.value)
    ).one()
    return row[0], row[1]


def _last_sent(conn: Connection) -> datetime | None:
    # The newest finished sent row, through the index on finished_at (set in the same
    # update as sent_at): max(sent_at) would read the whole table.
    last: datetime | None = conn.execute(
        select(messages.c.sent_at)
        .where(messages.c.status == Status.SENT.value, messages.c.finished_at.is_not(None))
        .order_by(messages.c.finished_at.desc())
        .limit(1)
    ).scalar_one_or_none()
    return aware(last)


def list_messages(
    conn: Connection,
    *,
    statuses: Sequence[str] = (),
    queue: str | None = None,
    template: str | None = None,
    since: datetime | timedelta | None = None,
    limit: int = 50,
) -> list[MessageRecord]:
    """The newest rows matching every filter given, newest first.

    ``since`` is a moment (naive means UTC) or a span back from the database's now,
    compared with ``created_at``.
    """
    stmt = summary_select().order_by(messages.c.id.desc()).limit(limit)
    if statuses:
        stmt = stmt.where(messages.c.status.in_(list(statuses)))
    if queue is not None:
        stmt = stmt.where(messages.c.queue == queue)
    if template is not None:
        stmt = stmt.where(messages.c.template == template)
    if isinstance(since, timedelta):
        stmt = stmt.where(messages.c.created_at >= _ago(since))
    elif since is not None:
        stmt = stmt.where(messages.c.created_at >= _utc(since))
    return [record_from_row(r._mapping) for r in conn.execute(stmt)]


def _ago(span: timedelta) -> ColumnElement[Any]:
    return db_now_plus(bindparam("ago", -span.total_seconds(), Float))


MAX_ROW_ID = 2**63 - 1  # ids are 64-bit signed integers in every database


def find(conn: Connection, ref: str) -> tuple[MessageRecord, str] | None:
    """The row ``ref`` names, and what it matched as: "id", "key", "message_id" or
    "provider_id". Tried in that order; a Message-ID may be given without its <>.
    Several rows with one provider id (some providers reuse ids) give the newest.
    """
    ref = ref.strip()
    candidates: list[tuple[str, ColumnElement[bool]]] = []
    # ASCII digits only ("²".isdigit() is true), and only ids a row can have.
    if ref.isascii() and ref.isdigit() and int(ref) <= MAX_ROW_ID:
        candidates.append(("id", messages.c.id == int(ref)))
    bare = ref.strip("<>")
    candidates += [
        ("key", messages.c.idempotency_key == ref),
        ("message_id", messages.c.message_id.in_([ref, f"<{bare}>"])),
        # IS NOT NULL lets the partial index on provider ids serve this lookup.
        ("provider_id", and_(messages.c.provider_message_id.is_not(None),
                             messages.c.provider_message_id.in_([ref, bare]))),
    ]
    for how, cond in candidates:
        row = conn.execute(summary_select().where(cond).order_by(messages.c.id.desc())).first()
        if row is not None:
            return record_from_row(row._mapping), how
    return None


def attempt_log(conn: Connection, message_id: int) -> list[AttemptRecord]:
    """Every logged attempt of one row, oldest first."""
    stmt = (
        select(attempts)
        .where(attempts.c.outbox_id == message_id)
        .order_by(attempts.c.started_at, attempts.c.id)
    )
    return [
        AttemptRecord(
            attempt=r.attempt, outcome=r.outcome, stage=r.stage, reply_code=r.reply_code,
            enhanced_code=r.enhanced_code, reply_text=r.reply_text, detail=r.detail,
            recipient=r.recipient, worker=r.worker, started_at=aware(r.started_at),
            finished_at=aware(r.finished_at), charged=bool(r.charged),
        )
        for r in conn.execute(stmt)
    ]


def retryable_ids(
    conn: Connection, status: str, *, queue: str | None = None, template: str | None = None
) -> list[int]:
    """Ids in ``status`` (one of :data:`RETRYABLE`) matching the filters, oldest first."""
    if Status(status) not in RETRYABLE:
        raise ValueError(f"status {status!r} cannot be retried")
    stmt = select(messages.c.id).where(messages.c.status == status).order_by(messages.c.id)
    if queue is not None:
        stmt = stmt.where(messages.c.queue == queue)
    if template is not None:
        stmt = stmt.where(messages.c.template == template)
    return list(conn.scalars(stmt))


def requeue(conn: Connection, ids: Iterable[int]) -> Change:
    """Send reviewed rows back to pending, as if new: attempts 0, due now (database
    clock), reason, finish time and lease cleared, an earlier unknown attempt counted
    as settled. Message-ID and key are kept, so a provider that already has the
    message can recognise a resend.

    Only rows in :data:`RETRYABLE` change; the others are reported in ``skipped``.
    A row with an age limit gets its whole original window again (counted from
    now), or a message that died of old age would die again at once.
    """
    wanted = sorted(set(ids))
    rows = conn.execute(
        select(messages.c.id, messages.c.status, messages.c.created_at, messages.c.expires_at)
        .where(messages.c.id.in_(wanted))
    ).all()
    by_window: dict[float | None, list[int]] = {}
    for r in rows:
        if Status(r.status) in RETRYABLE:
            window = _seconds_between(r.expires_at, r.created_at)
            by_window.setdefault(None if window is None else round(window), []).append(r.id)
    changed: list[int] = []
    for window, group in by_window.items():
        values: dict[str, Any] = {
            "status": Status.PENDING.value, "attempts": 0, "next_attempt_at": db_now(),
            "reason": None, "finished_at": None, "lease_owner": None, "lease_token": None,
            "lease_expires_at": None,
            # Reviewed: an earlier unknown attempt no longer holds the resend back (the
            # key still goes out, so a provider inside its window still drops a copy).
            "unknown_since": None, "unknown_via": None,
        }
        if window is not None:
            values["expires_at"] = db_now_plus(bindparam("window", window, Float))
        stmt = (
            update(messages)
            .where(messages.c.id.in_(group), _in_statuses(RETRYABLE))  # re-checked: races
            .values(values)
        )
        changed += dialects.updated_ids(conn, stmt, messages.c.id)
    _forget_refusals(conn, changed)
    return Change(sorted(changed), skipped_statuses(conn, wanted, changed))


def _forget_refusals(conn: Connection, ids: Sequence[int]) -> None:
    """A requeued message to several recipients is tried again for those refused or
    given up on; those that accepted it are not sent it again."""
    if not ids:
        return
    found = conn.execute(select(messages.c.id, messages.c.settled)
                         .where(messages.c.id.in_(list(ids)), messages.c.settled.is_not(None)))
    for rid, settled in found.all():
        kept = {a: s for a, s in (settled or {}).items() if s == "sent"}
        conn.execute(update(messages).where(messages.c.id == rid)
                     .values(settled=kept or None))


def cancel(conn: Connection, ids: Iterable[int]) -> Change:
    """Withdraw pending rows (reason "operator"); rows in any other status are skipped.

    A row being sent right now (``sending``) cannot be cancelled: its SMTP dialogue
    is already under way.
    """
    wanted = sorted(set(ids))
    stmt = (
        update(messages)
        .where(messages.c.id.in_(wanted), messages.c.status == Status.PENDING.value)
        .values(status=Status.CANCELLED.value, reason=OPERATOR_REASON, finished_at=db_now())
    )
    changed = dialects.updated_ids(conn, stmt, messages.c.id)
    return Change(sorted(changed), skipped_statuses(conn, wanted, changed))


def _in_statuses(statuses: Iterable[Status]) -> ColumnElement[bool]:
    return messages.c.status.in_(sorted(s.value for s in statuses))


def skipped_statuses(conn: Connection, wanted: list[int],
                     changed: Iterable[int]) -> dict[int, str]:
    """For the ids of ``wanted`` not in ``changed``: id -> current status or "not found"."""
    rest = sorted(set(wanted) - set(changed))
    rows = conn.execute(select(messages.c.id, messages.c.status).where(messages.c.id.in_(rest)))
    found = {r.id: r.status for r in rows}
    return {i: found.get(i, "not found") for i in rest}


def mark_sent(conn: Connection, ids: list[int], provider_id: str | None) -> list[int]:
    """Settle parked ``unknown`` rows as sent (the operator confirmed delivery)."""
    values: dict[str, Any] = {
        "status": Status.SENT.value, "reason": "confirmed_by_operator",
        "sent_at": db_now(), "finished_at": db_now(),
    }
    if provider_id is not None:
        values["provider_message_id"] = provider_id
    stmt = (update(messages)
            .where(messages.c.id.in_(ids), messages.c.status == Status.UNKNOWN.value)
            .values(values))
    return sorted(dialects.updated_ids(conn, stmt, messages.c.id))


def unknown_ids(conn: Connection, ids: list[int]) -> list[int]:
    """Those of ``ids`` whose row is parked in ``unknown``."""
    stmt = select(messages.c.id).where(messages.c.id.in_(ids),
                                       messages.c.status == Status.UNKNOWN.value)
    return sorted(conn.execute(stmt).scalars())


def count_messages(conn: Connection) -> dict[str, int]:
    """How many messages are in each status (``mailout.count_messages``): every
    status is a key, 0 when none. For an application's own health page."""
    return dict(status(conn).totals)
