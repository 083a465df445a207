"""The worker's claim and completion on PostgreSQL run on psycopg's cursor when nothing
watches SQLAlchemy (mailout.db.hot_statements): the same messages claimed, the same rows
completed, as through ``Connection.execute``, and a listener still sees both."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, event, select, text
from sqlalchemy.exc import DBAPIError

from mailout import db
from mailout.db import hot_statements, leasing, outcomes
from mailout.db.schema import attempts, messages
from mailout.db.stores import postgresql
from mailout.models import ClaimedMessage, Completion, Mailbox, Outcome, Status
from mailout.outbox import EnqueueSettings, NotifyMode, enqueue
from tests.support.timetravel import expire_leases

QUIET = EnqueueSettings(message_id_domain="shop.example.com", notify=NotifyMode.OFF)
LANES = [  # (queues, excluded queues, excluded templates, expired only)
    ((), (), (), False),
    (("bulk",), (), (), False),
    (("login", "bulk"), (), (), False),
    ((), ("bulk",), ("newsletter",), False),
    (("login",), (), (), True),
]


@pytest.fixture
def pg(pg_url: str) -> Iterator[Engine]:
    engine = db.make_engine(pg_url)
    yield engine
    engine.dispose()


@pytest.fixture
def watched(pg_url: str) -> Iterator[tuple[Engine, list[str]]]:
    """An engine with a statement listener: every statement takes Connection.execute."""
    seen: list[str] = []
    engine = db.make_engine(pg_url)
    event.listen(engine, "before_cursor_execute",
                 lambda conn, cur, statement, *rest: seen.append(statement))
    yield engine, seen
    engine.dispose()


@pytest.mark.parametrize("lane", LANES)
def test_every_lane_claim_takes_the_cursor_path(pg: Engine, lane: tuple[Any, ...]) -> None:
    # Fails when a claim would need SQLAlchemy at run time (an IN list expanded per
    # execution, a bind or result processor): the worker's fast path is lost.
    with pg.begin() as conn:
        assert hot_statements._prepared(conn, postgresql.claim_statement(*lane)).direct
        assert hot_statements._prepared(conn, postgresql.COMPLETE).direct


def _fill(engine: Engine, tag: str) -> None:
    with engine.begin() as conn:
        for i, queue in enumerate(["login", "bulk", "default", "login"]):
            enqueue(conn, to=[Mailbox("ana@example.com", "Ana Núñez"), "bo@example.com"],
                    cc="cy@example.com", template="newsletter" if i == 2 else "welcome",
                    params={"n": i, "ü": ["€", None]}, queue=queue, priority=i % 2,
                    key=f"{tag}-{i}", headers={"X-Tag": "t"}, locale="es-MX",
                    event=f"order:{i}", version=i, settings=QUIET)


def _claim(engine: Engine, lane: tuple[Any, ...]) -> list[ClaimedMessage]:
    queues, exclude, templates, expired = lane
    with engine.begin() as conn:
        return leasing.claim(conn, owner="w", limit=10, lease_seconds=60, queues=queues,
                             exclude_queues=exclude, exclude_templates=templates,
                             expired_only=expired, transport="smtp")


def _comparable(msg: ClaimedMessage) -> dict[str, Any]:
    """What a claim returns, less what differs from claim to claim by design."""
    fields = dataclasses.asdict(msg)
    for name in ("id", "key", "lease_token", "claimed_at", "created_at", "expires_at",
                 "message_id"):
        fields.pop(name)
    return fields


@pytest.mark.parametrize("lane", [lane for lane in LANES if not lane[3]])
def test_a_claim_returns_what_sqlalchemy_returns(
        pg: Engine, watched: tuple[Engine, list[str]], lane: tuple[Any, ...]) -> None:
    engine, seen = watched
    _fill(pg, "direct")
    direct_claim = _claim(pg, lane)
    _fill(pg, "watched")
    watched_claim = _claim(engine, lane)
    assert any("FOR UPDATE SKIP LOCKED" in s for s in seen)  # the listener saw it
    assert direct_claim, "the lane claimed nothing: the comparison would prove nothing"
    assert [m.key.split("-")[1] for m in direct_claim] == \
        [m.key.split("-")[1] for m in watched_claim]
    assert [_comparable(m) for m in direct_claim] == [_comparable(m) for m in watched_claim]
    first = direct_claim[0]
    assert first.to == (Mailbox("ana@example.com", "Ana Núñez"), Mailbox("bo@example.com", ""))
    assert first.created_at.tzinfo is UTC
    assert first.claimed_at.tzinfo is UTC


def test_a_completion_batch_updates_and_fences_as_through_sqlalchemy(
        pg: Engine, watched: tuple[Engine, list[str]]) -> None:
    engine, seen = watched
    for tag, target in (("direct", pg), ("watched", engine)):
        _fill(pg, tag)
        claimed = [m for m in _claim(pg, LANES[0]) if m.key.startswith(tag)]
        now = datetime.now(UTC)
        done = [Completion(id=m.id, lease_token=m.lease_token, attempt=m.attempts,
                           outcome=Outcome.SENT, status=Status.SENT, started_at=now,
                           worker="w", recipient=m.recipient, reason="accepted",
                           reply_code=250, reply_text="2.0.0 Ok: queued as X",
                           provider_message_id=f"X-{m.id}") for m in claimed]
        done[-1] = dataclasses.replace(done[-1], lease_token="not-the-lease")
        with target.begin() as conn:
            fenced = outcomes.complete(conn, done)
        assert fenced == [claimed[-1].id]
        with pg.connect() as conn:
            rows = conn.execute(select(messages.c.id, messages.c.status,
                                       messages.c.provider_message_id)
                                .where(messages.c.idempotency_key.like(f"{tag}-%"))
                                .order_by(messages.c.id)).all()
        assert len(rows) == len(claimed) == 4
        for row in rows:  # the fenced row is left to its lease holder
            expected = ("sending", None) if row.id in fenced else ("sent", f"X-{row.id}")
            assert (row.status, row.provider_message_id) == expected
    assert any("jsonb_to_recordset" in s for s in seen)


def test_a_claim_is_one_statement_committed_on_its_own(pg: Engine) -> None:
    """The worker claims in autocommit on PostgreSQL (no BEGIN, no COMMIT): the claim
    statement leases the rows and logs an abandoned attempt as unknown in one go, so
    another connection sees both before the claiming connection is even closed."""
    _fill(pg, "alone")
    with db.immediate(pg) as conn:  # an earlier claim whose worker died
        first = leasing.claim(conn, owner="w-dead", limit=1, lease_seconds=60,
                              transport="smtp")
    expire_leases(pg)  # its lease runs out
    with db.immediate(pg, one_statement=True) as conn:
        claimed = leasing.claim(conn, owner="w-new", limit=10, lease_seconds=60,
                                transport="smtp")
        assert conn.connection.dbapi_connection is not None
        assert conn.connection.dbapi_connection.info.transaction_status.name == "IDLE"
        with pg.connect() as other:  # committed already: nothing left open
            leased = other.execute(select(messages.c.id).where(
                messages.c.lease_owner == "w-new")).scalars().all()
            logged = other.execute(select(attempts.c.outbox_id, attempts.c.outcome,
                                          attempts.c.worker)).all()
    assert sorted(leased) == sorted(m.id for m in claimed)
    assert [m.id for m in claimed if m.reclaimed] == [first[0].id]
    assert [tuple(r) for r in logged] == [(first[0].id, "unknown", "w-dead")]


def test_a_held_connection_is_one_connection_until_a_database_error(
        pg: Engine, pg_url: str) -> None:
    """A lane's claims run on one connection, checked out (and pinged) once; in
    autocommit each statement is committed on its own. When the server drops it, the
    unit sees the error, and the next unit connects afresh."""
    checkouts: list[object] = []
    event.listen(pg, "checkout", lambda dbapi_conn, record, proxy: checkouts.append(dbapi_conn))
    held = db.HeldConnection(pg, **db.immediate_options(one_statement=True))
    pids = []
    for _ in range(3):
        with held.begin() as conn:
            pids.append(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
            assert conn.connection.dbapi_connection is not None
            assert conn.connection.dbapi_connection.info.transaction_status.name == "IDLE"
    assert len(set(pids)) == 1
    assert len(checkouts) == 1
    other = db.make_engine(pg_url)  # not pg's pool: its checkouts are counted
    with other.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pids[0]})
    other.dispose()
    with pytest.raises(DBAPIError), held.begin() as conn:
        conn.execute(text("SELECT 1"))
    with held.begin() as conn:
        assert conn.execute(text("SELECT pg_backend_pid()")).scalar_one() != pids[0]
    assert len(checkouts) == 2
    checkins: list[object] = []
    event.listen(pg, "checkin", lambda dbapi_conn, record: checkins.append(dbapi_conn))
    held.close()
    assert checkins == [checkouts[-1]]
