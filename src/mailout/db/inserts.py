"""The outbox INSERT: new rows from enqueue, one statement per batch, written by the
connection's store (:mod:`mailout.db.stores`).

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
from typing import Any

from sqlalchemy import Connection, bindparam, delete, update
from sqlalchemy.exc import DBAPIError

from mailout.db import dialects
from mailout.db.schema import messages
from mailout.db.stores import store_for
from mailout.db.stores.inserting import CONTENT_COLUMNS, NOTIFY_CHANNEL, Stored
from mailout.exceptions import InvalidMessage, SchemaMissing

__all__ = ["CONTENT_COLUMNS", "NOTIFY_CHANNEL", "Stored", "insert_messages", "notify_queues",
           "refuse_oversize", "schema_required", "store_late", "withdraw"]

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



def insert_messages(conn: Connection, rows: Sequence[Mapping[str, Any]],
                    notify: bool = False) -> dict[str, Stored]:
    """Insert ``rows``, skipping keys that already exist; map every key to its row.

    The insert is ``ON CONFLICT DO NOTHING`` on the key, so two transactions racing
    on one key end with one row: the second waits for the first to commit, then
    finds its row. Duplicates within ``rows`` keep the first. With ``notify``,
    workers are woken on commit (see :func:`notify_queues`); on PostgreSQL the NOTIFY
    rides in the INSERT statement itself, saving the round trip.
    """
    first: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        first.setdefault(row["idempotency_key"], row)
    return store_for(conn).insert(conn, first, notify)


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
    store_for(conn).notify(conn, sorted(set(queues)))
