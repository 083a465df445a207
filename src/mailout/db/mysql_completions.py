"""Completions as one UPDATE per batch on MySQL 8 and MariaDB 10.6+ (``JSON_TABLE``).

PostgreSQL completes a batch with ``UPDATE ... FROM jsonb_to_recordset(...)``; the
MySQL form joins the messages to ``JSON_TABLE(:batch, ...)``. Without RETURNING, the
rows still held (lease token matches, status ``sending``) are first read with ``FOR
UPDATE``, so the update then changes exactly those and the rest are the fenced ones.

MySQL gives no order to the assignments of a multiple-table UPDATE, so none may read
a column another one changes: a batch that records an ``unknown`` outcome (which
reads ``unknown_since`` to set ``unknown_via``) is not done here; :func:`fits` says
so, and :mod:`mailout.db.outcomes` then completes it row by row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, and_, or_, select, text

from mailout.db.schema import messages
from mailout.models import Status

_COLUMNS = {  # the JSON_TABLE columns of _COMPLETE and their types
    "id": "BIGINT", "status": "VARCHAR(16)", "reason": "VARCHAR(64)",
    "reply_code": "SMALLINT", "reply_text": "TEXT", "provider_id": "VARCHAR(255)",
    "redirected_to": "VARCHAR(320)", "delay": "DOUBLE", "uncharge": "INT", "sent": "INT",
    "final": "INT", "settled": "LONGTEXT",
}
_SPEC = ", ".join(f"{c} {t} PATH '$.{c}'" for c, t in _COLUMNS.items())
# The rules of outcomes._complete_row_statement for rows whose outcome is known; each
# assignment reads only its own column and the batch. UTC_TIMESTAMP(6) is db_now().
_COMPLETE = text(f"""
UPDATE {messages.name} AS m
JOIN JSON_TABLE(:batch, '$[*]' COLUMNS ({_SPEC})) AS v ON m.id = v.id
SET m.status = v.status,
    m.reason = v.reason,
    m.lease_owner = NULL,
    m.lease_token = NULL,
    m.lease_expires_at = NULL,
    m.last_reply_code = CASE WHEN v.reply_code IS NULL THEN m.last_reply_code
                             ELSE v.reply_code END,
    m.last_reply_text = CASE WHEN v.reply_code IS NULL THEN m.last_reply_text
                             ELSE v.reply_text END,
    m.provider_message_id = COALESCE(v.provider_id, m.provider_message_id),
    m.redirected_to = COALESCE(v.redirected_to, m.redirected_to),
    m.sent_at = CASE WHEN v.sent = 1 THEN UTC_TIMESTAMP(6) ELSE m.sent_at END,
    m.finished_at = CASE WHEN v.final = 1 THEN UTC_TIMESTAMP(6) ELSE m.finished_at END,
    m.next_attempt_at = CASE WHEN v.delay IS NULL THEN m.next_attempt_at
        ELSE TIMESTAMPADD(MICROSECOND, CAST(v.delay * 1000000 AS SIGNED), UTC_TIMESTAMP(6))
        END,
    m.attempts = m.attempts - v.uncharge,
    m.settled = COALESCE(v.settled, m.settled)
""")  # noqa: S608 - only this module's constants are interpolated; values are bound


def fits(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Can this batch go as one statement: each row once, no unknown outcome?"""
    ids = [r["id"] for r in rows]
    return len(set(ids)) == len(ids) and not any(r["unknown"] for r in rows)


def complete(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> set[int]:
    """Apply ``rows`` (outcomes' completion rows) to the messages still held under
    their lease token; return the ids that were fenced out (held by nobody or by a
    newer claim). Two round trips whatever the batch size."""
    held_by = or_(*(and_(messages.c.id == r["id"], messages.c.lease_token == r["token"])
                    for r in rows))
    held = set(conn.scalars(select(messages.c.id)
                            .where(held_by, messages.c.status == Status.SENDING.value)
                            .with_for_update()))
    if held:
        batch = [_json_row(r) for r in rows if r["id"] in held]
        conn.execute(_COMPLETE, {"batch": json.dumps(batch, ensure_ascii=False)})
    return {r["id"] for r in rows} - held


def _json_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """One row as JSON_TABLE reads it: None left out (NULL), flags as 0/1, the settled
    map as its JSON text (a LONGTEXT column assigned to a JSON one)."""
    out: dict[str, Any] = {}
    for name in _COLUMNS:
        value = row[name]
        if value is None:
            continue
        if isinstance(value, bool):
            value = int(value)
        elif name == "settled":
            value = json.dumps(value, ensure_ascii=False)
        out[name] = value
    return out

