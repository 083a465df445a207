"""PostgreSQL's store: every hot statement is one round trip.

A claim picks, locks (``SKIP LOCKED``) and leases rows and logs the abandoned attempts
in one statement, so a worker may run it in autocommit. A batch of completions or of
new rows travels as one JSON document expanded by the server, so the statement text
and its server-side prepared plan are the same for every batch size. New rows can wake
workers by NOTIFY, riding in the INSERT itself.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Integer,
    String,
    bindparam,
    column,
    func,
    insert,
    literal,
    select,
    text,
    union_all,
    update,
)
from sqlalchemy.sql.elements import ColumnElement

from mailout.db import dialects, hot_statements
from mailout.db.claimed import ABANDONED_DETAIL, CLAIMED_COLUMNS, claimed_rows
from mailout.db.schema import attempts, db_now, json_default, messages
from mailout.db.stores import completing
from mailout.db.stores.claiming import (
    LEASE_SET,
    PREV_COLUMNS,
    SUPPRESSED,
    expired_filter,
    filters,
    pending_branches,
)
from mailout.db.stores.common import CommonStore
from mailout.db.stores.inserting import (
    LITERAL_COLUMNS,
    NOTIFY_CHANNEL,
    Stored,
    insert_params,
    with_existing,
)
from mailout.models import ClaimedMessage, Completion, Outcome, Status


def due_cte(limit: Any, branches: list[list[ColumnElement[bool]]],
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
    expired = (select(*PREV_COLUMNS).where(messages.c.status == Status.SENDING.value,
                                   messages.c.lease_expires_at <= now, *expired_filters)
               .order_by(messages.c.lease_expires_at).limit(limit)
               .with_for_update(skip_locked=True).subquery("expired"))
    # Several branches keep their sort key, to be merged on it.
    order = (messages.c.priority, messages.c.next_attempt_at) if len(branches) > 1 else ()
    parts = [(select(*PREV_COLUMNS, *order).where(messages.c.status == Status.PENDING.value,
                                          messages.c.next_attempt_at <= now, *filters)
              .order_by(messages.c.priority.desc(), messages.c.next_attempt_at,
                        messages.c.id).limit(limit)
              .with_for_update(skip_locked=True)
              .subquery("pending" if len(branches) == 1 else f"pending_{i}"))
             for i, filters in enumerate(branches)]
    pending = parts[0]
    if len(parts) > 1:
        merged = union_all(*map(select, parts)).subquery("pending_all")
        pending = (select(*(merged.c[c.name] for c in PREV_COLUMNS))
                   .order_by(merged.c.priority.desc(), merged.c.next_attempt_at, merged.c.id)
                   .limit(limit).subquery("pending"))
    both = union_all(select(expired), select(pending)).limit(limit)
    return both.cte("due").prefix_with("MATERIALIZED")



@functools.lru_cache(maxsize=256)
def claim_statement(queues: tuple[str, ...], exclude: tuple[str, ...],
              exclude_templates: tuple[str, ...], expired_only: bool = False) -> Any:
    """The PostgreSQL claim for one lane's filters, built once: building the
    statement cost more CPU than running it."""
    extra = expired_filter(expired_only)
    branches, _ = pending_branches(queues, exclude, exclude_templates, extra, arrays=True)
    due = due_cte(bindparam("limit", type_=Integer), branches,
                   [*filters(queues, exclude, exclude_templates, queue_indexed=False,
                              arrays=True), *extra])
    claimed = (
        update(messages)
        .where(messages.c.id == due.c.id)
        .ordered_values(*LEASE_SET)
        .returning(*CLAIMED_COLUMNS, due.c.prev_status, due.c.prev_owner,
                   due.c.prev_started, SUPPRESSED, due.c.prev_transport)
        .cte("claimed")
    )
    # The attempts whose lease ran out, logged as unknown by the same statement (a
    # data-modifying CTE): the claim stays one statement, atomic without a transaction.
    abandoned = select(
        claimed.c.id, claimed.c.attempts - 1, literal(Outcome.UNKNOWN.value, String),
        literal(ABANDONED_DETAIL, String), claimed.c.prev_owner, claimed.c.prev_started,
        claimed.c.prev_transport, db_now(),
    ).where(claimed.c.prev_status == Status.SENDING.value)
    logged = insert(attempts).from_select(
        ["outbox_id", "attempt", "outcome", "detail", "worker", "started_at", "transport",
         "finished_at"], abandoned).cte("abandoned")
    return select(claimed).add_cte(logged)



_ROW_TYPES = {  # the jsonb_to_recordset() columns of INSERT and their types
    **dict.fromkeys(LITERAL_COLUMNS, "text"),
    "params": "jsonb", "headers": "jsonb", "addresses": "jsonb", "priority": "smallint",
    "schema_version": "int",
    "send_at": "timestamptz", "expires_at": "timestamptz", "expires_in": "float8",
    "ord": "int",
}
# The batch travels as one JSON document: serialising it is a single C call, where
# per-column array parameters cost psycopg a Python call per value. PostgreSQL
# parses it back with the column types above. WITH "ord" the ids follow input
# order, as the executemany this replaces did; clock_timestamp() is db_now().
INSERT = text(f"""
INSERT INTO {messages.name} ({", ".join(LITERAL_COLUMNS)}, status, created_at,
    next_attempt_at, expires_at)
SELECT {", ".join(f"v.{c}" for c in LITERAL_COLUMNS)}, '{Status.PENDING.value}',
    clock_timestamp(), COALESCE(v.send_at, clock_timestamp()),
    COALESCE(v.expires_at, clock_timestamp() + make_interval(secs => v.expires_in))
FROM jsonb_to_recordset(CAST(:rows AS jsonb))
    AS v({", ".join(f"{c} {t}" for c, t in _ROW_TYPES.items())})
ORDER BY v.ord
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id, idempotency_key, message_id
""")  # noqa: S608 - only this module's constants are interpolated; values are bound


# The same, waking workers: pg_notify runs once per inserted row, and PostgreSQL
# folds identical notifications of one transaction into one.
INSERT_NOTIFY = text(f"""
WITH ins AS ({INSERT.text.strip()}, queue)
SELECT ins.id, ins.idempotency_key, ins.message_id
FROM ins, LATERAL (SELECT pg_notify('{NOTIFY_CHANNEL}', ins.queue)) AS n
""")  # noqa: S608 - as above


_RETURNED = (column("id", BigInteger), column("idempotency_key", String),
             column("message_id", String))
_JSON_COLUMNS = ("params", "headers", "addresses")


def _one_value(name: str) -> str:
    return f"CAST(:{name} AS jsonb)" if name in _JSON_COLUMNS else f":{name}"


# One row as a plain INSERT ... VALUES: what INSERT does for a batch, without
# building and parsing a JSON document and a recordset for a single row. Typed result
# columns let SQLAlchemy (when it runs it, see mailout.db.hot_statements) cache the result's
# metadata with the statement.
_ONE_SQL = f"""
INSERT INTO {messages.name} ({", ".join(LITERAL_COLUMNS)}, status, created_at,
    next_attempt_at, expires_at)
VALUES ({", ".join(_one_value(c) for c in LITERAL_COLUMNS)}, '{Status.PENDING.value}',
    clock_timestamp(), COALESCE(CAST(:send_at AS timestamptz), clock_timestamp()),
    COALESCE(CAST(:expires_at AS timestamptz),
             clock_timestamp() + make_interval(secs => CAST(:expires_in AS float8))))
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id, idempotency_key, message_id
"""  # noqa: S608 - only this module's constants are interpolated; values are bound
ONE = text(_ONE_SQL).columns(*_RETURNED)
ONE_NOTIFY = text(f"""
WITH ins AS ({_ONE_SQL.strip()}, queue)
SELECT ins.id, ins.idempotency_key, ins.message_id
FROM ins, LATERAL (SELECT pg_notify('{NOTIFY_CHANNEL}', ins.queue)) AS n
""").columns(*_RETURNED)  # noqa: S608 - as above
# Built once: json.dumps() with any option builds a new encoder on every call.
_JSON_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"),
                                 default=json_default)


def one_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of ONE: the JSON columns as JSON text (the params as
    validation encoded them, ``row["params_json"]``, when there), the rest as they are."""
    params = insert_params(row)
    encoded = row.get("params_json")
    for name in _JSON_COLUMNS:
        if params[name] is not None:
            params[name] = encoded if name == "params" and encoded is not None \
                else _JSON_ENCODER.encode(params[name])
    return params


def insert_rows(params: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The batch as the one JSON parameter of INSERT.

    A key left out is SQL NULL to jsonb_to_recordset(), so None values are left
    out: most columns of a typical row are NULL, and this nearly halves the bytes
    to encode, send and parse.
    """
    rows = [{"ord": i, **{k: v for k, v in p.items() if v is not None}}
            for i, p in enumerate(params)]
    return {"rows": json.dumps(rows, ensure_ascii=False, separators=(",", ":"),
                               default=json_default)}



COMPLETE = text(completing.postgresql_sql())


class PostgreSQLStore(CommonStore):
    """PostgreSQL 13+."""

    name = dialects.POSTGRESQL
    listens = True
    claims_in_one_statement = True

    def claim(self, conn: Connection, params: Mapping[str, Any], *,
              queues: Sequence[str] | None, exclude_queues: Sequence[str],
              exclude_templates: Sequence[str], expired_only: bool) -> list[ClaimedMessage]:
        stmt = claim_statement(tuple(queues or ()), tuple(exclude_queues),
                               tuple(exclude_templates), expired_only)
        # One fetch for the batch, on the driver's cursor when nothing observes it. The
        # statement logs the abandoned attempts itself: it is the whole claim, so the
        # caller may run it in autocommit (see claims_alone).
        rows = hot_statements.fetch_mappings(conn, stmt, params)
        return claimed_rows(conn, rows, logged=True)

    def complete(self, conn: Connection, batch: Sequence[Completion]) -> list[int]:
        completing.log_recipients(conn, batch)
        rows = [completing.completion_row(c) for c in batch]
        ids = [c.id for c in batch]
        if len(set(ids)) != len(ids):  # a row named twice: the order matters
            return completing.complete_rows(conn, batch, rows)
        param = json.dumps(rows, ensure_ascii=False, default=json_default)
        done = {row[0] for row in hot_statements.fetch(conn, COMPLETE, {"batch": param})}
        return [i for i in ids if i not in done]

    def insert(self, conn: Connection, first: Mapping[str, Mapping[str, Any]],
               notify: bool) -> dict[str, Stored]:
        """With ``notify`` the NOTIFY rides in the INSERT statement itself."""
        if len(first) == 1:
            # One row (every enqueue()): a plain INSERT ... VALUES, no JSON batch.
            return _insert_one(conn, next(iter(first.values())), notify)
        created: dict[str, Stored] = {}
        if first:
            # One statement and one parameter whatever the batch size: SQLAlchemy's
            # multi-VALUES batches make psycopg parse a new query text of thousands of
            # placeholders each time.
            params = [insert_params(r) for r in first.values()]
            stmt = INSERT_NOTIFY if notify else INSERT
            for rid, key, mid in conn.execute(stmt, insert_rows(params)):
                created[key] = Stored(rid, mid, True, first[key])
        return with_existing(conn, first, created)

    def notify(self, conn: Connection, queues: Sequence[str]) -> None:
        """NOTIFY is transactional: nothing is delivered on rollback, and duplicates
        within a transaction are folded into one."""
        if queues:
            conn.execute(select(*(func.pg_notify(NOTIFY_CHANNEL, q) for q in queues)))


def _insert_one(conn: Connection, row: Mapping[str, Any], notify: bool) -> dict[str, Stored]:
    """One row: :data:`ONE` (with the NOTIFY riding in it), through
    :func:`mailout.db.hot_statements.fetch`; a key already present is read back."""
    key = row["idempotency_key"]
    found = hot_statements.fetch(conn, ONE_NOTIFY if notify else ONE, one_row(row))
    if found:
        rid, _, mid = found[0]
        return {key: Stored(rid, mid, True, row)}
    return with_existing(conn, {key: row}, {})
