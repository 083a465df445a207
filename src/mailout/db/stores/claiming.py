"""What every store's claim shares: the lane's filters, the lease a claim writes,
and the claim by reads of MySQL and SQLite (read the due rows, then lease them);
lease upkeep (release, extend), the same SQL everywhere.

PostgreSQL's claim, one statement, is :mod:`mailout.db.stores.postgresql`'s. Every
function runs inside whatever transaction the caller holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Float,
    Select,
    String,
    all_,
    and_,
    any_,
    bindparam,
    case,
    exists,
    func,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import array
from sqlalchemy.sql.elements import ColumnElement

from mailout.db.claimed import CLAIMED_COLUMNS, claimed_rows
from mailout.db.dialects import MYSQL
from mailout.db.schema import db_now, db_now_plus, messages, suppressions
from mailout.models import ClaimedMessage, Status


def filters(queues: Sequence[str] | None, exclude: Sequence[str] = (),
             exclude_templates: Sequence[str] = (),
             queue_indexed: bool = True, arrays: bool = False) -> list[ColumnElement[bool]]:
    """The lane's queues, minus excluded (rated elsewhere or paused) queues and templates.

    ``queue_indexed=False`` compares ``queue || ''`` instead, the same values, which no
    index on ``queue`` matches: the expired-lease reads filter so (see postgresql.due_cte; SQLite
    otherwise reads the queue's whole history through ``ix_mailout_messages_queue_id``
    and sorts it).

    ``arrays`` (PostgreSQL) writes an ``IN`` list of several values as ``= ANY
    (ARRAY[...])`` and ``NOT IN`` as ``<> ALL (ARRAY[...])``, which is what PostgreSQL
    parses such lists into (the same plans), with one bind per value fixed when the
    statement is built: SQLAlchemy's IN lists are expanded each time the statement runs,
    which keeps the claim off the driver's cursor (mailout.db.hot_statements). A single value is
    an equality, as PostgreSQL parses ``IN (x)``: only then can a one-queue lane's claim
    read its queue's claim index in claim order and stop after LIMIT rows (an index scan
    on ``= ANY`` returns rows out of order before PostgreSQL 17, so that claim sorted
    its queue's whole backlog, or walked the other queues' rows, whatever the index).
    """
    def among(column: ColumnElement[Any], values: Sequence[str]) -> ColumnElement[bool]:
        if not arrays:
            return column.in_(list(values))
        return column == values[0] if len(values) == 1 else column == any_(array(values))

    def outside(column: ColumnElement[Any], values: Sequence[str]) -> ColumnElement[bool]:
        if not arrays:
            return column.not_in(list(values))
        return column != values[0] if len(values) == 1 else column != all_(array(values))

    out: list[ColumnElement[bool]] = []
    if queues:
        queue = messages.c.queue if queue_indexed else messages.c.queue.concat("")
        out.append(among(queue, queues))
    if exclude:
        out.append(outside(messages.c.queue, exclude))
    if exclude_templates:
        tpl = messages.c.template
        out.append(or_(tpl.is_(None), outside(tpl, exclude_templates)))
    return out


def pending_branches(queues: Sequence[str] | None, exclude: Sequence[str],
                      exclude_templates: Sequence[str], extra: list[ColumnElement[bool]],
                      *, arrays: bool) -> tuple[list[list[ColumnElement[bool]]], bool]:
    """The pending rows' filters, a list per index scan, and whether each scan is one
    queue's: one scan per queue of the lane still claimable (a paused one is not), each
    read in claim order through the queue's claim index, to be merged; one scan for a
    lane over every queue (or none left). A single scan over several queues (``IN``,
    ``= ANY``) cannot read an index in claim order: it sorted the lane's whole
    backlog, or walked the other queues' rows."""
    live = [q for q in queues or () if q not in exclude]
    if not live:
        return [[*filters(queues, exclude, exclude_templates, arrays=arrays), *extra]], False
    return [[*filters((q,), (), exclude_templates, arrays=arrays), *extra]
            for q in live], True


# What a claim reads of each due row before leasing it: the abandoned attempt's facts.
PREV_COLUMNS = (messages.c.id, messages.c.status.label("prev_status"),
                 messages.c.lease_owner.label("prev_owner"),
                 messages.c.last_attempt_at.label("prev_started"),
                 messages.c.lease_transport.label("prev_transport"))


# Whether the recipient is on the suppression list, read by the claim itself: one
# primary-key probe per claimed row inside the statement, instead of a query per send.
SUPPRESSED = exists().where(
    suppressions.c.address == func.lower(messages.c.recipient)).label("suppressed")


@dataclass(frozen=True, slots=True)
class ReadClaim:
    """How a store runs the claim by reads (MySQL, SQLite)."""

    locking: bool  # reads lock rows, passing over locked ones (FOR UPDATE SKIP LOCKED)
    likely: bool  # the planner reads likely(term) as a hint (see _mostly_true)
    returning: bool  # the lease UPDATE can RETURN the rows it wrote
    queue_hint: str | None  # the index hint of a one-queue read, and its dialect


def claim_in_reads(conn: Connection, params: Mapping[str, Any], way: ReadClaim,
                   queues: Sequence[str] | None, exclude_queues: Sequence[str],
                   exclude_templates: Sequence[str],
                   expired_only: bool) -> list[ClaimedMessage]:
    """The lane's filters as claim_by_reads takes them: one read per branch."""
    extra = expired_filter(expired_only)
    branches, by_queue = pending_branches(queues, exclude_queues, exclude_templates,
                                          extra, arrays=False)
    expired_filters = [*filters(queues, exclude_queues, exclude_templates,
                                queue_indexed=False), *extra]
    return claim_by_reads(conn, params, way, expired_filters, branches, by_queue=by_queue)


def claim_by_reads(conn: Connection, params: Mapping[str, Any], way: ReadClaim,
                   expired_filters: list[ColumnElement[bool]],
                   branches: list[list[ColumnElement[bool]]],
                   by_queue: bool) -> list[ClaimedMessage]:
    """The claim of MySQL and SQLite: read the due rows (expired leases first, then
    pending rows in claim order, one read per entry of ``branches``, merged), lease
    exactly those, and return them.

    Each read walks an index in claim order and stops after ``limit`` rows, so a claim
    costs the same behind a large backlog:

    - MySQL locks what it reads with ``FOR UPDATE SKIP LOCKED``: rows another claimer
      holds are skipped, never waited for, so two claims neither take one row nor wait
      on each other. Pending rows a merge leaves out stay locked, unclaimed, until the
      claim commits. The leased rows are read back (no RETURNING). ``by_queue``: each
      branch is one queue, read through the index ``way.queue_hint`` names, by force.
      Left to itself the optimizer walks the all-queue claim order (``..._claim_order``)
      and filters, expecting the queue's rows to be spread evenly; behind another
      queue's backlog that read every row of it, a claim's cost growing with that
      backlog (docs/capacity.md).
    - SQLite's transaction holds the database write lock (BEGIN IMMEDIATE), so reading
      the rows and then leasing them cannot race another claimer. Its status and due-time
      terms are wrapped in ``likely()`` (see :func:`_mostly_true`).
    """
    limit = int(params["limit"])
    now = db_now()
    locking, likely = way.locking, way.likely
    expired = (select(*PREV_COLUMNS)
               .where(_mostly_true(likely, messages.c.status == Status.SENDING.value),
                      messages.c.lease_expires_at <= now,
                      *expired_filters)
               .order_by(messages.c.lease_expires_at).limit(limit))
    prev = {r.id: r for r in conn.execute(_locked(expired, locking))}
    want = limit - len(prev)
    if want > 0:
        rows: list[Any] = []
        for branch in branches:
            pending = (select(*PREV_COLUMNS, messages.c.priority, messages.c.next_attempt_at)
                       .where(_mostly_true(likely, messages.c.status == Status.PENDING.value),
                              _mostly_true(likely, messages.c.next_attempt_at <= now), *branch)
                       .order_by(messages.c.priority.desc(), messages.c.next_attempt_at,
                                 messages.c.id)
                       .limit(want))
            if by_queue and way.queue_hint:
                pending = pending.with_hint(messages, way.queue_hint, dialect_name=MYSQL)
            rows += conn.execute(_locked(pending, locking)).all()
        rows.sort(key=lambda r: (-r.priority, r.next_attempt_at, r.id))
        prev.update((r.id, r) for r in rows[:want])
    if not prev:
        return []
    ids = list(prev)
    lease = update(messages).where(messages.c.id.in_(ids)).ordered_values(*LEASE_SET)
    if way.returning:
        leased = conn.execute(lease.returning(*CLAIMED_COLUMNS, SUPPRESSED), params)
    else:
        conn.execute(lease, params)
        leased = conn.execute(select(*CLAIMED_COLUMNS, SUPPRESSED)
                              .where(messages.c.id.in_(ids)))
    return claimed_rows(conn, [{**r._mapping, **prev[r.id]._mapping} for r in leased])


def _locked(stmt: Select[Any], locking: bool) -> Select[Any]:
    return stmt.with_for_update(skip_locked=True) if locking else stmt


def _mostly_true(likely: bool, term: ColumnElement[bool]) -> ColumnElement[bool]:
    """``term``, marked where the planner takes hints as true of most rows it reads
    (SQLite's ``likely()``), so that it picks the index that gives the claim order.

    SQLite, left to itself, reads ``status = ?`` through ``ix_mailout_messages_status_id``
    and sorts every due row, a claim's cost growing with the backlog (docs/capacity.md).
    With statistics it may also read one queue's rows through
    the all-queue claim order, ranging on ``next_attempt_at``, past other queues'
    backlog. Marked, the status term still selects the partial claim-order indexes
    (their WHERE matches it) and each read stops after LIMIT rows in index order. The
    marks are true: the rows these reads walk are the due backlog."""
    return func.likely(term) if likely else term


_ABANDONED = messages.c.status == Status.SENDING.value  # SET sees the old row
# What a claim writes; the bind parameters are the claim's owner, token, lease and
# transport.
_LEASE: dict[str, Any] = {
    # First: MySQL evaluates SET left to right and later assignments see the values
    # earlier ones wrote (PostgreSQL and SQLite read the old row throughout), so what
    # reads another column goes before that column changes (see in_set_order).
    "unknown_via": case(
        (_ABANDONED & messages.c.unknown_since.is_(None), messages.c.lease_transport),
        (_ABANDONED & (messages.c.unknown_via != messages.c.lease_transport), literal("*")),
        else_=messages.c.unknown_via),
    # The old row's status: a row still "sending" was abandoned mid-attempt.
    "unknown_attempts": messages.c.unknown_attempts + case((_ABANDONED, 1), else_=0),
    "unknown_since": case(
        (_ABANDONED, func.coalesce(messages.c.unknown_since, messages.c.last_attempt_at)),
        else_=messages.c.unknown_since),
    "status": Status.SENDING.value,
    "attempts": messages.c.attempts + 1,
    "lease_transport": bindparam("transport", type_=String),
    "lease_owner": bindparam("owner", type_=String),
    "lease_token": bindparam("token", type_=String),
    "lease_expires_at": db_now_plus(bindparam("lease", type_=Float)),
    "first_attempt_at": func.coalesce(messages.c.first_attempt_at, db_now()),
    "last_attempt_at": db_now(),
}


def in_set_order(**values: Any) -> tuple[tuple[Any, Any], ...]:
    """``values`` as UPDATE ... SET assignments in the order given, for
    ``ordered_values``: MySQL applies them one after another, and an assignment that
    reads a column must come before the one that changes it."""
    return tuple((messages.c[name], value) for name, value in values.items())


LEASE_SET = in_set_order(**_LEASE)


def expired_filter(expired_only: bool) -> list[ColumnElement[bool]]:
    return [messages.c.expires_at <= db_now()] if expired_only else []


def release(conn: Connection, leases: Iterable[tuple[int, str]]) -> int:
    """Give back claimed rows that were never started (shutdown): pending again, uncharged."""
    n = 0
    for rid, token in leases:
        stmt = (
            update(messages)
            .where(messages.c.id == rid, messages.c.lease_token == token)
            .values(
                status=Status.PENDING.value,
                attempts=messages.c.attempts - 1,
                lease_owner=None,
                lease_token=None,
                lease_expires_at=None,
            )
        )
        n += conn.execute(stmt).rowcount
    return n


def extend_leases(conn: Connection, leases: Iterable[tuple[int, str]], seconds: float) -> int:
    """Push the lease expiry of rows still held (heartbeat). Returns how many were held."""
    pairs = list(leases)
    if not pairs:
        return 0
    held = or_(*(and_(messages.c.id == i, messages.c.lease_token == t) for i, t in pairs))
    stmt = (
        update(messages)
        .where(held, messages.c.status == Status.SENDING.value)
        .values(lease_expires_at=db_now_plus(bindparam("lease", seconds, Float)))
    )
    return conn.execute(stmt).rowcount
