"""mailout's statements on a DB-API connection someone else owns (mailout.db.borrowed),
on SQLite and PostgreSQL: the owner's commit, rollback and savepoints decide, never
mailout, and leaving the borrow neither commits nor rolls back."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.engine import make_url

from mailout.db.borrowed import borrow
from mailout.db.schema import messages
from mailout.outbox import enqueue

# The DB-API connections this file opens as "the application" are sqlite3 and psycopg.
pytestmark = pytest.mark.parametrize("db_url", ["sqlite", "postgresql"], indirect=True)

@pytest.fixture
def owned(db_url: str) -> Iterator[Any]:
    """A DB-API connection opened by "the application", in a transaction of its own."""
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite":
        conn: Any = sqlite3.connect(url.database, isolation_level=None)
        conn.execute("BEGIN")
    else:
        conn = psycopg.connect(url.set(drivername="postgresql")
                               .render_as_string(hide_password=False))  # autocommit off
    yield conn
    conn.close()


def _count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(messages)).scalar_one())


def _enqueue(owned: Any, key: str) -> None:
    with borrow(owned) as conn:
        enqueue(conn, to="a@example.com", subject="s", text="t", key=key)


def _in_transaction(owned: Any) -> bool:
    if isinstance(owned, sqlite3.Connection):
        return owned.in_transaction
    return owned.info.transaction_status != psycopg.pq.TransactionStatus.IDLE


def test_the_owner_commits(owned: Any, engine: Engine) -> None:
    _enqueue(owned, "k1")
    assert _in_transaction(owned)  # leaving the borrow committed nothing
    assert _count(engine) == 0
    owned.commit()
    assert _count(engine) == 1


def test_the_owner_rolls_back(owned: Any, engine: Engine) -> None:
    _enqueue(owned, "k1")
    owned.rollback()
    assert _count(engine) == 0


def test_a_savepoint_rolled_back_inside_the_borrow_takes_only_its_rows(
    owned: Any, engine: Engine,
) -> None:
    with borrow(owned) as conn:
        enqueue(conn, to="a@example.com", subject="s", text="t", key="kept")
        savepoint = conn.begin_nested()
        enqueue(conn, to="a@example.com", subject="s", text="t", key="undone")
        savepoint.rollback()
    owned.commit()
    with engine.connect() as conn:
        assert list(conn.scalars(select(messages.c.idempotency_key))) == ["kept"]


def test_an_error_inside_the_borrow_leaves_the_decision_to_the_owner(
    owned: Any, engine: Engine,
) -> None:
    def enqueue_then_fail() -> None:
        with borrow(owned) as conn:
            enqueue(conn, to="a@example.com", subject="s", text="t", key="k1")
            raise RuntimeError("the application failed after the enqueue")

    with pytest.raises(RuntimeError):
        enqueue_then_fail()
    assert _in_transaction(owned)  # not rolled back by mailout
    owned.commit()
    assert _count(engine) == 1
