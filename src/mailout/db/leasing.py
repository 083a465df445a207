"""The SQL of a worker's leases: claim, release and lease upkeep.

Every function takes a SQLAlchemy ``Connection`` and runs inside whatever
transaction the caller holds; the caller decides where transactions begin and end.
The rows a claim reads back become ClaimedMessage records in :mod:`mailout.db.claimed`.
Finished attempts are written by :mod:`mailout.db.outcomes`, new rows by
:mod:`mailout.db.inserts`; operator queries (status, list, trace, requeue, purge) live
in :mod:`mailout.db.operator`.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Float,
    Integer,
    Select,
    String,
    all_,
    and_,
    any_,
    bindparam,
    case,
    exists,
    func,
    insert,
    literal,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import array
from sqlalchemy.sql.elements import ColumnElement

from mailout.db import dialects, hot_statements
from mailout.db.claimed import ABANDONED_DETAIL, CLAIMED_COLUMNS, SENDING, claimed_rows
from mailout.db.dialects import MYSQL
from mailout.db.schema import (
    attempts,
    db_now,
    db_now_plus,
    messages,
    suppressions,
)
from mailout.models import ClaimedMessage, Outcome, Status
from mailout.support.timeutil import aware


def _filters(queues: Sequence[str] | None, exclude: Sequence[str] = (),
             exclude_templates: Sequence[str] = (),
             queue_indexed: bool = True, arrays: bool = False) -> list[ColumnElement[bool]]:
    """The lane's queues, minus excluded (rated elsewhere or paused) queues and templates.

    ``queue_indexed=False`` compares ``queue || ''`` instead, the same values, which no
    index on ``queue`` matches: the expired-lease reads filter so (see _due_cte; SQLite
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


def _pending_branches(queues: Sequence[str] | None, exclude: Sequence[str],
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
        return [[*_filters(queues, exclude, exclude_templates, arrays=arrays), *extra]], False
    return [[*_filters((q,), (), exclude_templates, arrays=arrays), *extra]
            for q in live], True


# What a claim reads of each due row before leasing it: the abandoned attempt's facts.
_PREV_COLUMNS = (messages.c.id, messages.c.status.label("prev_status"),
                 messages.c.lease_owner.label("prev_owner"),
                 messages.c.last_attempt_at.label("prev_started"),
                 messages.c.lease_transport.label("prev_transport"))


def _due_cte(limit: Any, branches: list[list[ColumnElement[bool]]],
             expired_filters: list[ColumnElement[bool]]) -> Any:
    """PostgreSQL's due rows: expired leases first, then pending rows in index order.

    Two branches, each an index scan that stops at ``limit`` (the partial indexes
    ``ix_mailout_messages_leased`` and ``ix_mailout_messages_due`` /
    ``..._pending_order``), so a claim costs the same with a million finished rows
    or a large backlog. The pending rows are read by one index scan per entry of
    ``branches`` (its filters; a lane over several queues has one per queue, each read
    in claim order), merged in claim order: a single scan over ``queue = ANY(...)``
    could not return rows in order, so it sorted the lane's whole backlog unless the
    statistics steered the planner elsewhere. Each branch locks up to ``limit`` rows:
    those the merge leaves out stay locked, unclaimed, until the transaction ends (a
    worker claims in autocommit: the statement's end). statement_timestamp() is stable
    within the statement, which lets the planner use it as an index condition.
    MATERIALIZED: the planner must not inline the CTE and lock rows again for each use.

    The expired branch gets ``expired_filters``: the lane's queue filter written so
    that no index on ``queue`` can serve it. Otherwise the planner ANDs the bitmap of
    every row of the queue (its whole history) with the leased rows', a cost that
    grows with the table (docs/capacity.md); the leased index alone holds only the
    rows being sent.
    """
    now = func.statement_timestamp()
    expired = (select(*_PREV_COLUMNS).where(messages.c.status == Status.SENDING.value,
                                   messages.c.lease_expires_at <= now, *expired_filters)
               .order_by(messages.c.lease_expires_at).limit(limit)
               .with_for_update(skip_locked=True).subquery("expired"))
    # Several branches keep their sort key, to be merged on it.
    order = (messages.c.priority, messages.c.next_attempt_at) if len(branches) > 1 else ()
    parts = [(select(*_PREV_COLUMNS, *order).where(messages.c.status == Status.PENDING.value,
                                          messages.c.next_attempt_at <= now, *filters)
              .order_by(messages.c.priority.desc(), messages.c.next_attempt_at,
                        messages.c.id).limit(limit)
              .with_for_update(skip_locked=True)
              .subquery("pending" if len(branches) == 1 else f"pending_{i}"))
             for i, filters in enumerate(branches)]
    pending = parts[0]
    if len(parts) > 1:
        merged = union_all(*map(select, parts)).subquery("pending_all")
        pending = (select(*(merged.c[c.name] for c in _PREV_COLUMNS))
                   .order_by(merged.c.priority.desc(), merged.c.next_attempt_at, merged.c.id)
                   .limit(limit).subquery("pending"))
    both = union_all(select(expired), select(pending)).limit(limit)
    return both.cte("due").prefix_with("MATERIALIZED")


# Whether the recipient is on the suppression list, read by the claim itself: one
# primary-key probe per claimed row inside the statement, instead of a query per send.
_SUPPRESSED = exists().where(
    suppressions.c.address == func.lower(messages.c.recipient)).label("suppressed")


def claim(
    conn: Connection,
    *,
    owner: str,
    limit: int,
    lease_seconds: float,
    queues: Sequence[str] | None = None,
    exclude_queues: Sequence[str] = (),
    exclude_templates: Sequence[str] = (),
    expired_only: bool = False,
    transport: str | None = None,
) -> list[ClaimedMessage]:
    """Lease up to ``limit`` due messages to ``owner``, highest priority first.

    ``expired_only`` claims only rows past their age limit (``expires_at``): a
    worker whose transport is down claims these to dead-letter them.

    Due means ``pending`` with ``next_attempt_at`` in the past, or ``sending`` with an
    expired lease (its worker died or stalled). Claimed rows become ``sending`` with
    ``attempts + 1``, a fresh lease token and a lease expiry on the database clock.
    For a reclaimed row the abandoned attempt is logged as ``unknown``: nobody knows
    whether the server got it, and the row remembers when (``unknown_since``) and
    through which transport (``unknown_via``: the ``transport`` of the claim that
    abandoned it). Commit promptly: on SQLite the claim holds the write lock.
    """
    params = {"owner": owner, "token": str(uuid.uuid4()), "lease": lease_seconds,
              "limit": limit, "transport": transport}
    if dialects.claims_in_one_statement(conn):
        stmt = _pg_claim(tuple(queues or ()), tuple(exclude_queues), tuple(exclude_templates),
                         expired_only)
        # One fetch for the batch, on the driver's cursor when nothing observes it. The
        # statement logs the abandoned attempts itself: it is the whole claim, so the
        # caller may run it in autocommit (see claims_alone).
        rows = hot_statements.fetch_mappings(conn, stmt, params)
        return claimed_rows(conn, rows, logged=True)
    # MySQL and SQLite: read the due rows (one index read per branch), then lease them.
    extra = _expired_filter(expired_only)
    branches, by_queue = _pending_branches(queues, exclude_queues, exclude_templates,
                                           extra, arrays=False)
    expired_filters = [*_filters(queues, exclude_queues, exclude_templates,
                                 queue_indexed=False), *extra]
    return _claim_by_reads(conn, params, expired_filters, branches, by_queue=by_queue)


_BY_QUEUE_INDEX = "FORCE INDEX (ix_mailout_messages_claim_due)"


def _claim_by_reads(conn: Connection, params: Mapping[str, Any],
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
      branch is one queue, read through ``ix_mailout_messages_claim_due`` by force.
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
    locking = dialects.locks_rows_skipping_locked(conn)
    expired = (select(*_PREV_COLUMNS)
               .where(_mostly_true(conn, messages.c.status == Status.SENDING.value),
                      messages.c.lease_expires_at <= now,
                      *expired_filters)
               .order_by(messages.c.lease_expires_at).limit(limit))
    prev = {r.id: r for r in conn.execute(_locked(expired, locking))}
    want = limit - len(prev)
    if want > 0:
        rows: list[Any] = []
        for branch in branches:
            pending = (select(*_PREV_COLUMNS, messages.c.priority, messages.c.next_attempt_at)
                       .where(_mostly_true(conn, messages.c.status == Status.PENDING.value),
                              _mostly_true(conn, messages.c.next_attempt_at <= now), *branch)
                       .order_by(messages.c.priority.desc(), messages.c.next_attempt_at,
                                 messages.c.id)
                       .limit(want))
            if by_queue:
                pending = pending.with_hint(messages, _BY_QUEUE_INDEX, dialect_name=MYSQL)
            rows += conn.execute(_locked(pending, locking)).all()
        rows.sort(key=lambda r: (-r.priority, r.next_attempt_at, r.id))
        prev.update((r.id, r) for r in rows[:want])
    if not prev:
        return []
    ids = list(prev)
    lease = update(messages).where(messages.c.id.in_(ids)).ordered_values(*_LEASE_SET)
    if dialects.returns_written_rows(conn):
        leased = conn.execute(lease.returning(*CLAIMED_COLUMNS, _SUPPRESSED), params)
    else:
        conn.execute(lease, params)
        leased = conn.execute(select(*CLAIMED_COLUMNS, _SUPPRESSED)
                              .where(messages.c.id.in_(ids)))
    return claimed_rows(conn, [{**r._mapping, **prev[r.id]._mapping} for r in leased])


def _locked(stmt: Select[Any], locking: bool) -> Select[Any]:
    return stmt.with_for_update(skip_locked=True) if locking else stmt


def _mostly_true(conn: Connection, term: ColumnElement[bool]) -> ColumnElement[bool]:
    """``term``, marked where the planner takes hints as true of most rows it reads
    (SQLite's ``likely()``), so that it picks the index that gives the claim order.

    SQLite, left to itself, reads ``status = ?`` through ``ix_mailout_messages_status_id``
    and sorts every due row, a claim's cost growing with the backlog (docs/capacity.md).
    With statistics it may also read one queue's rows through
    the all-queue claim order, ranging on ``next_attempt_at``, past other queues'
    backlog. Marked, the status term still selects the partial claim-order indexes
    (their WHERE matches it) and each read stops after LIMIT rows in index order. The
    marks are true: the rows these reads walk are the due backlog."""
    return func.likely(term) if dialects.takes_likelihood_hints(conn) else term


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


_LEASE_SET = in_set_order(**_LEASE)


def _expired_filter(expired_only: bool) -> list[ColumnElement[bool]]:
    return [messages.c.expires_at <= db_now()] if expired_only else []


@functools.lru_cache(maxsize=256)
def _pg_claim(queues: tuple[str, ...], exclude: tuple[str, ...],
              exclude_templates: tuple[str, ...], expired_only: bool = False) -> Any:
    """The PostgreSQL claim for one lane's filters, built once: building the
    statement cost more CPU than running it."""
    extra = _expired_filter(expired_only)
    branches, _ = _pending_branches(queues, exclude, exclude_templates, extra, arrays=True)
    due = _due_cte(bindparam("limit", type_=Integer), branches,
                   [*_filters(queues, exclude, exclude_templates, queue_indexed=False,
                              arrays=True), *extra])
    claimed = (
        update(messages)
        .where(messages.c.id == due.c.id)
        .ordered_values(*_LEASE_SET)
        .returning(*CLAIMED_COLUMNS, due.c.prev_status, due.c.prev_owner,
                   due.c.prev_started, _SUPPRESSED, due.c.prev_transport)
        .cte("claimed")
    )
    # The attempts whose lease ran out, logged as unknown by the same statement (a
    # data-modifying CTE): the claim stays one statement, atomic without a transaction.
    abandoned = select(
        claimed.c.id, claimed.c.attempts - 1, literal(Outcome.UNKNOWN.value, String),
        literal(ABANDONED_DETAIL, String), claimed.c.prev_owner, claimed.c.prev_started,
        claimed.c.prev_transport, db_now(),
    ).where(claimed.c.prev_status == SENDING)
    logged = insert(attempts).from_select(
        ["outbox_id", "attempt", "outcome", "detail", "worker", "started_at", "transport",
         "finished_at"], abandoned).cte("abandoned")
    return select(claimed).add_cte(logged)


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


def next_due_in(conn: Connection, queues: Sequence[str] | None = None,
                exclude_queues: Sequence[str] = (),
                exclude_templates: Sequence[str] = ()) -> float | None:
    """Seconds until the next message becomes due, 0 if one is due now, None if none waits.

    Messages in excluded (paused) queues or templates do not count: they wait for
    an operator, not for time.
    """
    soonest = func.min(
        func.coalesce(messages.c.lease_expires_at, messages.c.next_attempt_at)
    )
    live = messages.c.status.in_([Status.PENDING.value, Status.SENDING.value])
    cond = live if not queues else and_(live, messages.c.queue.in_(list(queues)))
    if exclude_queues:
        cond = and_(cond, messages.c.queue.not_in(list(exclude_queues)))
    if exclude_templates:
        tpl = messages.c.template
        cond = and_(cond, or_(tpl.is_(None), tpl.not_in(list(exclude_templates))))
    row = conn.execute(select(soonest, db_now()).where(cond)).one()
    at: datetime | None = aware(row[0])
    now: datetime | None = aware(row[1])
    if at is None or now is None:
        return None
    return max(0.0, (at - now).total_seconds())
