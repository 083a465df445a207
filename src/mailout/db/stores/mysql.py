"""MySQL 8's and MariaDB 10.6+'s store (SQLAlchemy's one "mysql" dialect).

No RETURNING: a claim reads the due rows with ``FOR UPDATE SKIP LOCKED``, leases
exactly those and reads them back; a batch completion first reads, locking, the rows
its leases still hold, then updates exactly those in one ``UPDATE ... JOIN
JSON_TABLE`` generated from the completion rules (:mod:`mailout.db.stores.completing`).
An INSERT that skips a taken key is ``ON DUPLICATE KEY UPDATE key = key``, then a
locking read tells which rows it wrote.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, and_, insert, or_, select, text
from sqlalchemy.dialects.mysql import insert as mysql_insert

from mailout.db import dialects
from mailout.db.schema import attempts, db_now, messages
from mailout.db.stores import claiming, completing
from mailout.db.stores.common import CommonStore
from mailout.db.stores.inserting import (
    CONTENT_COLUMNS,
    INSERT_VALUES,
    LITERAL_COLUMNS,
    Stored,
    insert_params,
)
from mailout.models import ClaimedMessage, Completion, Status

# A one-queue read goes through the queue's claim index by force. Left to itself the
# optimizer walks the all-queue claim order and filters, expecting the queue's rows to
# be spread evenly; behind another queue's backlog that read every row of it
# (docs/capacity.md).
_READS = claiming.ReadClaim(locking=True, likely=False, returning=False,
                            queue_hint="FORCE INDEX (ix_mailout_messages_claim_due)")
_COMPLETE = text(completing.mysql_sql())


def _skipping_taken() -> Any:
    stmt = mysql_insert(messages)
    return stmt.on_duplicate_key_update({"idempotency_key": stmt.table.c.idempotency_key})


_INSERT_MANY = _skipping_taken()
_INSERT_ONE = _skipping_taken().values(INSERT_VALUES)


def fits(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Can this batch go as one statement: each row once, no unknown outcome?"""
    ids = [r["id"] for r in rows]
    return len(set(ids)) == len(ids) and not any(r["unknown"] for r in rows)


class MySQLStore(CommonStore):
    """MySQL 8 and MariaDB 10.6+."""

    name = dialects.MYSQL

    def claim(self, conn: Connection, params: Mapping[str, Any], *,
              queues: Sequence[str] | None, exclude_queues: Sequence[str],
              exclude_templates: Sequence[str], expired_only: bool) -> list[ClaimedMessage]:
        return claiming.claim_in_reads(conn, params, _READS, queues, exclude_queues,
                                       exclude_templates, expired_only)

    def complete(self, conn: Connection, batch: Sequence[Completion]) -> list[int]:
        """A batch without unknown outcomes in two round trips whatever its size;
        otherwise row by row (see completing.MYSQL_RULES)."""
        completing.log_recipients(conn, batch)
        rows = [completing.completion_row(c) for c in batch]
        if not fits(rows):
            return completing.complete_rows(conn, batch, rows)
        fenced = _complete(conn, rows)
        log = [{**completing.attempt_row(row, fenced=c.id in fenced), "finished_at": db_now()}
               for c, row in zip(batch, rows, strict=True) if c.logged]
        if log:  # one multi-row INSERT: the driver would send an executemany row by row
            conn.execute(insert(attempts).values(log))
        return [c.id for c in batch if c.id in fenced]

    def insert(self, conn: Connection, first: Mapping[str, Mapping[str, Any]],
               notify: bool) -> dict[str, Stored]:
        """Insert, then read every key's row with a locking read, which sees the newest
        committed row under any isolation (a plain read under REPEATABLE READ could miss
        one committed by a racing transaction). The insert already holds those rows'
        locks, so it does not wait. A row is ours when it carries the Message-ID this
        call generated."""
        found: dict[str, Stored] = {}
        params = [insert_params(r) for r in first.values()]
        if not params:
            return found
        if len(params) == 1:
            conn.execute(_INSERT_ONE, params[0])
        else:
            _insert_many_plain(conn, params)
        cols = [messages.c.id, messages.c.idempotency_key, messages.c.message_id]
        cols += [messages.c[c] for c in CONTENT_COLUMNS]
        rows = conn.execute(select(*cols).where(messages.c.idempotency_key.in_(list(first)))
                            .with_for_update())
        for r in rows:
            m = r._mapping
            ours = m["message_id"] == first[m["idempotency_key"]]["message_id"]
            content = first[m["idempotency_key"]] if ours else dict(m)
            found[m["idempotency_key"]] = Stored(m["id"], m["message_id"], ours, content)
        return found


def _complete(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> set[int]:
    """Apply ``rows`` to the messages still held under their lease token; return the
    ids that were fenced out (held by nobody or by a newer claim)."""
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
    for name in completing.MYSQL_FIELDS:
        value = row[name]
        if value is None:
            continue
        if isinstance(value, bool):
            value = int(value)
        elif name == "settled":
            value = json.dumps(value, ensure_ascii=False)
        out[name] = value
    return out


def _insert_many_plain(conn: Connection, params: Sequence[Mapping[str, Any]]) -> None:
    """A batch as one multi-row INSERT: the driver folds an executemany into one
    statement only when every value is a plain placeholder, so the times are worked out
    here from one read of the database clock, the same for the batch (ids still give
    the order)."""
    now = conn.execute(select(db_now())).scalar_one()
    rows = []
    for p in params:
        row = {c: p[c] for c in LITERAL_COLUMNS}
        row["status"] = Status.PENDING.value
        row["created_at"] = now
        row["next_attempt_at"] = p["send_at"] or now
        row["expires_at"] = p["expires_at"] or now + timedelta(seconds=p["expires_in"])
        rows.append(row)
    conn.execute(_INSERT_MANY, rows)
