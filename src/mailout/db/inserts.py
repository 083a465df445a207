"""The outbox INSERT: new rows from enqueue, one statement per batch.

Keys already present are skipped (``ON CONFLICT DO NOTHING``) and reported with
the row that holds them; with ``notify`` (``MAILOUT_NOTIFY=in-transaction``), workers
are woken by a NOTIFY in the transaction (PostgreSQL; the default wakes them after the
commit instead, :mod:`mailout.db.wakeups`). Like
:mod:`mailout.db.leasing`, every function runs in the caller's transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Float,
    String,
    bindparam,
    column,
    delete,
    func,
    select,
    text,
    update,
)
from sqlalchemy.exc import DBAPIError

from mailout.db import dialects, hot_statements
from mailout.db.schema import Timestamp, db_now, db_now_plus, json_default, messages
from mailout.exceptions import InvalidMessage, SchemaMissing
from mailout.models import Status

# The columns that make two messages "the same" for idempotency.
CONTENT_COLUMNS = (
    "recipient", "sender", "queue", "template", "params", "subject", "body_text",
    "body_html", "headers", "addresses", "locale", "attachment_digest",
)


@contextmanager
def schema_required() -> Iterator[None]:
    """Turn the database's "no such table" for a mailout table into SchemaMissing, which
    says what to run; without it an application on an unmigrated database meets the
    driver's ``relation "mailout_messages" does not exist``."""
    try:
        yield
    except DBAPIError as exc:
        if dialects.is_missing_table(exc):
            raise SchemaMissing("the database has no mailout tables: run `mailout db "
                                "upgrade` (or `manage.py migrate` with Django)") from exc
        raise


@dataclass(frozen=True, slots=True)
class Stored:
    """Where an idempotency key landed: the row holding it and whether we wrote it."""

    id: int
    message_id: str
    created: bool
    content: Mapping[str, Any]


def insert_messages(conn: Connection, rows: Sequence[Mapping[str, Any]],
                    notify: bool = False) -> dict[str, Stored]:
    """Insert ``rows``, skipping keys that already exist; map every key to its row.

    The insert is ``ON CONFLICT DO NOTHING`` on the key, so two transactions racing
    on one key end with one row: the second waits for the first to commit, then
    finds its row. Duplicates within ``rows`` keep the first. With ``notify``,
    workers are woken on commit (see :func:`notify`); on PostgreSQL the NOTIFY rides
    in the INSERT statement itself, saving the round trip.
    """
    first: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        first.setdefault(row["idempotency_key"], row)
    if len(first) == 1 and dialects.writes_batches_as_json(conn):
        # One row (every enqueue()): a plain INSERT ... VALUES, no JSON batch.
        return _insert_one(conn, next(iter(first.values())), notify)
    params = [_insert_params(r) for r in first.values()]
    created: dict[str, Stored] = {}
    if params:
        if dialects.writes_batches_as_json(conn):
            # One statement and one parameter whatever the batch size: SQLAlchemy's
            # multi-VALUES batches make psycopg parse a new query text of thousands of
            # placeholders each time.
            stmt_pg = _INSERT_NOTIFY_PG if notify else _INSERT_PG
            result = conn.execute(stmt_pg, _insert_rows(params))
            notify = False
        elif dialects.returns_written_rows(conn):
            stmt = _insert_statement(conn)
            # One row goes as a plain execute: executemany costs more than it saves.
            result = conn.execute(stmt, params[0] if len(params) == 1 else params)
        else:
            _insert_then_lock(conn, params, first, created)
            return created
        for rid, key, mid in result:
            created[key] = Stored(rid, mid, True, first[key])
    if notify:
        notify_queues(conn, {first[k]["queue"] for k in created})
    missing = [k for k in first if k not in created]
    if missing:
        created.update(_existing(conn, missing))
    return created


def _insert_one(conn: Connection, row: Mapping[str, Any], notify: bool) -> dict[str, Stored]:
    """PostgreSQL, one row: :data:`_ONE_PG` (with the NOTIFY riding in it), through
    :func:`mailout.db.hot_statements.fetch`; a key already present is read back."""
    key = row["idempotency_key"]
    found = hot_statements.fetch(conn, _ONE_NOTIFY_PG if notify else _ONE_PG, _one_row(row))
    if found:
        rid, _, mid = found[0]
        return {key: Stored(rid, mid, True, row)}
    return _existing(conn, [key])


def _existing(conn: Connection, keys: Sequence[str]) -> dict[str, Stored]:
    """The rows already holding ``keys``, with their content (none of them ours)."""
    cols = [messages.c.id, messages.c.idempotency_key, messages.c.message_id]
    cols += [messages.c[c] for c in CONTENT_COLUMNS]
    found = conn.execute(select(*cols).where(messages.c.idempotency_key.in_(list(keys))))
    held: dict[str, Stored] = {}
    for r in found:
        m = r._mapping
        held[m["idempotency_key"]] = Stored(m["id"], m["message_id"], False, dict(m))
    return held


_LARGE_COLUMNS = ("subject", "body_text", "body_html", "params", "headers", "addresses")


def refuse_oversize(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """Raise InvalidMessage, before anything is written, for a row or an attachment
    (``row["attachments"]``, each inserted by a statement of its own) that would not
    fit in one statement on this server (MySQL's ``max_allowed_packet``): the server
    would drop the connection mid-transaction instead of refusing it.
    Elsewhere nothing is checked."""
    limit = dialects.statement_limit(conn)
    if limit is None:
        return
    room = limit - dialects.STATEMENT_OVERHEAD
    advice = (f"the database accepts statements up to {limit} bytes (max_allowed_packet): "
              "raise it on the server, or link the file instead of attaching it")
    for row in rows:
        for item in row.get("attachments") or ():
            size = dialects.sent_size(item.content)
            if size > room:
                raise InvalidMessage("attachments", f"{item.filename!r} takes {size} bytes "
                                     f"as sent to the database; {advice}")
        size = sum(dialects.sent_size(_as_text(row.get(c))) for c in _LARGE_COLUMNS)
        size += dialects.sent_size(row.get("mime"))  # written by a statement of its own
        if size > room:
            raise InvalidMessage("text", f"the message takes {size} bytes as sent to the "
                                 f"database; {advice}")


def _as_text(value: Any) -> str | None:
    return value if value is None or isinstance(value, str) else json.dumps(value)


_ROW_COLUMNS = (*CONTENT_COLUMNS, "idempotency_key", "priority", "message_id",
                "event_ref", "event_version", "schema_version")
# The enqueue's W3C trace context (mailout.support.tracing): in a row only when the
# caller had an active span, so they are read with .get().
_TRACE_COLUMNS = ("traceparent", "tracestate")
_LITERAL_COLUMNS = (*_ROW_COLUMNS, *_TRACE_COLUMNS)
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
    params = {c: row[c] for c in _ROW_COLUMNS}
    params["traceparent"] = row.get("traceparent")
    params["tracestate"] = row.get("tracestate")
    send_at: datetime | None = row["send_at"]
    params["send_at"] = send_at
    params["expires_in"] = row["expires_in"]
    params["expires_at"] = (
        None if send_at is None else send_at + timedelta(seconds=row["expires_in"])
    )
    return params


_ROW_TYPES = {  # the jsonb_to_recordset() columns of _INSERT_PG and their types
    **dict.fromkeys(_LITERAL_COLUMNS, "text"),
    "params": "jsonb", "headers": "jsonb", "addresses": "jsonb", "priority": "smallint",
    "schema_version": "int",
    "send_at": "timestamptz", "expires_at": "timestamptz", "expires_in": "float8",
    "ord": "int",
}
# The batch travels as one JSON document: serialising it is a single C call, where
# per-column array parameters cost psycopg a Python call per value. PostgreSQL
# parses it back with the column types above. WITH "ord" the ids follow input
# order, as the executemany this replaces did; clock_timestamp() is db_now().
_INSERT_PG = text(f"""
INSERT INTO {messages.name} ({", ".join(_LITERAL_COLUMNS)}, status, created_at,
    next_attempt_at, expires_at)
SELECT {", ".join(f"v.{c}" for c in _LITERAL_COLUMNS)}, '{Status.PENDING.value}',
    clock_timestamp(), COALESCE(v.send_at, clock_timestamp()),
    COALESCE(v.expires_at, clock_timestamp() + make_interval(secs => v.expires_in))
FROM jsonb_to_recordset(CAST(:rows AS jsonb))
    AS v({", ".join(f"{c} {t}" for c, t in _ROW_TYPES.items())})
ORDER BY v.ord
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id, idempotency_key, message_id
""")  # noqa: S608 - only this module's constants are interpolated; values are bound

NOTIFY_CHANNEL = "mailout"  # mailout.db.notifications listens here; the payload is the queue

# The same, waking workers: pg_notify runs once per inserted row, and PostgreSQL
# folds identical notifications of one transaction into one.
_INSERT_NOTIFY_PG = text(f"""
WITH ins AS ({_INSERT_PG.text.strip()}, queue)
SELECT ins.id, ins.idempotency_key, ins.message_id
FROM ins, LATERAL (SELECT pg_notify('{NOTIFY_CHANNEL}', ins.queue)) AS n
""")  # noqa: S608 - as above


_RETURNED = (column("id", BigInteger), column("idempotency_key", String),
             column("message_id", String))
_JSON_COLUMNS = ("params", "headers", "addresses")


def _one_value(name: str) -> str:
    return f"CAST(:{name} AS jsonb)" if name in _JSON_COLUMNS else f":{name}"


# One row as a plain INSERT ... VALUES: what _INSERT_PG does for a batch, without
# building and parsing a JSON document and a recordset for a single row. Typed result
# columns let SQLAlchemy (when it runs it, see mailout.db.hot_statements) cache the result's
# metadata with the statement.
_ONE_PG_SQL = f"""
INSERT INTO {messages.name} ({", ".join(_LITERAL_COLUMNS)}, status, created_at,
    next_attempt_at, expires_at)
VALUES ({", ".join(_one_value(c) for c in _LITERAL_COLUMNS)}, '{Status.PENDING.value}',
    clock_timestamp(), COALESCE(CAST(:send_at AS timestamptz), clock_timestamp()),
    COALESCE(CAST(:expires_at AS timestamptz),
             clock_timestamp() + make_interval(secs => CAST(:expires_in AS float8))))
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id, idempotency_key, message_id
"""  # noqa: S608 - only this module's constants are interpolated; values are bound
_ONE_PG = text(_ONE_PG_SQL).columns(*_RETURNED)
_ONE_NOTIFY_PG = text(f"""
WITH ins AS ({_ONE_PG_SQL.strip()}, queue)
SELECT ins.id, ins.idempotency_key, ins.message_id
FROM ins, LATERAL (SELECT pg_notify('{NOTIFY_CHANNEL}', ins.queue)) AS n
""").columns(*_RETURNED)  # noqa: S608 - as above
# Built once: json.dumps() with any option builds a new encoder on every call.
_JSON_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"),
                                 default=json_default)


def _one_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of _ONE_PG: the JSON columns as JSON text (the params as
    validation encoded them, ``row["params_json"]``, when there), the rest as they are."""
    params = _insert_params(row)
    encoded = row.get("params_json")
    for name in _JSON_COLUMNS:
        if params[name] is not None:
            params[name] = encoded if name == "params" and encoded is not None \
                else _JSON_ENCODER.encode(params[name])
    return params


def _insert_rows(params: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The batch as the one JSON parameter of _INSERT_PG.

    A key left out is SQL NULL to jsonb_to_recordset(), so None values are left
    out: most columns of a typical row are NULL, and this nearly halves the bytes
    to encode, send and parse.
    """
    rows = [{"ord": i, **{k: v for k, v in p.items() if v is not None}}
            for i, p in enumerate(params)]
    return {"rows": json.dumps(rows, ensure_ascii=False, separators=(",", ":"),
                               default=json_default)}


_STATEMENTS: dict[str, Any] = {}  # dialect name -> the insert, built once


def _insert_statement(conn: Connection) -> Any:
    """INSERT ... skipping an existing key (RETURNING where the database can), built
    once per dialect: building it per call costs more than the round trip on a fast
    network."""
    name = dialects.name_of(conn)
    if name not in _STATEMENTS:
        stmt = dialects.insert_ignoring_duplicates(conn, messages, ["idempotency_key"])
        stmt = stmt.values(_INSERT_VALUES)
        if dialects.returns_written_rows(conn):
            stmt = stmt.returning(messages.c.id, messages.c.idempotency_key,
                                  messages.c.message_id)
        _STATEMENTS[name] = stmt
    return _STATEMENTS[name]


def _insert_many_plain(conn: Connection, params: Sequence[Mapping[str, Any]]) -> None:
    """A batch as one multi-row INSERT: the driver (PyMySQL) folds an executemany into
    one statement only when every value is a plain placeholder, so the times are
    worked out here from one read of the database clock, the same for the batch
    (ids still give the order)."""
    now = conn.execute(select(db_now())).scalar_one()
    rows = []
    for p in params:
        row = {c: p[c] for c in _LITERAL_COLUMNS}
        row["status"] = Status.PENDING.value
        row["created_at"] = now
        row["next_attempt_at"] = p["send_at"] or now
        row["expires_at"] = p["expires_at"] or now + timedelta(seconds=p["expires_in"])
        rows.append(row)
    stmt = dialects.insert_ignoring_duplicates(conn, messages, ["idempotency_key"])
    conn.execute(stmt, rows)


def _insert_then_lock(conn: Connection, params: Sequence[Mapping[str, Any]],
                      first: Mapping[str, Mapping[str, Any]],
                      found: dict[str, Stored]) -> None:
    """MySQL: insert (``ON DUPLICATE KEY UPDATE key = key``), then read every key's row
    with a locking read, which sees the newest committed row under any isolation
    (a plain read under REPEATABLE READ could miss one committed by a racing
    transaction). The insert already holds those rows' locks, so it does not wait.
    A row is ours when it carries the Message-ID this call generated."""
    if len(params) == 1:
        conn.execute(_insert_statement(conn), params[0])
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


def store_late(conn: Connection, late: Sequence[tuple[int, bytes | None, str | None]]) -> None:
    """``(id, mime, batch)`` on rows just inserted: the bytes of messages stored whole
    and the token of an ordered batch, in one UPDATE per call, so that the INSERT
    (JSON on PostgreSQL, where bytes do not travel) stays as it is for every other
    message."""
    if late:
        stmt = update(messages).where(messages.c.id == bindparam("row_id"))
        conn.execute(stmt.values(mime=bindparam("whole"), batch=bindparam("token")),
                     [{"row_id": i, "whole": data, "token": token}
                      for i, data, token in late])


def withdraw(conn: Connection, ids: Sequence[int]) -> None:
    """Delete rows this transaction just inserted (an enqueue_many that failed after
    its INSERT), so that a caller who catches the error and commits writes none of
    the batch. Nothing else can have seen them: they are not committed."""
    if ids:
        conn.execute(delete(messages).where(messages.c.id.in_(list(ids))))


def notify_queues(conn: Connection, queues: Iterable[str]) -> None:
    """Wake workers serving ``queues`` when the caller's transaction commits.

    PostgreSQL only (elsewhere workers poll). NOTIFY is transactional: nothing is
    delivered on rollback, and duplicates within a transaction are folded into one.
    """
    names = sorted(set(queues))
    if not names or not dialects.supports_listen_notify(conn):
        return
    conn.execute(select(*(func.pg_notify(NOTIFY_CHANNEL, q) for q in names)))
