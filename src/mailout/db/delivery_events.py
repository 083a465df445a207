"""SQL for delivery events (``mailout_events``): linking them to outbox rows, storing
them once, and the counts the rate alert and the reports read.

Every function takes a SQLAlchemy ``Connection`` and runs inside the caller's
transaction. An event is stored with the dialect's insert-or-ignore, so two
concurrent copies of one webhook store one row: the second waits for the first's
commit and then inserts nothing. Suppressions are in :mod:`mailout.db.suppressions`,
webhook replay nonces in :mod:`mailout.db.webhook_nonces`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Float,
    bindparam,
    func,
    or_,
    select,
)

from mailout.db import dialects
from mailout.db.schema import (
    db_now,
    db_now_plus,
    events,
    messages,
)
from mailout.models import Event
from mailout.support.timeutil import aware

MATCHED_BY_PROVIDER_ID = "provider_id"
MATCHED_BY_MESSAGE_ID = "message_id"
MATCHED_BY_RETURN_PATH = "return_path"
# Reports that arrive as mail: anyone can send them, so unlinked ones are unverified and
# count for nothing (webhook events are signed by their provider).
MAIL_REPORT_PROVIDERS = ("dsn", "arf", "text_bounce")
SENDER_SIDE = ("sender_rejected",)  # bounce reasons that blame our sender, not the address


@dataclass(frozen=True, slots=True)
class Link:
    """The outbox row an event belongs to, and how it was found."""

    outbox_id: int
    matched_by: str
    recipient: str  # the row's recipient, for events that do not name one
    # Every address the row was sent to (recipient, To, Cc, Bcc, a redirect), lower case:
    # a report about any other address is not about this message.
    recipients: frozenset[str] = frozenset()
    # The W3C trace context the row was enqueued under (None: outside any trace): an
    # event's ingest span links to it.
    traceparent: str | None = None
    tracestate: str | None = None


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One stored event as operators see it (the payload is left out)."""

    id: int
    provider: str
    provider_event_id: str
    type: str
    subtype: str | None
    reason: str | None  # why a bounce happened (mailout.feedback.bounce_rules.Reason)
    recipient: str
    outbox_id: int | None
    matched_by: str | None
    provider_message_id: str | None
    message_id: str | None
    occurred_at: datetime
    received_at: datetime
    diagnostic: str | None


def _cut(value: str | None, limit: int) -> str | None:
    return value[:limit] if value else None


def _utc(value: datetime) -> datetime:
    # SQLite's DateTime binding drops the zone: convert first so the digits are UTC.
    return aware(value)


# -- linking -------------------------------------------------------------------------

def find_links(conn: Connection, *, provider_ids: Iterable[str] = (),
               message_ids: Iterable[str] = (), row_ids: Iterable[int] = ()
               ) -> dict[tuple[str, str], Link]:
    """Outbox rows by provider id, Message-ID and row id, in at most three queries.

    Keys are ``(MATCHED_BY_..., value)`` with the value as given (row ids as str).
    Several rows with one provider id (some providers reuse ids) give the newest.
    """
    found: dict[tuple[str, str], Link] = {}
    cols = (messages.c.id, messages.c.recipient, messages.c.addresses,
            messages.c.redirected_to, messages.c.traceparent, messages.c.tracestate)
    wanted = sorted({p for p in provider_ids if p})
    if wanted:
        rows = conn.execute(
            select(*cols, messages.c.provider_message_id)
            .where(messages.c.provider_message_id.is_not(None),
                   messages.c.provider_message_id.in_(wanted))
            .order_by(messages.c.id))
        for row in rows:
            found[(MATCHED_BY_PROVIDER_ID, row[-1])] = _link(row, MATCHED_BY_PROVIDER_ID)
    wanted = sorted({m for m in message_ids if m})
    if wanted:
        rows = conn.execute(select(*cols, messages.c.message_id)
                            .where(messages.c.message_id.in_(wanted)))
        for row in rows:
            found[(MATCHED_BY_MESSAGE_ID, row[-1])] = _link(row, MATCHED_BY_MESSAGE_ID)
    ids = sorted(set(row_ids))
    if ids:
        for by_id in conn.execute(select(*cols).where(messages.c.id.in_(ids))):
            found[(MATCHED_BY_RETURN_PATH, str(by_id[0]))] = _link(by_id,
                                                                  MATCHED_BY_RETURN_PATH)
    return found


def _link(row: Any, matched_by: str) -> Link:
    row_id, recipient, stored, redirected = row[0], row[1], row[2], row[3]
    every = {recipient, redirected}
    for kind in ("to", "cc", "bcc"):
        every.update(address for _name, address in (stored or {}).get(kind) or ())
    return Link(row_id, matched_by, recipient,
                frozenset(str(a).lower() for a in every if a), row[4], row[5])


# -- events --------------------------------------------------------------------------

def store_event(conn: Connection, event: Event, link: Link | None) -> int | None:
    """Insert ``event``; its new id, or None when (provider, event id) is already stored."""
    values: dict[str, Any] = {
        "provider": event.provider.value, "provider_event_id": event.event_id[:255],
        "type": event.type.value, "subtype": event.subtype, "reason": event.reason,
        "recipient": (event.recipient or (link.recipient.lower() if link else ""))[:320],
        "outbox_id": link.outbox_id if link else None,
        "matched_by": link.matched_by if link else None,
        "provider_message_id": _cut(event.provider_message_id, 255),
        "message_id": _cut(event.message_id, 255),
        "occurred_at": _utc(event.occurred_at), "received_at": db_now(),
        "diagnostic": event.diagnostic, "payload": event.payload or None,
    }
    row = dialects.insert_new_row(conn, events, ("provider", "provider_event_id"), values)
    return None if row is None else int(row[0])


def events_for(conn: Connection, outbox_id: int) -> list[EventRecord]:
    """Every event linked to one outbox row, oldest first."""
    stmt = (select(events).where(events.c.outbox_id == outbox_id)
            .order_by(events.c.occurred_at, events.c.id))
    return [_event_record(r._mapping) for r in conn.execute(stmt)]


def list_events(conn: Connection, *, unmatched: bool = False, types: Sequence[str] = (),
                provider: str | None = None, limit: int = 50) -> list[EventRecord]:
    """The newest events matching the filters, newest first."""
    stmt = select(events).order_by(events.c.id.desc()).limit(limit)
    if unmatched:
        stmt = stmt.where(events.c.outbox_id.is_(None))
    if types:
        stmt = stmt.where(events.c.type.in_(list(types)))
    if provider is not None:
        stmt = stmt.where(events.c.provider == provider)
    return [_event_record(r._mapping) for r in conn.execute(stmt)]


def _event_record(m: Mapping[Any, Any]) -> EventRecord:
    return EventRecord(
        id=m["id"], provider=m["provider"], provider_event_id=m["provider_event_id"],
        type=m["type"], subtype=m["subtype"], reason=m["reason"], recipient=m["recipient"],
        outbox_id=m["outbox_id"], matched_by=m["matched_by"],
        provider_message_id=m["provider_message_id"], message_id=m["message_id"],
        occurred_at=aware(m["occurred_at"]), received_at=aware(m["received_at"]),
        diagnostic=m["diagnostic"],
    )


def event_counts(conn: Connection, since_seconds: float | None = None
                 ) -> list[tuple[str, str, bool, int]]:
    """(provider, type, matched, count) over every event, or those received recently."""
    matched = events.c.outbox_id.is_not(None)
    stmt = (select(events.c.provider, events.c.type, matched, func.count())
            .group_by(events.c.provider, events.c.type, matched))
    if since_seconds is not None:
        stmt = stmt.where(events.c.received_at >= _ago(since_seconds))
    return [(p, t, bool(m), int(n)) for p, t, m, n in conn.execute(stmt)]


def soft_bounces(conn: Connection, address: str, window_seconds: float) -> int:
    """Verified soft bounces of ``address`` that happened within the window (database
    clock)."""
    stmt = (select(func.count()).select_from(events)
            .where(events.c.recipient == address, events.c.type == "bounced",
                   events.c.subtype == "soft", _verified(),
                   or_(events.c.reason.is_(None), events.c.reason.not_in(SENDER_SIDE)),
                   events.c.occurred_at >= _ago(window_seconds)))
    return int(conn.execute(stmt).scalar_one())


def rates(conn: Connection, window_seconds: float) -> tuple[int, int, int]:
    """(messages sent, verified hard or soft bounces, complaints) within the window."""
    sent = conn.execute(
        select(func.count()).select_from(messages)
        .where(messages.c.sent_at.is_not(None), messages.c.sent_at >= _ago(window_seconds))
    ).scalar_one()
    rows = conn.execute(
        select(events.c.type, func.count()).where(
            events.c.type.in_(["bounced", "complained"]), _verified(),
            events.c.occurred_at >= _ago(window_seconds))
        .group_by(events.c.type))
    counts = {str(kind): int(n) for kind, n in rows}
    return int(sent), int(counts.get("bounced", 0)), int(counts.get("complained", 0))


def per_template(conn: Connection, since_seconds: float
                 ) -> dict[tuple[str, str], tuple[int, int]]:
    """(template, queue) -> (bounced messages, complained messages), for messages
    created within the window. Distinct messages: three bounce reports for one
    message count once."""
    template = func.coalesce(messages.c.template, "(pre-rendered)")
    stmt = (
        select(template, messages.c.queue, events.c.type,
               func.count(func.distinct(messages.c.id)))
        .select_from(events.join(messages, events.c.outbox_id == messages.c.id))
        .where(messages.c.created_at >= _ago(since_seconds),
               events.c.type.in_(["bounced", "complained"]))
        .group_by(template, messages.c.queue, events.c.type))
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for tpl, queue, kind, n in conn.execute(stmt):
        bounced, complained = out.get((tpl, queue), (0, 0))
        out[(tpl, queue)] = (bounced + n, complained) if kind == "bounced" else (
            bounced, complained + n)
    return out


def _verified() -> Any:
    """Events that count: linked, or from a signed webhook (not an unlinked mail report)."""
    return or_(events.c.outbox_id.is_not(None),
               events.c.provider.not_in(MAIL_REPORT_PROVIDERS))


def _ago(seconds: float) -> Any:
    return db_now_plus(bindparam("ago", -float(seconds), Float))
