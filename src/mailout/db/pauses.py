"""Operator pauses: a queue or a template switched off for every worker, in the database."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, delete, insert, select

from mailout.db.schema import db_now, pauses


def set_pause(conn: Connection, kind: str, name: str, reason: str | None = None) -> bool:
    """Pause a queue or template for every worker. False if it was already paused."""
    exists = conn.execute(select(pauses.c.name).where(
        pauses.c.kind == kind, pauses.c.name == name)).first()
    if exists:
        return False
    conn.execute(insert(pauses).values(kind=kind, name=name, reason=reason,
                                       created_at=db_now()))
    return True


def clear_pause(conn: Connection, kind: str, name: str) -> bool:
    """Resume a paused queue or template. False if it was not paused."""
    gone = conn.execute(delete(pauses).where(pauses.c.kind == kind, pauses.c.name == name))
    return bool(gone.rowcount)


def list_pauses(conn: Connection) -> list[dict[str, Any]]:
    rows = conn.execute(select(pauses).order_by(pauses.c.kind, pauses.c.name))
    return [dict(r._mapping) for r in rows]
