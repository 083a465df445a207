"""Wake-ups after the commit (mailout.db.wakeups): nothing NOTIFYs in the caller's
transaction by default, a commit wakes listeners, a rollback wakes no one."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Connection, Engine, event
from sqlalchemy.orm import Session

from mailout import db
from mailout.db import wakeups
from mailout.db.notifications import libpq_url
from mailout.outbox import EnqueueSettings, NotifyMode, enqueue

DEFAULT = EnqueueSettings(message_id_domain="shop.example.com")
IN_TRANSACTION = EnqueueSettings(message_id_domain="shop.example.com",
                                 notify=NotifyMode.IN_TRANSACTION)
WAIT = 30.0  # seconds a notification may take on a loaded machine before the test fails


@pytest.fixture
def pg(pg_url: str) -> Iterator[Engine]:
    engine = db.make_engine(pg_url)
    yield engine
    engine.dispose()


@pytest.fixture
def heard(pg_url: str) -> Iterator[queue.Queue[str]]:
    """The payloads of the notifications on mailout's channel, from a LISTEN that is up."""
    got: queue.Queue[str] = queue.Queue()
    ready, stop = threading.Event(), threading.Event()

    def listen() -> None:
        with psycopg.connect(libpq_url(pg_url), autocommit=True) as conn:
            conn.execute("LISTEN mailout")
            ready.set()
            while not stop.is_set():
                for note in conn.notifies(timeout=0.05):
                    got.put(note.payload)

    listener = threading.Thread(target=listen)
    listener.start()
    assert ready.wait(10)
    yield got
    stop.set()
    listener.join(10)


def heard_until(heard: queue.Queue[str], last: str) -> list[str]:
    """Every payload heard up to ``last`` (a later commit's queue): a wake-up that
    should not have been sent would have come before it."""
    got = [heard.get(timeout=WAIT)]
    while got[-1] != last:
        got.append(heard.get(timeout=WAIT))
    return got


def _statements_of(engine: Engine, caller: Connection) -> list[str]:
    """The statements ``caller`` runs from now on (an observer also keeps enqueue's
    INSERT off the cursor path, so it shows here)."""
    seen: list[str] = []

    def record(conn: Connection, cursor: Any, statement: str, *args: Any) -> None:
        if conn is caller:
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    return seen


def test_the_callers_transaction_sends_no_notify_and_its_commit_wakes(
    pg: Engine, heard: queue.Queue[str],
) -> None:
    with pg.begin() as conn:
        seen = _statements_of(pg, conn)
        enqueue(conn, to="a@example.com", subject="Hi", text="t", queue="critical",
                settings=DEFAULT)
        assert seen, "the observer saw nothing: the test would prove nothing"
        assert not [s for s in seen if "notify" in s.lower()]
        assert heard.empty()
    assert heard.get(timeout=WAIT) == "critical"


def test_a_rollback_wakes_no_one(pg: Engine, heard: queue.Queue[str]) -> None:
    with pg.connect() as conn:
        conn.begin()
        enqueue(conn, to="a@example.com", subject="Hi", text="t", queue="rolled-back",
                settings=DEFAULT)
        conn.rollback()
    with Session(pg) as session:
        session.begin()
        enqueue(session, to="a@example.com", subject="Hi", text="t", queue="other-rollback",
                settings=DEFAULT)
        session.rollback()
        enqueue(session, to="a@example.com", subject="Hi", text="t", queue="committed",
                settings=DEFAULT)
        session.commit()
    with pg.begin() as conn:
        enqueue(conn, to="a@example.com", subject="Hi", text="t", queue="later",
                settings=DEFAULT)
    assert heard_until(heard, "later") == ["committed", "later"]


def test_a_duplicate_key_wakes_no_one(pg: Engine, heard: queue.Queue[str]) -> None:
    with pg.begin() as conn:
        enqueue(conn, to="a@example.com", subject="Hi", text="t", key="k", queue="first",
                settings=DEFAULT)
    assert heard.get(timeout=WAIT) == "first"
    with pg.begin() as conn:  # nothing written: nobody woken
        enqueue(conn, to="a@example.com", subject="Hi", text="t", key="k", queue="first",
                settings=DEFAULT)
    with pg.begin() as conn:
        enqueue(conn, to="a@example.com", subject="Hi", text="t", queue="second",
                settings=DEFAULT)
    assert heard_until(heard, "second") == ["second"]


def test_a_connection_kept_past_its_commit_wakes_when_it_goes_back(
    pg: Engine, heard: queue.Queue[str],
) -> None:
    with pg.connect() as conn:
        enqueue(conn, to="a@example.com", subject="Hi", text="t", queue="kept",
                settings=DEFAULT)
        conn.commit()
        enqueue(conn, to="a@example.com", subject="Hi", text="t", queue="kept-then-undone",
                settings=DEFAULT)
        conn.rollback()
    with pg.begin() as conn:
        enqueue(conn, to="a@example.com", subject="Hi", text="t", queue="last",
                settings=DEFAULT)
    assert heard_until(heard, "last") == ["kept", "last"]


def test_wakeups_within_a_window_go_as_one_statement(
    pg: Engine, heard: queue.Queue[str],
) -> None:
    waker = wakeups.Waker(window=2.0)
    ids = []
    for name in ("one", "two", "three"):
        with pg.begin() as conn:
            ids.append(enqueue(conn, to="a@example.com", subject="Hi", text="t", queue=name,
                               settings=EnqueueSettings(notify=NotifyMode.OFF)).id)
    waker.submit(pg, ids[:1])  # the first goes at once
    assert heard.get(timeout=WAIT) == "one"
    waker.submit(pg, ids[1:2])  # these two wait out the window together
    waker.submit(pg, ids[2:])
    assert {heard.get(timeout=WAIT), heard.get(timeout=WAIT)} == {"two", "three"}
    assert waker.sent == 2


def test_in_transaction_keeps_the_old_notify_inside_the_transaction(
    pg: Engine, heard: queue.Queue[str],
) -> None:
    with pg.begin() as conn:
        seen = _statements_of(pg, conn)
        enqueue(conn, to="a@example.com", subject="Hi", text="t", queue="old",
                settings=IN_TRANSACTION)
        assert [s for s in seen if "pg_notify" in s]
    assert heard.get(timeout=WAIT) == "old"


def test_off_sends_nothing(pg: Engine, heard: queue.Queue[str]) -> None:
    with pg.begin() as conn:
        enqueue(conn, to="a@example.com", subject="Hi", text="t", queue="silent",
                settings=EnqueueSettings(notify=NotifyMode.OFF))
    with pg.begin() as conn:
        enqueue(conn, to="a@example.com", subject="Hi", text="t", queue="loud",
                settings=DEFAULT)
    assert heard_until(heard, "loud") == ["loud"]
