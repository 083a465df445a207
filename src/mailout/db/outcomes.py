"""The SQL that records finished attempts: each row's next state, and its attempt log.

A row is updated only while the attempt's lease token still holds it (a fenced
completion: its worker lost the lease and another has claimed the row); the attempt
is logged either way, because it happened. Every function runs inside the caller's
transaction. Rows are claimed and leased by :mod:`mailout.db.leasing`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    Boolean,
    Connection,
    Float,
    Integer,
    SmallInteger,
    String,
    bindparam,
    case,
    cast,
    func,
    insert,
    literal,
    text,
    true,
    update,
)

from mailout.db import dialects, hot_statements, mysql_completions
from mailout.db.leasing import in_set_order
from mailout.db.schema import (
    REPLY_TEXT_MAX,
    Timestamp,
    attempt_recipients,
    attempts,
    db_now,
    db_now_plus,
    json_default,
    messages,
)
from mailout.models import Completion, Outcome, Status


def complete(conn: Connection, completions: Iterable[Completion]) -> list[int]:
    """Record finished attempts; return the ids whose completion was fenced out.

    Each update checks the lease token, so a worker whose lease expired (and whose
    row another worker has since claimed) cannot overwrite the newer attempt. Its
    attempt is still logged, because it happened; only the row is left alone.
    On PostgreSQL the whole batch is one statement (one round trip); on MySQL a
    batch without unknown outcomes is two (:mod:`mailout.db.mysql_completions`).
    """
    batch = list(completions)
    if not batch:
        return []
    rows = [_completion_row(c) for c in batch]
    ids = [c.id for c in batch]
    _log_recipients(conn, batch)
    if dialects.writes_batches_as_json(conn) and len(set(ids)) == len(ids):
        param = json.dumps(rows, ensure_ascii=False, default=json_default)
        done = {row[0] for row in hot_statements.fetch(conn, _COMPLETE_PG, {"batch": param})}
        return [i for i in ids if i not in done]
    if dialects.completes_batches_in_json_table(conn) and mysql_completions.fits(rows):
        fenced = mysql_completions.complete(conn, rows)
        log = [{**_attempt_row(c, fenced=c.id in fenced), "finished_at": db_now()}
               for c in batch if c.logged]
        if log:  # one multi-row INSERT: the driver would send an executemany row by row
            conn.execute(insert(attempts).values(log))
        return [i for i in ids if i in fenced]
    return _complete_rows(conn, batch, rows)


def _log_recipients(conn: Connection, batch: Sequence[Completion]) -> None:
    """Each recipient's outcome, for attempts of messages to several recipients. Logged
    whether or not the row's completion is fenced: the attempt happened."""
    rows = [{"outbox_id": c.id, "attempt": c.attempt, "address": r.address,
             "outcome": r.outcome.value, "reply_code": r.reply_code,
             "enhanced_code": r.enhanced_code, "reply_text": _truncate(r.reply_text)}
            for c in batch if c.logged for r in c.recipients]
    if rows:
        conn.execute(insert(attempt_recipients).values(created_at=db_now()), rows)


def _complete_rows(
    conn: Connection, batch: Sequence[Completion], rows: Sequence[Mapping[str, Any]]
) -> list[int]:
    """One UPDATE per row: SQLite (in-process: a statement costs microseconds, not a
    round trip), and a batch naming a row twice, where the order matters."""
    stmt = _complete_row_statement()
    fenced: list[int] = []
    log: list[dict[str, Any]] = []
    for c, row in zip(batch, rows, strict=True):
        was_fenced = conn.execute(stmt, {f"p_{k}": v for k, v in row.items()}).rowcount != 1
        if was_fenced:
            fenced.append(c.id)
        if c.logged:
            log.append(_attempt_row(c, fenced=was_fenced))
    if log:
        conn.execute(insert(attempts).values(finished_at=db_now()), log)
    return fenced


_LEASE_LOST = "lease lost before completion; row left to its new owner"


def _completion_row(c: Completion) -> dict[str, Any]:
    """What ``c`` does to its row (and its attempt log entry), as plain values.

    Reply code and text are kept from an earlier attempt unless this one got a
    reply; so are the provider id and the redirect. Times come from the database
    clock; ``delay`` schedules the next attempt; ``uncharge`` gives the attempt
    back (a pause); an unknown outcome counts towards ``unknown_attempts``.
    """
    return {
        "id": c.id, "token": c.lease_token, "status": c.status.value, "reason": c.row_reason,
        "reply_code": c.reply_code, "reply_text": _truncate(c.reply_text),
        "provider_id": c.provider_message_id, "redirected_to": c.redirected_to,
        "delay": c.delay_seconds, "uncharge": int(c.uncharge),
        "unknown": int(c.outcome is Outcome.UNKNOWN and c.logged),
        "sent": c.status is Status.SENT, "final": c.status.is_final, "logged": c.logged,
        "attempt": c.attempt, "outcome": c.outcome.value, "stage": c.stage,
        "enhanced": c.enhanced_code, "detail": _truncate(c.detail, 200),
        "recipient": c.recipient, "worker": c.worker, "started_at": c.started_at,
        "charged": not c.uncharge,
        "settled": None if c.settled is None else dict(c.settled),
        "transport": c.transport,
    }


_BATCH_TYPES = {  # the jsonb_to_recordset() columns of _COMPLETE_PG and their types
    "id": "bigint", "token": "text", "status": "text", "reason": "text",
    "reply_code": "smallint", "reply_text": "text", "provider_id": "text",
    "redirected_to": "text", "delay": "float8", "uncharge": "int", "unknown": "int",
    "sent": "bool", "final": "bool", "logged": "bool", "attempt": "int", "outcome": "text",
    "stage": "text", "enhanced": "text", "detail": "text", "recipient": "text",
    "worker": "text", "started_at": "timestamptz", "charged": "bool", "settled": "jsonb",
    "transport": "text",
}
# The batch arrives as one JSON document (see _INSERT_PG), so the text and its
# server-side prepared plan are the same for every batch size. The UPDATE applies
# _completion_row's rules, fenced by the lease token; the attempt log joins on its
# RETURNING to tell fenced rows. clock_timestamp() is schema.db_now() on PostgreSQL.
_COMPLETE_PG = text(f"""
WITH v AS (
    SELECT * FROM jsonb_to_recordset(CAST(:batch AS jsonb))
        AS v({", ".join(f"{c} {t}" for c, t in _BATCH_TYPES.items())})
), done AS (
    UPDATE {messages.name} AS m SET
        status = v.status,
        reason = v.reason,
        lease_owner = NULL,
        lease_token = NULL,
        lease_expires_at = NULL,
        last_reply_code = CASE WHEN v.reply_code IS NULL THEN m.last_reply_code
                               ELSE v.reply_code END,
        last_reply_text = CASE WHEN v.reply_code IS NULL THEN m.last_reply_text
                               ELSE v.reply_text END,
        provider_message_id = COALESCE(v.provider_id, m.provider_message_id),
        redirected_to = COALESCE(v.redirected_to, m.redirected_to),
        sent_at = CASE WHEN v.sent THEN clock_timestamp() ELSE m.sent_at END,
        finished_at = CASE WHEN v.final THEN clock_timestamp() ELSE m.finished_at END,
        next_attempt_at = CASE WHEN v.delay IS NULL THEN m.next_attempt_at
                               ELSE clock_timestamp() + make_interval(secs => v.delay) END,
        attempts = m.attempts - v.uncharge,
        unknown_attempts = m.unknown_attempts + v.unknown,
        settled = COALESCE(v.settled, m.settled),
        unknown_since = CASE WHEN v.unknown = 1
                             THEN COALESCE(m.unknown_since, v.started_at)
                             ELSE m.unknown_since END,
        unknown_via = CASE WHEN v.unknown = 0 THEN m.unknown_via
                           WHEN m.unknown_since IS NULL THEN v.transport
                           WHEN m.unknown_via IS DISTINCT FROM v.transport THEN '*'
                           ELSE m.unknown_via END
    FROM v
    WHERE m.id = v.id AND m.lease_token = v.token AND m.status = '{Status.SENDING.value}'
    RETURNING m.id
), logged AS (
    INSERT INTO {attempts.name} (outbox_id, attempt, outcome, stage, reply_code,
        enhanced_code, reply_text, detail, recipient, worker, started_at, finished_at,
        charged, transport)
    SELECT v.id, v.attempt, v.outcome, v.stage, v.reply_code, v.enhanced, v.reply_text,
           CASE WHEN done.id IS NULL THEN '{_LEASE_LOST}' ELSE v.detail END,
           v.recipient, v.worker, v.started_at, clock_timestamp(), v.charged, v.transport
    FROM v LEFT JOIN done ON done.id = v.id
    WHERE v.logged
)
SELECT id FROM done
""")  # noqa: S608 - only this module's constants are interpolated; values are bound


@functools.cache
def _complete_row_statement() -> Any:
    """_COMPLETE_PG's rules for one row, in any dialect, built and compiled once (a
    statement built per row showed in SQLite's completions: docs/capacity.md). Its
    parameters are _completion_row's keys with a "p_" prefix: SQLAlchemy reserves
    column names."""
    m = messages.c

    def arg(name: str, type_: Any = None) -> Any:
        # Typed, so that "? IS NULL" means something to PostgreSQL as well. (Booleans
        # are tested with IS TRUE instead: MySQL has no CAST to a boolean.)
        param: Any = bindparam(f"p_{name}")
        return param if type_ is None else cast(param, type_)

    def flag(name: str) -> Any:
        return bindparam(f"p_{name}", type_=Boolean).is_(true())

    reply_code = arg("reply_code", SmallInteger)
    return (
        update(messages)
        .where(m.id == arg("id"), m.lease_token == arg("token"),
               m.status == Status.SENDING.value)
        # unknown_via first: it reads the old unknown_since (see in_set_order).
        .ordered_values(*in_set_order(
            unknown_via=case(
                (arg("unknown", Integer) == 0, m.unknown_via),
                (m.unknown_since.is_(None), arg("transport", String)),
                (m.unknown_via.is_distinct_from(arg("transport", String)), literal("*")),
                else_=m.unknown_via),
            status=arg("status"),
            reason=arg("reason"),
            lease_owner=None,
            lease_token=None,
            lease_expires_at=None,
            last_reply_code=case((reply_code.is_(None), m.last_reply_code), else_=reply_code),
            last_reply_text=case((reply_code.is_(None), m.last_reply_text),
                                 else_=arg("reply_text")),
            provider_message_id=func.coalesce(arg("provider_id", String), m.provider_message_id),
            redirected_to=func.coalesce(arg("redirected_to", String), m.redirected_to),
            sent_at=case((flag("sent"), db_now()), else_=m.sent_at),
            finished_at=case((flag("final"), db_now()), else_=m.finished_at),
            next_attempt_at=case((arg("delay", Float).is_(None), m.next_attempt_at),
                                 else_=db_now_plus(arg("delay", Float))),
            attempts=m.attempts - arg("uncharge", Integer),
            unknown_attempts=m.unknown_attempts + arg("unknown", Integer),
            settled=func.coalesce(bindparam("p_settled", type_=m.settled.type), m.settled),
            # Typed but not CAST: SQLite would turn CAST(text AS DATETIME) into a number.
            unknown_since=case((arg("unknown", Integer) == 1,
                                func.coalesce(m.unknown_since,
                                              bindparam("p_started_at", type_=Timestamp))),
                               else_=m.unknown_since),
        ))
    )


def _attempt_row(c: Completion, *, fenced: bool) -> dict[str, Any]:
    detail = _LEASE_LOST if fenced else c.detail
    return {
        "outbox_id": c.id,
        "attempt": c.attempt,
        "outcome": c.outcome.value,
        "stage": c.stage,
        "reply_code": c.reply_code,
        "enhanced_code": c.enhanced_code,
        "reply_text": _truncate(c.reply_text),
        "detail": _truncate(detail, 200),
        "recipient": c.recipient,
        "worker": c.worker,
        "started_at": c.started_at,
        "charged": not c.uncharge,
        "transport": c.transport,
    }


def _truncate(value: str | None, limit: int = REPLY_TEXT_MAX) -> str | None:
    """``value`` cut to ``limit`` and made storable: a server's stray bytes arrive as
    lone surrogates (surrogateescape), and PostgreSQL refuses NUL. Either would fail
    the whole batch, and with it every retry."""
    if value is None:
        return None
    value = value[:limit]
    if not value.isascii():
        value = value.encode("utf-8", "replace").decode("utf-8")
    return value.replace("\x00", "")
