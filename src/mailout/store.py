"""All SQL on the message lifecycle: insert, claim, complete, release.

Every function takes a SQLAlchemy ``Connection`` and runs inside whatever
transaction the caller holds; the caller decides where transactions begin and end.
Operator queries (status, list, trace, requeue, purge) live in :mod:`mailout.queries`.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Float,
    and_,
    bindparam,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from mailout.models import ClaimedMessage, Outcome, Status
from mailout.schema import (
    REPLY_TEXT_MAX,
    Timestamp,
    attempts,
    db_now,
    db_now_plus,
    messages,
)

# The columns that make two messages "the same" for idempotency.
CONTENT_COLUMNS = (
    "recipient", "sender", "queue", "template", "params", "subject", "body_text",
    "body_html", "headers",
)


@dataclass(frozen=True, slots=True)
class Stored:
    """Where an idempotency key landed: the row holding it and whether we wrote it."""

    id: int
    message_id: str
    created: bool
    content: Mapping[str, Any]


def insert_messages(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> dict[str, Stored]:
    """Insert ``rows``, skipping keys that already exist; map every key to its row.

    The insert is ``ON CONFLICT DO NOTHING`` on the key, so two transactions racing
    on one key end with one row: the second waits for the first to commit, then
    finds its row. Duplicates within ``rows`` keep the first.
    """
    first: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        first.setdefault(row["idempotency_key"], row)
    params = [_insert_params(r) for r in first.values()]
    created: dict[str, Stored] = {}
    if params:
        stmt = _insert_statement(conn.dialect.name)
        # One row goes as a plain execute: the executemany path costs more than it saves.
        for rid, key, mid in conn.execute(stmt, params[0] if len(params) == 1 else params):
            created[key] = Stored(rid, mid, True, first[key])
    missing = [k for k in first if k not in created]
    if missing:
        cols = [messages.c.id, messages.c.idempotency_key, messages.c.message_id]
        cols += [messages.c[c] for c in CONTENT_COLUMNS]
        found = conn.execute(select(*cols).where(messages.c.idempotency_key.in_(missing)))
        for r in found:
            m = r._mapping
            created[m["idempotency_key"]] = Stored(m["id"], m["message_id"], False, dict(m))
    return created


_LITERAL_COLUMNS = (*CONTENT_COLUMNS, "idempotency_key", "priority", "message_id")
# Times come from the database clock unless the caller scheduled the message.
_INSERT_VALUES: dict[str, Any] = {
    **{c: bindparam(c, type_=messages.c[c].type) for c in _LITERAL_COLUMNS},
    "status": Status.PENDING.value,
    "created_at": db_now(),
    "next_attempt_at": func.coalesce(bindparam("send_at", type_=Timestamp), db_now()),
    "expires_at": func.coalesce(
        bindparam("expires_at", type_=Timestamp),
        db_now_plus(bindparam("expires_in", type_=Float)),
    ),
}


def _insert_params(row: Mapping[str, Any]) -> dict[str, Any]:
    params = {c: row[c] for c in _LITERAL_COLUMNS}
    send_at: datetime | None = row["send_at"]
    params["send_at"] = send_at
    params["expires_in"] = row["expires_in"]
    params["expires_at"] = (
        None if send_at is None else send_at + timedelta(seconds=row["expires_in"])
    )
    return params


@functools.cache
def _insert_statement(dialect: str) -> Any:
    """INSERT ... ON CONFLICT (key) DO NOTHING RETURNING, built once per dialect.

    Building it per call costs more than the round trip on a fast network.
    """
    if dialect == "postgresql":
        base: Any = postgresql.insert(messages)
    elif dialect == "sqlite":
        base = sqlite.insert(messages)
    else:
        raise NotImplementedError(f"mailout does not support the {dialect} dialect yet")
    return (
        base.on_conflict_do_nothing(index_elements=["idempotency_key"])
        .values(_INSERT_VALUES)
        .returning(messages.c.id, messages.c.idempotency_key, messages.c.message_id)
    )
