"""What a claim reads back, and how it becomes :class:`~mailout.models.ClaimedMessage`
records: the columns, their decoding, and the log rows of abandoned attempts (a
reclaimed row's attempt whose lease ran out, logged as ``unknown``).

Shared by every store's claim (:mod:`mailout.db.stores`); the operator reads in
:mod:`mailout.db.browse` decode stored addresses the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, insert

from mailout.db.schema import attempts, db_now, messages
from mailout.models import ClaimedMessage, Mailbox, Outcome, Status
from mailout.support.timeutil import aware

ABANDONED_DETAIL = "lease expired before the attempt finished"


# What a claim reads back: the columns _claimed and _log_abandoned use, and no more
# (each column returned costs a conversion per claimed row).
CLAIMED_COLUMNS = tuple(messages.c[name] for name in (
    "id", "idempotency_key", "queue", "priority", "recipient", "sender", "template", "params",
    "subject", "body_text", "body_html", "headers", "message_id", "attempts",
    "unknown_attempts", "created_at", "expires_at", "lease_token", "last_attempt_at",
    "event_ref", "event_version", "schema_version", "addresses", "locale",
    "attachment_digest", "settled", "unknown_since", "unknown_via", "mime",
    "batch", "traceparent", "tracestate"))


def claimed_rows(conn: Connection, rows: Sequence[Mapping[Any, Any]], *,
                  logged: bool = False) -> list[ClaimedMessage]:
    """``rows`` as ClaimedMessages, highest priority first; unless the claim ``logged``
    them itself, the abandoned attempts of reclaimed rows are logged here."""
    claimed = [_claimed(r) for r in rows]
    if not logged:
        _log_abandoned(conn, [r for r in rows if r["prev_status"] == Status.SENDING.value])
    claimed.sort(key=lambda m: (-m.priority, m.id))
    return claimed


def _claimed(m: Mapping[Any, Any]) -> ClaimedMessage:
    return ClaimedMessage(
        id=m["id"],
        key=m["idempotency_key"],
        queue=m["queue"],
        priority=m["priority"],
        recipient=m["recipient"],
        sender=m["sender"],
        template=m["template"],
        params=m["params"],
        subject=m["subject"],
        text=m["body_text"],
        html=m["body_html"],
        headers=m["headers"],
        message_id=m["message_id"],
        attempts=m["attempts"],
        unknown_attempts=m["unknown_attempts"],
        created_at=aware(m["created_at"]) or datetime.now(UTC),
        expires_at=aware(m["expires_at"]),
        lease_token=m["lease_token"],
        claimed_at=aware(m["last_attempt_at"]) or datetime.now(UTC),
        reclaimed=m["prev_status"] == Status.SENDING.value,
        event_ref=m["event_ref"],
        event_version=m["event_version"],
        schema_version=m["schema_version"],
        suppressed=bool(m.get("suppressed")),
        **stored_addresses(m["addresses"]),
        locale=m["locale"],
        has_attachments=m["attachment_digest"] is not None,
        settled=m["settled"] or {},
        unknown_since=aware(m["unknown_since"]),
        unknown_via=m["unknown_via"],
        mime=None if m["mime"] is None else bytes(m["mime"]),
        batch=m["batch"],
        traceparent=m["traceparent"],
        tracestate=m["tracestate"],
    )


_ADDRESS_FIELDS = ("to", "cc", "bcc", "reply_to")


def stored_addresses(stored: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``addresses`` column ({"to": [[name, address], ...], ...}) as mailboxes."""
    if not stored:
        return {}
    return {f: tuple(Mailbox(address, name) for name, address in stored.get(f) or ())
            for f in _ADDRESS_FIELDS}


def _log_abandoned(conn: Connection, rows: Sequence[Mapping[Any, Any]]) -> None:
    if not rows:
        return
    conn.execute(
        insert(attempts).values(finished_at=db_now()),
        [
            {
                "outbox_id": r["id"],
                "attempt": r["attempts"] - 1,
                "outcome": Outcome.UNKNOWN.value,
                "detail": ABANDONED_DETAIL,
                "worker": r["prev_owner"],
                "started_at": r["prev_started"],
                "transport": r["prev_transport"],
            }
            for r in rows
        ],
    )
