"""Lanes keep urgent mail moving; NOTIFY wakes idle workers; queue rates hold."""

from __future__ import annotations

import asyncio
import time

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import settings_for
from sqlalchemy import Engine, func, select, text

from mailout.db.schema import messages
from mailout.outbox import EnqueueSettings, enqueue
from mailout.worker.build import build_worker

SETTINGS = EnqueueSettings(message_id_domain="lanes.example.com")
BULK_REPLY = 30.0  # seconds a bulk message's 250 takes in the overtaking test
# A NOTIFY must wake the idle worker well inside its 60 s poll: half of it leaves a
# loaded machine room, and still tells a wakeup from a poll.
NOTIFY_WITHIN = 30.0


def add(engine: Engine, n: int, queue: str, local: str = "user") -> None:
    with engine.begin() as conn:
        for i in range(n):
            enqueue(conn, to=f"{local}+{queue}{i}@example.com", subject="Hi", text="x",
                    queue=queue, settings=SETTINGS)


def pending(engine: Engine, queue: str) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).where(
            messages.c.queue == queue, messages.c.status != "sent")).scalar_one()


# The worker's LISTEN session, and when its other sessions (the claims) last finished a
# statement: all idle, one after the LISTEN, means the claim that LISTEN's start-up
# wake asked for is done.
_SESSIONS = text(
    "SELECT max(state_change) FILTER (WHERE query LIKE 'LISTEN%') AS listening, "
    "max(state_change) FILTER (WHERE query NOT LIKE 'LISTEN%') AS last_done, "
    "count(*) FILTER (WHERE state <> 'idle') AS busy FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid()")


def _listening_and_idle(engine: Engine) -> bool:
    with engine.connect() as conn:
        row = conn.execute(_SESSIONS).one()
    return bool(row.listening and row.last_done and row.last_done > row.listening
                and row.busy == 0)


async def _until(predicate: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.02)
    return False


def test_a_critical_message_overtakes_a_saturated_bulk_lane(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer
) -> None:
    add(engine, 30, "bulk", local="slow-after-dot")
    # Each bulk reply takes longer than the critical message may: it can only be
    # delivered in time if it does not wait for a bulk slot. (The stop then gives up
    # on the bulk sends in flight at once.)
    smtp_server.slow_delay = BULK_REPLY
    settings = settings_for(db_url, smtp_server, MAILOUT_LANES="critical:2,bulk:2",
                            MAILOUT_SHUTDOWN_GRACE_SECONDS=0.1)
    worker = build_worker(settings)

    async def scenario() -> None:
        task = asyncio.create_task(worker.run())
        assert await _until(lambda: smtp_server.connections >= 2, 60)  # bulk is busy
        await asyncio.to_thread(add, engine, 1, "critical", "login")
        got = await _until(lambda: any(m.rcpt_tos[0].startswith("login")
                                       for m in smtp_server.messages), BULK_REPLY - 5)
        still_waiting = await asyncio.to_thread(pending, engine, "bulk")
        worker.stop()
        await task
        assert got, "the critical message was not delivered before a bulk reply"
        assert still_waiting > 20  # delivered while the bulk backlog stood

    try:
        asyncio.run(scenario())
    finally:
        worker.alerts.close()
        worker.engine.dispose()


def test_notify_wakes_an_idle_worker_long_before_its_poll(
    pg_url: str, smtp_server: SmtpTestServer
) -> None:
    from mailout import db

    engine = db.make_engine(pg_url)
    settings = settings_for(pg_url, smtp_server, MAILOUT_POLL_SECONDS=60)
    worker = build_worker(settings)

    async def scenario() -> float:
        task = asyncio.create_task(worker.run())
        # Idle and listening, the next poll ~60 s away: the LISTEN is up, the claim
        # after it is done, and no wake is pending.
        deadline = time.monotonic() + 60
        while not (await asyncio.to_thread(_listening_and_idle, engine)
                   and not any(lane.wake.is_set() for lane in worker.lanes)):
            assert time.monotonic() < deadline, "the worker never sat idle, listening"
            await asyncio.sleep(0.02)
        t0 = time.monotonic()
        await asyncio.to_thread(add, engine, 1, "default")
        got = await _until(lambda: len(smtp_server.messages) == 1, NOTIFY_WITHIN)
        elapsed = time.monotonic() - t0
        worker.stop()
        await task
        assert got, "no delivery: the NOTIFY did not wake the worker"
        return elapsed

    try:
        elapsed = asyncio.run(scenario())
    finally:
        worker.alerts.close()
        worker.engine.dispose()
        engine.dispose()
    assert elapsed < NOTIFY_WITHIN


@pytest.mark.slow
def test_a_queue_rate_limit_holds(engine: Engine, db_url: str,
                                  smtp_server: SmtpTestServer) -> None:
    rate, n = 40, 160
    add(engine, n, "bulk")
    settings = settings_for(db_url, smtp_server, MAILOUT_LANES="bulk:10",
                            MAILOUT_QUEUE_POLICIES=f"bulk:rate={rate}")
    worker = build_worker(settings, until_idle=True)
    try:
        asyncio.run(worker.run())
    finally:
        worker.alerts.close()
        worker.engine.dispose()
    times = sorted(m.received_at for m in smtp_server.messages)
    assert len(times) == n
    start = times[0]
    offsets = [(t - start).total_seconds() for t in times]
    # A full bucket allows one second's worth at once, then `rate` per second.
    assert offsets[-1] >= (n - rate) / rate * 0.9
    # What a token bucket guarantees whatever the machine does: by t seconds after the
    # first send, at most rate * (1 + t) tokens were taken. A busy machine can delay
    # sends already paced (claimed with a token) so that they arrive together: at most
    # the lane's 10 slots' worth on top.
    for sent, offset in enumerate(offsets, start=1):
        assert sent <= rate * (1 + offset) + 10, f"{sent} messages by {offset:.2f}s"
    # And in no second more than a full bucket and a second's refill (plus the slots):
    # the bound holds however a loaded machine bunches the sends, where a steady rate
    # per second does not (a stall lets the bucket fill, and its sends go together).
    for start in offsets:
        window = sum(1 for o in offsets if start <= o < start + 1)
        assert window <= 2 * rate + 10, f"{window} messages in the second from {start:.2f}s"
