"""Operator browsing: filtered, searchable, keyset-paginated message lists, the
selection behind bulk actions, and the one read that returns a message's content.

Pages are cut by id (``id < cursor ORDER BY id DESC LIMIT n``), never by OFFSET:
with the ``(status, id)``, ``(queue, id)``, ``(template, id)`` and
``(recipient, id)`` indexes every page costs the same, the 500th as the first.
Like :mod:`mailout.db.operator`, every function runs in the caller's transaction and
list records carry no params or body; only :func:`renderable` reads content, for
a console that renders a message for a person allowed to see it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, and_, exists, func, or_, select, text
from sqlalchemy.sql.elements import ColumnElement

from mailout.db import attachments
from mailout.db.claimed import stored_addresses
from mailout.db.operator import MessageRecord, record_from_row, summary_select
from mailout.db.schema import messages
from mailout.models import ClaimedMessage, Status
from mailout.support.timeutil import aware

MAX_PAGE = 500


@dataclass(frozen=True, slots=True)
class MessageFilter:
    """What a message list shows. Empty fields do not filter.

    ``search`` matches exactly one of: the row id, the idempotency key, the
    Message-ID (with or without ``<>``), the provider's id or the recipient address.
    Exact matches only: each is an index lookup, and a substring search over
    millions of addresses would be a table scan.
    """

    statuses: tuple[str, ...] = ()
    queue: str | None = None
    template: str | None = None
    created_from: datetime | None = None  # inclusive; naive means UTC
    created_to: datetime | None = None  # exclusive
    search: str | None = None
    # False for a viewer who may not see addresses: a search by address would still
    # tell them whether someone is a customer (1 row or 0), so it matches nothing.
    search_recipients: bool = True

    def __post_init__(self) -> None:
        for status in self.statuses:
            Status(status)  # ValueError for an unknown status

    def describe(self) -> str:
        """``status=failed queue=default search="x"``, or ``all messages``."""
        parts = [f"status={','.join(self.statuses)}"] if self.statuses else []
        parts += [f"{name}={value}" for name, value in (
            ("queue", self.queue), ("template", self.template)) if value]
        for name, moment in (("from", self.created_from), ("to", self.created_to)):
            if moment is not None:
                parts.append(f"{name}={_utc(moment):%Y-%m-%dT%H:%M:%SZ}")
        if self.search:
            parts.append(f'search="{self.search}"')
        return " ".join(parts) or "all messages"

    def conditions(self) -> list[ColumnElement[bool]]:
        out: list[ColumnElement[bool]] = []
        if self.statuses:
            out.append(messages.c.status.in_(list(self.statuses)))
        if self.queue:
            out.append(messages.c.queue == self.queue)
        if self.template:
            out.append(messages.c.template == self.template)
        if self.created_from is not None:
            out.append(messages.c.created_at >= _utc(self.created_from))
        if self.created_to is not None:
            out.append(messages.c.created_at < _utc(self.created_to))
        if self.search and self.search.strip():
            out.append(_search(self.search.strip(), self.search_recipients))
        return out


def _utc(moment: datetime) -> datetime:
    # SQLite's DateTime binding drops the zone: convert first so the digits are UTC.
    return (aware(moment) or moment).astimezone(UTC)


def _search(term: str, recipients: bool) -> ColumnElement[bool]:
    bare = term.strip("<>")
    found: list[ColumnElement[bool]] = [
        messages.c.idempotency_key == term,
        messages.c.message_id.in_([term, f"<{bare}>"]),
        # IS NOT NULL lets the partial index on provider ids serve this lookup.
        and_(messages.c.provider_message_id.is_not(None),
             messages.c.provider_message_id.in_([term, bare])),
    ]
    if recipients:
        found.append(messages.c.recipient.in_(sorted({term, term.lower()})))
    if term.isdigit() and len(term) < 19:  # fits a BIGINT
        found.append(messages.c.id == int(term))
    return or_(*found)


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list, newest first, with the cursors of its neighbours."""

    rows: list[MessageRecord]
    newer: int | None  # pass as ``after`` for the page before this one; None: none newer
    older: int | None  # pass as ``before`` for the page after this one; None: none older


def browse(conn: Connection, flt: MessageFilter, *, before: int | None = None,
           after: int | None = None, limit: int = 50) -> Page:
    """The ``limit`` newest rows matching ``flt`` below ``before`` (or the oldest
    ``limit`` above ``after``, still shown newest first). Raises ValueError for a
    limit outside 1..500 or both cursors at once."""
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be 1..{MAX_PAGE}, got {limit}")
    if before is not None and after is not None:
        raise ValueError("give before or after, not both")
    cond = flt.conditions()
    stmt = summary_select().where(*cond).limit(limit)
    if after is not None:
        stmt = stmt.where(messages.c.id > after).order_by(messages.c.id.asc())
    else:
        if before is not None:
            stmt = stmt.where(messages.c.id < before)
        stmt = stmt.order_by(messages.c.id.desc())
    rows = [record_from_row(r._mapping) for r in conn.execute(stmt)]
    if after is not None:
        rows.reverse()
    if not rows:
        return Page([], None, None)
    newer = rows[0].id if _any(conn, cond, messages.c.id > rows[0].id) else None
    older = rows[-1].id if _any(conn, cond, messages.c.id < rows[-1].id) else None
    return Page(rows, newer, older)


def _any(conn: Connection, cond: list[ColumnElement[bool]], bound: ColumnElement[bool]) -> bool:
    return bool(conn.execute(select(exists().where(*cond, bound))).scalar())


def newest_id(conn: Connection) -> int:
    """The highest row id now (0 for an empty table): the upper bound a bulk action
    was confirmed for, so rows enqueued after the confirmation are left alone."""
    return int(conn.execute(select(func.coalesce(func.max(messages.c.id), 0))).scalar_one())


def _selection(flt: MessageFilter, statuses: Iterable[Status], upto: int) -> Any:
    allowed = sorted(s.value for s in statuses)
    if flt.statuses:
        allowed = [s for s in allowed if s in flt.statuses]
    return (select(messages.c.id)
            .where(*flt.conditions(), messages.c.status.in_(allowed), messages.c.id <= upto))


def matching_ids(conn: Connection, flt: MessageFilter, statuses: Iterable[Status], *,
                 upto: int, limit: int) -> list[int]:
    """Ids (oldest first, at most ``limit``, none above ``upto``) of rows matching
    ``flt`` whose status is one of ``statuses``: what a bulk action acts on."""
    stmt = _selection(flt, statuses, upto).order_by(messages.c.id).limit(limit)
    return list(conn.scalars(stmt))


def count_matching(conn: Connection, flt: MessageFilter, statuses: Iterable[Status], *,
                   upto: int, cap: int) -> int:
    """How many rows :func:`matching_ids` would return with ``limit=cap``, counting
    no further than ``cap``: the confirmation page's number, cheap at any size."""
    capped = _selection(flt, statuses, upto).limit(cap).subquery()
    return int(conn.execute(select(func.count()).select_from(capped)).scalar_one())


def distinct_values(conn: Connection, column: str, *, limit: int = 200) -> list[str]:
    """The distinct non-null values of ``queue`` or ``template``, sorted.

    A loose index scan (one index probe per value through a recursive query)
    rather than ``SELECT DISTINCT``, which would read every row of the index.
    """
    if column not in ("queue", "template"):
        raise ValueError(f"no distinct listing for {column!r}")
    col = column
    table = messages.name
    # The column and table names are fixed above; only the limit is a parameter.
    stmt = text(
        f"WITH RECURSIVE v(x) AS ("  # noqa: S608 - names are constants, not input
        f" SELECT MIN({col}) FROM {table}"
        f" UNION ALL SELECT (SELECT MIN({col}) FROM {table} WHERE {col} > v.x)"
        f" FROM v WHERE v.x IS NOT NULL)"
        f" SELECT x FROM v WHERE x IS NOT NULL LIMIT :limit"
    )
    return [str(v) for v in conn.scalars(stmt, {"limit": limit})]


def renderable(conn: Connection, message_id: int) -> ClaimedMessage | None:
    """Everything needed to render row ``message_id`` again, or None if it is gone.

    Recipients (to, cc, bcc), the locale and the attachments come along, so the
    message renders as the worker would send it. This is the only operator read
    that returns params, bodies and attachments: call it only
    to show a rendered message to someone allowed to see it, never to list or log.
    The lease fields are placeholders: nothing is claimed.
    """
    m = conn.execute(select(messages).where(messages.c.id == message_id)).first()
    if m is None:
        return None
    r = m._mapping
    created = aware(r["created_at"]) or datetime.now(UTC)
    files = (attachments.as_attachments(attachments.for_message(conn, message_id))
             if r["attachment_digest"] is not None else ())
    return ClaimedMessage(
        id=r["id"], key=r["idempotency_key"], queue=r["queue"], priority=r["priority"],
        recipient=r["recipient"], sender=r["sender"], template=r["template"],
        params=r["params"], subject=r["subject"], text=r["body_text"], html=r["body_html"],
        headers=r["headers"], message_id=r["message_id"], attempts=r["attempts"],
        unknown_attempts=r["unknown_attempts"], created_at=created,
        expires_at=aware(r["expires_at"]), lease_token="", claimed_at=created,
        reclaimed=False, event_ref=r["event_ref"], event_version=r["event_version"],
        schema_version=r["schema_version"], locale=r["locale"],
        has_attachments=bool(files), attachments=files, **stored_addresses(r["addresses"]),
    )
