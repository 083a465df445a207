"""Attachment storage: contents by SHA-256, linked to messages, purged when orphaned.

A content is stored once however many messages carry it (``mailout_attachments``,
keyed by its SHA-256); ``mailout_message_attachments`` says which message carries
which content, under which name and type. Every function runs in the caller's
transaction: at enqueue, that is the application's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from sqlalchemy import Connection, delete, exists, func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.elements import ColumnElement

from mailout.db import dialects
from mailout.db.schema import attachments, db_now, message_attachments
from mailout.message.compose import AttachmentPart
from mailout.models import Attachment


def store(conn: Connection,
          per_message: Iterable[tuple[int, Sequence[AttachmentPart]]]) -> int:
    """Link each message id to its attachments; write the contents not stored yet.

    Contents already stored are not sent to the database again, and are locked
    against a concurrent :func:`purge_orphans` (``FOR KEY SHARE`` on PostgreSQL)
    until the caller commits. Returns how many contents were written.
    """
    contents: dict[str, bytes] = {}
    links: list[dict[str, object]] = []
    for outbox_id, items in per_message:
        for position, item in enumerate(items):
            contents.setdefault(item.sha256, item.content)
            links.append({"outbox_id": outbox_id, "position": position, "sha256": item.sha256,
                          "filename": item.filename, "content_type": item.content_type,
                          "inline": item.inline, "cid": item.cid})
    if not links:
        return 0
    present = _locked_present(conn, sorted(contents))
    missing = [{"sha256": sha, "size": len(data), "content": data}
               for sha, data in contents.items() if sha not in present]
    if missing:
        insert_new = dialects.insert_ignoring_duplicates(conn, attachments, ["sha256"])
        conn.execute(insert_new.values(created_at=db_now()), missing)
    conn.execute(insert(message_attachments), links)
    return len(missing)


def _locked_present(conn: Connection, digests: Sequence[str]) -> set[str]:
    """The contents among ``digests`` already stored, locked against a concurrent
    :func:`purge_orphans` until the caller commits.

    On MySQL a locking read that finds nothing locks the gap where the rows would be
    (REPEATABLE READ, an application's default there), which holds up every other
    transaction storing a new content until this one commits: only the rows a plain
    read found are locked there (one that was purged in between is stored again)."""
    query = select(attachments.c.sha256)
    if dialects.locks_gaps_under_default_isolation(conn):
        digests = sorted(set(conn.scalars(query.where(attachments.c.sha256.in_(digests)))))
        if not digests:
            return set()
    return set(conn.scalars(query.where(attachments.c.sha256.in_(digests))
                            .with_for_update(read=True, key_share=True)))


def for_message(conn: Connection, outbox_id: int,
                known: Mapping[str, bytes] | None = None) -> list[AttachmentPart]:
    """The attachments of one message, in order. Contents found in ``known`` (a
    cache by digest) are not read from the database again."""
    rows = conn.execute(
        select(message_attachments).where(message_attachments.c.outbox_id == outbox_id)
        .order_by(message_attachments.c.position)).all()
    cached = known or {}
    wanted = sorted({r.sha256 for r in rows if r.sha256 not in cached})
    found = dict(cached)
    if wanted:
        found.update((sha, content) for sha, content in conn.execute(
            select(attachments.c.sha256, attachments.c.content)
            .where(attachments.c.sha256.in_(wanted))))
    return [AttachmentPart(r.sha256, r.filename, r.content_type, r.inline, r.cid, found[r.sha256])
            for r in rows]


def as_attachments(items: Iterable[AttachmentPart]) -> tuple[Attachment, ...]:
    """Stored attachments as the records an envelope carries."""
    return tuple(Attachment(a.filename, a.content, a.content_type, a.inline, a.cid)
                 for a in items)


def _orphaned() -> ColumnElement[bool]:
    return ~exists().where(message_attachments.c.sha256 == attachments.c.sha256)


def count_orphans(conn: Connection) -> int:
    """How many stored contents no message refers to."""
    return conn.execute(select(func.count()).select_from(attachments)
                        .where(_orphaned())).scalar_one()


def purge_orphans(conn: Connection, *, batch: int = 100) -> int:
    """Delete up to ``batch`` contents that no message refers to; how many went.

    Call it in short transactions until it returns 0. A content that an enqueue
    links meanwhile is kept: PostgreSQL then refuses the delete (a foreign key
    violation), which this function reports as 0 deleted after rolling back to a
    savepoint, so the caller simply tries again.
    """
    shas = list(conn.scalars(select(attachments.c.sha256).where(_orphaned())
                             .order_by(attachments.c.sha256).limit(batch)))
    if not shas:
        return 0
    try:
        with conn.begin_nested():
            stmt = delete(attachments).where(attachments.c.sha256.in_(shas), _orphaned())
            return conn.execute(stmt).rowcount
    except IntegrityError:
        return 0
