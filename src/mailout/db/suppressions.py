"""SQL for the suppression list (``mailout_suppressions``) and its log
(``mailout_suppression_log``).

Every function takes a SQLAlchemy ``Connection`` and runs inside the caller's
transaction. An address suppressed twice (two copies of one webhook, a bounce and
then a complaint) is added with the dialect's insert-or-ignore: the first reason
stays, and the second copy waits for the first's commit and then inserts nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select

from mailout.db import dialects
from mailout.db.schema import db_now, suppression_log, suppressions
from mailout.support.timeutil import aware

ADDED = "added"
REMOVED = "removed"


@dataclass(frozen=True, slots=True)
class Suppression:
    """One suppressed address: why, since when, because of which event, added by whom."""

    address: str
    reason: str
    event_id: int | None
    detail: str | None
    created_by: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class SuppressionChange:
    """One line of the suppression log."""

    address: str
    action: str  # added or removed
    reason: str | None
    event_id: int | None
    actor: str | None
    note: str | None
    at: datetime


def _cut(value: str | None, limit: int) -> str | None:
    return value[:limit] if value else None


def suppress(conn: Connection, address: str, reason: str, *, event_id: int | None = None,
             detail: str | None = None, actor: str | None = None) -> bool:
    """Add ``address`` (normalised by the caller); True if it was not suppressed yet.

    The first reason stays: a complaint after a hard bounce changes nothing. Each
    addition is logged with its reason, event and actor.
    """
    added = dialects.insert_new_row(conn, suppressions, ("address",), {
        "address": address, "reason": reason, "event_id": event_id,
        "detail": _cut(detail, 200), "created_by": _cut(actor, 200), "created_at": db_now(),
    }) is not None
    if added:
        _log(conn, address, ADDED, reason=reason, event_id=event_id, actor=actor, note=detail)
    return added


def unsuppress(conn: Connection, address: str, *, actor: str, note: str) -> Suppression | None:
    """Remove ``address``; the removed entry, or None if it was not suppressed.
    The removal is logged with who removed it and why."""
    found = get_suppression(conn, address)
    if found is None:
        return None
    conn.execute(delete(suppressions).where(suppressions.c.address == address))
    _log(conn, address, REMOVED, reason=found.reason, event_id=found.event_id, actor=actor,
         note=note)
    return found


def _log(conn: Connection, address: str, action: str, *, reason: str | None,
         event_id: int | None, actor: str | None, note: str | None) -> None:
    conn.execute(insert(suppression_log).values(
        address=address, action=action, reason=reason, event_id=event_id,
        actor=_cut(actor, 200), note=_cut(note, 500),
        at=db_now()))


def get_suppression(conn: Connection, address: str) -> Suppression | None:
    row = conn.execute(select(suppressions).where(suppressions.c.address == address)).first()
    return None if row is None else _suppression(row._mapping)


def suppressed_among(conn: Connection, addresses: Iterable[str]) -> set[str]:
    """Those of ``addresses`` (normalised) that are suppressed: one indexed query."""
    wanted = sorted(set(addresses))
    if not wanted:
        return set()
    stmt = select(suppressions.c.address).where(suppressions.c.address.in_(wanted))
    return set(conn.scalars(stmt))


def list_suppressions(conn: Connection, *, reason: str | None = None,
                      limit: int = 100) -> list[Suppression]:
    """The newest suppressions first."""
    stmt = select(suppressions).order_by(suppressions.c.created_at.desc(),
                                         suppressions.c.address).limit(limit)
    if reason is not None:
        stmt = stmt.where(suppressions.c.reason == reason)
    return [_suppression(r._mapping) for r in conn.execute(stmt)]


def suppression_history(conn: Connection, address: str) -> list[SuppressionChange]:
    stmt = (select(suppression_log).where(suppression_log.c.address == address)
            .order_by(suppression_log.c.at, suppression_log.c.id))
    return [SuppressionChange(address=r.address, action=r.action, reason=r.reason,
                              event_id=r.event_id, actor=r.actor, note=r.note,
                              at=aware(r.at)) for r in conn.execute(stmt)]


def _suppression(m: Mapping[Any, Any]) -> Suppression:
    return Suppression(address=m["address"], reason=m["reason"], event_id=m["event_id"],
                       detail=m["detail"], created_by=m["created_by"],
                       created_at=aware(m["created_at"]))
