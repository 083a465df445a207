"""Purging history on SQLite, PostgreSQL and MariaDB: in committed batches of the
size asked for, only old finished rows, and never in the way of claims, enqueues or
an operator holding a row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, Float, bindparam, func, insert, select, text, update
from sqlalchemy.exc import DBAPIError

from mailout import db
from mailout.db import leasing, purging
from mailout.db.schema import attempts, db_now_plus, messages
from mailout.outbox import EnqueueSettings, Message, enqueue_many

SETTINGS = EnqueueSettings(message_id_domain="test.example.com")
MONTH = timedelta(days=30)
LOCK_TIMEOUT_S = 1


def _days_ago(days: float) -> Any:
    return db_now_plus(bindparam("secs", -days * 86400.0, Float))


def seed(engine: Engine, *, old: int, recent: int = 0, pending: int = 0) -> list[int]:
    """``old`` sent rows finished 40 days ago, each with one attempt; ``recent`` sent
    rows finished yesterday; ``pending`` rows not sent yet. Returns the old ids."""
    n = old + recent + pending
    with engine.begin() as conn:
        ids = [r.id for r in enqueue_many(conn, [
            Message(to=f"u{i}@example.com", subject="Hi", text="x", key=f"k{i}")
            for i in range(n)], settings=SETTINGS)]
        old_ids, recent_ids = ids[:old], ids[old:old + recent]
        for chosen, days in ((old_ids, 40), (recent_ids, 1)):
            if chosen:
                conn.execute(update(messages).where(messages.c.id.in_(chosen)).values(
                    status="sent", attempts=1, sent_at=_days_ago(days),
                    finished_at=_days_ago(days)))
                now = datetime.now(UTC)
                conn.execute(insert(attempts), [
                    {"outbox_id": i, "attempt": 1, "outcome": "sent", "started_at": now,
                     "finished_at": now} for i in chosen])
    return old_ids


def remaining(engine: Engine) -> tuple[int, int]:
    """(messages, attempts) in the tables, read on a connection of its own."""
    with engine.connect() as conn:
        return (conn.execute(select(func.count()).select_from(messages)).scalar_one(),
                conn.execute(select(func.count()).select_from(attempts)).scalar_one())


def test_purge_commits_batches_of_the_size_asked_for(engine: Engine) -> None:
    seed(engine, old=7, recent=2, pending=1)
    seen: list[tuple[int, tuple[int, int]]] = []

    def progress(totals: purging.PurgeTotals) -> None:
        # Another connection sees each batch: it was committed on its own.
        seen.append((totals.messages, remaining(engine)))

    totals = purging.purge_in_batches(engine, MONTH, ["sent"], batch=3, pause=0,
                                      progress=progress)

    assert seen == [(3, (7, 6)), (6, (4, 3)), (7, (3, 2))]  # 10 rows, 9 attempts at first
    assert (totals.messages, totals.attempts, totals.batches) == (7, 7, 3)
    assert totals.longest_batch > 0
    with engine.connect() as conn:
        left = conn.execute(select(messages.c.status, func.count())
                            .group_by(messages.c.status)).all()
    assert sorted(left) == [("pending", 1), ("sent", 2)]  # the recent and the live rows


def test_purge_pauses_between_batches_at_least_as_long_as_asked(engine: Engine) -> None:
    seed(engine, old=4)
    totals = purging.purge_in_batches(engine, MONTH, ["sent"], batch=2, pause=0.2)
    # Two full batches, each followed by a pause, and the short third that ends it.
    assert (totals.messages, totals.batches) == (4, 3)
    assert totals.paused >= 0.4


def test_purge_refuses_a_live_status_before_deleting_anything(engine: Engine) -> None:
    seed(engine, old=2)
    with pytest.raises(ValueError, match="pending"):
        purging.purge_in_batches(engine, MONTH, ["sent", "pending"])
    assert remaining(engine) == (2, 2)


def _lock_timeout(conn: Connection) -> None:
    """Give up on any lock after LOCK_TIMEOUT_S instead of waiting."""
    if conn.dialect.name == "postgresql":
        conn.execute(text(f"SET lock_timeout = '{LOCK_TIMEOUT_S}s'"))
    else:  # row locks, and table (metadata) locks
        conn.execute(text(f"SET SESSION innodb_lock_wait_timeout = {LOCK_TIMEOUT_S}"))
        conn.execute(text(f"SET SESSION lock_wait_timeout = {LOCK_TIMEOUT_S}"))


def test_claims_and_enqueues_go_on_while_a_purge_batch_holds_its_locks(
        server_url: str) -> None:
    engine = db.make_engine(server_url)
    seed(engine, old=50, pending=1)
    with engine.connect() as purger, purger.begin():
        # A batch deleted, not yet committed: it holds every lock it takes.
        assert purging.purge(purger, MONTH, ["sent"], batch=50).messages == 50
        with engine.connect() as worker, worker.begin():
            _lock_timeout(worker)  # a wait for the purge's locks fails the test
            claimed = leasing.claim(worker, owner="w", limit=10, lease_seconds=60)
            enqueue_many(worker, [Message(to="new@example.com", subject="Hi", text="x",
                                          key="new")], settings=SETTINGS)
    assert [m.key for m in claimed] == ["k50"]  # the pending row, not skipped as locked
    assert remaining(engine) == (2, 0)
    engine.dispose()


def test_purge_skips_a_row_someone_holds_and_never_waits_for_it(server_url: str) -> None:
    engine = db.make_engine(server_url)
    held, *others = seed(engine, old=3)
    with engine.connect() as operator, operator.begin():
        # An operator's requeue in flight holds the row it is changing.
        operator.execute(select(messages.c.id).where(messages.c.id == held).with_for_update())
        with engine.connect() as purger, purger.begin():
            _lock_timeout(purger)
            done = purging.purge(purger, MONTH, ["sent"], batch=10)
    assert (done.messages, done.last_id) == (2, others[-1])
    assert remaining(engine) == (1, 1)  # left for the next purge, not deleted under the lock
    assert purging.purge_in_batches(engine, MONTH, ["sent"]).messages == 1
    engine.dispose()


def test_a_batch_starts_after_the_last_id_of_the_one_before(engine: Engine) -> None:
    ids = seed(engine, old=5)
    with engine.begin() as conn:
        done = purging.purge(conn, MONTH, ["sent"], batch=10, after=ids[2])
    assert (done.messages, done.last_id) == (2, ids[-1])
    with engine.connect() as conn:
        left = conn.execute(select(messages.c.id).order_by(messages.c.id)).scalars().all()
    assert left == ids[:3]


def test_server_lock_timeout_is_what_fails_a_blocked_claim(server_url: str) -> None:
    """The guard of the claim test above bites: a claim that must wait for a lock
    the purge's connection holds fails within the timeout instead of hanging."""
    engine = db.make_engine(server_url)
    seed(engine, old=0, pending=1)
    with engine.connect() as holder, holder.begin():
        holder.execute(text("LOCK TABLE mailout_messages IN ACCESS EXCLUSIVE MODE")
                       if holder.dialect.name == "postgresql"
                       else text("LOCK TABLES mailout_messages WRITE"))
        with engine.connect() as worker, worker.begin():
            _lock_timeout(worker)
            with pytest.raises(DBAPIError):
                leasing.claim(worker, owner="w", limit=10, lease_seconds=60)
        if holder.dialect.name != "postgresql":
            holder.execute(text("UNLOCK TABLES"))
    engine.dispose()
