"""Wake-ups after the commit (mailout.db.wakeups): nothing NOTIFYs in the caller's
transaction by default, a commit wakes listeners, a rollback wakes no one."""

from __future__ import annotations

import asyncio
import os
import queue
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from mailout import db
from mailout.db import hot_statements, wakeups
from mailout.db.notifications import libpq_url
from mailout.outbox import EnqueueSettings, NotifyMode, enqueue

DEFAULT = EnqueueSettings(message_id_domain="shop.example.com")
IN_TRANSACTION = EnqueueSettings(message_id_domain="shop.example.com",
                                 notify=NotifyMode.IN_TRANSACTION)
OFF = EnqueueSettings(message_id_domain="shop.example.com", notify=NotifyMode.OFF)
WAIT = 30.0  # seconds a notification may take on a loaded machine before the test fails


@pytest.fixture
def pg(pg_url: str) -> Iterator[Engine]:
    engine = db.make_engine(pg_url)
    yield engine
    engine.dispose()


class Heard:
    """The notifications on mailout's channel for this test's queues, whose names carry
    a prefix of its own: a late wake-up of an earlier test on the same database is not
    heard."""

    def __init__(self) -> None:
        self.prefix = f"t{uuid.uuid4().hex[:8]}-"
        self.got: queue.Queue[str] = queue.Queue()

    def q(self, name: str) -> str:
        """This test's queue ``name``."""
        return self.prefix + name

    def add(self, payload: str) -> None:
        if payload.startswith(self.prefix):
            self.got.put(payload.removeprefix(self.prefix))

    def get(self) -> str:
        return self.got.get(timeout=WAIT)

    def until(self, last: str) -> list[str]:
        """Every queue heard up to ``last`` (a later commit's queue): a wake-up that
        should not have been sent would have come before it."""
        heard = [self.get()]
        while heard[-1] != last:
            heard.append(self.get())
        return heard


@pytest.fixture
def heard(pg_url: str) -> Iterator[Heard]:
    """What a LISTEN that is up hears, until the test ends."""
    found = Heard()
    ready, stop = threading.Event(), threading.Event()

    def listen() -> None:
        with psycopg.connect(libpq_url(pg_url), autocommit=True) as conn:
            conn.execute("LISTEN mailout")
            ready.set()
            while not stop.is_set():
                for note in conn.notifies(timeout=0.05):
                    found.add(note.payload)

    listener = threading.Thread(target=listen)
    listener.start()
    assert ready.wait(10)
    yield found
    stop.set()
    listener.join(10)


def mail(conn: Connection | Session, heard: Heard, name: str,
         settings: EnqueueSettings = DEFAULT, key: str | None = None) -> int:
    """Enqueue one message to this test's queue ``name``; its id."""
    return enqueue(conn, to="a@example.com", subject="Hi", text="t", key=key,
                   queue=heard.q(name), settings=settings).id


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
    pg: Engine, heard: Heard,
) -> None:
    with pg.begin() as conn:
        seen = _statements_of(pg, conn)
        mail(conn, heard, "critical")
        assert seen, "the observer saw nothing: the test would prove nothing"
        assert not [s for s in seen if "notify" in s.lower()]
        assert heard.got.empty()
    assert heard.get() == "critical"


def test_a_rollback_wakes_no_one(pg: Engine, heard: Heard) -> None:
    with pg.connect() as conn:
        conn.begin()
        mail(conn, heard, "rolled-back")
        conn.rollback()
    with Session(pg) as session:
        session.begin()
        mail(session, heard, "other-rollback")
        session.rollback()
        mail(session, heard, "committed")
        session.commit()
    with pg.begin() as conn:
        mail(conn, heard, "later")
    assert heard.until("later") == ["committed", "later"]


def test_a_duplicate_key_wakes_no_one(pg: Engine, heard: Heard) -> None:
    with pg.begin() as conn:
        mail(conn, heard, "first", key="k")
    assert heard.get() == "first"
    with pg.begin() as conn:  # nothing written: nobody woken
        mail(conn, heard, "first", key="k")
    with pg.begin() as conn:
        mail(conn, heard, "second")
    assert heard.until("second") == ["second"]


def test_a_connection_kept_past_its_commit_wakes_when_it_goes_back(
    pg: Engine, heard: Heard,
) -> None:
    with pg.connect() as conn:
        mail(conn, heard, "kept")
        conn.commit()
        mail(conn, heard, "kept-then-undone")
        conn.rollback()
    with pg.begin() as conn:
        mail(conn, heard, "last")
    assert heard.until("last") == ["kept", "last"]


def test_wakeups_within_a_window_go_as_one_statement(
    pg: Engine, heard: Heard,
) -> None:
    waker = wakeups.Waker(window=2.0)
    ids = []
    for name in ("one", "two", "three"):
        with pg.begin() as conn:
            ids.append(mail(conn, heard, name, OFF))
    waker.submit(pg, ids[:1])  # the first goes at once
    assert heard.get() == "one"
    waker.submit(pg, ids[1:2])  # these two wait out the window together
    waker.submit(pg, ids[2:])
    assert {heard.get(), heard.get()} == {"two", "three"}
    assert waker.flush(WAIT)
    assert waker.sent == 2


def test_the_wake_up_hook_keeps_enqueue_on_the_cursor_path(pg: Engine, heard: Heard) -> None:
    # A pool listener, not an engine one: SQLAlchemy still counts the engine unobserved.
    with pg.begin() as conn:
        mail(conn, heard, "first")
    assert heard.get() == "first"
    with pg.begin() as conn:
        assert hot_statements._unobserved(conn)


def test_in_transaction_keeps_the_old_notify_inside_the_transaction(
    pg: Engine, heard: Heard,
) -> None:
    with pg.begin() as conn:
        seen = _statements_of(pg, conn)
        mail(conn, heard, "old", IN_TRANSACTION)
        assert [s for s in seen if "pg_notify" in s]
    assert heard.get() == "old"


def test_off_sends_nothing(pg: Engine, heard: Heard) -> None:
    with pg.begin() as conn:
        mail(conn, heard, "silent", OFF)
    with pg.begin() as conn:
        mail(conn, heard, "loud")
    assert heard.until("loud") == ["loud"]


def test_an_asyncio_engine_wakes_after_its_commit(pg_url: str, heard: Heard) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    from mailout.outbox import enqueue_async

    async def scenario() -> None:
        engine = create_async_engine(make_url(pg_url).set(drivername="postgresql+psycopg_async"))
        try:
            async with engine.begin() as conn:
                await enqueue_async(conn, to="a@example.com", subject="Hi", text="t",
                                    queue=heard.q("async"), settings=DEFAULT)
        finally:
            await engine.dispose()

    asyncio.run(scenario())
    assert heard.get() == "async"


def test_a_process_that_exits_right_after_its_commit_still_wakes(
    pg_url: str, heard: Heard,
) -> None:
    # `mailout enqueue` commits and exits: the waker's thread is a daemon, so the wake-up
    # goes out only because the exit waits for it (Waker.flush, registered with atexit).
    done = subprocess.run(
        [sys.executable, "-m", "mailout", "enqueue", "--to", "a@example.com", "--subject",
         "Hi", "--text", "t", "--queue", heard.q("cli")],
        env={**os.environ, "MAILOUT_DATABASE_URL": pg_url}, capture_output=True, text=True,
        timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert heard.get() == "cli"
