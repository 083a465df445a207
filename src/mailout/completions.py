"""Batched, retried completion writes.

Completions are buffered and written one transaction per batch. When the database
is unreachable the batch stays buffered and is retried with backoff; meanwhile the
worker's heartbeat keeps extending the leases of buffered rows (see worker.py), so
that a short outage costs nothing. If the outage outlasts the lease, other workers
reclaim the rows, and the late write is fenced out by the lease token.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from mailout import store
from mailout.store import Completion

log = logging.getLogger("mailout.worker")

MAX_BATCH = 200
FLUSH_INTERVAL = 0.01  # seconds a completion may wait for others to share its transaction
MAX_BACKOFF = 10.0


class CompletionWriter:
    """Collects completions and writes them in batches from a background task."""

    def __init__(self, engine: Engine, on_written: Callable[[list[Completion], set[int]], None]):
        self._engine = engine
        self._on_written = on_written
        self._buffer: list[Completion] = []
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closing = False

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
            await asyncio.sleep(FLUSH_INTERVAL)
            batch = self._buffer[:MAX_BATCH]
            try:
                fenced = await asyncio.to_thread(self._write, batch)
            except (OperationalError, DBAPIError) as exc:
                log.warning("could not record %d completions, retrying in %.1fs: %s",
                            len(batch), backoff, type(exc).__name__)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
                continue
            backoff = 0.5
            del self._buffer[: len(batch)]
            if fenced:
                log.warning("lease lost before completion for ids %s; left to their new owner",
                            sorted(fenced))
            self._on_written(batch, fenced)
        self._idle.set()

    def _write(self, batch: list[Completion]) -> set[int]:
        with self._engine.begin() as conn:
            return set(store.complete(conn, batch))
