"""enqueue()'s one-row INSERT on PostgreSQL, run on psycopg's cursor when nothing
watches SQLAlchemy (mailout.db.hot_statements): the same rows, notifications, errors and
transaction handling as through ``Connection.execute``, and observers still see it."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, event, select, text
from sqlalchemy.exc import DataError, InternalError, OperationalError

from mailout import db
from mailout.db import hot_statements
from mailout.db.notifications import libpq_url
from mailout.db.schema import messages
from mailout.models import Attachment, Mailbox
from mailout.outbox import EnqueueSettings, Message, NotifyMode, enqueue, enqueue_many

SETTINGS = EnqueueSettings(message_id_domain="shop.example.com")
QUIET = EnqueueSettings(message_id_domain="shop.example.com", notify=NotifyMode.OFF)


@pytest.fixture
def pg(pg_url: str) -> Iterator[Engine]:
    engine = db.make_engine(pg_url)
    yield engine
    engine.dispose()


def stored(engine: Engine, key: str) -> dict[str, Any]:
    with engine.connect() as conn:
        found = conn.execute(select(messages).where(messages.c.idempotency_key == key))
        return dict(found.one()._mapping)


def test_a_plain_transaction_takes_the_cursor_path(pg: Engine) -> None:
    # Fails when a SQLAlchemy upgrade renames what direct reads: the fast path is lost.
    with pg.begin() as conn:
        assert hot_statements._unobserved(conn)
    with pg.connect() as conn:
        assert not hot_statements._unobserved(conn)  # nothing begun yet: SQLAlchemy autobegins


FULL: dict[str, Any] = {
    "to": [Mailbox("ana@example.com", "Ana Núñez"), "bo@example.com"],
    "cc": "cy@example.com", "bcc": ["di@example.com"], "reply_to": "help@example.com",
    "template": "order_confirmation",
    "params": {"order": 7, "total": 12.5, "items": ["ü", "€"], "nested": {"a": [1, None]}},
    "queue": "bulk", "priority": -3,
    "send_at": datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC),
    "expires_in": timedelta(hours=5), "headers": {"X-Campaign": "spring"},
    "sender": "Shop <shop@example.com>", "event": "order:7", "version": 3, "locale": "es-MX",
    "unsubscribe": ["https://shop.example.com/u/7", "mailto:u@shop.example.com"],
    "attachments": [Attachment("a.txt", b"hello", "text/plain")],
}
SCHEDULED = ("created_at", "next_attempt_at", "expires_at")
PER_ROW = ("id", "idempotency_key", "message_id", *SCHEDULED)


@pytest.mark.parametrize("given", [FULL, {"to": "x@example.com", "subject": "Hi", "text": "t"}])
def test_one_row_stores_what_the_batch_statement_stores(pg: Engine, given: dict[str, Any]) -> None:
    with pg.begin() as conn:
        one = enqueue(conn, key="one", settings=SETTINGS, **given)
        batch = enqueue_many(conn, [Message(key="batch", **given),
                                    Message(key="other", **given)], settings=SETTINGS)
    assert one.created
    assert batch[0].created
    a, b = stored(pg, "one"), stored(pg, "batch")
    assert {k: v for k, v in a.items() if k not in PER_ROW} == \
        {k: v for k, v in b.items() if k not in PER_ROW}
    if given.get("send_at"):  # times from send_at and expires_in
        assert a["next_attempt_at"] == b["next_attempt_at"] == given["send_at"]
        assert a["expires_at"] == b["expires_at"] == given["send_at"] + given["expires_in"]
    else:  # from the database clock, the default queue's day
        for r in (a, b):
            assert abs(r["expires_at"] - r["created_at"] - timedelta(days=1)) < \
                timedelta(seconds=1)
            assert abs(r["next_attempt_at"] - r["created_at"]) < timedelta(seconds=1)
    assert (a["id"], a["message_id"]) == (one.id, one.message_id)


def test_a_duplicate_key_returns_the_stored_row(pg: Engine) -> None:
    with pg.begin() as conn:
        first = enqueue(conn, to="a@example.com", subject="Hi", text="t", key="k",
                        settings=SETTINGS)
        again = enqueue(conn, to="a@example.com", subject="Hi", text="t", key="k",
                        settings=SETTINGS)
    assert first.created
    assert not again.created
    assert (again.id, again.message_id) == (first.id, first.message_id)


def test_commit_as_you_go_keeps_every_enqueue(pg: Engine) -> None:
    # The first statement of a connection is SQLAlchemy's to run (it begins the
    # transaction that commit() then commits); the next ones may take the cursor.
    with pg.connect() as conn:
        for key in ("a", "b"):
            enqueue(conn, to="a@example.com", subject="Hi", text="t", key=key,
                    settings=QUIET)
        conn.commit()
        enqueue(conn, to="a@example.com", subject="Hi", text="t", key="c", settings=QUIET)
        conn.commit()
    assert [stored(pg, k)["idempotency_key"] for k in "abc"] == list("abc")


def test_listeners_and_echo_still_see_the_insert(pg_url: str,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    seen: list[str] = []
    engine = db.make_engine(pg_url)
    event.listen(engine, "before_cursor_execute",
                 lambda conn, cur, statement, *rest: seen.append(statement))
    with engine.begin() as conn:
        enqueue(conn, to="a@example.com", subject="Hi", text="t", key="k", settings=QUIET)
    engine.dispose()
    assert any("INSERT INTO mailout_messages" in s for s in seen)

    echoing = db.make_engine(pg_url, echo=True)
    with caplog.at_level(logging.INFO, "sqlalchemy.engine"), echoing.begin() as conn:
        enqueue(conn, to="a@example.com", subject="Hi", text="t", key="k2", settings=QUIET)
    echoing.dispose()
    assert "INSERT INTO mailout_messages" in caplog.text


def test_driver_errors_are_sqlalchemy_errors_as_from_execute(pg: Engine) -> None:
    holder = pg.connect()
    holder.begin()
    enqueue(holder, to="a@example.com", subject="Hi", text="t", key="held", settings=QUIET)
    try:
        with pg.begin() as conn:
            conn.execute(text("SET LOCAL lock_timeout = '100ms'"))
            assert hot_statements._unobserved(conn)
            # Waits for the holder's uncommitted row with the same key, then gives up.
            with pytest.raises(OperationalError) as caught:
                enqueue(conn, to="a@example.com", subject="Hi", text="t", key="held",
                        settings=QUIET)
            conn.rollback()
        assert isinstance(caught.value.orig, psycopg.errors.LockNotAvailable)
        assert "INSERT INTO mailout_messages" in str(caught.value)
    finally:
        holder.rollback()
        holder.close()
    with pg.begin() as conn:
        with contextlib.suppress(DataError):
            conn.execute(text("SELECT 1 / 0"))  # the transaction is now failed
        with pytest.raises(InternalError) as failed:
            enqueue(conn, to="a@example.com", subject="Hi", text="t", key="late",
                    settings=QUIET)
        conn.rollback()
    assert isinstance(failed.value.orig, psycopg.errors.InFailedSqlTransaction)
    with pg.begin() as conn:  # the pool's connection is fine afterwards
        assert enqueue(conn, to="a@example.com", subject="Hi", text="t", key="fine",
                       settings=QUIET).created


def _listen(url: str, ready: threading.Event, stop: threading.Event, got: list[str]) -> None:
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("LISTEN mailout")
        ready.set()
        while not stop.is_set():
            got += [n.payload for n in conn.notifies(timeout=0.1)]


def test_notify_on_commit_only_and_only_for_new_rows(pg: Engine, pg_url: str) -> None:
    ready, stop = threading.Event(), threading.Event()
    got: list[str] = []
    listener = threading.Thread(target=_listen, args=(pg_url, ready, stop, got))
    listener.start()
    try:
        assert ready.wait(10)
        with pg.connect() as conn:
            conn.begin()
            enqueue(conn, to="a@example.com", subject="Hi", text="t", queue="bulk",
                    settings=SETTINGS)
            conn.rollback()
        with pg.begin() as conn:
            enqueue(conn, to="a@example.com", subject="Hi", text="t", key="k",
                    settings=QUIET)
        with pg.begin() as conn:  # a duplicate: nothing written, nobody woken
            enqueue(conn, to="a@example.com", subject="Hi", text="t", key="k",
                    settings=SETTINGS)
        with pg.begin() as conn:
            for _ in range(2):  # folded into one notification per transaction
                enqueue(conn, to="a@example.com", subject="Hi", text="t",
                        queue="critical", settings=SETTINGS)
        stop.wait(0.5)  # time for a stray notification to arrive
    finally:
        stop.set()
        listener.join(10)
    assert got == ["critical"]

