"""The audit log: who did what to which messages, when and why.

Every operator change (console, CLI, API) writes one entry through
:func:`record`, in the same transaction as the change itself, so an entry exists
exactly when its change was committed. Entries name the messages they changed
(``mailout_audit_messages``), so a message's page and ``mailout show`` list its
history. Times come from the database clock. Entries hold no message content:
the target is ids, a queue or template name, or a filter description.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, insert, select

from mailout.db.schema import audit, audit_messages, db_now
from mailout.support.timeutil import aware

ACTOR_MAX = 200
TARGET_MAX = 500
REASON_MAX = 500
_SHOWN_IDS = 10  # a target names at most this many ids, then "+N more"


class AuditAction(enum.StrEnum):
    """What an operator did."""

    RETRY = "retry"  # requeued reviewed dead/failed/unknown/cancelled rows
    CANCEL = "cancel"  # withdrew pending rows
    RESOLVE_SENT = "resolve_sent"  # settled parked unknown rows as delivered
    RESOLVE_RETRY = "resolve_retry"  # settled parked unknown rows as not delivered: resend
    PAUSE = "pause"  # stopped a queue or template on every worker
    RESUME = "resume"  # undid a pause
    PURGE = "purge"  # deleted old finished rows
    SIGN_IN = "sign_in"  # opened a console session (target: the client address)
    SIGN_IN_FAILED = "sign_in_failed"  # a console sign-in with a wrong token
    SIGN_OUT = "sign_out"  # ended a console session


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One operator action as the log keeps it."""

    id: int
    created_at: datetime
    actor: str
    action: str
    target: str
    reason: str | None
    changed: int  # rows (or switches) the action changed
    skipped: int  # rows it was asked to change but left alone (wrong status, gone)


def describe_ids(ids: Sequence[int]) -> str:
    """``message 4``, ``messages 4, 7, 9`` or ``messages 1, 2, ... (+990 more)``."""
    shown = ", ".join(str(i) for i in list(ids)[:_SHOWN_IDS])
    more = f" (+{len(ids) - _SHOWN_IDS} more)" if len(ids) > _SHOWN_IDS else ""
    return f"message {shown}" if len(ids) == 1 else f"messages {shown}{more}"


def _clip(value: str, limit: int) -> str:
    # Control characters would garble a terminal; the log keeps the rest verbatim.
    cleaned = "".join(c if c.isprintable() else " " for c in value)
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


def record(
    conn: Connection,
    *,
    actor: str,
    action: AuditAction,
    target: str,
    reason: str | None = None,
    changed: Iterable[int] = (),
    changed_count: int | None = None,
    skipped: int = 0,
) -> int:
    """Write one entry in the caller's transaction and return its id.

    ``changed`` lists the message ids the action changed (linked to the entry);
    ``changed_count`` overrides the count for actions that change something else
    (a pause switch) or too many rows to list (a purge). Over-long or
    control-character-laden actor, target and reason are cleaned and clipped,
    never refused: the action already happened. An empty actor raises ValueError.
    """
    if not actor.strip():
        raise ValueError("an audit entry needs an actor")
    ids = sorted(set(changed))
    # inserted_primary_key: RETURNING where the database has it, the insert id on MySQL.
    key = conn.execute(
        insert(audit).values(
            created_at=db_now(), actor=_clip(actor.strip(), ACTOR_MAX), action=action.value,
            target=_clip(target, TARGET_MAX),
            reason=_clip(reason.strip(), REASON_MAX) if reason and reason.strip() else None,
            changed=len(ids) if changed_count is None else changed_count, skipped=skipped,
        )
    ).inserted_primary_key
    assert key is not None  # a one-row INSERT always has one
    entry_id = int(key[0])
    if ids:
        conn.execute(insert(audit_messages),
                     [{"audit_id": entry_id, "outbox_id": i} for i in ids])
    return entry_id


def _entry(row: Row[Any]) -> AuditEntry:
    r = row._mapping
    created = aware(r["created_at"])
    assert created is not None  # NOT NULL column
    return AuditEntry(id=r["id"], created_at=created, actor=r["actor"], action=r["action"],
                      target=r["target"], reason=r["reason"], changed=r["changed"],
                      skipped=r["skipped"])


def entries(conn: Connection, *, before: int | None = None, limit: int = 50) -> list[AuditEntry]:
    """The newest entries, newest first; ``before`` an entry id pages back (keyset)."""
    stmt = select(audit).order_by(audit.c.id.desc()).limit(limit)
    if before is not None:
        stmt = stmt.where(audit.c.id < before)
    return [_entry(r) for r in conn.execute(stmt)]


def for_message(conn: Connection, message_id: int) -> list[AuditEntry]:
    """Every entry that changed message ``message_id``, oldest first."""
    stmt = (
        select(audit)
        .join(audit_messages, audit_messages.c.audit_id == audit.c.id)
        .where(audit_messages.c.outbox_id == message_id)
        .order_by(audit.c.id)
    )
    return [_entry(r) for r in conn.execute(stmt)]
