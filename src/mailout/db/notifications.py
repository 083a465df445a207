"""Low-latency pickup on PostgreSQL: LISTEN for the NOTIFY that enqueue sends.

Enqueue's ``NOTIFY mailout, '<queue>'`` comes after the application's commit, from
the application process's waker (:mod:`mailout.db.wakeups`), or with
``MAILOUT_NOTIFY=in-transaction`` inside its transaction, delivered on commit. Each
worker keeps one connection that LISTENs and wakes the lane serving that queue at
once. Polling stays as the safety net: a lost connection or a missed notification
costs at most one poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from mailout.db import inserts

log = logging.getLogger(__name__)

CHANNEL = inserts.NOTIFY_CHANNEL
RECONNECT_MAX = 30.0


def libpq_url(sqlalchemy_url: str) -> str:
    url = make_url(sqlalchemy_url).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


async def listen(url: str, wake: Callable[[str | None], None]) -> None:
    """LISTEN and call ``wake(queue)`` per notification (``wake(None)``: wake all).

    Runs until cancelled; reconnects with backoff when the connection drops.
    """
    backoff = 0.5
    while True:
        try:
            conn = await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True)
        except psycopg.OperationalError as exc:
            log.warning("LISTEN connection failed, polling meanwhile: %s", type(exc).__name__,
                        extra={"event": "listen_failed", "error": type(exc).__name__})
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, RECONNECT_MAX)
            continue
        backoff = 0.5
        try:
            async with conn:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
                wake(None)  # anything enqueued while we were not listening
                async for note in conn.notifies():
                    wake(note.payload)
        except psycopg.OperationalError as exc:
            log.warning("LISTEN connection lost, reconnecting: %s", type(exc).__name__,
                        extra={"event": "listen_lost", "error": type(exc).__name__})
        with contextlib.suppress(Exception):
            await conn.close()
