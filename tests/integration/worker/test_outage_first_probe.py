"""The first outage probe waits its base interval, whatever was claimed meanwhile.

Issue 33, item 15: a claim still running in its thread when the outage breaker
opened came back with a message, which became the probe and went out some 14 ms
into the outage; it failed too, and the wait doubled before any had passed. Here a
real worker (in-process, real PostgreSQL) meets a real server that goes down (its
greeting turns 421) while the worker's next claim is held by a table lock; the
recorded connection times say when the first probe went out.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import Connection, select, text

from mailout.db import make_engine
from mailout.db.schema import messages
from mailout.outbox import EnqueueSettings, enqueue
from mailout.worker import config
from mailout.worker.build import build_worker
from tests.support.locks import wait_for_lock_waiter

BASE = 1.0  # MAILOUT_OUTAGE_PROBE_SECONDS: short, the test waits for the probe
SETTINGS = EnqueueSettings(message_id_domain="test.example.com")


class DownServer:
    """A TCP listener that greets every connection with 421 once :meth:`go_down` is
    called; until then it holds each connection before its greeting. Records when
    each connection arrived (time.monotonic(), the breaker's clock)."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self.connected_at: list[float] = []
        self._down = threading.Event()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def go_down(self) -> None:
        self._down.set()

    def close(self) -> None:
        self._closed = True
        self._down.set()
        self._sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connected_at.append(time.monotonic())
            threading.Thread(target=self._greet, args=(conn,), daemon=True).start()

    def _greet(self, conn: socket.socket) -> None:
        with conn:
            self._down.wait()
            with contextlib.suppress(OSError):  # the client may have given up
                conn.sendall(b"421 4.3.2 Service not available, closing channel\r\n")


@pytest.fixture
def down_server() -> Iterator[DownServer]:
    server = DownServer()
    yield server
    server.close()


def _add(conn: Connection, n: int) -> int:
    return enqueue(conn, to=f"user{n}@example.com", subject=f"Order {n}", text="Hi",
                   key=f"order-{n}", settings=SETTINGS).id


async def _until(predicate: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(predicate):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_a_claim_in_flight_when_the_outage_began_does_not_probe_early(
    pg_url: str, down_server: DownServer
) -> None:
    engine = make_engine(pg_url)
    with engine.begin() as conn:
        first = _add(conn, 1)
    settings = config.load(env={
        "MAILOUT_DATABASE_URL": pg_url, "MAIL_FROM": "Shop <shop@example.com>",
        "SMTP_HOST": "127.0.0.1", "SMTP_PORT": str(down_server.port), "SMTP_TLS": "none",
        "SMTP_TIMEOUT": "10", "MAILOUT_LEASE_SECONDS": "60", "MAILOUT_POLL_SECONDS": "0.05",
        "MAILOUT_CONCURRENCY": "2", "MAILOUT_OUTAGE_PROBE_SECONDS": str(BASE),
        "MAILOUT_OUTAGE_PROBE_CAP_SECONDS": str(8 * BASE),
    })
    worker = build_worker(settings)
    outage = worker.breakers.outage
    locker = engine.connect()

    async def scenario() -> None:
        task = asyncio.create_task(worker.run())
        try:
            await _until(lambda: len(down_server.connected_at) == 1, "the first send")
            # The lane's next claim (a slot is free) waits behind this lock; the second
            # message is added under it, so that claim is the one to bring it back.
            locker.begin()
            await asyncio.to_thread(locker.execute,
                                    text("LOCK TABLE mailout_messages IN EXCLUSIVE MODE"))
            await asyncio.to_thread(_add, locker, 2)
            await asyncio.to_thread(wait_for_lock_waiter, engine, "%skip locked%", 30)
            down_server.go_down()  # the first send meets 421: the outage begins
            await _until(lambda: outage.is_open, "the outage breaker to open")
            await asyncio.to_thread(locker.commit)  # the claim returns the second message
            await _until(lambda: outage.failed_probes >= 1, "the first probe to fail")
        finally:
            worker.stop()
            await task

    try:
        asyncio.run(scenario())
    finally:
        locker.close()
        worker.alerts.close()
        worker.engine.dispose()
    opened = outage.opened_at
    assert opened is not None
    after = [round(t - opened, 3) for t in down_server.connected_at if t > opened]
    # The first connection after the opening is the probe, a full base interval later
    # (main sent the racing claim's message as the probe at once: [0.014, ...]).
    assert after, down_server.connected_at
    assert after[0] >= BASE, after
    with engine.connect() as conn:
        rows = conn.execute(select(messages.c.id, messages.c.status, messages.c.attempts)
                            .order_by(messages.c.id)).all()
    engine.dispose()
    # Nothing was charged for the outage, and nothing was lost.
    assert [(r.status, r.attempts) for r in rows] == [("pending", 0), ("pending", 0)], rows
    assert rows[0].id == first
