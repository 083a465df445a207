"""The claim's plan: a lane's claim reads its queues' claim indexes, in claim order, and
neither its queues' history nor other queues' backlog (PostgreSQL; MariaDB last)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from mailout import db
from mailout.db import leasing
from mailout.models import ClaimedMessage
from mailout.outbox import Message, enqueue_many
from tests.integration.db.test_store import SETTINGS, add


def _claim_plan(url: str, queues: tuple[str, ...]) -> str:
    """EXPLAIN of the claim statement exactly as leasing.claim sends it (rolled back)."""
    engine = db.make_engine(url)
    seen: list[tuple[str, Any]] = []

    def capture(_c: Any, _cur: Any, statement: str, parameters: Any, _ctx: Any,
                _many: bool) -> None:
        if statement.lstrip().upper().startswith("WITH") and not seen:
            seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        with engine.connect() as conn:
            leasing.claim(conn, owner="plan", limit=16, lease_seconds=60, queues=queues)
            statement, parameters = seen[0]
            raw = conn.connection.driver_connection
            assert raw is not None
            with raw.cursor() as cur:
                cur.execute("EXPLAIN (COSTS OFF) " + statement, parameters)
                plan = "\n".join(r[0] for r in cur.fetchall())
            conn.rollback()
    finally:
        engine.dispose()
    return plan


def test_a_lane_claim_reads_leased_rows_not_its_queue_history(pg_url: str) -> None:
    engine = db.make_engine(pg_url)
    add(engine, 300, queue="bulk")
    with engine.begin() as conn:
        # Most of the queue is history; statistics as autovacuum would leave them.
        conn.execute(text("UPDATE mailout_messages SET status = 'sent' WHERE id % 10 <> 0"))
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.execute(text("ANALYZE mailout_messages"))
    engine.dispose()
    plan = _claim_plan(pg_url, ("bulk",))
    expired = plan.split("Subquery Scan on pending")[0]
    assert "ix_mailout_messages_queue_id" not in expired, plan
    assert "(queue)::text || ''::text" in expired, plan  # the filter is still applied
    claimed_queues = {m.queue for m in _claimed(pg_url, ("bulk",))}
    assert claimed_queues == {"bulk"}


def _claimed(url: str, queues: tuple[str, ...]) -> list[ClaimedMessage]:
    engine = db.make_engine(url)
    try:
        with engine.begin() as conn:
            return leasing.claim(conn, owner="plan", limit=50, lease_seconds=60, queues=queues)
    finally:
        engine.dispose()


def test_a_lane_reclaims_expired_leases_of_its_own_queues_only(pg_url: str) -> None:
    engine = db.make_engine(pg_url)
    bulk = add(engine, 3, queue="bulk")
    other = add(engine, 3, queue="other")
    with engine.begin() as conn:
        conn.execute(text(
            "UPDATE mailout_messages SET status = 'sending', lease_owner = 'gone', "
            "lease_token = 't', lease_expires_at = now() - interval '1 minute', "
            "last_attempt_at = now() - interval '2 minutes', attempts = 1"))
    engine.dispose()
    got = _claimed(pg_url, ("bulk",))
    assert sorted(m.id for m in got) == sorted(bulk)
    assert all(m.reclaimed for m in got)
    assert not {m.id for m in got} & set(other)


def _backlog_behind_another_queue(engine: Engine, queues: tuple[str, ...]) -> None:
    """3,000 pending rows spread over ``queues``, behind 3,000 of higher priority in
    another queue (first in claim order)."""
    with engine.begin() as conn:
        enqueue_many(conn, [Message(to=f"o{i}@example.com", subject="Hi", text="x",
                                    key=f"other-{i}", queue="other", priority=5)
                            for i in range(3000)], settings=SETTINGS)
        enqueue_many(conn, [Message(to=f"b{i}@example.com", subject="Hi", text="x",
                                    key=f"{queues[i % len(queues)]}-{i}",
                                    queue=queues[i % len(queues)]) for i in range(3000)],
                     settings=SETTINGS)


@pytest.mark.parametrize("queues", [("bulk",), ("bulk", "news")])
def test_a_lane_reads_each_queues_claim_index_in_order(
        pg_url: str, queues: tuple[str, ...]) -> None:
    """The claim walks the claim index of each of the lane's queues in claim order and
    stops after LIMIT rows, although another queue's backlog comes first in claim
    order. Written as ``queue = ANY(ARRAY[...])`` it could not: an index scan on
    ``= ANY`` is unordered before PostgreSQL 17, so the claim walked the other queue's
    rows or sorted the lane's backlog (12-34 ms a claim at 60,000 rows, against 3 ms
    in order)."""
    engine = db.make_engine(pg_url)
    _backlog_behind_another_queue(engine, queues)
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.execute(text("VACUUM (ANALYZE) mailout_messages"))  # as autovacuum would
    engine.dispose()
    plan = _claim_plan(pg_url, queues)
    pending = plan[plan.index("Subquery Scan on pending"):plan.index("CTE claimed")]
    scans = pending.count("Index Scan using ix_mailout_messages_due")
    assert scans == len(queues), plan
    for queue in queues:
        assert f"(queue)::text = '{queue}'::text" in pending, plan
    # Only the merge of at most LIMIT rows a queue may be sorted, never a backlog.
    assert "Bitmap" not in pending, plan
    assert "pending_order" not in pending, plan
    assert {m.queue for m in _claimed(pg_url, queues)} == set(queues)


@pytest.mark.parametrize("queues", [("bulk",), ("bulk", "news")])
def test_a_mysql_lane_reads_each_queues_claim_index(
        mysql_url: str, queues: tuple[str, ...]) -> None:
    """MySQL's claim reads each of the lane's queues through its claim index. Left to
    itself, MariaDB walked the all-queue claim order and filtered, past the other
    queue's whole backlog (95 ms a claim of 50 behind 60,000 rows, against 1 ms)."""
    engine = db.make_engine(mysql_url)
    _backlog_behind_another_queue(engine, queues)
    with engine.connect() as conn:
        conn.execute(text("ANALYZE TABLE mailout_messages"))
    seen: list[tuple[str, Any]] = []

    def capture(_c: Any, _cur: Any, statement: str, parameters: Any, _ctx: Any,
                _many: bool) -> None:
        if "next_attempt_at <=" in statement and "FOR UPDATE" in statement:
            seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", capture)
    with engine.begin() as conn:
        got = leasing.claim(conn, owner="plan", limit=16, lease_seconds=60, queues=queues)
        raw = conn.connection.driver_connection
        assert raw is not None
        keys = []
        for statement, parameters in seen:
            with raw.cursor() as cur:
                cur.execute("EXPLAIN " + statement, parameters)
                keys.append(cur.fetchone()[5])  # EXPLAIN's "key" column
    engine.dispose()
    assert keys == ["ix_mailout_messages_claim_due"] * len(queues)
    assert len(got) == 16
    assert {m.queue for m in got} == set(queues)


def _sqlite_claim_plans(url: str, queues: tuple[str, ...]) -> list[str]:
    """EXPLAIN QUERY PLAN of each read a SQLite claim makes, as leasing.claim sends it
    (the claim rolled back)."""
    engine = db.make_engine(url)
    seen: list[tuple[str, Any]] = []

    def capture(_c: Any, _cur: Any, statement: str, parameters: Any, _ctx: Any,
                _many: bool) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", capture)
    plans = []
    with engine.connect() as conn:
        got = leasing.claim(conn, owner="plan", limit=16, lease_seconds=60,
                            queues=queues or None)
        conn.rollback()
        assert len(got) == 16
        assert not queues or {m.queue for m in got} == set(queues)
        for statement, parameters in seen:
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)
            plans.append("\n".join(r[3] for r in rows))
    engine.dispose()
    return plans


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-statistics", "analyzed"])
@pytest.mark.parametrize("queues", [(), ("bulk",), ("bulk", "news")])
def test_a_sqlite_claim_reads_claim_indexes_in_order(
        sqlite_url: str, queues: tuple[str, ...], analyzed: bool) -> None:
    """SQLite's claim reads expired leases through the leased index and pending rows
    through the claim-order partial indexes, one read per queue, each in claim order:
    no sort of the backlog and no read of a queue's history. Left to itself, SQLite
    read ``status = 'pending'`` through ix_mailout_messages_status_id and sorted every
    due row (34-67 ms a claim of 50 behind 126,000 rows, against 3-4 ms in order)."""
    engine = db.make_engine(sqlite_url)
    _backlog_behind_another_queue(engine, queues or ("bulk",))
    add(engine, 300, queue="bulk")
    with engine.begin() as conn:
        # A queue's history: finished rows a read by queue alone would walk.
        conn.execute(text("UPDATE mailout_messages SET status = 'sent' "
                          "WHERE idempotency_key LIKE 'k-%'"))
        if analyzed:
            conn.execute(text("ANALYZE"))
    engine.dispose()
    expired, *pending = _sqlite_claim_plans(sqlite_url, queues)
    assert expired == "SEARCH mailout_messages USING INDEX ix_mailout_messages_leased " \
                      "(lease_expires_at<?)"
    assert len(pending) == max(1, len(queues))
    index = "ix_mailout_messages_due (queue=?)" if queues else "ix_mailout_messages_pending_order"
    for plan in pending:
        assert f"USING INDEX {index}" in plan, plan
        assert "\n" not in plan, plan  # one step: no "USE TEMP B-TREE FOR ORDER BY"
