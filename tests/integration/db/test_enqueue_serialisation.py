"""Two open transactions that enqueue never wait for each other on a server database:
enqueue locks the rows it writes and nothing shared (issue 38's review; docs/mysql.md).
SQLite has one write lock for the whole file, so there every writer waits by design."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Connection, Engine, func, select, text

from mailout import db
from mailout.db.schema import messages
from mailout.models import Attachment
from mailout.outbox import EnqueueSettings, NotifyMode, enqueue

LOCK_WAIT = 5  # seconds a blocked enqueue waits before the server refuses it


@pytest.fixture(params=["READ COMMITTED", "REPEATABLE READ"])
def server(server_url: str, request: pytest.FixtureRequest) -> Iterator[Engine]:
    """mailout's engine (READ COMMITTED), or one at REPEATABLE READ as an application's
    MySQL engine has by default."""
    engine = db.make_engine(server_url, isolation_level=request.param)
    with engine.connect() as conn:  # what the server runs, not only what was asked
        level = conn.execute(text("SHOW transaction_isolation" if conn.dialect.name ==
                                  "postgresql" else "SELECT @@tx_isolation")).scalar_one()
    assert level.upper().replace("-", " ") == request.param
    yield engine
    engine.dispose()


def _bounded(conn: Connection) -> None:
    """Make a lock wait fail after LOCK_WAIT seconds instead of hanging the test."""
    if conn.dialect.name == "postgresql":
        conn.execute(text(f"SET lock_timeout = '{LOCK_WAIT}s'"))
    else:
        conn.execute(text(f"SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT}"))
    conn.commit()


@pytest.mark.parametrize("mode", list(NotifyMode))
def test_an_open_enqueue_does_not_hold_up_another(server: Engine, mode: NotifyMode) -> None:
    settings = EnqueueSettings(message_id_domain="shop.example.com", notify=mode)

    run = uuid.uuid4().hex  # keys of rows deleted before may wait (docs/mysql.md)

    def mail(conn: Connection, name: str) -> None:
        enqueue(conn, to=f"{name}@example.com", subject="Hi", text="t", key=f"{name}-{run}",
                queue="critical",
                attachments=[Attachment(f"{name}.txt", f"{name}-{run}".encode())],
                settings=settings)

    with server.connect() as first, server.connect() as second:
        _bounded(second)
        first.begin()
        mail(first, "first")  # and its transaction stays open meanwhile
        with second.begin():
            mail(second, "second")  # would time out if it waited for the first
        first.commit()
    with server.connect() as conn:
        assert conn.execute(select(func.count()).select_from(messages)).scalar_one() == 2
