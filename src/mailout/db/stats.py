"""Counting SQL: the rollout report and queue depths for metrics."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, Connection, case, func, literal_column, select

from mailout.db import dialects
from mailout.db.delivery_events import per_template
from mailout.db.schema import db_now, messages
from mailout.models import Status
from mailout.support.timeutil import aware


@dataclass
class ReportRow:
    """One template and queue: what was enqueued since the cutoff, and how it ended."""

    template: str
    queue: str
    enqueued: int = 0
    sent: int = 0
    failed: int = 0
    dead: int = 0
    pending: int = 0  # pending, sending or parked unknown: not finished yet
    cancelled: dict[str, int] = field(default_factory=dict)  # by reason
    median_seconds_to_send: float | None = None
    p95_seconds_to_send: float | None = None
    bounced: int = 0  # messages with a bounce event (hard or soft)
    complained: int = 0  # messages with a complaint event
    bounce_rate: float | None = None  # bounced / sent; None before anything was sent
    complaint_rate: float | None = None


def rollout_report(conn: Connection, since: timedelta) -> list[ReportRow]:
    """Per template and queue, for messages created within ``since`` of now (DB clock).

    This is the count comparison a rollout needs: events in, e-mails queued, sent,
    failed, cancelled; and how many of the sent came back as bounces or complaints.
    It reads the rows created in the window (an index on ``created_at``), so keep the
    window to days, not months.
    """
    now = conn.execute(select(db_now())).scalar_one()
    cutoff = now - since
    rows = conn.execute(
        select(messages.c.template, messages.c.queue, messages.c.status, messages.c.reason,
               messages.c.created_at, messages.c.sent_at)
        .where(messages.c.created_at >= _same_kind(cutoff, now))
    )
    out: dict[tuple[str, str], ReportRow] = {}
    waits: dict[tuple[str, str], list[float]] = {}
    for template, queue, status, reason, created, sent in rows:
        key = (template or "(pre-rendered)", queue)
        row = out.setdefault(key, ReportRow(*key))
        row.enqueued += 1
        _count(row, status, reason)
        if status == Status.SENT.value and sent is not None and created is not None:
            waits.setdefault(key, []).append((sent - created).total_seconds())
    for key, seconds in waits.items():
        out[key].median_seconds_to_send = statistics.median(seconds)
        out[key].p95_seconds_to_send = _p95(seconds)
    for key, (bounced, complained) in per_template(conn, since.total_seconds()).items():
        if key in out:
            out[key].bounced, out[key].complained = bounced, complained
    for row in out.values():
        if row.sent:
            row.bounce_rate = row.bounced / row.sent
            row.complaint_rate = row.complained / row.sent
    return [out[k] for k in sorted(out)]


def _same_kind(cutoff: datetime, now: datetime) -> datetime:
    # SQLite hands back naive UTC times; compare like with like.
    return cutoff.replace(tzinfo=None) if now.tzinfo is None else cutoff


def _count(row: ReportRow, status: str, reason: str | None) -> None:
    if status == Status.SENT.value:
        row.sent += 1
    elif status == Status.FAILED.value:
        row.failed += 1
    elif status == Status.DEAD.value:
        row.dead += 1
    elif status == Status.CANCELLED.value:
        row.cancelled[reason or "operator"] = row.cancelled.get(reason or "operator", 0) + 1
    else:
        row.pending += 1


def _p95(values: list[float]) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


# Literals, not bound parameters: a cached generic plan for "status = $1" could not use
# the partial indexes (WHERE status = 'pending' / 'sending').
_PENDING: ColumnElement[str] = literal_column(f"'{Status.PENDING.value}'")
_SENDING: ColumnElement[str] = literal_column(f"'{Status.SENDING.value}'")


@dataclass(frozen=True)
class QueueDepths:
    """Live rows per queue, read through the claim's partial indexes."""

    now: datetime  # the database clock, UTC
    pending: list[tuple[str, int, int, datetime | None]]  # queue, count, due, oldest due time
    sending: list[tuple[str, int]]  # queue, count


def queue_depths(conn: Connection, *, statement_timeout_ms: int) -> QueueDepths:
    """Pending and sending counts per queue and the oldest pending time, cheaply: only
    live rows, through the partial indexes. A stuck query is cut off after
    ``statement_timeout_ms`` where the database allows it."""
    dialects.limit_statement_time(conn, statement_timeout_ms)
    now = aware(conn.execute(select(db_now())).scalar_one())
    pending = conn.execute(
        select(messages.c.queue, func.count(),
               func.count(case((messages.c.next_attempt_at <= db_now(), 1))),
               func.min(messages.c.next_attempt_at))
        .where(messages.c.status == _PENDING)
        .group_by(messages.c.queue)).all()
    sending = conn.execute(
        select(messages.c.queue, func.count())
        .where(messages.c.status == _SENDING)
        .group_by(messages.c.queue)).all()
    return QueueDepths(
        now=now,
        pending=[(q, int(n), int(due), aware(oldest)) for q, n, due, oldest in pending],
        sending=[(q, int(n)) for q, n in sending],
    )
