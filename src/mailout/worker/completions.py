"""Batched, retried completion writes.

Completions are buffered and written one transaction per batch. When the database
is unreachable the batch stays buffered and is retried with backoff; meanwhile the
worker's heartbeat keeps extending the leases of buffered rows (see worker.py), so
that a short outage costs nothing. If the outage outlasts the lease, other workers
reclaim the rows, and the late write is fenced out by the lease token.

A batch costs about a millisecond of CPU whatever its size plus a little per row
(see outcomes.complete), and the CPU is shared with the sends: under load the writer
lets a batch grow for up to FLUSH_INTERVAL, or until TARGET_BATCH completions
wait, and it keeps one connection instead of checking one out (and pinging it) per
batch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from mailout import db
from mailout.db import outcomes
from mailout.models import Completion

log = logging.getLogger(__name__)

MAX_BATCH = 200
TARGET_BATCH = 50  # write at once when this many wait
# Seconds a completion may wait for others to share its transaction: also how much
# a SIGKILL can lose (those rows are resent, as unknown, when their lease runs out).
FLUSH_INTERVAL = 0.02
FLUSH_STEP = 0.005  # how often a growing batch is looked at
MAX_BACKOFF = 10.0


class CompletionWriter:
    """Collects completions and writes them in batches from a background task."""

    def __init__(self, engine: Engine, on_written: Callable[[list[Completion], set[int]], None],
                 more_coming: Callable[[], bool] = lambda: True):
        self._on_written = on_written
        # Whether sends are still in flight: when none is, waiting for a bigger batch
        # would only add latency (a login code sent to an idle worker).
        self._more_coming = more_coming
        self._buffer: list[Completion] = []
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closing = False
        # One _write at a time: one connection, kept (a database error drops it, and
        # the retry connects afresh). Always a transaction, even for a batch that is one
        # statement: sent in autocommit, a completion whose worker was killed while it
        # waited on a lock would still commit, and the crash tests (test_crash*) catch
        # the worker in that window to prove the resend after an unknown outcome.
        self._held = db.HeldConnection(engine)

    def add(self, completion: Completion) -> None:
        self._buffer.append(completion)
        self._idle.clear()
        self._wakeup.set()

    def held_leases(self) -> list[tuple[int, str]]:
        """Rows whose completion is not written yet: their leases must stay alive."""
        return [(c.id, c.lease_token) for c in self._buffer]

    @property
    def idle(self) -> bool:
        return not self._buffer

    async def wait_idle(self) -> None:
        await self._idle.wait()

    def close(self) -> None:
        """Stop after the buffer is written (see :meth:`run`)."""
        self._closing = True
        self._wakeup.set()

    async def run(self) -> None:
        """Write batches until closed and empty. Database errors are retried, not raised."""
        backoff = 0.5
        while not (self._closing and not self._buffer):
            if not self._buffer:
                self._idle.set()
                await self._wakeup.wait()
                self._wakeup.clear()
                continue
            await self._gather()
            batch = self._buffer[:MAX_BATCH]
            try:
                fenced = await asyncio.to_thread(self._write, batch)
            except (OperationalError, DBAPIError) as exc:
                log.warning("could not record %d completions, retrying in %.1fs: %s",
                            len(batch), backoff, type(exc).__name__,
                            extra={"event": "completions_retry", "count": len(batch),
                                   "seconds": backoff, "error": type(exc).__name__})
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
                continue
            backoff = 0.5
            del self._buffer[: len(batch)]
            if fenced:
                log.warning("lease lost before completion for ids %s; left to their new owner",
                            sorted(fenced),
                            extra={"event": "lease_lost", "outbox_ids": sorted(fenced)})
            self._on_written(batch, fenced)
        self._idle.set()
        self._held.close()

    async def _gather(self) -> None:
        """Let the batch grow for up to FLUSH_INTERVAL, or until TARGET_BATCH wait."""
        waited = 0.0
        while (waited < FLUSH_INTERVAL and len(self._buffer) < TARGET_BATCH
               and not self._closing and self._more_coming()):
            await asyncio.sleep(FLUSH_STEP)
            waited += FLUSH_STEP

    def _write(self, batch: list[Completion]) -> set[int]:
        with self._held.begin() as conn:
            return set(outcomes.complete(conn, batch))
