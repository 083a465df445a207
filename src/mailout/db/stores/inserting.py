"""What every store's INSERT of new rows shares: the columns, their parameters, the
record of where each idempotency key landed, and the rows already holding keys.

Each store writes its own INSERT (:meth:`mailout.db.stores.base.Store.insert`); the
batch is deduplicated by :func:`mailout.db.inserts.insert_messages` first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Float, bindparam, func, select

from mailout.db.schema import Timestamp, db_now, db_now_plus, messages
from mailout.models import Status

NOTIFY_CHANNEL = "mailout"  # mailout.db.notifications listens here; the payload is the queue

# The columns that make two messages "the same" for idempotency.
CONTENT_COLUMNS = (
    "recipient", "sender", "queue", "template", "params", "subject", "body_text",
    "body_html", "headers", "addresses", "locale", "attachment_digest",
)


@dataclass(frozen=True, slots=True)
class Stored:
    """Where an idempotency key landed: the row holding it and whether we wrote it."""

    id: int
    message_id: str
    created: bool
    content: Mapping[str, Any]


def existing(conn: Connection, keys: Sequence[str]) -> dict[str, Stored]:
    """The rows already holding ``keys``, with their content (none of them ours)."""
    cols = [messages.c.id, messages.c.idempotency_key, messages.c.message_id]
    cols += [messages.c[c] for c in CONTENT_COLUMNS]
    found = conn.execute(select(*cols).where(messages.c.idempotency_key.in_(list(keys))))
    held: dict[str, Stored] = {}
    for r in found:
        m = r._mapping
        held[m["idempotency_key"]] = Stored(m["id"], m["message_id"], False, dict(m))
    return held


ROW_COLUMNS = (*CONTENT_COLUMNS, "idempotency_key", "priority", "message_id",
                "event_ref", "event_version", "schema_version")
# The enqueue's W3C trace context (mailout.support.tracing): in a row only when the
# caller had an active span, so they are read with .get().
TRACE_COLUMNS = ("traceparent", "tracestate")
LITERAL_COLUMNS = (*ROW_COLUMNS, *TRACE_COLUMNS)
# Times come from the database clock unless the caller scheduled the message.
INSERT_VALUES: dict[str, Any] = {
    **{c: bindparam(c, type_=messages.c[c].type) for c in LITERAL_COLUMNS},
    "status": Status.PENDING.value,
    "created_at": db_now(),
    "next_attempt_at": func.coalesce(bindparam("send_at", type_=Timestamp), db_now()),
    "expires_at": func.coalesce(
        bindparam("expires_at", type_=Timestamp),
        db_now_plus(bindparam("expires_in", type_=Float)),
    ),
}


def insert_params(row: Mapping[str, Any]) -> dict[str, Any]:
    params = {c: row[c] for c in ROW_COLUMNS}
    params["traceparent"] = row.get("traceparent")
    params["tracestate"] = row.get("tracestate")
    send_at: datetime | None = row["send_at"]
    params["send_at"] = send_at
    params["expires_in"] = row["expires_in"]
    params["expires_at"] = (
        None if send_at is None else send_at + timedelta(seconds=row["expires_in"])
    )
    return params


def with_existing(conn: Connection, first: Mapping[str, Mapping[str, Any]],
                  created: dict[str, Stored]) -> dict[str, Stored]:
    """``created``, plus the rows already holding the keys of ``first`` it lacks."""
    missing = [k for k in first if k not in created]
    if missing:
        created.update(existing(conn, missing))
    return created
